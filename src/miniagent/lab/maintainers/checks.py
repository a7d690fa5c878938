"""The maintainers' checks: every break caught and reverted (``check-breaks``), and the docs' measured results.

A check that cannot fail is the fault this lab teaches, so each one judges pytest's exit status exactly
(:func:`judge_pytest`) and says when it is the check, not the code, that is broken.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Iterator

from rich.markup import escape

from ...processes import machine_cores
from ..catalogue import ROOT, Break, catalogue, find
from ..harness.process_tree import spinning_core
from ..harness.record import RunRecord, crash_note, summary
from ..harness.run import run_experiment
from ..patching import agent_command, source_digest
from .. import screen
from .counterexamples import property_tests
from ..commands.experiment import BASELINE, exp
from .partial_fixes import Piece, pieces


def check_breaks(*, use_ci_models: bool = True, only: str | None = None, under_load: bool = False,
                 lines: bool = False, root: Path = ROOT) -> int:
    """Maintainer check: every break applies, is caught by its guard tests, shows its symptom, reverts exactly.

    The tests a break names must pass on the intact source, then fail with it applied, guard and property
    tests apart (pytest exit 1: :func:`judge_pytest`).  ``under_load``: one core kept busy, and each record
    must say so.  ``lines``: every partial fix must fail too (:mod:`.partial_fixes`).
    """
    failures: list[str] = []
    original = source_digest(root / "src")
    selected = [find(only, root)] if only is not None else catalogue(root)  # "" or an unknown name: refused
    # under load, the spinner is started here and always reaped here; each run must still show its symptom
    with (busy_core() if under_load else contextlib.nullcontext()):
        intact = _named_tests_on_intact_source(selected, root)
        started = time.monotonic()
        for done, brk in enumerate(selected, 1):
            problems, record = intact.get(brk.id) or _check_one(brk, use_ci_models, under_load, root)
            if lines and brk.id not in intact:
                problems += check_pieces(brk, root)
            status = "[green]ok[/]" if not problems else "[red]FAIL[/] " + escape("; ".join(problems))
            shown = f" [dim]({escape(summary(record))})[/]" if record is not None else ""
            far = f" [dim]· {screen.so_far(done, len(selected), started)}[/]" if len(selected) > 1 else ""
            screen.console.print(f"{brk.id}: {status}{shown}{far}")
            failures += [f"{brk.id}: {p}" for p in problems]
    if source_digest(root / "src") != original:
        failures.append("the check changed src/")
    screen.console.print(f"{len(failures)} problem(s)" if failures else "every break is caught and reverts cleanly")
    return 1 if failures else 0


# What pytest's exit status means (pytest.ExitCode): only 1 says that tests ran and some failed.
PYTEST_EXIT = {0: "every test passed", 1: "tests failed", 2: "interrupted", 3: "pytest's internal error",
               4: "a usage error, e.g. a test id that does not exist", 5: "no test was collected"}


def judge_pytest(proc: subprocess.CompletedProcess, what: str) -> str | None:
    """None when ``what`` (run against a broken copy) failed as it must: pytest exit 1; else the problem.

    Exit 0 means the break is not caught; 2-5 mean the check did not test anything, and say so."""
    if proc.returncode == 1:
        return None
    if proc.returncode == 0:
        return f"{what} pass with the break applied: the break is not caught"
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()][-3:]
    return (f"the check is broken: {what} exited {proc.returncode} "
            f"({PYTEST_EXIT.get(proc.returncode, 'not an exit status of pytest')}): {' | '.join(said)}")


def _pytest(work: Path, tests: list[str], timeout_s: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout",
                           str(timeout_s), *extra, *tests], cwd=work, capture_output=True, text=True,
                          env={**_env(), "PYTHONPATH": str(work / "src")})


def _work_copy(root: Path, prefix: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=prefix))
    # With their .pyc files: pytest's rewritten test modules and Python's own are used again where the source
    # is unchanged (copytree keeps each file's time, which the .pyc is checked against), redone where a patch
    # changed it.
    shutil.copytree(root / "src", work / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    shutil.copytree(root / "tests", work / "tests")
    shutil.copy(root / "pyproject.toml", work / "pyproject.toml")  # markers and test paths
    return work


def _named_tests_on_intact_source(breaks: list[Break], root: Path) -> dict[str, tuple[list[str], None]]:
    """{break id: (problems, None)} for the breaks whose named tests do not exist, or fail on the intact source.

    One pytest run of every named test: each must be collected and pass, or "caught" would mean nothing."""
    named = list(dict.fromkeys(t for brk in breaks for t in brk.tests))
    work = _work_copy(root, "miniagent-check-intact-")
    try:
        proc = _pytest(work, named, 120, "-rfE")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if proc.returncode == 0:
        return {}
    out = proc.stdout + proc.stderr
    missing = set(re.findall(r"not found: (?:\S*/)?(tests/\S+?)(?:\s|$)", out))
    failed = set(re.findall(r"^(?:FAILED|ERROR) (tests/\S+?)(?: - |\s|$)", out, re.M))
    problems: dict[str, tuple[list[str], None]] = {}
    for brk in breaks:
        said = [f"its test {t} does not exist (pytest: not found)" for t in brk.tests if t in missing]
        said += [f"its test {t} fails on the intact source" for t in brk.tests
                 if any(f == t or f.startswith(t + "[") for f in failed)]
        if said:
            problems[brk.id] = (said, None)
    if not problems:  # the run failed and named no test of ours: report it as it is
        problems = {brk.id: ([judge_pytest(proc, "the named tests on the intact source")], None) for brk in breaks}
    return problems


@contextlib.contextmanager
def busy_core() -> Iterator[subprocess.Popen]:
    """Another program spinning on one core for as long as the block runs; killed and reaped afterwards."""
    with spinning_core() as spinner:
        screen.console.print(f"[yellow]under load[/]: pid {spinner.pid} keeps one core busy during the check")
        yield spinner


def _check_one(brk: Break, use_ci_models: bool, under_load: bool = False,
               root: Path = ROOT) -> tuple[list[str], RunRecord | None]:
    problems = []
    record = None
    work = _work_copy(root, f"miniagent-check-{brk.id}-")
    try:
        before = source_digest(work / "src")
        env = {"PYTHONPATH": str(work / "src")}
        # 1. the patch applies to the current source
        applied = subprocess.run(["git", "apply", str(brk.patch)], cwd=work, capture_output=True, text=True)
        if applied.returncode != 0:
            return [f"patch does not apply: {applied.stderr.strip()}"], None
        # 2. its guard tests catch it: they must fail against the broken copy (pytest exit 1, nothing else)
        problems += filter(None, [judge_pytest(_pytest(work, brk.tests, 40, "-x"), "the guard tests")])
        # 2b. and so do its property tests on their own (generated worlds, not hand-picked ones)
        properties = property_tests(brk)
        if properties:
            problems += filter(None, [judge_pytest(_pytest(work, properties, 120, "-x"), "the property tests")])
        else:
            problems.append("no property test is named in [check] tests")
        # 3. the harness observes the declared symptom
        llm, timeout = (brk.ci_llm, brk.ci_timeout_s) if use_ci_models else (brk.llm, brk.timeout_s)
        record = run_experiment(agent_command(brk.input, work / "trace.jsonl", llm=llm, flags=brk.flags),
                                timeout=timeout, trace_path=work / "trace.jsonl", env=env, cwd=work,
                                live=False, clock="loop", needs=brk.needs, hard_cap=brk.hard_cap_s)
        if record.signal:
            problems.append("; ".join(crash_note(record)))
        elif record.needs_met is False:
            problems.append(f"not exercised: needs {brk.needs}, the run ended before ({summary(record)})")
        else:
            problems += [f"symptom: {p}" for p in brk.expect.failures(record.to_dict())]
        if under_load and not record.machine_busy:
            problems.append(f"the record does not say the machine was busy (other programs "
                            f"{record.other_cpu_mean:.0f} %)")
        if record.processes_left and not brk.expect.processes_left_min:
            problems.append(f"left processes behind: {record.processes_left}")
        if not record.cleanup_ok:
            problems.append("the harness could not clean up the process tree")
        # 4. the revert restores every file byte for byte
        reverted = subprocess.run(["git", "apply", "--reverse", str(brk.patch)], cwd=work, capture_output=True,
                                  text=True)
        if reverted.returncode != 0 or source_digest(work / "src") != before:
            problems.append("the revert does not restore the source byte for byte")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return problems, record


def check_pieces(brk: Break, root: Path = ROOT) -> list[str]:
    """The problems: each partial fix (:func:`.partial_fixes.pieces`) its guard tests pass on, unless the break's
    ``[[check.cosmetic]]`` names it, and each cosmetic entry that is no piece or is caught after all."""
    cosmetic = {c["piece"] for c in brk.cosmetic}
    found = pieces(brk, root)

    def tests_on(text: str | None, file: str) -> subprocess.CompletedProcess:
        """The guard tests on a copy with ``file`` holding ``text`` (None: the intact source)."""
        work = _work_copy(root, f"miniagent-partial-{brk.id}-")
        try:
            if text is not None:
                (work / file).write_text(text, encoding="utf-8")
            return _pytest(work, brk.tests, 40, "-x")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def caught(proc: subprocess.CompletedProcess) -> bool:
        # Tests that cannot even import the code (a class the fix left out) are as red as a failing test: they
        # import the intact code (the check runs them there first), so the piece is what breaks the import.
        return proc.returncode == 1 or proc.returncode in (2, 4) and "ERROR collecting tests/" in proc.stdout

    def run(piece: Piece) -> str | None:
        proc = tests_on(piece.text, piece.file)
        if proc.returncode == 0:
            return None if piece.label in cosmetic else \
                f"a fix {piece.label} passes its guard tests (or list it under [[check.cosmetic]] with why)"
        if not caught(proc):
            return judge_pytest(proc, "the guard tests")
        if piece.label not in cosmetic:
            return None
        # A timing test a busy machine fails would call a cosmetic piece needed: only a second red run, beside
        # a green run of the intact source, says the list is out of date.
        if caught(tests_on(piece.text, piece.file)) and tests_on(None, piece.file).returncode == 0:
            return f"{piece.label} is listed as cosmetic, yet its guard tests catch it: take it off the list"
        return None

    with ThreadPoolExecutor(max_workers=machine_cores()) as pool:
        problems = [p for p in pool.map(run, found) if p]
    labels = {p.label for p in found}
    problems += [f"[[check.cosmetic]] names {c!r}, which is no piece of this break" for c in cosmetic - labels]
    return problems


RESULT_KEYS = ("outcome", "stop_reason", "wall_s", "kill_latency_s", "cpu_mean", "cpu_max", "rss_max_mb", "tool_calls",
               "tool_calls_by_tool", "identical_calls", "tool_errors", "turns", "final_answer", "processes_left",
               "started_at", "other_cpu_mean", "machine_busy", "loop_start_s", "deadline_s", "timeout", "samples")


def docs_results(results_dir: Path, assets_dir: Path, only: str | None = None) -> None:
    """Run each break and its fixed twin (same model, input and flags) and keep what the docs show.

    ``<results_dir>/<id>.json``: both runs' measured figures and CPU samples; the docs hook turns
    them into each page's table, in the page's language.  ``<assets_dir>/<id>.svg`` and
    ``<id>.es.svg``: the CPU chart in English and in Spanish (broken above, fixed below), drawn
    from the same JSON (``invoke docs-charts`` redraws them).  Nothing here is typed by hand.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    assets_dir.mkdir(parents=True, exist_ok=True)
    selected = [find(only)] if only is not None else catalogue()
    with screen.progress_bar("docs-results", len(selected), shown=screen.console.is_terminal) as step:
        for done, brk in enumerate(selected):
            step(done, now=brk.id)
            _measure_break(brk, results_dir, assets_dir)
    if only is None:
        _write_eval_results(results_dir)


def _measure_break(brk: Break, results_dir: Path, assets_dir: Path) -> None:
    """One break and its fixed twin, run and kept (JSON, charts)."""
    screen.console.rule(brk.id)
    broken = exp(brk.alias, live=False)
    fixed = exp(BASELINE, question=brk.input, timeout=brk.timeout_s, llm=brk.llm, flags=brk.flags, live=False)
    data = {"id": brk.id, "llm": brk.llm, "real_model": brk.real_model,
            "measured_at": broken.started_at[:16], "cores": machine_cores(), "timeout_s": brk.timeout_s,
            "input": brk.input, "flags": list(brk.flags),
            "broken": {k: v for k, v in broken.to_dict().items() if k in RESULT_KEYS},
            "fixed": {k: v for k, v in fixed.to_dict().items() if k in RESULT_KEYS}}
    (results_dir / f"{brk.id}.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                                                encoding="utf-8")
    _draw_charts(data, assets_dir)


def _draw_charts(data: dict, assets_dir: Path) -> list[Path]:
    from ..harness.record import records_from_results
    from ..harness.charts import write_docs_charts

    broken, fixed = records_from_results(data)
    return write_docs_charts(broken, fixed, data["id"], assets_dir)


def docs_charts(results_dir: Path, assets_dir: Path) -> list[Path]:
    """Redraw every break's docs chart (both languages) from its measured JSON; nothing is run."""
    written = []
    for path in sorted(results_dir.glob("[0-9][0-9]-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "broken" in data and "samples" in data["broken"]:
            written += _draw_charts(data, assets_dir)
    return written


def _write_eval_results(results_dir: Path) -> None:
    """Lab 01's figures, strictly scored: every set with argument grounding off (before) and on (after, the
    default), and plain greedy decoding on the public set.

    ``fresh.jsonl`` was written before the prompt and the calibration were tuned for issue 7, and
    ``unseen.jsonl`` before argument grounding was written (issue 23); both are measured only here, never
    used to choose a setting.
    """
    from ...models.llama_params import choose_amx, cpu_model_name
    from ...settings import load_config
    from ..evaluation import load_eval_set, run_eval

    lines = ["| set · conjunto | decoding · decodificación | grounding · anclaje | strict accuracy · acierto estricto "
             "| declined right · rechazos correctos | made-up answers · formas inventadas | stop reasons · motivos "
             "| p50 s | p95 s | total s |", "|---|---|---|---|---|---|---|---|---|---|"]
    runs = [("eval.jsonl", "public · público", "scored", False), ("eval.jsonl", "public · público", "scored", True),
            ("eval.jsonl", "public · público", "greedy", False), ("eval.jsonl", "public · público", "greedy", True),
            ("heldout.jsonl", "old held-out · antiguo reservado", "scored", False),
            ("heldout.jsonl", "old held-out · antiguo reservado", "scored", True),
            ("fresh.jsonl", "fresh · nuevo", "scored", False), ("fresh.jsonl", "fresh · nuevo", "scored", True),
            ("unseen.jsonl", "unseen · inédito", "scored", False), ("unseen.jsonl", "unseen · inédito", "scored", True),
            ("outside.jsonl", "outside the grammar, public · fuera de la gramática, público", "scored", True),
            ("outside-unseen.jsonl", "outside the grammar, unseen · fuera de la gramática, inédito", "scored", True)]
    with screen.progress_bar("docs-results: eval", len(runs), shown=screen.console.is_terminal) as step:
        for done, (name, label, decode, grounded) in enumerate(runs):
            step(done, now=f"{name} {decode}")
            items = load_eval_set(ROOT / "labs" / "01-tutor-end-to-end" / name)
            grounding = "on" if grounded else "off"
            screen.console.print(f"eval {name} {decode}, grounding {grounding}")
            r = run_eval(items, load_config(env={}, cli={"decode": decode, "ground_arguments": grounded}))
            declined = f"{r['declined_right']}/{r['decline_items']}" if r["decline_items"] else "–"
            lines.append(f"| `{name}` ({label}) | `{decode}` | {grounding} | {r['correct']}/{r['n']} = {r['accuracy']:.1%} "
                         f"| {declined} | {r['made_up_answers']} | {r['stop_reasons']} | {r['latency_p50_s']:.2f} | {r['latency_p95_s']:.2f} | "
                         f"{r['total_s']:.1f} |")
            (results_dir / f"eval-{name.removesuffix('.jsonl')}-{decode}-grounding-{grounding}.json").write_text(
                json.dumps(r, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
    # The CPU too: llama.cpp's kernels differ from one to the next (repacked weights, AMX off), and with grounding
    # off some answers with them (the maintainers page lists those seen).
    lines = [f"Measured by `invoke docs-results` · medido con `invoke docs-results`: {stamp}, {machine_cores()} cores, "
             f"{cpu_model_name()} ({choose_amx().describe()}), Gemma 3 270M (Q4_K_M).", ""] + lines
    (results_dir / "eval.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
