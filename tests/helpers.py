"""Shared test helpers: a fake tool server for fast loop tests, scripted models, a fake OpenAI-compatible model
server, and waits on the agent's processes."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from pathlib import Path

import psutil

from miniagent.models.scripted import ScriptedBackend
from miniagent.agent.config import TutorConfig
from miniagent.tools.conjugation import PERSONS, PRONOUNS, TENSES, preload
from miniagent.tools.server import ToolInputError, conjugate_text
from miniagent.agent.errors import ToolError, ToolTimeout

# llama.cpp threads for a model a test runs in its own process. In invoke test's parallel pass another worker keeps
# the other core busy, and two threads on a crowded core wait on each other at every step (measured on 2 cores:
# 20 one-token decodes 3.6 s with two threads, 0.9 s with one; 0.5 s with two on an idle machine).
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2

# How a stand-in process whose signal handler must end its wait waits for 60 s: in short naps, never one long
# sleep. CPython runs a handler between bytecodes or when a system call is interrupted; a signal that lands after
# the last check and before the sleep's system call starts is handled only when the sleep ends. Sent the moment
# the stand-in says it is running, as these tests do, that happened once in 1,500 tries on a busy machine (the
# handler ran 5 s late, after the whole sleep); with 0.1 s naps, 0 of 1,500 were late by more than 0.5 s.
NAPS_60_S = "for _ in range(600): time.sleep(0.1)"


class FakeTools:
    """Answers like the MCP server, in-process, with optional slowness or failure."""

    def __init__(self, *, delay: float = 0.0, hang: bool = False, fail_with: Exception | None = None,
                 hangs_on: tuple[str, ...] = (), hang_at_most: float | None = None):
        """``hang``: every call waits out its timeout (``hangs_on``: only these tools); ``hang_at_most`` caps
        the wait, so that a test of the timeout a call was given need not sit through a wrong one."""
        preload()  # as the real server does before serving: no call pays for loading the verb lexicon
        self.delay, self.hang, self.fail_with = delay, hang, fail_with
        self.hangs_on, self.hang_at_most = hangs_on, hang_at_most
        self.calls: list[tuple[str, dict, float | None]] = []

    def call(self, tool: str, args: dict, timeout: float | None = None) -> str:
        self.calls.append((tool, dict(args), timeout))
        if self.fail_with is not None:
            raise self.fail_with
        if self.hang or tool in self.hangs_on:
            time.sleep(min(timeout or 0, self.hang_at_most if self.hang_at_most is not None else float("inf")))
            raise ToolTimeout(f"no answer within {timeout:.2f} s")
        if self.delay:
            if timeout is not None and self.delay > timeout:
                time.sleep(timeout)
                raise ToolTimeout(f"no answer within {timeout:.2f} s")
            time.sleep(self.delay)
        if tool == "list_tenses":
            return f"Tenses: {', '.join(TENSES)}. Persons: {', '.join(PERSONS)} ({', '.join(PRONOUNS)})."
        try:
            return conjugate_text(args["verb"], args["tense"], args["person"])  # the server's own words
        except ToolInputError as err:
            raise ToolError(str(err), err.refusal) from None  # as the MCP client raises it


def scripted(behaviour: str) -> ScriptedBackend:
    return ScriptedBackend(behaviour)


def config(**overrides) -> TutorConfig:
    """The loop's settings: the given ones, every other one at its default."""
    return TutorConfig(**overrides)




def start_foreign_spinner() -> psutil.Process:
    """A busy loop that is not our child (its launcher has exited): other work on the machine.

    The caller must kill it."""
    launcher = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; "
         "print(subprocess.Popen([sys.executable, '-c', 'while True: pass'], stdin=subprocess.DEVNULL, "
         "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"],
        capture_output=True, text=True, check=True, timeout=30)
    return psutil.Process(int(launcher.stdout))


CRASH_HOOK = """
import ctypes, importlib.abc, importlib.util, os, sys

TARGETS = {"model": ("miniagent.models.llama_runtime", "KVRuntime", "feed"),
           "turn2": ("miniagent.models.scripted", "ScriptedBackend", "next_action")}
module_name, class_name, method = TARGETS.get(os.environ.get("MINIAGENT_TEST_CRASH", ""), (None, None, None))


class CrashAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != module_name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            cls = getattr(module, class_name)
            original = getattr(cls, method)
            calls = []

            def crashing(self, *args, **kwargs):
                calls.append(1)
                if method == "feed" or len(calls) >= 2:
                    ctypes.string_at(0)  # a real SIGSEGV: reads address 0
                return original(self, *args, **kwargs)

            setattr(cls, method, crashing)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, CrashAfterImport())
"""


def crash_env(tmp_path, where: str) -> dict:
    """Environment for an agent process that dies of a real SIGSEGV: in the llama backend's first decode
    (``model``, before the loop starts) or in the scripted model's second turn (``turn2``)."""
    import os

    hook = tmp_path / "crash-hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(CRASH_HOOK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")]))
    env["MINIAGENT_TEST_CRASH"] = where
    return env


WEDGED = "this server is now wedged"  # what the MCP server prints on stderr when its hang fault starts


class LineWatch:
    """Reads a pipe in a thread and sets ``event`` once a line containing ``needle`` went by (all lines kept)."""

    def __init__(self, stream, needle: str = WEDGED) -> None:
        import threading

        self.lines: list[str] = []
        self.event = threading.Event()
        self.needle = needle
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        with stream:  # closed at its end: the test that started the process need not
            for line in stream:
                line = line.decode(errors="replace") if isinstance(line, bytes) else line
                self.lines.append(line)
                if self.needle in line:
                    self.event.set()

    def wait(self, timeout: float = 120.0) -> None:
        """Until the line came (the bound only keeps a broken run from hanging the suite)."""
        assert self.event.wait(timeout), f"no line with {self.needle!r}; got:\n{''.join(self.lines)}"


def returns_within(seconds: float, call, *args, what: str | None = None, **kwargs):
    """``call(*args, **kwargs)``'s result (or its exception), or a failed test when it is not back within
    ``seconds``: a test about a wait that must end fails at its own bound, not at pytest's timeout. ``what`` names
    the call in that failure (default: the function's name).

    The call runs in a daemon thread; a call that never returns is abandoned there (the test's clean-up, e.g.
    closing the client, is what frees it)."""
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call(*args, **kwargs)
        except BaseException as err:  # handed to the test
            box["error"] = err

    worker = threading.Thread(target=run, name="returns-within", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        import pytest

        pytest.fail(f"{what or getattr(call, '__name__', call)} did not return within {seconds:g} s: it waits for ever")
    if "error" in box:
        raise box["error"]
    return box["value"]


def shell_script(path: Path, body: str) -> Path:
    """An executable ``#!/bin/sh`` stand-in at ``path`` (a fake python, a server that says something first)."""
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return path


def pid_alive(pid: int) -> bool:
    """Running: not gone, and not a zombie (exited, its reaper not done yet: as dead as a stop needs it).

    No pid is a test that never saw its process, never a process gone: it fails rather than pass unchecked."""
    assert isinstance(pid, int), f"no process to look at (pid {pid!r})"
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pid: int, within: float = 3.0) -> bool:
    """Gone within ``within`` s: a signal sent is not yet a process gone, so a check waits for that event."""
    deadline = time.monotonic() + within
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not pid_alive(pid)


class SleepingClock:
    """time.monotonic and time.sleep for the code under test: time moves only when that code sleeps (or a test
    moves ``now``); every sleep is kept."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def screen_console(monkeypatch, *, colours: bool, width: int = 400):
    """A recording console in place of the lab's terminal (``screen.console``): plain text, or with ``colours`` a
    colour terminal that shows what rich adds (bold, colours, the numbers its highlighter paints)."""
    from rich.console import Console

    from miniagent.lab import screen

    looks = {"force_terminal": True, "color_system": "standard"} if colours else {"color_system": None}
    console = Console(record=True, width=width, file=io.StringIO(), **looks)
    monkeypatch.setattr(screen, "console", console)
    return console


def printed(console, *, styles: bool = False) -> list[str]:
    """The lines a recording console holds so far (kept for the next read): each without its trailing spaces, or
    with ``styles`` as rich wrote it, colour codes and all."""
    text = console.export_text(clear=False, styles=styles)
    return text.splitlines() if styles else [line.rstrip() for line in text.splitlines()]


def repo_copy(dest: Path) -> Path:
    """A copy of the repository's code, tests and breaks at ``dest``: what check-breaks and the learner's tasks
    work on, for a test that changes it."""
    root = Path(__file__).resolve().parents[1]
    for folder in ("src", "tests", "breaks"):
        shutil.copytree(root / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(root / "pyproject.toml", dest / "pyproject.toml")
    return dest


def repo_tasks():
    """The repository's tasks.py, loaded from its file: ``import tasks`` through sys.path fails inside mutmut's
    sandbox (invoke mutants), where the same file is the one being mutated."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    if "tasks" not in sys.modules or Path(getattr(sys.modules["tasks"], "__file__", "")).resolve() != root / "tasks.py":
        spec = importlib.util.spec_from_file_location("tasks", root / "tasks.py")
        sys.modules["tasks"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["tasks"])
    return sys.modules["tasks"]


def exit_status(call) -> int:
    """The status a task ends with: what it passed to sys.exit, or 0."""
    try:
        call()
    except SystemExit as done:
        return 0 if done.code is None else done.code
    return 0


def wait_for(check, within: float, what: str):
    """``check()``'s first truthy result, tried every 0.05 s; a failed test naming ``what`` when none comes within
    ``within`` seconds (the bound only keeps a broken run from hanging the suite)."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {within:g} s")


def wait_for_server(agent: subprocess.Popen, timeout: float = 20.0) -> psutil.Process:
    """The agent's MCP server process, once started."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(agent.pid).children(recursive=True):
            try:
                if "miniagent.tools.server" in " ".join(child.cmdline()):
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError("the MCP server never started")


def wait_for_tool_call(trace: Path, timeout: float = 60.0) -> None:
    """Until the agent has sent its call: only then is the server wedged (before, it would exit on EOF).

    Waiting for the trace, not a fixed sleep: on a busy machine start-up alone can take longer than any
    sleep chosen on an idle one, and the test would then pass with the guard removed.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trace.exists():
            for line in trace.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("event") == "tool_call":
                        return
        time.sleep(0.05)
    raise AssertionError("the agent never called the tool")


class FakeModelServer:
    """Answers every POST with ``reply`` (status, body); ``hang`` never answers until closed.

    A streamed request (``"stream": true``, the scored decoding's log-probabilities) gets the body as
    one server-sent event; ``answer`` may replace the fixed reply: (request) -> (status, body).
    ``pings``: a streamed request is answered at once and then only kept alive, a keep-alive comment every
    0.05 s for 5 s and no event, in HTTP/1.1 chunks as llama-cpp-python's server does (every 15 s) while a
    request waits for the model; ``drops``: the stream is answered, then the connection dropped after one
    comment. A request that is not streamed hangs in both.
    """

    def __init__(self, status: int = 200, body: bytes = b"{}", hang: bool = False, answer=None,
                 pings: bool = False, drops: bool = False) -> None:
        self.status, self.body, self.answer = status, body, answer
        self.hang, self.pings, self.drops = hang or pings or drops, pings, drops
        self.release = threading.Event()
        self.requests: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    request = json.loads(raw)
                except json.JSONDecodeError:
                    request = {}
                outer.requests.append(request)
                if (outer.pings or outer.drops) and request.get("stream"):
                    self.protocol_version = "HTTP/1.1"  # chunks, so that a stream cut short is not a whole one
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for _ in range(1 if outer.drops else 100):
                        if outer.release.wait(0.05):
                            break
                        try:
                            self.wfile.write(b"a\r\n: ping\r\n\r\n\r\n")  # one chunk of 10 bytes
                            self.wfile.flush()
                        except OSError:  # the client cut the stream: nobody is left to keep alive
                            break
                    if outer.pings:
                        with contextlib.suppress(OSError):
                            self.wfile.write(b"0\r\n\r\n")  # the stream's end, without a single event
                    self.close_connection = True
                    return
                if outer.hang:
                    outer.release.wait(30)
                    return
                status, body = outer.answer(request) if outer.answer else (outer.status, outer.body)
                kind = "application/json"
                if request.get("stream") and status == 200:
                    body, kind = b"data: " + body + b"\n\ndata: [DONE]\n\n", "text/event-stream"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST  # noqa: N815 - the model list (GET /models) is answered the same way

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the serving loop's next look at its flag: every 0.5 s by default, paid by every test
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
