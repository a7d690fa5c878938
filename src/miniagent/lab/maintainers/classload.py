"""A class at once: N learners run the public eval together against one model server.

Each learner is its own process and tutor session, set up first, then started on one signal.  Per class size:
wall time, throughput, turn and run latency (p50/p95), how runs ended, strict accuracy, server requests.  More:
docs/classroom.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ..evaluation import DEFAULT_SET, is_right, load_eval_set, percentile
from ...processes import load_average, machine_cores, signal_group
from ..harness.process_tree import MachineLoad, TreeSampler
from ..words import number, section
from .. import screen

LEVEL_TIMEOUT_S = 3600.0  # a level that takes longer than this is killed (and said so)
READY_TIMEOUT_S = 120.0  # one learner's start-up: its MCP server, its backend's checks (and the local model's load)
LOCAL = "local"  # class-load's baseline: no shared server, each learner runs the local backend


class ClassFailed(RuntimeError):
    """A level could not be measured: a learner that did not start, or a class past its bound (said in one line)."""


def assign(n_items: int, learners: int, questions_each: int | None = None) -> list[list[int]]:
    """The question indices of each learner: the set split round-robin, or ``questions_each`` apiece."""
    # split, not repeated: on 2 cores the server answers one request at a time, and each question is asked once
    if questions_each is None:
        return [list(range(i, n_items, learners)) for i in range(learners)]
    return [[(i * questions_each + k) % n_items for k in range(questions_each)] for i in range(learners)]


# --- one learner (a subprocess) -----------------------------------------------------------------
def learner_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="miniagent.lab.maintainers.classload")
    parser.add_argument("--set", dest="eval_set", default=str(DEFAULT_SET))
    parser.add_argument("--items", required=True, help="comma-separated question indices")
    parser.add_argument("--settings", default="{}", help="settings (of any wing: the loop, the model, the server faults) as a JSON object")
    args = parser.parse_args(argv)

    import logging

    from ...settings import load_config
    from ...agent.trace import Trace
    from ..session import TutorSession

    logging.getLogger("miniagent").setLevel(logging.WARNING)
    items = load_eval_set(args.eval_set)
    config = load_config(cli=json.loads(args.settings), env={})
    trace = Trace.memory()
    with TutorSession(config, trace) as session:
        _say({"ready": True})
        sys.stdin.readline()  # the driver's signal: the whole class starts together
        for index in (int(i) for i in args.items.split(",") if i):
            item = items[index]
            first = len(trace.events)
            outcome = session.ask(item.question)
            _say({"item": index, "stop_reason": outcome.stop_reason,
                  "correct": is_right(item, outcome),
                  "seconds": outcome.stats.seconds, "turn_latencies": turn_latencies(trace.events[first:])})
            print(QUESTION_DONE, file=sys.stderr, flush=True)  # to its log, which the driver's progress bar counts
        server = getattr(session.model, "server", None)
        _say({"done_at": time.time(), "requests": getattr(server, "requests", 0)})
    return 0


QUESTION_DONE = "[class-load] question done"


def questions_done(log_dir: Path, learners: int) -> int:
    """How many questions the learners of a class of ``learners`` have answered so far, read from their logs."""
    return sum(path.read_text(encoding="utf-8", errors="replace").count(QUESTION_DONE)
               for path in log_dir.glob(f"learner-{learners}-*.log"))


@contextlib.contextmanager
def _counting(log_dir: Path, learners: int, step: screen.Step, shown: bool):
    """While the block runs, tell ``step`` every half second how many questions are done (only when ``shown``)."""
    if not shown:
        yield
        return
    stop = threading.Event()

    def count() -> None:
        while not stop.wait(0.5):
            step(questions_done(log_dir, learners))

    counter = threading.Thread(target=count, name="class-load-progress", daemon=True)
    counter.start()
    try:
        yield
    finally:
        stop.set()
        counter.join()


def turn_latencies(events: list[dict]) -> list[float]:
    """Seconds of each model turn of a run, from its trace: a turn's continuations are part of it, and the final
    round after a limit (no turn number) is a turn of its own."""
    turns: dict[int | None, float] = {}
    for event in events:
        if event["event"] == "model_action":
            key = event["turn"]  # None: the final round (the loop numbers no turn there)
            turns[key] = turns.get(key, 0.0) + event["latency_s"]
    return list(turns.values())


def _wait_until_ready(proc: subprocess.Popen, log_dir: Path, timeout_s: float = READY_TIMEOUT_S) -> None:
    """The learner's ready line, within ``timeout_s``; ClassFailed naming its log otherwise."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line.strip().startswith('{"ready"'):
        why = "did not start" if ready else f"was not ready within {timeout_s:g} s"
        raise ClassFailed(f"a learner {why} (see {log_dir}): {line!r}")


def _say(record: dict) -> None:
    print(json.dumps(record), flush=True)


# --- the driver -------------------------------------------------------------------------------------
def run_level(learners: int, base_url: str | None, *, eval_set: Path = DEFAULT_SET, questions_each: int | None = None,
              settings: dict | None = None, log_dir: Path | None = None, shown: bool = False) -> dict:
    """One class of ``learners`` at once; ``shown``: a progress bar of the questions answered so far."""
    items = load_eval_set(eval_set)
    shares = assign(len(items), learners, questions_each)
    # no server: every learner runs the local backend, its own model, on this machine
    where = {"llm": "openai", "openai_base_url": base_url} if base_url else {"llm": "llama"}
    settings = {**where, **(settings or {})}
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="miniagent-class-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    procs, logs = [], []
    try:
        for i, share in enumerate(shares):
            log = open(log_dir / f"learner-{learners}-{i}.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "miniagent.lab.maintainers.classload", "--set", str(eval_set),
                 "--items", ",".join(map(str, share)), "--settings", json.dumps(settings)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                start_new_session=True))  # a group per learner: its MCP server is reaped with it
            # Each learner set up (its MCP server started, its backend warmed up) before the next starts: on
            # their own laptops they would not share two cores, and sixteen start-ups at once outlast the MCP
            # server's own start-up bound here.  Start-up is not what a level measures.
            _wait_until_ready(procs[-1], log_dir)
        go = time.time()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        bar = screen.progress_bar(f"class-load, {learners} learner(s)", sum(map(len, shares)), shown=shown)
        with bar as step, _counting(log_dir, learners, step, shown):
            records = _collect(procs, go, learners, log_dir)
    finally:  # also on a timeout or Ctrl-C: every learner's group (the learner and its MCP server) is killed
        for proc in procs:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        for log in logs:
            log.close()
    return _level_report(learners, shares, records, go, settings)


def _collect(procs: list[subprocess.Popen], go: float, learners: int, log_dir: Path) -> list[dict]:
    """Every learner's records; each learner gets what is left of the level's bound, and at least a second."""
    records = []
    for proc in procs:
        remaining = max(1.0, go + LEVEL_TIMEOUT_S - time.time())
        try:
            out, _ = proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            raise ClassFailed(f"the class of {learners} learner(s) ran past its bound of {LEVEL_TIMEOUT_S:g} s "
                              f"and was stopped, every learner with it (their logs: {log_dir})") from None
        records += [json.loads(line) for line in out.splitlines() if line.strip()]
    return records


def _level_report(learners: int, shares: list[list[int]], records: list[dict], go: float, settings: dict) -> dict:
    runs = [r for r in records if "item" in r]
    ends = [r["done_at"] for r in records if "done_at" in r]
    wall = (max(ends) - go) if ends else None  # no learner said when it finished: unknown, not zero
    turns = [t for r in runs for t in r["turn_latencies"]]
    stops = Counter(r["stop_reason"] for r in runs)
    return {
        "learners": learners, "questions": len(runs), "questions_each": [len(s) for s in shares],
        "wall_s": None if wall is None else round(wall, 1), "questions_per_min": _per_min(len(runs), wall),
        "answers_per_min": _per_min(stops.get("answered", 0), wall),
        "turns": len(turns),
        "turn_p50_s": round(percentile(turns, 0.5), 2), "turn_p95_s": round(percentile(turns, 0.95), 2),
        "run_p50_s": round(percentile([r["seconds"] for r in runs], 0.5), 2),
        "run_p95_s": round(percentile([r["seconds"] for r in runs], 0.95), 2),
        "answered": stops.get("answered", 0), "guard_stops": len(runs) - stops.get("answered", 0),
        "stop_reasons": dict(stops), "correct": sum(r["correct"] for r in runs),
        "requests": sum(r.get("requests", 0) for r in records), "settings": settings,
    }


def _per_min(count: int, wall: float | None, places: int | None = 2) -> float | None:
    """A rate over the level's wall time (rounded to ``places``, None: not): unknown with it, 0 over no time at all."""
    if wall is None:
        return None
    rate = count / wall * 60 if wall else 0.0
    return rate if places is None else round(rate, places)


BUSY_OTHERS = 50.0  # other programs' mean CPU (100 = one core) that makes the figures disturbed, as in the harness


class OthersSampler:
    """Once a second, the CPU that programs outside this class (driver, server, learners) take from it."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s, self.samples = interval_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="others-cpu", daemon=True)

    def _run(self) -> None:
        tree, machine = TreeSampler(os.getpid()), MachineLoad()
        while not self._stop.wait(self.interval_s):
            try:
                cpu, _, _ = tree.sample()
                self.samples.append(machine.sample(cpu))
            except Exception:  # noqa: BLE001 - a lost sample must not end a 15-minute measurement
                continue

    def __enter__(self) -> OthersSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else None


def class_load(levels: list[int], *, server: str = "miniagent", base_url: str | None = None,
               eval_set: Path = DEFAULT_SET, questions_each: int | None = None, settings: dict | None = None,
               model_path: str | None = None, on_level=None, shown: bool = False) -> dict:
    """Every level in turn against one server: ``base_url``, or one of :data:`SERVERS` started here and reaped,
    or ``"local"``: no server, each learner runs the local backend on this machine (the baseline)."""
    from ...serving.start import SERVERS, model_server

    if base_url is None and server not in (*SERVERS, LOCAL):
        raise ValueError(f"no server named {server!r}: choose {', '.join((*SERVERS, LOCAL))}, or give a base URL")
    log_dir = Path(tempfile.mkdtemp(prefix="miniagent-class-"))
    if base_url is not None:
        kind, running = base_url, contextlib.nullcontext(base_url)
    elif server == LOCAL:
        kind, running = LOCAL, contextlib.nullcontext(None)
    else:
        kind, running = server, model_server(server, model_path, log=log_dir / "server.log")
    results = []
    load_before = load_average()
    with running as url, OthersSampler() as others:
        for n in levels:
            level = run_level(n, url, eval_set=eval_set, questions_each=questions_each, settings=settings,
                              log_dir=log_dir, shown=shown)
            results.append(level)
            if on_level:
                on_level(level)
    return {"server": kind, "cpus": machine_cores(), "eval_set": _shown(eval_set), "questions_each": questions_each,
            "settings": settings or {}, "levels": results, "logs": str(log_dir),
            "load_before": load_before, "others_cpu_mean": others.mean(), "busy_others": BUSY_OTHERS,
            "measured_at": time.strftime("%Y-%m-%d %H:%M")}


TABLE = section("class_load")


def disturbed(report: dict) -> bool:
    """Other work on the machine during the class (or, in a report without that figure, just before it)."""
    others = report.get("others_cpu_mean")
    if others is not None:
        return others > report.get("busy_others", BUSY_OTHERS)
    load = report.get("load_before")
    return load is not None and load > (report.get("cpus") or 1) / 2


def _shown(path: Path) -> str:
    """A path as the docs show it: from the project's root when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _machine_line(report: dict, t: dict, lang: str) -> str:
    """Whether other programs shared the machine with the class, in the table's language."""
    before = number(report.get("load_before"), lang)
    if report.get("others_cpu_mean") is None:
        return t["unsampled"].format(before=before, cpus=report["cpus"],
                                     verdict=t["unsampled_busy"] if disturbed(report) else "")
    return (t["busy"] if disturbed(report) else t["quiet"]).format(
        others=number(report["others_cpu_mean"], lang), before=before, cpus=report["cpus"])


def _server_kind(server: str) -> str:
    """A report's server as a name the tables translate (reports before the lab's server said a sentence)."""
    return "llama-cpp-python" if server.startswith("llama-cpp-python") else server


def markdown(report: dict, lang: str = "en") -> str:
    """The docs' table for one language, with whether the machine was quiet enough to trust it."""
    t = TABLE[lang]
    settings = ", ".join(f"`{k}={v}`" for k, v in report["settings"].items()) or t["defaults"]
    share = t["each"].format(n=report["questions_each"]) if report["questions_each"] else t["split"]
    server = report["server"] if "://" in report["server"] else t["servers"][_server_kind(report["server"])]
    lines = [t["intro"].format(when=report["measured_at"], cpus=report["cpus"], server=server,
                               eval_set=report["eval_set"], share=share, settings=settings),
             _machine_line(report, t, lang), "",
             "| " + " | ".join(t["head"]) + " |", "|" + "---|" * len(t["head"])]
    for r in report["levels"]:
        guards = ", ".join(f"`{k}` {v}" for k, v in sorted(r["stop_reasons"].items()) if k != "answered") or t["none"]
        wall = r["wall_s"]  # None: no learner said when it finished
        answers_per_min = _per_min(r["answered"], wall, places=None)  # a guard's stop is no answer
        turns = f"{number(r['turn_p50_s'], lang, '.1f')} / {number(r['turn_p95_s'], lang, '.1f')}" \
            if r.get("turns", 1) else "—"  # no turn finished
        lines.append(f"| {r['learners']} | {r['questions']} | {number(wall, lang, '.0f')} | {number(answers_per_min, lang, '.1f')} | "
                     f"{turns} | {number(r['run_p50_s'], lang, '.1f')} / {number(r['run_p95_s'], lang, '.1f')} | "
                     f"{r['answered']} | {guards} | {r['correct']}/{r['questions']} |")
    return "\n".join(lines) + "\n"


def level_line(level: dict) -> str:
    """One level as `invoke class-load` prints it when the level ends ("?" for a figure nobody could measure)."""
    def fig(key: str, fmt: str = ".1f") -> str:
        return number(level[key], "en", fmt)

    return (f"{level['learners']:>3} learners: {level['questions']} questions in {fig('wall_s', '.0f')} s "
            f"({fig('questions_per_min')}/min, {fig('answers_per_min')} answers/min), "
            f"turn p50/p95 {fig('turn_p50_s')}/{fig('turn_p95_s')} s, run p50/p95 {fig('run_p50_s')}/{fig('run_p95_s')} s, "
            f"answered {level['answered']}, guard stops {level['guard_stops']} {level['stop_reasons']}, "
            f"correct {level['correct']}/{level['questions']}, {level['requests']} requests")


def save(report: dict, folder: Path, name: str) -> list[Path]:
    """docs_results/class-load-NAME.json and one table per language (.md, .es.md), all from the one report."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"class-load-{name}.json", folder / f"class-load-{name}.md", folder / f"class-load-{name}.es.md"]
    paths[0].write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(report, "en"), encoding="utf-8")
    paths[2].write_text(markdown(report, "es"), encoding="utf-8")
    return paths


if __name__ == "__main__":
    sys.exit(learner_main())
