"""Does telling the model how many turns it has left change what it does?

    python labs/04-remaining-budget/compare.py                # both eval sets, notice off and on, grounded and not
    python labs/04-remaining-budget/compare.py --limit 5      # a quick look
    python labs/04-remaining-budget/compare.py --write        # also write docs_results/remaining-budget.md

Runs the real eval (``run_eval``) with ``remaining_budget_notice`` off and on,
same model, same questions, once with argument grounding (the default: after a
conjugate result the answer is that result) and once without it
(``ground_arguments`` off, as break 15 leaves the loop). The strict score is
the one ``invoke eval`` prints. The second score is a diagnosis, not a result: it cuts the notice off
the answer before scoring, to tell "the model copied the notice" apart from
"the model chose another verb form".
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from miniagent.settings import load_config
from miniagent.lab.evaluation import is_correct, load_eval_set, run_eval

SETS = {"public": Path("labs/01-tutor-end-to-end/eval.jsonl"), "held-out": Path("labs/01-tutor-end-to-end/heldout.jsonl")}
NOTICE = re.compile(r"\s*\(turns left.*$", re.S)


def settings(notice: bool, grounded: bool):
    # env={}: no MINIAGENT_* variable of the shell may change what the table says was measured
    return load_config(env={}, cli={"remaining_budget_notice": notice, "ground_arguments": grounded})


def measure(items, notice: bool, grounded: bool) -> dict:
    report = run_eval(items, settings(notice, grounded))
    rows = report["items"]
    answered = [r for r in rows if r["stop_reason"] == "answered"]
    return {
        "strict": report["correct"],
        "notice_cut": sum(is_correct(NOTICE.sub("", r["answer"]), r["accept"]) for r in answered),
        "copied": sum("turns left" in r["answer"] for r in answered),
        "n": report["n"],
        "turns": sum(r["turns"] for r in rows) / len(rows),
        "stops": ", ".join(f"{k} {v}" for k, v in sorted(report["stop_reasons"].items())),
        "p50": report["latency_p50_s"],
    }


def table(results: dict) -> str:
    lines = ["| set · conjunto | grounding · anclaje | notice · aviso | strict · estricta | notice cut off · sin el aviso | "
             "answers that copy it · respuestas que lo copian | mean turns · turnos medios | stop reasons · motivos | p50 s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (name, grounded, notice), r in results.items():
        lines.append(f"| {name} | {'on' if grounded else 'off'} | {'on' if notice else 'off'} | {r['strict']}/{r['n']} | {r['notice_cut']}/{r['n']} | "
                     f"{r['copied']} | {r['turns']:.2f} | {r['stops']} | {r['p50']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of each set")
    parser.add_argument("--write", action="store_true", help="write docs_results/remaining-budget.md")
    args = parser.parse_args()
    results, started = {}, time.monotonic()
    for name, path in SETS.items():
        items = load_eval_set(path)[: args.limit]
        for grounded in (True, False):
            for notice in (False, True):
                results[(name, grounded, notice)] = measure(items, notice, grounded)
    text = table(results)
    print(text)
    if args.write:
        stamp, took = time.strftime("%Y-%m-%dT%H:%M"), time.monotonic() - started
        used = settings(False, True)
        model = Path(used.model.model).name if used.model.model else "Gemma 3 270M"
        Path("docs_results/remaining-budget.md").write_text(
            f"Measured by · medido con `python labs/04-remaining-budget/compare.py --write`: {stamp}, "
            f"{took // 60:.0f} min {took % 60:.0f} s, model · modelo `{used.model.llm}` ({model}), "
            f"max_turns {used.tutor.max_turns}\n\n{text}\n", encoding="utf-8")
        print("written: docs_results/remaining-budget.md")


if __name__ == "__main__":
    main()
