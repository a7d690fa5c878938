"""Lab tasks: `invoke --list` shows them all.

Every task is a thin front for a module of `miniagent`, so what a learner
runs here is exactly what the tests exercise.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from invoke import task as invoke_task

ROOT = Path(__file__).resolve().parent
PY = shlex.quote(sys.executable)


def task(*args, **kwargs):
    """``invoke.task``, with the body run so that SIGTERM and SIGHUP unwind it like Ctrl-C.

    A task's ``finally`` blocks stop what it started in sessions of its own (the agent under the harness,
    a model server, the learners of a class); killed by ``timeout`` or a closed terminal, Python would skip
    them and leave those processes behind (``miniagent.processes.stops_unwind``). A task whose reader went away
    (``invoke exp --json | head -1``) unwinds the same way and ends quietly (:func:`_reader_gone`).
    """
    def unwinding(body):
        @functools.wraps(body)
        def task_body(*a, **k):
            from miniagent.processes import stops_unwind

            try:
                with stops_unwind():
                    return body(*a, **k)
            except BrokenPipeError:
                _reader_gone()

        return task_body

    if len(args) == 1 and callable(args[0]) and not kwargs:  # @task
        return invoke_task(unwinding(args[0]))
    return lambda body: invoke_task(*args, **kwargs)(unwinding(body))  # @task(...)


def _run(c, command: str, *, trace: Path | None = None, who: str = "process") -> int:
    """Run a command from the repo root; exit with its status, without invoke's traceback.

    A death by signal (a crash in llama.cpp, say) is named in one clear report, in the learner's language,
    and exits 128 + the signal's number, as a shell does; ``trace`` (the agent's trace file) tells how far
    its loop got; ``who`` names what died (agent, tests, bench, process)."""
    code = _status(c, command, trace=trace, who=who)
    if code:
        sys.exit(code)
    return 0


# A shell's status for a writer whose reader went away: 128 + SIGPIPE.
READER_GONE = 141


def _reader_gone() -> None:
    """End quietly, as a shell's ``cmd | head`` does: no traceback, status 141. Python's own advice (the signal
    module's note on SIGPIPE): point the streams at /dev/null first, so that the exit's flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    sys.exit(READER_GONE)


def _our_children() -> list:
    import psutil

    return psutil.Process().children()


class _Output:
    """Where a command's output goes: our own stream, until whoever reads it goes away
    (``invoke ask --trace - | head -1``). invoke's copying thread would die of the broken pipe and invoke would stop
    waiting, leaving the command running on its own; here, as in a shell, the command is stopped instead (SIGTERM:
    the lab's commands unwind and stop what they started), and invoke waits for it while the rest is dropped."""

    def __init__(self, stream) -> None:
        self.stream, self.reader_gone = stream, False

    def write(self, text: str) -> None:
        if self.reader_gone:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            import psutil

            self.reader_gone = True
            for child in _our_children():  # the command (invoke runs one at a time)
                with contextlib.suppress(psutil.Error):
                    child.terminate()

    def flush(self) -> None:
        """write() flushes."""


def _status(c, command: str, *, who: str, trace: Path | None = None) -> int:
    """:func:`_run`'s work without the exit: the command's status (128 + the signal when it died of one,
    named in one clear report)."""
    out, err = _Output(sys.stdout), _Output(sys.stderr)
    with c.cd(str(ROOT)):  # a Result always: nothing here disowns or runs in the background
        result = c.run(command, warn=True, out_stream=out, err_stream=err)
    if out.reader_gone or err.reader_gone:
        _reader_gone()
    if result.exited is not None and result.exited < 0:
        _report_crash(result, trace, who)
        return 128 - result.exited
    return result.exited or 0


def _report_crash(result, trace: Path | None, who: str) -> None:
    from miniagent.lab.harness import crash
    from miniagent.lab.harness.follow import Progress, TraceFollower
    from miniagent.lab.commands.exercises import report_lang

    progress = Progress()
    if trace is not None:
        for event in TraceFollower(trace).finish():
            progress.add(event, 0.0)
    started = None if trace is None else progress.first_event_at is not None
    lines = crash.describe(crash.signal_name(result.exited), loop_started=started, turns=progress.turns,
                           stderr_lines=(result.stderr or "").splitlines(), lang=report_lang(), who=who)
    print("\n".join(f"miniagent: {line}" if i == 0 else line for i, line in enumerate(lines)), file=sys.stderr)


@contextlib.contextmanager
def _agent_trace(trace: str | None):
    """(the trace file to read after the run, the --trace value to pass): the learner's, else a scratch file."""
    if trace:
        yield (None if trace == "-" else ROOT / trace), trace
        return
    scratch = Path(tempfile.mkdtemp(prefix="miniagent-trace-"))
    try:
        yield scratch / "trace.jsonl", str(scratch / "trace.jsonl")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- refusals: a clear line and exit status 2, never a traceback ------------------------------------
def _number(flag: str, raw, kind: type):
    """A flag's value as an int or a finite float; a ValueError naming the flag otherwise (refused, exit 2)."""
    import math

    try:
        value = kind(str(raw).strip())
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        raise ValueError(f"{flag} takes {'a whole number' if kind is int else 'a number'}, got {raw!r}")
    return value


def _check_save_name(save: str | None) -> None:
    """--save NAME becomes docs_results/<kind>-NAME.json: a name, checked before the measurement it would save."""
    import re

    if save is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", save):
        raise ValueError(f"--save takes a name (letters, digits, - and _), got {save!r}")


def _refuse(err: Exception | str, status: int = 2) -> None:
    print(f"miniagent: {err}", file=sys.stderr)
    sys.exit(status)


def _errors():
    """The learner-facing refusals: a clear message and exit status 2, never a traceback."""
    from miniagent.lab.catalogue import BreakError
    from miniagent.lab.learner.notebook import PredictionError
    from miniagent.lab.learner.progress import StateError

    return BreakError, PredictionError, StateError, ValueError


def refusing(body):
    """One refusal path for every task: a learner-facing error becomes one line and exit status 2, and a
    ``--learner`` named on a refused command is not remembered."""
    @functools.wraps(body)
    def task_body(*args, **kwargs):
        from miniagent.lab.learner.progress import remembered_unless_refused

        try:
            with remembered_unless_refused(ROOT):
                return body(*args, **kwargs)
        except _errors() as err:
            _refuse(err)

    return task_body


def _flags(**values) -> str:
    """--flag value pairs for the CLI; None means "not given" (lower config layers apply)."""
    parts = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        parts.append(flag if value is True else f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


# The model options of the CLI, the same on `invoke ask`, `eval` and `exp` (see TutorConfig): declared here once.
MODEL_HELP = {
    "llm": "llama (default) | openai | scripted:<behaviour>",
    "model": "path of another GGUF file (with --llm openai: the tokenizer of the model the server serves)",
    "decode": "scored (default) | greedy",
    "max_action_tokens": "tokens per model reply (default 48)",
    "n_ctx": "context window in tokens (default 2048)",
    "n_threads": "llama.cpp threads, 0 = the free cores (default)",
    "cache_dir": "prompt and priors cache ('' turns it off)",
    "openai_base_url": "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (with --llm openai)",
    "openai_model": "model name the server expects (default 'local')",
    "openai_response_format": "greedy only: auto (default) | json_schema | json_object",
    "openai_max_retries": "retries when the model server is unreachable or busy (default 2)",
    "openai_startup_s": "seconds each start-up request to the model server may take (default 10)",
    "model_wall_clock_s": "seconds the run may wait for the model apart from wall_clock_s (0 = counted in it)",
    "llama_amx": "llama.cpp's AMX path: auto (default: off where the CPU reports AMX) | on | off",
}


def with_model_options(body):
    """The task takes every model option as a flag (None: not given) and gets them as ``options={name: value}``."""
    signature = inspect.signature(body)
    own = [p for name, p in signature.parameters.items() if name != "options"]
    options = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for name in MODEL_HELP]

    @functools.wraps(body)
    def task_body(c, *args, **kwargs):
        chosen = {name: kwargs.pop(name, None) for name in MODEL_HELP}
        return body(c, *args, options=chosen, **kwargs)

    del task_body.__wrapped__  # invoke reads the signature below, not the body's
    task_body.__signature__ = signature.replace(parameters=[*own, *options])
    return task_body


@task(auto_shortflags=False, help={
    "question": "the grammar question, e.g. 'What is the past simple of go for she?'",
    "max_turns": "turn cap (default 6)",
    "max_tool_calls": "tool-call cap (default 4)",
    "wall_clock_s": "time budget of the run in seconds (default 20)",
    "tool_timeout_s": "per-call MCP timeout in seconds (default 2)",
    **MODEL_HELP,
    "trace": "write JSON-lines events to FILE ('-' for stdout)",
    "json": "print the outcome as JSON",
})
@with_model_options
def ask(c, question, max_turns=None, max_tool_calls=None, wall_clock_s=None, tool_timeout_s=None, trace=None,
        json=False, options=None):
    """Ask the grammar tutor one question (real local model + real MCP server)."""
    flags = _flags(max_turns=max_turns, max_tool_calls=max_tool_calls, wall_clock_s=wall_clock_s,
                   tool_timeout_s=tool_timeout_s, json=json, **options)
    with _agent_trace(trace) as (trace_file, trace_flag):
        _run(c, f"{PY} -m miniagent ask {shlex.quote(question)} {flags} {_flags(trace=trace_flag)}",
             trace=trace_file, who="agent")


@task(name="eval", auto_shortflags=False, help={
    "set": "JSON-lines eval set (default labs/01-tutor-end-to-end/eval.jsonl)",
    "limit": "only the first N items",
    "wall_clock_s": "time budget of each run in seconds (default 20)",
    **MODEL_HELP,
    "json": "print one JSON object (accuracy, n, items...)",
})
@with_model_options
def eval_(c, set=None, limit=None, wall_clock_s=None, json=False, options=None):  # noqa: A002
    """Score the tutor on an eval set: per-item table, accuracy, stop reasons, latency p50/p95."""
    flags = _flags(set=set, limit=limit, wall_clock_s=wall_clock_s, json=json, **options)
    with _agent_trace(None) as (trace_file, trace_flag):
        _run(c, f"{PY} -m miniagent eval {flags} {_flags(trace=trace_flag)}", trace=trace_file, who="agent")


# The suite runs in two passes: most tests on two workers at once (pytest-xdist), then, one at a time, the tests
# marked `serial` (a kill latency, a time bound, CPU figures: another test on the same cores could disturb them).
WORKERS = 2
# pytest's exit statuses after which the second pass still runs: passed, failed, nothing collected.
GO_ON = (0, 1, 5)


def suite_status(codes: list[int]) -> int:
    """One status for the passes: the first failure; "nothing collected" (5) only when no pass collected any."""
    ran = [code for code in codes if code != 5]
    if not ran:
        return 5
    return next((code for code in ran if code), 0)


@task(help={"k": "only tests matching this expression",
            "quick": "skip the real-model tests, the slow ones (marked slow: each half a minute or more) and the docs "
                     "in a browser"})
def test(c, k=None, quick=False):
    """Run the test suite (real model and real MCP server included): in parallel, then the timing tests alone."""
    selection = f"-k {shlex.quote(k)} " if k else ""
    also = " and not real_model and not slow and not browser" if quick else ""
    codes = [_status(c, f"{PY} -m pytest -q -n {WORKERS} -m {shlex.quote('not serial' + also)} {selection}".strip(),
                     who="tests")]
    if codes[0] in GO_ON:  # a crash or an interrupted run ends the suite here
        codes.append(_status(c, f"{PY} -m pytest -q -p no:xdist -m {shlex.quote('serial' + also)} "
                                f"{selection}".strip(), who="tests"))
    code = suite_status(codes)
    if code:
        sys.exit(code)


@task(help={"json": "print the figures as JSON",
            "only": "one figure only: a, b (KV reuse), c (start -> answer/fallback), d, e or f (MCP server start-up)",
            "amx": "(c): llama.cpp's AMX path, comma-separated settings to compare, e.g. on,off (default auto)",
            "load": "(c): idle or busy (one core kept busy by another program); default both",
            "runs": "(c): processes per figure, the median is shown (default 5)",
            "save": "(c): also write docs_results/bench-NAME.json and its tables for the docs"})
@refusing
def bench(c, json=False, only=None, amx=None, load=None, runs=None, save=None):
    """Print the speed figures (turn latency vs decode, KV reuse, start -> answer/fallback, eval time...)."""
    loads = {"idle": "idle", "busy": "'one core busy'"}
    asked = [x.strip() for x in (load or "").split(",") if x.strip()]
    if any(x not in loads for x in asked):  # before minutes of measuring: bench's own names are not the flag's
        _refuse(f"--load takes idle or busy (or both, comma-separated), got {load!r}")
    if runs is not None and _number("--runs", runs, int) < 1:
        _refuse(f"--runs takes 1 or more, got {runs!r}")
    _check_save_name(save)
    flags = [_flags(json=json, only=only, runs=runs, save=save)]
    flags += [f"--amx {shlex.quote(a.strip())}" for a in (amx or "").split(",") if a.strip()]
    flags += [f"--load {loads[x]}" for x in asked]
    _run(c, f"{PY} -m miniagent.lab.maintainers.bench {' '.join(flags)}", who="bench")


@task
def docs(c):
    """Serve the bilingual docs site on http://127.0.0.1:8000."""
    _run(c, f"{PY} -m mkdocs serve")


@task(name="docs-build")
def docs_build(c):
    """Build the docs site strictly (any warning fails), as CI does."""
    _run(c, f"{PY} -m mkdocs build --strict --site-dir site")


# --- breaks, experiments, predictions -----------------------------------------------------------
@task
def breaks(c):
    """List the break catalogue with a one-line description each."""
    from miniagent.lab.commands import exercises

    exercises.list_breaks()


LEARNER_HELP = "your name, your folder under learners/ (remembered: needed once)"
LANG_HELP = "en | es (default: the language of your notebook)"


def _who(learner, required=False):
    """The learner named here, else the one who ran a command last (None, or a refusal if required)."""
    from miniagent.lab.learner.progress import resolve_learner

    return resolve_learner(ROOT, learner, required=required)


@task(name="break", positional=["variant"], help={
    "variant": "a break: alias (no-cap), id (00-no-cap) or number (00)", "learner": LEARNER_HELP})
@refusing
def break_(c, variant, learner=None):
    """Apply a break to your working tree (refuses, changing nothing, if your edits conflict)."""
    from miniagent.lab.commands import exercises

    exercises.break_tree(variant, _who(learner))


@task(positional=["variant"], help={"variant": "the break to revert", "learner": LEARNER_HELP})
@refusing
def fix(c, variant, learner=None):
    """Revert a break exactly (refuses if you edited the same lines since)."""
    from miniagent.lab.commands import exercises

    exercises.fix_tree(variant, _who(learner))


@task(positional=["variant"], help={"variant": "a break (alias, id or number), or 'all' for every guard test",
                                    "dry_run": "only list the guard tests, without running them",
                                    "verbose": "also print pytest's own output", "learner": LEARNER_HELP})
@refusing
def check(c, variant, dry_run=False, learner=None, verbose=False):
    """Run a break's guard tests against your own source: green means your fix holds."""
    from miniagent.lab.commands import exercises

    code = exercises.check(variant, dry_run=dry_run, learner=_who(learner), verbose=verbose)
    sys.exit(code)


@task(positional=["variant"], help={"variant": "the break you are fixing", "learner": LEARNER_HELP,
                                    "lang": LANG_HELP})
@refusing
def hint(c, variant, learner=None, lang=None):
    """The next hint for a break: 1, then 2, then 3 (remembered in your progress)."""
    from miniagent.lab.commands import exercises

    exercises.hint(variant, _who(learner, required=True), lang)


@task(help={"learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def progress(c, learner=None, lang=None):
    """Every break with your state (predicted, run, broken, fixed, hints) and what to do next."""
    from miniagent.lab.commands import exercises

    exercises.progress_report(_who(learner, required=True), lang)


@task(name="next", help={"learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def next_(c, learner=None, lang=None):
    """The next break to work on, with the commands for it."""
    from miniagent.lab.commands import exercises

    exercises.next_break(_who(learner, required=True), lang)


@task(positional=["variant"], help={"variant": "the break whose guard tests to run (or 'all')",
                                    "learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def watch(c, variant, learner=None, lang=None):
    """Re-run a break's guard tests every time you save a file under src/ (Ctrl-C to stop)."""
    from miniagent.lab.commands import exercises

    code = exercises.watch_tree(variant, _who(learner), lang)
    sys.exit(code)


@task(positional=["variant"], help={"variant": "the break to put back to its intact source",
                                    "learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def reset(c, variant, learner=None, lang=None):
    """Back to the intact source for this break only (your other edits stay; replaced lines are saved)."""
    from miniagent.lab.commands import exercises

    exercises.reset_tree(variant, _who(learner), lang)


@task(positional=["variant"], help={
    "variant": "the break to predict", "learner": LEARNER_HELP,
    "lang": "en | es: your notebook's language, chosen once (the first time; default en)"})
@refusing
def predict(c, variant, learner=None, lang=None):
    """Add a prediction section for a break to learners/NAME/notebook.md (never overwrites)."""
    from miniagent.lab.commands import experiment

    experiment.predict(variant, _who(learner, required=True), lang)


@task(auto_shortflags=False, help={
    "variant": "a break alias/id, or 'baseline' for the intact loop",
    "input": "the question (default: the break's own input)",
    "timeout": "seconds before the harness kills the run (default: the break's)",
    **MODEL_HELP,
    "llm": "model: llama | scripted:<behaviour> | openai (default: the break's)",
    "learner": "compare with your prediction and append the observation to your notes",
    "json": "print the run record as JSON",
})
@with_model_options
@refusing
def exp(c, variant, input=None, timeout=None, learner=None, json=False, options=None):  # noqa: A002
    """Run a variant from a sandbox copy under the harness: live panel, kill at timeout, report."""
    from miniagent.lab.commands import experiment

    llm = options.pop("llm")
    seconds = _number("--timeout", timeout, float) if timeout is not None else None
    if seconds is not None and seconds <= 0:
        raise ValueError(f"--timeout takes a number of seconds above 0, got {timeout!r}")
    record = experiment.exp(variant, question=input, timeout=seconds, llm=llm,
                            learner=learner, as_json=json, model_flags=shlex.split(_flags(**options)))
    if record is None or record.signal:  # no prediction yet (it said how to write one), or a crash (reported)
        sys.exit(1)


@task(help={"learner": "score your predictions", "json": "print all records as JSON",
            "llm": "run every break with this model instead of its own"})
@refusing
def tour(c, learner=None, json=False, llm=None):
    """The failure-mode tour: run every break, then a summary table (predicted vs observed)."""
    from miniagent.lab.commands import experiment

    results = experiment.tour(learner, as_json=json, llm=llm)
    if any((r["record"] or {}).get("signal") for r in results):
        sys.exit(1)  # a run crashed: the table says which


@task(name="check-breaks", help={"real": "use each break's own model instead of the fast CI model",
                                 "only": "check one break",
                                 "under_load": "keep one core busy with another process during the whole check",
                                 "lines": "also: a fix that leaves out any one removed line or term stays red"})
@refusing
def check_breaks(c, real=False, only=None, under_load=False, lines=False):
    """Maintainer check: each break applies, is caught by its tests, shows its symptom, reverts exactly."""
    from miniagent.lab.maintainers import checks

    sys.exit(checks.check_breaks(use_ci_models=not real, only=only, under_load=under_load, lines=lines))


@task(name="docs-results", help={"only": "one break only"})
@refusing
def docs_results(c, only=None):
    """Run every break and its fixed twin for real; write the docs' results tables and CPU charts."""
    from miniagent.lab.maintainers import checks

    checks.docs_results(ROOT / "docs_results", ROOT / "docs" / "assets" / "results", only=only)


@task(name="docs-charts")
def docs_charts(c):
    """Redraw the docs' CPU charts (English and Spanish) from the measured JSON in docs_results/; runs nothing."""
    from miniagent.lab.maintainers import checks

    for path in checks.docs_charts(ROOT / "docs_results", ROOT / "docs" / "assets" / "results"):
        print(path.relative_to(ROOT))


@task(name="docs-check")
def docs_check(c):
    """Headless Chromium reads the built site in Spanish (home, break 00, a hint, the results), searches,
    and follows the language switcher on every page; saves a screenshot of each step."""
    _run(c, f"{PY} -m pytest -q tests/docs/test_docs_browser.py")
    print("screenshots: build/docs-check/*.png")


# --- maintainers: the property tests' counterexamples, mutation testing -------------------------------------
@task(help={"only": "one break only"})
@refusing
def counterexamples(c, only=None):
    """Run each break against its property tests; write hypothesis's smallest failing world to docs_results/."""
    from miniagent.lab.maintainers import counterexamples as ce

    ce.write(ROOT / "docs_results", only=only)


@task(help={"max_children": "mutants tested in parallel (default 2)",
            "wing": "the wings to mutate, comma-separated: agent, models, tools, lab, cli, tasks (default: all)"})
def mutants(c, max_children=2, wing=None):
    """Mutation testing of the whole package, wing by wing, with each wing's tests (mutmut; slow: not in CI)."""
    from miniagent.lab.maintainers import mutants as mm

    wings = [w.strip() for w in str(wing).split(",")] if wing is not None else list(mm.WINGS)  # "": no wing
    unknown = [repr(w) if not w else w for w in wings if w not in mm.WINGS]
    if unknown:
        _refuse(f"no wing named {', '.join(unknown)}: the wings are {', '.join(mm.WINGS)}")
    unexplained = broken = 0
    for name in wings:
        result = mm.run(max_children=int(max_children), wing=name)
        print(mm.report(result), flush=True)
        unexplained += len(result["unexplained"])
        broken += result["problem"] is not None
    # 2: the check itself failed (a wing tested nothing); 1: survivors nobody explained
    sys.exit(2 if broken else 1 if unexplained else 0)


@task(name="class-load", help={
    "learners": "class sizes to measure, comma-separated (default 1,4,8,16)",
    "server": "the server to start here and reap after: miniagent (the lab's class server, default), "
              "llama-cpp-python, or local (no server: each learner runs the local backend, the baseline)",
    "base_url": "an OpenAI-compatible server that is already up (instead of --server)",
    "questions_each": "questions per learner (default: the public set split among the learners, each question once)",
    "wall_clock_s": "each run's wall clock (default 20)",
    "model_wall_clock_s": "the model calls' own budget per run (default 0: counted in the wall clock)",
    "set": "eval set (default labs/01-tutor-end-to-end/eval.jsonl)",
    "model": "GGUF the server loads (and the learners' tokenizer)",
    "save": "also write docs_results/class-load-NAME.json and its tables (.md, .es.md) for the docs",
    "json": "print the report as JSON",
    "grounding": "argument grounding in the learners' runs (default on; --no-grounding: the loop without it)",
})
@refusing
def class_load(c, learners="1,4,8,16", server="miniagent", base_url=None, questions_each=None, wall_clock_s=None,  # noqa: A002
               model_wall_clock_s=None, set=None, model=None, save=None, json=False, grounding=True):
    """A class on one model server: N learners run the eval at once; throughput, turn latency, guard stops."""
    import json as json_module

    from rich.console import Console

    from miniagent.lab.maintainers import classload
    from miniagent.lab.evaluation import load_eval_set
    from miniagent.serving.start import SERVERS, ServerNotReady
    from miniagent.models.settings import SERVER_URL
    from miniagent.settings import load_config

    console = Console(quiet=json)
    # Everything a flag says is checked before the first learner starts: a class takes minutes, and a learner
    # that refuses its settings would only say that it did not start.
    settings = {k: _number(f"--{k.replace('_', '-')}", v, float) for k, v in
                (("wall_clock_s", wall_clock_s), ("model_wall_clock_s", model_wall_clock_s)) if v is not None}
    if model:
        if not Path(model).is_file():
            raise ValueError(f"--model: model file not found: {model}")
        settings["model"] = model
    if not grounding:
        settings["ground_arguments"] = False
    load_config(cli=settings, env={})  # the bounds every learner's settings must meet
    try:
        sizes = [_number("--learners", n, int) for n in str(learners).split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--learners takes class sizes of 1 or more, comma-separated, got {learners!r}")
    each = _number("--questions-each", questions_each, int) if questions_each is not None else None
    if each is not None and each < 1:
        raise ValueError(f"--questions-each takes 1 or more, got {questions_each!r}")
    if set:
        load_eval_set(Path(set))  # a set that cannot be read is refused by name (EvalSetError)
    _check_save_name(save)
    if base_url is not None and not SERVER_URL.match(base_url):
        raise ValueError(f"--base-url takes a server's URL (http://HOST:PORT/v1), got {base_url!r}")
    choices = (*SERVERS, classload.LOCAL)
    if base_url is None and server not in choices:
        _refuse(f"no server named {server!r}: choose one of {', '.join(choices)}, or give --base-url")

    def show(level):
        console.print(classload.level_line(level), highlight=False)

    try:
        report = classload.class_load(sizes, server=server, base_url=base_url,
                                      eval_set=Path(set) if set else classload.DEFAULT_SET,
                                      questions_each=each,
                                      settings=settings, model_path=model, on_level=show,
                                      shown=not json and sys.stdout.isatty())
    except (ServerNotReady, classload.ClassFailed) as err:  # the levels above it were shown as they ended
        _refuse(err, status=1)  # a class that failed, not a refused input
    console.print(classload.markdown(report), markup=False, highlight=False)
    if save:
        for path in classload.save(report, ROOT / "docs_results", save):
            console.print(f"saved: {path.relative_to(ROOT)}", highlight=False)
    if json:
        print(json_module.dumps(report))
