"""``invoke bench``: speed figures of the real model and the real loop; prints, asserts nothing.

(a) turn latency over pure decode; (b) prompt tokens per turn (flat: the KV cache is reused); (c) whole
processes, to the answer and the fallback, idle and busy; (d) the eval set's time; (e) killed runs in a row;
(f) the MCP server's start-up; (g) how far past its wall clock a run ends (overrun.py).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from ...processes import OtherPrograms, machine_cores
from ..catalogue import ROOT
from ..words import number, section
from .overrun import overruns, print_overruns
from .. import screen

ADVERSARIAL = "Could you conjugate eat tenderly in the sleepy tense?"  # a verb among words that are not grammar
# On a modal verb every call fails, so only the caps end the run: that is the capped loop's way to its fallback.
UNANSWERABLE = "What is the present perfect of would for you?"
# The capped path is measured with the out-of-grammar guard off: on, it declines a modal after one tool call.
CAPPED_PATH_ENV = {"MINIAGENT_DECLINE_OUT_OF_GRAMMAR": "false"}
ANSWERABLE = "What is the past simple of go for she?"  # two turns: one tool call, then the answer
# The budgets the lab promises (whole process, median; issue 50): idle, seconds to the answer and to the capped
# path's fallback, each within FLOOR_FACTOR of its CPU floor (least_wall_s); one core busy, BUSY_FACTOR x idle.
GOALS = {"answer": 1.5, "fallback": 2.0}
FLOOR_FACTOR, BUSY_FACTOR = 1.15, 2.0
LOADS = ("idle", "one core busy")
BUSY_OTHERS = 50  # other programs' CPU %, as the harness's busy-machine threshold
QUESTIONS = ["What is the past simple of go for she?", "Give me the present perfect of write for they.",
             "Conjugate swim in the future continuous for we."]


def _clean_env() -> dict:  # the learner's settings left out; traces kept, to measure them: MINIAGENT_TRACES=file
    return {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_") or k.startswith("MINIAGENT_TRACES")}


def turn_latency_ratio(backend) -> dict:
    """(a): each real turn's latency against decoding the same number of tokens one by one."""
    from ...agent.ports import Entry

    rows = []
    for question in QUESTIONS:
        pad = [Entry("question", question)]
        reply = backend.next_action(pad, first_turn=True)
        tokens = reply.prompt_tokens + reply.completion_tokens
        rt = backend.rt
        probe = rt.vocab.tokenize(" the" * tokens)[:tokens]
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
    from ...agent.ports import Entry
    from ...models.prompt import render

    pad = [Entry("question", ADVERSARIAL)]
    rows = []
    for turn in range(1, turns + 1):
        reply = backend.next_action(pad, first_turn=turn == 1)
        pad_tokens = len(backend.rt.vocab.tokenize(render(pad)))
        rows.append({"turn": turn, "scratchpad_tokens": pad_tokens, "prompt_tokens_evaluated": reply.prompt_tokens})
        pad += [Entry("action", reply.text), Entry("observation", f"we ate ({turn})")]
    return rows


class AgentCrashed(RuntimeError):
    """The agent died of a signal during a benchmark run (the message is the crash report)."""


def _agent(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "miniagent", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)
    if proc.returncode < 0:
        from ..harness import crash

        raise AgentCrashed("\n".join(crash.describe(crash.signal_name(proc.returncode), loop_started=None, turns=0,
                                                     stderr_lines=proc.stderr.splitlines())))
    return proc


def one_process(question: str, amx: str = "auto", env: dict[str, str] | None = None) -> dict:
    """One fresh process, real model and real server, from its start to the end of its run: wall time, and
    CPU time of the process and its MCP server (the kernel's accounting of reaped children)."""
    env = {**_clean_env(), "MINIAGENT_LLAMA_AMX": amx, **(env or {})}
    others, before = OtherPrograms(), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = _agent(["ask", question, "--json"], env, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "others_pct": 100 * (others.cores(ours_s=cpu) or 0.0),
            "stop_reason": outcome["stop_reason"], "turns": outcome["stats"]["turns"],
            "tool_calls": outcome["stats"]["tool_calls"]}


def start_to_end(amx_settings: list[str], loads: tuple[str, ...] = LOADS, runs: int = 5,
                 shown: bool = False) -> list[dict]:
    """(c) for each load, path and AMX setting: ``runs`` processes, the settings taking turns run by run, so a
    drift of the machine during the measurement falls on all of them alike. ``shown``: a progress bar."""
    with screen.progress_bar("bench (c)", len(loads) * 2 * runs * len(amx_settings), shown=shown) as step:
        return _start_to_end(amx_settings, loads, runs, step)


def _start_to_end(amx_settings: list[str], loads: tuple[str, ...], runs: int, step: screen.Step) -> list[dict]:
    from ..harness.process_tree import spinning_core

    rows, done = [], 0
    for load in loads:
        with (spinning_core() if load != "idle" else contextlib.nullcontext()):
            for path, question in (("answer", ANSWERABLE), ("fallback", UNANSWERABLE)):
                taken: dict[str, list[dict]] = {amx: [] for amx in amx_settings}
                for _ in range(runs):
                    for amx in amx_settings:
                        step(done, now=f"{load}, {path}, amx {amx}")
                        taken[amx].append(one_process(question, amx, CAPPED_PATH_ENV if path == "fallback" else None))
                        done += 1
                for amx, got in taken.items():
                    walls, cpus = [g["wall_s"] for g in got], [g["cpu_s"] for g in got]
                    rows.append({"path": path, "load": load, "amx": amx, "question": question, "runs": runs,
                                 "goal_s": None, "wall_p50_s": round(statistics.median(walls), 3),
                                 "wall_min_s": round(min(walls), 3), "wall_max_s": round(max(walls), 3),
                                 "cpu_p50_s": round(statistics.median(cpus), 3),
                                 # CPU other programs used meanwhile (100 = one core): the spinner when busy
                                 "others_pct": round(statistics.mean(g["others_pct"] for g in got)),
                                 "stop_reason": got[-1]["stop_reason"], "turns": got[-1]["turns"],
                                 "tool_calls": got[-1]["tool_calls"]})
    return with_goals(rows)


def with_goals(rows: list[dict]) -> list[dict]:
    """Each row's goal in seconds: GOALS when idle; with one core busy, BUSY_FACTOR times the idle row of the same
    path and AMX setting (none where the idle rows were not measured)."""
    idle = {(r["path"], r["amx"]): r["wall_p50_s"] for r in rows if r["load"] == "idle"}
    for r in rows:
        idle_s = idle.get((r["path"], r["amx"]))
        r["goal_s"] = GOALS[r["path"]] if r["load"] == "idle" else idle_s and round(BUSY_FACTOR * idle_s, 2)
    return rows


def eval_time() -> dict:
    """(d): the public eval set, one process."""
    started = time.perf_counter()
    proc = _agent(["eval", "--json"], _clean_env(), timeout=600)
    wall = time.perf_counter() - started
    report = json.loads(proc.stdout)
    return {"process_wall_s": round(wall, 2), "total_s": report["total_s"], "accuracy": report["accuracy"],
            "n": report["n"], "latency_p50_s": report["latency_p50_s"], "latency_p95_s": report["latency_p95_s"]}


def killed_runs(count: int = 50) -> dict:
    """(e): start the busy-looping agent, kill it at a short timeout, count what survives."""
    from ..harness.run import run_experiment

    left, started = 0, time.perf_counter()
    command = [sys.executable, "-m", "miniagent", "ask", ADVERSARIAL, "--llm", "scripted:wanderer",
               "--max-turns", "1000000", "--max-tool-calls", "1000000", "--wall-clock-s", "1000000",
               "--decline-out-of-grammar", "false"]  # on, the sleepy tense would be declined before any turn
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
    from ...tools.mcp_client import MCPClient

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
    parser = argparse.ArgumentParser(prog="miniagent.lab.maintainers.bench")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5, help="(c): processes per figure (median)")
    parser.add_argument("--amx", choices=("auto", "on", "off"), action="append", default=None,
                        help="(c): llama.cpp's AMX path for the runs (repeatable; default auto)")
    parser.add_argument("--save", default=None, metavar="NAME",
                        help="(c): also write docs_results/bench-NAME.json and its tables (.md, .es.md) for the docs")
    parser.add_argument("--load", choices=LOADS, action="append", default=None,
                        help="(c): idle, or with one core kept busy by another program (repeatable; default both)")
    parser.add_argument("--only", choices=tuple("abcdefg"), action="append", default=None,
                        help="only these figures (repeatable), e.g. --only b: KV reuse, a few seconds")
    args = parser.parse_args(argv)
    only = set(args.only or "abcdefg")
    from ...models.llama import LlamaBackend
    from ...models.llama_params import cpu_model_name, cpu_reports_amx
    from ...models.settings import ModelSettings

    figures: dict = {"cores": machine_cores(), "cpu": cpu_model_name(), "amx_cpu": bool(cpu_reports_amx()),
                     "measured_at": datetime.now().strftime("%Y-%m-%d %H:%M")}
    if only & {"a", "b"}:
        backend = LlamaBackend(cache_dir=ModelSettings().cache_dir)
        try:
            if "a" in only:
                figures["a_turn_latency"] = turn_latency_ratio(backend)
            if "b" in only:
                figures["b_kv_reuse"] = kv_reuse(backend)
        finally:
            backend.close()
    if "c" in only:
        figures["c_time_to_end"] = start_to_end(args.amx or ["auto"], tuple(args.load or LOADS), args.runs,
                                                shown=not args.json and sys.stdout.isatty())
    if "d" in only:
        figures["d_eval"] = eval_time()
    if "e" in only:
        figures["e_killed_runs"] = killed_runs(args.kills)
    if "f" in only:
        figures["f_server_startup"] = server_startup()
    if "g" in only:
        figures["g_overrun"] = overruns()
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_figures(figures)
    if args.save and figures.get("c_time_to_end"):
        for path in save_c(figures, ROOT / "docs_results", args.save):
            print(f"saved: {path.relative_to(ROOT)}", file=sys.stderr if args.json else sys.stdout)
    return 0


C_TABLE = section("bench")


def c_markdown(figures: dict, name: str, lang: str = "en") -> str:
    """(c)'s table for the docs, in one language, from the figures alone."""
    t = C_TABLE[lang]
    rows = figures["c_time_to_end"]
    settings = list(dict.fromkeys(r["amx"] for r in rows))
    loads = list(dict.fromkeys(r["load"] for r in rows))
    flags = (f" --amx {','.join(settings)}" if settings != ["auto"] else "") + \
        (f" --load {'idle' if loads == ['idle'] else 'busy'}" if len(loads) == 1 else "") + \
        (f" --runs {rows[0]['runs']}" if rows[0]["runs"] != 5 else "")
    decimal: Callable[..., str] = lambda x, digits=".2f": number(x, lang, digits)  # noqa: E731
    lines = [t["intro"].format(flags=flags, name=name,
                               when=figures["measured_at"], cores=figures["cores"], cpu=figures["cpu"],
                               amx=t["amx_yes"] if figures["amx_cpu"] else t["amx_no"], runs=rows[0]["runs"],
                               floor=decimal(FLOOR_FACTOR), busy=decimal(BUSY_FACTOR, "g")), "",
             "| " + " | ".join(t["head"]) + " |", "|" + "---|" * len(t["head"])]
    for r in rows:
        goal = "" if r["goal_s"] is None else \
            f"{decimal(r['goal_s'], 'g')} ({t['ok'] if r['wall_p50_s'] <= r['goal_s'] else t['missed']})"
        to_floor = _to_floor(r, figures["cores"], decimal, f" ({t['ok']})", f" ({t['missed']})")
        lines.append(f"| {t[r['path']]} | `{r['amx']}` | {t['idle'] if r['load'] == 'idle' else t['busy']} | "
                     f"{r['others_pct']} | {decimal(r['wall_p50_s'])} | {decimal(r['wall_min_s'])}–{decimal(r['wall_max_s'])} | "
                     f"{decimal(r['cpu_p50_s'])} | {_or_dash(least_wall_s(r, figures['cores']), decimal)} | {to_floor} | "
                     f"{goal} | {r['turns']}, `{r['stop_reason']}` |")
    return "\n".join(lines) + "\n"


def least_wall_s(row: dict, cores: int) -> float | None:
    """The least wall time the row's CPU time could take on the cores that other programs left it, in any order:
    a run of wall time W had at most (cores - others) * W of CPU, so W >= CPU / (cores - others). A goal under it
    needs less CPU, not a better order. None where the others left nothing."""
    free = cores - row["others_pct"] / 100
    return row["cpu_p50_s"] / free if free > 0 else None


def _to_floor(row: dict, cores: int, shown: Callable[[float], str], ok: str, missed: str) -> str:
    """Wall time over its floor (:func:`least_wall_s`; 1.0: every free core busy throughout), judged on an idle
    row as shown, to two decimals."""
    floor = least_wall_s(row, cores)
    if not floor:
        return "–"
    ratio = row["wall_p50_s"] / floor
    return shown(ratio) + ("" if row["load"] != "idle" else ok if round(ratio, 2) <= FLOOR_FACTOR else missed)


def _or_dash(value: float | None, show: Callable[[float], str]) -> str:
    return "–" if value is None else show(value)


def save_c(figures: dict, folder: Path, name: str) -> list[Path]:
    """docs_results/bench-NAME.json and one table per language (.md, .es.md), all from the one set of figures."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {k: figures[k] for k in ("cores", "cpu", "amx_cpu", "measured_at", "c_time_to_end")}
    paths = [folder / f"bench-{name}.json", folder / f"bench-{name}.md", folder / f"bench-{name}.es.md"]
    paths[0].write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(c_markdown(data, name, "en"), encoding="utf-8")
    paths[2].write_text(c_markdown(data, name, "es"), encoding="utf-8")
    return paths


def cli(argv: list[str] | None = None) -> int:
    try:
        return main(argv)
    except AgentCrashed as err:
        print(f"miniagent bench: {err}", file=sys.stderr)
        return 1


def print_figures(f: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=120)  # a log keeps the tables whole
    console.print(f"[bold]miniagent bench[/] on {f['cores']} cores, traces {os.environ.get('MINIAGENT_TRACES') or 'off'}")
    if "a_turn_latency" in f:
        _print_a(console, f["a_turn_latency"])
    if "b_kv_reuse" in f:
        table = Table(title="(b) prompt tokens evaluated per turn vs scratchpad length (flat = KV reuse)")
        for col in ("turn", "scratchpad tokens", "prompt tokens evaluated"):
            table.add_column(col)
        for r in f["b_kv_reuse"]:
            table.add_row(str(r["turn"]), str(r["scratchpad_tokens"]), str(r["prompt_tokens_evaluated"]))
        console.print(table)
    if f.get("c_time_to_end"):
        _print_c(console, f["c_time_to_end"], f["cores"])
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
    if "g_overrun" in f:
        print_overruns(console, f["g_overrun"])


def _print_c(console, rows: list[dict], cores: int) -> None:
    from rich.table import Table

    table = Table(title=f"(c) start -> end of the run, whole process, median of {rows[0]['runs']}")
    for col in ("path", "AMX", "machine", "others %", "wall s", "min-max", "CPU s", "CPU/free", "wall/floor",
                "goal s", "turns, stop"):
        table.add_column(col, no_wrap=True)
    for r in rows:
        goal = "" if r["goal_s"] is None else f"{r['goal_s']:g} " + ("ok" if r["wall_p50_s"] <= r["goal_s"]
                                                                     else "MISSED")
        to_floor = _to_floor(r, cores, lambda x: f"{x:.2f}", " ok", " MISSED")
        table.add_row(r["path"], r["amx"], "busy" if r["load"] != "idle" else "idle", str(r["others_pct"]),
                      f"{r['wall_p50_s']:.2f}",
                      f"{r['wall_min_s']:.2f}-{r['wall_max_s']:.2f}", f"{r['cpu_p50_s']:.2f}",
                      _or_dash(least_wall_s(r, cores), lambda x: f"{x:.2f}"), to_floor, goal,
                      f"{r['turns']}, {r['stop_reason']}")
    console.print(table)
    console.print(f"    answer: {ANSWERABLE!r}\n    fallback: {UNANSWERABLE!r} (the capped path, "
                  "decline_out_of_grammar off)\n"
                  "    busy: another program keeps one core busy; others %: CPU that other programs used meanwhile "
                  f"(100 = one core; above {BUSY_OTHERS:g} on an idle row, the machine was not idle)\n"
                  f"    CPU/free: the least wall time that CPU time could take on the {cores} cores less what other "
                  "programs used, in any order (a goal under it needs less CPU)\n"
                  f"    wall/floor: wall s over CPU/free, at most {FLOOR_FACTOR:g} when idle; goal s with one core "
                  f"busy: {BUSY_FACTOR:g} times the idle wall s", highlight=False)


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
    sys.exit(cli())
