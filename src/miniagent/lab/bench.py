"""``invoke bench``: speed figures of the real model and the real loop. Prints, asserts nothing.

(a) turn latency / pure decode time of the same number of tokens
(b) prompt tokens evaluated per turn against scratchpad length (flat = KV reuse works)
(c) wall time from process start to the fallback of the capped loop (real model)
(d) eval total time
(e) killed runs in a row and the processes they left behind
(f) the conjugation server's start-up: spawn to handshake done, and to its first answer
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ADVERSARIAL = "Could you conjugate eat tenderly in the sleepy tense?"  # a verb among words that are not grammar
# The real model reads "eat" out of ADVERSARIAL and answers; on a modal verb every call fails,
# so only the caps end the run: that is the capped loop's way to its fallback.
UNANSWERABLE = "What is the present perfect of would for you?"
QUESTIONS = ["What is the past simple of go for she?", "Give me the present perfect of write for they.",
             "Conjugate swim in the future continuous for we."]


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}


def turn_latency_ratio(backend) -> dict:
    """(a): each real turn's latency against decoding the same number of tokens one by one."""
    from ..agent.ports import Entry

    rows = []
    for question in QUESTIONS:
        pad = [Entry("question", question)]
        reply = backend.next_action(pad, first_turn=True)
        tokens = reply.prompt_tokens + reply.completion_tokens
        rt = backend.rt
        probe = rt.tokenize(" the" * tokens)[:tokens]
        base = len(rt.tokens)
        started = time.perf_counter()
        for token in probe:
            rt.feed([token])  # plain one-token-at-a-time decode: the yardstick
        pure = time.perf_counter() - started
        rt.rollback(base)
        rows.append({"question": question, "tokens": tokens, "turn_s": round(reply.latency_s, 4),
                     "pure_decode_s": round(pure, 4), "ratio": round(reply.latency_s / pure, 3)})
    return {"rows": rows, "ratio_mean": round(sum(r["ratio"] for r in rows) / len(rows), 3)}


def kv_reuse(backend, turns: int = 10) -> list[dict]:
    """(b): grow a scratchpad turn by turn; count the prompt tokens each turn evaluates."""
    from ..agent.ports import Entry
    from ..models.prompt import render

    pad = [Entry("question", ADVERSARIAL)]
    rows = []
    for turn in range(1, turns + 1):
        reply = backend.next_action(pad, first_turn=turn == 1)
        pad_tokens = len(backend.rt.tokenize(render(pad)))
        rows.append({"turn": turn, "scratchpad_tokens": pad_tokens, "prompt_tokens_evaluated": reply.prompt_tokens})
        pad += [Entry("action", reply.text), Entry("observation", f"we ate ({turn})")]
    return rows


def time_to_end(question: str) -> dict:
    """(c): a fresh process, real model and real server, from process start to the end of the run."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", question, "--json"],
                          capture_output=True, text=True, env=_clean_env(), timeout=120)
    wall = time.perf_counter() - started
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"question": question, "wall_s": round(wall, 3), "stop_reason": outcome["stop_reason"],
            "turns": outcome["stats"]["turns"], "tool_calls": outcome["stats"]["tool_calls"],
            "loop_s": outcome["stats"]["seconds"]}


def eval_time() -> dict:
    """(d): the public eval set, one process."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "miniagent", "eval", "--json"], capture_output=True, text=True,
                          env=_clean_env(), timeout=600)
    wall = time.perf_counter() - started
    report = json.loads(proc.stdout)
    return {"process_wall_s": round(wall, 2), "total_s": report["total_s"], "accuracy": report["accuracy"],
            "n": report["n"], "latency_p50_s": report["latency_p50_s"], "latency_p95_s": report["latency_p95_s"]}


def killed_runs(count: int = 50) -> dict:
    """(e): start the busy-looping agent, kill it at a short timeout, count what survives."""
    from .harness import run_experiment

    left = 0
    command = [sys.executable, "-m", "miniagent", "ask", ADVERSARIAL, "--llm", "scripted:wanderer",
               "--max-turns", "1000000", "--max-tool-calls", "1000000", "--wall-clock-s", "1000000"]
    started = time.perf_counter()
    trace_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"miniagent-bench-{os.getpid()}"
    for i in range(count):
        # Timeouts from 0.5 to 2.0 s: some kills land during start-up, most inside the loop.
        timeout = 0.5 + 1.5 * (i % 10) / 9
        record = run_experiment(command, timeout=timeout, trace_path=trace_dir / f"run-{i}.jsonl", live=False)
        left += len(record.processes_left)
    shutil.rmtree(trace_dir, ignore_errors=True)
    return {"runs": count, "processes_left": left, "seconds": round(time.perf_counter() - started, 1)}


def server_startup(runs: int = 5) -> dict:
    """(f): a fresh MCP server each time: spawn -> handshake done -> the first conjugate answered (medians)."""
    from ..tools.mcp_client import MCPClient

    ready, answered = [], []
    for _ in range(runs):
        started = time.perf_counter()
        with MCPClient(timeout=30) as client:
            ready.append(time.perf_counter() - started)
            # a prefixed irregular: its form comes from the lexicon, so this call needs the lexicon loaded
            client.call("conjugate", {"verb": "overpay", "tense": "present perfect", "person": "she"}, timeout=30)
            answered.append(time.perf_counter() - started)
    return {"runs": runs, "ready_p50_s": round(statistics.median(ready), 2),
            "first_answer_p50_s": round(statistics.median(answered), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="miniagent.lab.bench")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--only", choices=("a", "b", "c", "d", "e", "f"), action="append", default=None,
                        help="only these figures (repeatable), e.g. --only b: KV reuse, a few seconds")
    args = parser.parse_args(argv)
    only = set(args.only or "abcdef")
    from ..models.llama import LlamaBackend
    from ..agent.config import TutorConfig

    figures: dict = {"cores": os.cpu_count()}
    if only & {"a", "b"}:
        backend = LlamaBackend(cache_dir=TutorConfig().cache_dir)
        try:
            if "a" in only:
                figures["a_turn_latency"] = turn_latency_ratio(backend)
            if "b" in only:
                figures["b_kv_reuse"] = kv_reuse(backend)
        finally:
            backend.close()
    if "c" in only:
        figures["c_time_to_end"] = [time_to_end(ADVERSARIAL), time_to_end(UNANSWERABLE)]
    if "d" in only:
        figures["d_eval"] = eval_time()
    if "e" in only:
        figures["e_killed_runs"] = killed_runs(args.kills)
    if "f" in only:
        figures["f_server_startup"] = server_startup()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_figures(figures)
    return 0


def print_figures(f: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]miniagent bench[/] on {f['cores']} cores")
    if "a_turn_latency" in f:
        _print_a(console, f["a_turn_latency"])
    if "b_kv_reuse" in f:
        table = Table(title="(b) prompt tokens evaluated per turn vs scratchpad length (flat = KV reuse)")
        for col in ("turn", "scratchpad tokens", "prompt tokens evaluated"):
            table.add_column(col)
        for r in f["b_kv_reuse"]:
            table.add_row(str(r["turn"]), str(r["scratchpad_tokens"]), str(r["prompt_tokens_evaluated"]))
        console.print(table)
    for c in f.get("c_time_to_end", []):
        console.print(f"(c) process start -> end of the run (goal <= 2.0 s to the fallback): {c['wall_s']:.2f} s, "
                      f"of which the loop {c['loop_s']:.2f} s; stop_reason {c['stop_reason']}, {c['turns']} turns, "
                      f"tool calls {c['tool_calls']}  [{c['question']}]", highlight=False)
    if "d_eval" in f:
        d = f["d_eval"]
        console.print(f"(d) eval: {d['n']} questions in {d['total_s']:.1f} s in-process, {d['process_wall_s']:.1f} s "
                      f"with start-up (goal <= 45 s); accuracy {d['accuracy']:.1%}; p50 {d['latency_p50_s']:.2f} s, "
                      f"p95 {d['latency_p95_s']:.2f} s")
    if "e_killed_runs" in f:
        e = f["e_killed_runs"]
        console.print(f"(e) {e['runs']} killed runs in a row left {e['processes_left']} processes ({e['seconds']} s)")
    if "f_server_startup" in f:
        s = f["f_server_startup"]
        console.print(f"(f) conjugation server, median of {s['runs']} starts: handshake done in {s['ready_p50_s']:.2f} s, "
                      f"first answer at {s['first_answer_p50_s']:.2f} s", highlight=False)


def _print_a(console, a: dict) -> None:
    from rich.table import Table

    table = Table(title="(a) turn latency / pure decode of the same number of tokens (goal <= 1.2)")
    for col in ("question", "tokens", "turn s", "pure decode s", "ratio"):
        table.add_column(col)
    for r in a["rows"]:
        table.add_row(r["question"], str(r["tokens"]), f"{r['turn_s']:.3f}", f"{r['pure_decode_s']:.3f}",
                      f"{r['ratio']:.2f}")
    console.print(table)
    console.print(f"    mean ratio: {a['ratio_mean']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
