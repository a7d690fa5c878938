"""What every task in tasks.py shares: a command run from the repository's root and its end reported (a
crash named in the learner's language, a reader gone away as in a shell), SIGTERM unwinding a task like Ctrl-C,
flags checked and refused in one line, and the test suite's two passes."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shlex
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Callable

from invoke import task as invoke_task
from invoke.runners import Local

from ..processes import Terminated
from .catalogue import ROOT


def task(*args, **kwargs):
    """``invoke.task``, with the body run so that SIGTERM and SIGHUP unwind it like Ctrl-C.

    A task's ``finally`` blocks stop what it started in sessions of its own (the agent under the harness,
    a model server, the learners of a class); killed by ``timeout`` or a closed terminal, Python would skip
    them and leave those processes behind (``miniagent.processes.stops_unwind``). A task whose reader went away
    (``invoke exp --json | head -1``) unwinds the same way and ends quietly (:func:`reader_gone`).
    """
    def unwinding(body):
        @functools.wraps(body)
        def task_body(*a, **k):
            from ..processes import stops_unwind

            try:
                with stops_unwind():
                    return body(*a, **k)
            except BrokenPipeError:
                reader_gone()

        return task_body

    if len(args) == 1 and callable(args[0]) and not kwargs:  # @task
        return invoke_task(unwinding(args[0]))
    return lambda body: invoke_task(*args, **kwargs)(unwinding(body))  # @task(...)


def run(c, command: str, *, trace: Path | None = None, who: str = "process") -> int:
    """Run a command from the repo root; exit with its status, without invoke's traceback.

    A death by signal (a crash in llama.cpp, say) is named in one clear report, in the learner's language,
    and exits 128 + the signal's number, as a shell does; ``trace`` (the agent's trace file) tells how far
    its loop got; ``who`` names what died (agent, tests, bench, process)."""
    code = status(c, command, trace=trace, who=who)
    if code:
        sys.exit(code)
    return 0


# A shell's status for a writer whose reader went away: 128 + SIGPIPE.
READER_GONE = 141


def reader_gone() -> None:
    """End quietly, as a shell's ``cmd | head`` does: no traceback, status 141. Python's own advice (the signal
    module's note on SIGPIPE): point the streams at /dev/null first, so that the exit's flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    sys.exit(READER_GONE)


def our_children() -> list:
    import psutil

    return psutil.Process().children()


class Output:
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
            for child in our_children():  # the command (invoke runs one at a time)
                with contextlib.suppress(psutil.Error):
                    child.terminate()

    def flush(self) -> None:
        """write() flushes."""


class StoppingRunner(Local):
    """invoke's runner, except that a task stopped by SIGTERM or SIGHUP stops its command too. invoke passes on
    only Ctrl-C, as a byte on the command's stdin (a terminal's Ctrl-C reaches the command anyway), and would then
    wait for a command nobody told to stop (``kill`` of ``invoke traces`` left the viewer running)."""

    def wait(self) -> None:
        try:
            super().wait()
        except Terminated:
            self.process.terminate()  # the lab's commands unwind on SIGTERM and stop what they started
            raise


def status(c, command: str, *, who: str, trace: Path | None = None) -> int:
    """:func:`run`'s work without the exit: the command's status (128 + the signal when it died of one,
    named in one clear report)."""
    out, err = Output(sys.stdout), Output(sys.stderr)
    with c.cd(str(ROOT)):  # a Result always: nothing here disowns or runs in the background
        # Context._run is invoke's own place for another runner (changing c.config would reset the task's config)
        result = c._run(StoppingRunner(c), command, warn=True, out_stream=out, err_stream=err)
    if out.reader_gone or err.reader_gone:
        reader_gone()
    if result.exited is not None and result.exited < 0:
        report_crash(result, trace, who)
        return 128 - result.exited
    return result.exited or 0


def report_crash(result, trace: Path | None, who: str) -> None:
    from .harness import crash
    from .harness.follow import Progress, TraceFollower
    from .commands.exercises import report_lang

    progress = Progress()
    if trace is not None:
        for event in TraceFollower(trace).finish():
            progress.add(event, 0.0)
    started = None if trace is None else progress.first_event_at is not None
    lines = crash.describe(crash.signal_name(result.exited), loop_started=started, turns=progress.turns,
                           stderr_lines=(result.stderr or "").splitlines(), lang=report_lang(), who=who)
    print("\n".join(f"miniagent: {line}" if i == 0 else line for i, line in enumerate(lines)), file=sys.stderr)


@contextlib.contextmanager
def agent_trace(trace: str | None):
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
def number(flag: str, raw, kind: type, *, above: float | None = None):
    """A flag's value as an int or a finite float (of seconds ``above`` a bound, where one is given); a ValueError
    naming the flag otherwise (refused, exit 2)."""
    import math

    try:
        value = kind(str(raw).strip())
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        raise ValueError(f"{flag} takes {'a whole number' if kind is int else 'a number'}, got {raw!r}")
    if above is not None and value <= above:
        raise ValueError(f"{flag} takes a number of seconds above {above:g}, got {raw!r}")
    return value


def check_save_name(save: str | None) -> None:
    """--save NAME becomes docs_results/<kind>-NAME.json: a name, checked before the measurement it would save."""
    import re

    if save is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", save):
        raise ValueError(f"--save takes a name (letters, digits, - and _), got {save!r}")


def refuse(err: Exception | str, status: int = 2) -> None:
    print(f"miniagent: {err}", file=sys.stderr)
    sys.exit(status)


def errors():
    """The learner-facing refusals: a clear message and exit status 2, never a traceback."""
    from .catalogue import BreakError
    from .learner.notebook import PredictionError
    from .learner.progress import StateError

    return BreakError, PredictionError, StateError, ValueError


def refusing_in(root: Callable[[], Path]):
    """The decorator of every learner-facing task: an error of :func:`errors` becomes one line and exit status 2,
    and a ``--learner`` named on a refused command is not remembered in the checkout ``root()`` names."""
    def refusing(body):
        @functools.wraps(body)
        def task_body(*args, **kwargs):
            from .learner.progress import remembered_unless_refused

            try:
                with remembered_unless_refused(root()):
                    return body(*args, **kwargs)
            except errors() as err:
                refuse(err)

        return task_body

    return refusing


def learner_in(root: Callable[[], Path]):
    """``who(learner, required=False)``: the learner named, else the one who ran a command last in the checkout
    ``root()`` names (None, or a refusal if required)."""
    def who(learner: str | None, required: bool = False) -> str | None:
        from .learner.progress import resolve_learner

        return resolve_learner(root(), learner, required=required)

    return who


def flags(**values) -> str:
    """--flag value pairs for the CLI; None means "not given" (lower config layers apply)."""
    parts = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        parts.append(flag if value is True else f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


# What `invoke --help TASK` says of each flag (task_help.toml); the model options of the CLI, the same on
# `invoke ask`, `eval` and `exp` (see ModelSettings), declared there once.
HELP = tomllib.loads(Path(__file__).with_name("task_help.toml").read_text(encoding="utf-8"))
MODEL_HELP: dict[str, str] = HELP["model"]


def help_for(name: str) -> dict[str, str]:
    """Task ``name``'s flags and what ``--help`` says of each: its own texts, the shared ones it names
    ("@learner"), and every model option where it takes them (``model_options = true``)."""
    own = dict(HELP[name])
    texts = {**(MODEL_HELP if own.pop("model_options", False) else {}), **own}
    return {flag: HELP["shared"][text[1:]] if text.startswith("@") else text for flag, text in texts.items()}


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


def run_suite(c, pytest: str, *, k: str | None = None, quick: bool = False) -> None:
    """``invoke test``: the parallel pass, then the serial one unless the first crashed or was interrupted; exits
    with :func:`suite_status` of the two. ``quick`` is the parallel pass alone, without the real-model, slow and
    browser tests: the serial pass's tests wait on purpose (kills at a timeout, CPU figures), 47 s of 2.5 min."""
    # Each pytest process rewrites the test modules' asserts and keeps the result as .pyc files in __pycache__
    # (ignored by git); where PYTHONDONTWRITEBYTECODE is set (CI images) nothing is kept and every process, the
    # workers and each pytest run a test starts, redoes it: 2.7 s of a 5.4 s collection on 2 cores.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    selection = f"-k {shlex.quote(k)} " if k else ""
    also = " and not real_model and not slow and not browser" if quick else ""
    # The quick pass ends sooner when a worker that runs out takes tests queued for the other (worksteal: 4 s);
    # the whole one, with its few long tests, later (40 s): there xdist's default hands tests out one at a time.
    parallel = f"-n {WORKERS} --dist {'worksteal' if quick else 'load'} -m {shlex.quote('not serial' + also)}"
    codes = [status(c, f"{pytest} {parallel} {selection}".strip(), who="tests")]
    if codes[0] in GO_ON and not quick:  # a crash or an interrupted run ends the suite here
        codes.append(status(c, f"{pytest} -p no:xdist -m serial {selection}".strip(), who="tests"))
    code = suite_status(codes)
    if code:
        sys.exit(code)
