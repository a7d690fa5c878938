"""Every way an MCP client call can end, reached on purpose, each with what it says word for word.

The end-to-end tests (test_mcp_server, test_no_orphans) run the real server and see the outcomes a real server
can be pushed into. Some ends are races there (the loop stopping under a call, the session breaking on our side
while the server lives), so these tests wire a client by hand: a real event loop in a thread, a thread standing
in for the session's, and a real child process (``sleep``) as the server. Found by ``invoke mutants --wing
tools``: about a hundred mutants of the client's connection code changed what a learner reads and no test saw it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest
from helpers import shell_script
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from miniagent.agent.errors import ServerFailed, ToolError, ToolTimeout
from miniagent.tools import mcp_client, stdio_pipes
from miniagent.tools.mcp_client import MAX_RESTARTS, SERVER_MODULE, STARTUP_TIMEOUT, MCPClient, _Connection
from miniagent.tools.stdio_pipes import spawn

BOUND = 10.0  # the longest any wait here may take: each waits on an event, this only stops a hang


class Wired:
    """A client whose connection is a real loop thread, a stand-in session thread and a ``sleep`` child."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.loop_thread.start()
        self.session_over = threading.Event()
        self.unwound: list[BaseException] = []  # what the session thread records as it ends, like a real one
        self.child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.client = MCPClient(timeout=1.0)
        self.conn = self.client._conn
        self.conn.session = SimpleNamespace()
        self.conn.loop = self.loop
        self.conn.popen = self.child
        self.conn.proc = psutil.Process(self.child.pid)
        self.conn.thread = threading.Thread(target=self._session, daemon=True)
        self.conn.thread.start()

    def _session(self) -> None:
        self.session_over.wait()
        # Unwinding takes a moment, as the SDK's does: a client that judged the break before the thread ended would
        # read no failure yet (a race the real thread usually wins, so a test would pass either way).
        time.sleep(0.05)
        for failure in self.unwound:
            self.conn.failure = failure

    def kill_server(self) -> None:
        self.child.kill()
        self.child.wait()

    def close(self) -> None:
        self.session_over.set()
        if self.child.poll() is None:
            self.kill_server()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(BOUND)
        self.loop.close()


@pytest.fixture
def wired():
    w = Wired()
    yield w
    w.close()


async def never() -> None:
    await asyncio.Event().wait()


def test_an_answer_comes_back_as_the_calls_value(wired):
    async def answer():
        return 42

    assert wired.client._submit(lambda session: answer(), "conjugate", None) == 42


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_call_with_no_time_left_is_refused_before_anything_is_sent(wired, timeout):
    made = []
    with pytest.raises(ToolTimeout) as refused:
        wired.client._submit(lambda session: made.append(session), "conjugate", timeout)
    assert str(refused.value) == "conjugate: no time left for the call"
    assert made == []


async def unanswered(abandoned: threading.Event) -> None:
    """A request the server never answers; ``abandoned`` is set when the client cancels it."""
    try:
        await never()
    except asyncio.CancelledError:
        abandoned.set()
        raise


def test_a_call_unanswered_in_time_is_a_timeout_that_abandons_the_request_and_marks_the_server_wedged(wired):
    abandoned = threading.Event()
    with pytest.raises(ToolTimeout) as timed_out:
        wired.client._submit(lambda session: unanswered(abandoned), "conjugate", 0.2)
    assert str(timed_out.value) == "conjugate: no answer within 0.2 s"
    assert wired.conn.unanswered is True  # close() then gives the server no grace
    assert abandoned.wait(BOUND)


def test_the_time_a_restart_took_comes_off_the_calls_own_time_and_the_call_says_the_time_it_was_given(wired,
                                                                                                       monkeypatch):
    waited, running, abandoned = [], threading.Event(), threading.Event()

    async def request() -> None:
        running.set()
        await unanswered(abandoned)

    def wait_result(future, timeout):
        waited.append(timeout)
        running.wait(BOUND)  # cancelled once under way: a request cancelled before it ran is a coroutine never awaited
        raise TimeoutError

    monkeypatch.setattr(wired.client, "_reconnect_if_broken", lambda limit: threading.Event().wait(0.3))
    monkeypatch.setattr(mcp_client, "wait_result", wait_result)
    with pytest.raises(ToolTimeout) as timed_out:
        wired.client._submit(lambda session: request(), "conjugate", 0.5)
    assert abandoned.wait(BOUND), "the request was not cancelled"
    assert str(timed_out.value) == "conjugate: no answer within 0.5 s"
    assert waited and waited[0] <= 0.2


@pytest.mark.parametrize("unplug", ["session", "loop", "thread", "thread ended", "closed"])
def test_a_call_on_a_client_that_is_not_connected_is_refused_saying_so(wired, unplug):
    if unplug == "thread ended":
        wired.session_over.set()
        wired.conn.thread.join(BOUND)
    elif unplug == "closed":
        wired.client._close_started = True
    else:
        setattr(wired.conn, unplug, None)
    made = []
    with pytest.raises(ServerFailed) as refused:
        wired.client._submit(lambda session: made.append(session), "conjugate", None)
    assert str(refused.value) == "the MCP client is not connected (not started, or closed)"
    assert made == []


def test_a_call_after_the_session_broke_and_the_client_closed_says_why_the_session_ended(wired):
    wired.client._close_started = True
    wired.conn.failure = BrokenPipeError("pipe")
    with pytest.raises(ServerFailed) as refused:
        wired.client._submit(lambda session: never(), "conjugate", None)
    assert str(refused.value) == "the MCP client is not connected: the session ended with BrokenPipeError('pipe')"


def test_a_call_to_a_server_that_is_gone_is_refused_naming_its_pid(wired):
    wired.kill_server()
    made = []
    with pytest.raises(ServerFailed) as refused:
        wired.client._submit(lambda session: made.append(session), "conjugate", None)
    assert str(refused.value) == f"the MCP server (pid {wired.child.pid}) is not running"
    assert made == []


def test_a_call_on_a_loop_that_has_closed_says_the_connection_is_closed(wired):
    closed = asyncio.new_event_loop()
    closed.close()
    wired.conn.loop = closed
    made = []

    def make(session):
        made.append(never())
        return made[-1]

    with pytest.raises(ServerFailed) as refused:
        wired.client._submit(make, "conjugate", None)
    assert str(refused.value) == "the MCP connection is closed: Event loop is closed"
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED, "closed, never to run"


def test_a_server_that_dies_during_a_call_is_a_server_failure_not_a_timeout(wired):
    async def dies():
        wired.kill_server()
        await never()

    with pytest.raises(ServerFailed) as failed:
        wired.client._submit(lambda session: dies(), "conjugate", 0.3)
    assert str(failed.value) == "the MCP server died during conjugate"
    assert wired.conn.unanswered is False


def test_a_call_cancelled_under_it_says_the_client_was_closed(wired):
    async def cancelled():
        raise asyncio.CancelledError

    with pytest.raises(ServerFailed) as failed:
        wired.client._submit(lambda session: cancelled(), "conjugate", None)
    assert str(failed.value) == "the MCP client was closed during conjugate"


@pytest.mark.parametrize("code, server_dies, unwound, restarts, says", [
    (CONNECTION_CLOSED, False, None, 0, ServerFailed("the MCP server connection broke during conjugate: gone")),
    (CONNECTION_CLOSED, True, None, 0,
     ServerFailed("the MCP server connection broke during conjugate: gone (the server is gone)")),
    (-32602, True, None, 0, ServerFailed("the MCP server connection broke during conjugate: gone (the server is gone)")),
    (CONNECTION_CLOSED, False, BrokenPipeError("pipe"), 0,
     ServerFailed("the MCP session broke during conjugate on the client's side (BrokenPipeError: pipe); "
                  "the next call starts a new server")),
    (CONNECTION_CLOSED, False, BrokenPipeError("pipe"), MAX_RESTARTS - 1,
     ServerFailed("the MCP session broke during conjugate on the client's side (BrokenPipeError: pipe); "
                  "the next call starts a new server")),
    (CONNECTION_CLOSED, False, BrokenPipeError("pipe"), MAX_RESTARTS,
     ServerFailed("the MCP session broke during conjugate on the client's side (BrokenPipeError: pipe); "
                  "no restart is left")),
    (-32602, False, None, 0, ToolError("conjugate: gone")),
])
def test_an_error_from_the_connection_says_who_broke_it(wired, code, server_dies, unwound, restarts, says):
    """The session thread records a break on our side as it unwinds: the client waits for that before it judges."""
    wired.client.restarts = restarts
    if unwound is not None:
        wired.unwound.append(unwound)

    async def refused():
        if server_dies:
            wired.kill_server()
        if code == CONNECTION_CLOSED:
            wired.session_over.set()
        raise MCPError(code, "gone")

    with pytest.raises(type(says)) as failed:
        wired.client._submit(lambda session: refused(), "conjugate", None)
    assert str(failed.value) == str(says)


def test_ctrl_c_while_waiting_abandons_the_request_and_marks_the_server_wedged(wired, monkeypatch):
    abandoned = threading.Event()

    def interrupted(future, timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(mcp_client, "wait_result", interrupted)
    with pytest.raises(KeyboardInterrupt):
        wired.client._submit(lambda session: unanswered(abandoned), "conjugate", None)
    assert wired.conn.unanswered is True
    assert abandoned.wait(BOUND)


def test_a_garbled_reply_is_a_server_failure_that_keeps_its_cause(wired):
    async def garbled():
        raise ValueError("garbled reply")

    with pytest.raises(ServerFailed) as failed:
        wired.client._submit(lambda session: garbled(), "conjugate", None)
    assert str(failed.value) == "the MCP connection failed during conjugate: ValueError('garbled reply')"
    assert isinstance(failed.value.__cause__, ValueError)


def test_list_tools_and_call_name_themselves_in_what_they_say(wired):
    wired.conn.session = SimpleNamespace(list_tools=never, call_tool=lambda tool, args: never())
    with pytest.raises(ToolTimeout, match=r"^list_tools: no answer within 1 s$"):
        wired.client.list_tools()
    with pytest.raises(ToolTimeout, match=r"^conjugate: no answer within 0.2 s$"):
        wired.client.call("conjugate", {"verb": "go"}, timeout=0.2)


def test_a_result_is_its_text_blocks_joined_by_lines_and_other_blocks_are_left_out(wired):
    async def result(tool, args):
        blocks = [SimpleNamespace(type="text", text="she went"), SimpleNamespace(text="no type"),
                  SimpleNamespace(type="image", text="not text"), SimpleNamespace(type="text", text="(past)")]
        return SimpleNamespace(content=blocks, is_error=False)

    wired.conn.session = SimpleNamespace(call_tool=result)
    assert wired.client.call("conjugate", {"verb": "go"}) == "she went\n(past)"


# -- restarts -------------------------------------------------------------------------------------------------------


def test_a_session_broken_too_often_is_given_up_naming_the_break(wired):
    wired.conn.failure = BrokenPipeError("pipe")
    wired.client.restarts = MAX_RESTARTS
    with pytest.raises(ServerFailed) as failed:
        wired.client._reconnect_if_broken(1.0)
    assert str(failed.value) == (f"the MCP session broke again (BrokenPipeError) after {MAX_RESTARTS} restarts of "
                                 "the server; giving up")


@pytest.mark.parametrize("limit, startup", [(0.7, 0.7), (STARTUP_TIMEOUT + 5, STARTUP_TIMEOUT)])
def test_a_restart_stops_the_old_server_and_gives_the_new_one_what_is_left_of_the_call(wired, monkeypatch, limit,
                                                                                       startup):
    wired.conn.failure = BrokenPipeError("pipe")
    old = wired.conn
    stopped, started = [], []
    monkeypatch.setattr(wired.client, "_disconnect", stopped.append)
    monkeypatch.setattr(wired.client, "_connect", started.append)
    wired.client._reconnect_if_broken(limit)
    assert stopped == [old]
    assert started == [startup]
    assert wired.client.restarts == 1
    assert wired.client._conn is not old and wired.client._conn.failure is None


# -- start and close ------------------------------------------------------------------------------------------------


def test_a_negative_delay_is_refused_saying_what_it_got():
    with pytest.raises(ValueError) as refused:
        MCPClient(delay=-1)
    assert str(refused.value) == "delay must be >= 0, got -1"


@pytest.mark.parametrize("delay, hang_on, args", [
    (0.0, None, []), (0.5, None, ["--delay", "0.5"]), (0.0, "go", ["--hang-on", "go"]), (0.0, "", []),
])
def test_the_server_is_started_with_the_faults_asked_for_and_no_others(delay, hang_on, args):
    assert MCPClient(delay=delay, hang_on=hang_on)._server_args() == ["-m", SERVER_MODULE, *args]


def test_the_server_imports_the_clients_own_package_ahead_of_what_pythonpath_already_names(monkeypatch):
    package_root = str(mcp_client.Path(mcp_client.__file__).resolve().parents[2])
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert MCPClient()._server_env() == {"PYTHONPATH": package_root}
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert MCPClient(env={"EXTRA": "1"})._server_env() == {"PYTHONPATH": package_root + os.pathsep + "/elsewhere",
                                                           "EXTRA": "1"}


def test_the_server_inherits_no_shell_function_from_the_environment(monkeypatch):
    monkeypatch.setenv("TERM", "() { :; }")
    monkeypatch.setenv("SHELL", "/bin/sh")
    child = spawn([sys.executable, "-c", "import os, sys; sys.stdout.write(repr(sorted(os.environ)))"], {},
                  sys.stderr)
    out, _ = child.communicate(timeout=BOUND)
    names = eval(out)  # noqa: S307 - our own child's repr of a list of names
    assert "SHELL" in names and "TERM" not in names


def test_the_servers_stderr_is_the_first_stream_with_a_file_descriptor(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert stdio_pipes.inheritable_stderr() is sys.__stderr__
    monkeypatch.setattr(sys, "__stderr__", None)
    errlog = stdio_pipes.inheritable_stderr()
    try:
        assert errlog.name == os.devnull and errlog.mode == "w"
        errlog.write("the server may write here")
    finally:
        errlog.close()


def test_a_client_closed_before_it_started_cannot_be_started():
    client = MCPClient()
    client.close()
    with pytest.raises(RuntimeError) as refused:
        client.start()
    assert str(refused.value) == "this MCPClient was closed; create a new one"
    assert client.server_pid is None


def test_a_client_closed_while_it_was_starting_spawns_nothing_and_says_so():
    client = MCPClient()
    client._closing.set()
    with pytest.raises(ServerFailed) as failed:
        client._connect()
    assert str(failed.value) == (f"could not start the MCP server ({sys.executable} -m {SERVER_MODULE}): "
                                 "ServerFailed: the MCP client was closed while it was starting (the server's own "
                                 "stderr, if any, is above)")
    assert client._conn.popen is None


def test_a_server_that_never_answers_the_handshake_fails_the_start_in_time_and_is_stopped(tmp_path):
    mute = shell_script(tmp_path / "mute-python", "exec sleep 60\n")
    client = MCPClient(python=str(mute))
    client._started = True
    with pytest.raises(ServerFailed) as failed:
        client._connect(startup_timeout=0.3)
    assert str(failed.value) == "the MCP server did not start within 0.3 s"
    assert client._conn.popen.returncode is not None  # stopped and reaped


def test_a_server_that_did_not_start_fails_every_later_call_with_the_reason_the_start_gave(tmp_path):
    """A client whose server did not start (at first, or when a broken session is replaced in the middle of a run)
    tells every later call why, not a bare "not connected": the run's server_failed then quotes the start's reason."""
    gone = shell_script(tmp_path / "gone-python", "exit 3\n")
    client = MCPClient(python=str(gone))
    with pytest.raises(ServerFailed) as failed:
        client.start()
    reason = (f"could not start the MCP server ({gone} -m {SERVER_MODULE}): MCPError: Connection closed (the "
              "server's own stderr, if any, is above)")
    assert str(failed.value) == client.start_failure == reason
    for call in (lambda: client.call("conjugate", {"verb": "go", "tense": "past simple", "person": "she"}),
                 client.list_tools):
        with pytest.raises(ServerFailed) as later:
            call()
        assert str(later.value) == reason
    mute = shell_script(tmp_path / "mute-python", "exec sleep 60\n")
    slow = MCPClient(python=str(mute))
    slow._started = True
    with pytest.raises(ServerFailed):
        slow._connect(startup_timeout=0.3)
    with pytest.raises(ServerFailed) as later:
        slow.list_tools()
    assert str(later.value) == slow.start_failure == "the MCP server did not start within 0.3 s"


def test_a_client_that_started_has_no_start_failure_and_a_closed_one_says_it_is_not_connected():
    with MCPClient() as client:
        assert client.start_failure is None
    with pytest.raises(ServerFailed) as later:
        client.list_tools()
    assert str(later.value) == "the MCP client is not connected (not started, or closed)"


def test_the_session_thread_is_a_daemon_named_for_the_client_and_a_second_start_changes_nothing():
    with MCPClient() as client:
        thread, pid = client._conn.thread, client.server_pid
        assert (thread.name, thread.daemon) == ("mcp-client", True)
        assert client.start() is client
        assert (client._conn.thread, client.server_pid) == (thread, pid)
    assert not thread.is_alive()


def test_a_session_that_ends_before_it_is_ready_says_so_to_the_starter():
    client = MCPClient()
    client._closing.set()  # closed while the SDK was being imported: the session returns at once
    ready: concurrent.futures.Future[None] = concurrent.futures.Future()
    client._run_loop(client._conn, ready)
    assert isinstance(ready.exception(0), ServerFailed)
    assert str(ready.exception(0)) == "the MCP session ended during startup"


def test_a_session_that_fails_reports_why_to_the_starter_before_ready_and_to_later_calls_after():
    before: concurrent.futures.Future[None] = concurrent.futures.Future()
    client = MCPClient()  # no server spawned: the session fails at once
    client._run_loop(client._conn, before)
    assert isinstance(before.exception(0), AssertionError)
    assert client._conn.failure is None
    after: concurrent.futures.Future[None] = concurrent.futures.Future()
    after.set_result(None)
    client._run_loop(client._conn, after)
    assert isinstance(client._conn.failure, AssertionError)


# -- _disconnect ----------------------------------------------------------------------------------------------------


def test_a_server_spawned_whose_session_thread_never_started_is_stopped_and_reaped(wired):
    wired.conn.thread = None
    wired.client._disconnect(wired.conn)
    assert wired.child.returncode == -signal.SIGTERM


def test_a_session_that_ended_while_its_server_lives_on_gets_the_server_stopped_and_reaped(wired):
    stop_event = asyncio.Event()
    wired.conn.stop_event = stop_event
    wired.session_over.set()
    wired.conn.thread.join(BOUND)
    wired.client._disconnect(wired.conn)
    assert wired.child.returncode == -signal.SIGTERM  # not -SIGKILL: stopped, not just reaped
    assert wired.conn.session is None


def test_disconnect_tells_the_session_to_stop_only_through_a_loop_it_has(wired):
    wired.conn.loop = None
    wired.conn.stop_event = asyncio.Event()
    wired.session_over.set()
    wired.client._disconnect(wired.conn)
    assert wired.child.returncode == -signal.SIGTERM


def test_a_session_thread_that_never_unwinds_does_not_hold_close_past_its_bound(wired, monkeypatch):
    monkeypatch.setattr(mcp_client, "EXIT_GRACE", 0.05)
    monkeypatch.setattr(mcp_client, "UNWIND_TIMEOUT", 0.1)
    done = threading.Event()
    closer = threading.Thread(target=lambda: (wired.client._disconnect(wired.conn), done.set()), daemon=True)
    closer.start()
    assert done.wait(BOUND), "disconnect waited on a session thread that never ends"
    assert wired.child.returncode == -signal.SIGTERM


def test_a_second_ctrl_c_while_closing_still_stops_the_server(wired):
    class Interrupted(threading.Thread):
        def is_alive(self) -> bool:
            return True

        def join(self, timeout: float | None = None) -> None:
            raise KeyboardInterrupt

    wired.conn.thread = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        wired.client._disconnect(wired.conn)
    assert wired.child.returncode == -signal.SIGTERM


def test_a_session_thread_that_never_unwinds_does_not_hold_a_broken_call_past_its_bound(wired, monkeypatch):
    monkeypatch.setattr(mcp_client, "UNWIND_TIMEOUT", 0.1)

    async def closed():  # the connection closes under the call; the session thread never finishes unwinding
        raise MCPError(CONNECTION_CLOSED, "gone")

    said: list[str] = []

    def call() -> None:
        with pytest.raises(ServerFailed) as failed:
            wired.client._submit(lambda session: closed(), "conjugate", None)
        said.append(str(failed.value))

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(BOUND)
    assert said == ["the MCP server connection broke during conjugate: gone"], "the call waited without a bound"
