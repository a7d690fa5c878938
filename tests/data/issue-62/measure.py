"""Issue 62, measured: each question of a set here through the real tutor (real model, real MCP server).

python tests/data/issue-62/measure.py tests/data/issue-62/unseen-b.jsonl [llama|openai]  (openai: the lab's class server)
"""
import json, sys, time
from collections import Counter
from miniagent.settings import load_config
from miniagent.lab.session import TutorSession
from miniagent.lab.evaluation import accepted_forms, is_correct

import contextlib
from miniagent.serving.start import model_server
path, llm = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "llama")
rows = [json.loads(l) for l in open(path)]
out = []
with (model_server("miniagent") if llm == "openai" else contextlib.nullcontext(None)) as url, \
        TutorSession(load_config({"llm": llm, **({"openai_base_url": url} if url else {})}, env={})) as session:
    for r in rows:
        o = session.ask(r["question"])
        if r["expect"] == "answer":
            right = o.stop_reason == "answered" and is_correct(o.answer, accepted_forms(r["verb"], r["tense"], r["person"]))
        else:
            right = o.stop_reason == "out_of_grammar" and (r["kind"] != "verb" or f"'{r['name'].lower()}'" in o.answer.lower())
        made_up = r["expect"] == "decline" and o.stop_reason == "answered"
        out.append({**r, "stop_reason": o.stop_reason, "answer": o.answer, "right": right, "made_up": made_up,
                    "turns": o.stats.turns, "seconds": o.stats.seconds})
by = Counter((x.get("kind", "answer"), x["right"]) for x in out)
print(json.dumps({"set": path, "llm": llm, "n": len(out), "right": sum(x["right"] for x in out),
                  "made_up": sum(x["made_up"] for x in out), "stuck": sum(x["stop_reason"] == "stuck" for x in out),
                  "by_kind": {f"{k}:{v}": n for (k, v), n in sorted(by.items())},
                  "stop_reasons": dict(Counter(x["stop_reason"] for x in out))}, ensure_ascii=False))
for x in out:
    if not x["right"]:
        print("WRONG", x.get("kind", "answer"), "|", x["question"], "|", x["stop_reason"], "|", x["answer"][:150])
