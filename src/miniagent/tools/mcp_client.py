"""A small synchronous MCP client for the conjugation server, orphan-free by design.

:class:`MCPClient` starts ``python -m miniagent.tools.server`` and calls its tools from synchronous code, each
call with a timeout; closing it always stops the server, wedged or not.  Failures are the agent's errors:
``ToolError`` and ``ToolTimeout`` (recoverable), ``ServerFailed`` (terminal).  Importing this module is cheap.
Why it is built so: docs/maintainers.md.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..agent.errors import ServerFailed, ToolError, ToolTimeout
from ..processes import alive, reap, stop_process, submit_in_callers_context, wait_result
from .arguments import check_arguments

if TYPE_CHECKING:  # pragma: no cover
    import psutil
    from mcp.client.session import ClientSession

SERVER_MODULE = "miniagent.tools.server"
# Generous: a cold start imports the SDK and pydantic (about a second on a slow machine); a server that dies
# during startup fails fast anyway (EOF).
STARTUP_TIMEOUT = 20.0
# A healthy server exits within milliseconds of stdin EOF; past this it is presumed wedged and gets SIGTERM.
EXIT_GRACE = 0.5
# After SIGTERM, before SIGKILL: Python dies at once on SIGTERM (no handler), so this matters only to a trap.
KILL_GRACE = 1.0
# How long close() waits for the SDK to notice the death and unwind.
UNWIND_TIMEOUT = 3.0
# Sessions that broke on the client's side and were replaced by a new server.
MAX_RESTARTS = 2

# Every client not yet closed, so interpreter exit closes the forgotten ones.
_live_clients: "weakref.WeakSet[MCPClient]" = weakref.WeakSet()


def _close_live_clients() -> None:
    for client in list(_live_clients):
        client.close()


atexit.register(_close_live_clients)


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap the single-exception groups anyio task groups put around errors."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@dataclass
class _Connection:
    """One server process and the session to it; a restart makes a new one.

    The loop thread writes only to its own connection, so a thread that is
    slow to unwind can never disturb the one that replaced it.
    """

    popen: subprocess.Popen[bytes] | None = None
    thread: threading.Thread | None = None
    loop: asyncio.AbstractEventLoop | None = None
    stop_event: asyncio.Event | None = None
    session: ClientSession | None = None
    proc: psutil.Process | None = None
    # Set once a call went unanswered: close() then skips the EOF grace.
    unanswered: bool = False
    # Why the session loop ended, when it ended with an error after startup.
    failure: BaseException | None = None


class MCPClient:
    """Start the conjugation server, call its tools synchronously, and always stop it.

    Use it as a context manager; leaving the ``with`` block for any reason
    (normal exit, exception, Ctrl-C, SIGTERM via :func:`miniagent.processes.install_sigterm_handler`)
    stops the server process.
    """

    def __init__(
        self,
        *,
        delay: float = 0.0,
        hang_on: str | None = None,
        timeout: float = 2.0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
    ) -> None:
        if delay < 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        self.delay = delay
        self.hang_on = hang_on or None
        self.timeout = timeout
        self.python = python
        self.env = dict(env or {})
        self._lock = threading.Lock()
        self._started = False
        self._close_started = False
        self._closing = threading.Event()  # read by the loop thread during startup
        self._conn = _Connection()
        self.restarts = 0
        # Why the (latest) server did not start: every later call reports it, as the run's server_failed.
        self.start_failure: str | None = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> MCPClient:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def server_pid(self) -> int | None:
        """Pid of the (latest) server process; kept after close() so callers can check it is gone."""
        proc = self._conn.proc
        return proc.pid if proc is not None else None

    def _server_args(self) -> list[str]:
        args = ["-m", SERVER_MODULE]
        if self.delay > 0:
            args += ["--delay", repr(float(self.delay))]
        if self.hang_on:
            args += ["--hang-on", self.hang_on]
        return args

    def _server_env(self) -> dict[str, str]:
        # The child gets only a few safe variables (PATH, HOME, ...) plus these.
        # PYTHONPATH points at the package this module came from, so the
        # server runs the same code as the client, installed or not.
        src = str(Path(__file__).resolve().parents[2])  # the folder that holds the miniagent package
        inherited = os.environ.get("PYTHONPATH")
        env = {"PYTHONPATH": src + (os.pathsep + inherited if inherited else "")}
        env.update(self.env)
        return env

    def start(self) -> MCPClient:
        """Spawn the server and initialize the session; idempotent."""
        with self._lock:
            if self._close_started:
                raise RuntimeError("this MCPClient was closed; create a new one")
            if self._started:
                return self
            self._started = True
        _live_clients.add(self)
        self._connect()
        return self

    def _connect(self, startup_timeout: float = STARTUP_TIMEOUT) -> None:
        """Start ``self._conn``'s server and session thread; wait until it is initialized."""
        import psutil

        from .stdio_pipes import inheritable_stderr, spawn

        conn = self._conn
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            with self._lock:  # close() reads conn.popen under the same lock: it stops what was spawned
                if self._closing.is_set():
                    raise ServerFailed("the MCP client was closed while it was starting")
                conn.popen = spawn([self.python, *self._server_args()], self._server_env(), inheritable_stderr())
            conn.proc = psutil.Process(conn.popen.pid)
            thread = threading.Thread(target=self._run_loop, args=(conn, ready), name="mcp-client", daemon=True)
            thread.start()
            # Published only once started: a close() from another thread (a session whose model failed to load
            # meanwhile) must never join a thread that has not started (RuntimeError, hiding the real error).
            conn.thread = thread
            wait_result(ready, startup_timeout)
        except BaseException as exc:
            # __exit__ is not called when __enter__ fails, so clean up here:
            # this also covers Ctrl-C while the server is starting.
            self.close()
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, TimeoutError):
                self.start_failure = f"the MCP server did not start within {startup_timeout:g} s"
                raise ServerFailed(self.start_failure) from None
            cause = _root_cause(exc)
            command = " ".join([self.python, *self._server_args()])
            self.start_failure = (f"could not start the MCP server ({command}): {type(cause).__name__}: {cause} "
                                  "(the server's own stderr, if any, is above)")
            raise ServerFailed(self.start_failure) from exc

    def _run_loop(self, conn: _Connection, ready: concurrent.futures.Future[None]) -> None:
        """Body of the daemon thread: one event loop for the connection's whole life."""
        try:
            asyncio.run(self._hold_session(conn, ready))
        except BaseException as exc:  # the thread must not die with a traceback on stderr
            if not ready.done():
                ready.set_exception(_root_cause(exc))
            else:  # the session broke after startup; later calls report why
                conn.failure = _root_cause(exc)
        finally:
            if not ready.done():
                ready.set_exception(ServerFailed("the MCP session ended during startup"))

    async def _hold_session(self, conn: _Connection, ready: concurrent.futures.Future[None]) -> None:
        """Open the session over the server's pipes, report ready, then wait until close() says stop."""
        # The SDK is imported here, while the server (already spawned) imports it too.
        from mcp.client.session import ClientSession

        from .stdio_pipes import session_streams

        # Event first, loop second: close() reads the loop, then sets the event.
        conn.stop_event = asyncio.Event()
        conn.loop = asyncio.get_running_loop()
        if self._closing.is_set():  # closed while the SDK was being imported
            return
        assert conn.popen is not None

        def broke(exc: BaseException) -> None:  # before the server is let go: _broken() reads it first
            conn.failure = exc

        async with session_streams(conn.popen, on_error=broke) as (read_stream, write_stream):
            async with ClientSession(read_stream, write_stream) as session:
                await session.initialize()
                conn.session = session
                if not ready.done():
                    ready.set_result(None)
                # Leaving these `async with` blocks closes the server's stdin
                # and waits for it to exit (close() stops one that does not).
                await conn.stop_event.wait()

    def close(self) -> None:
        """Stop the server and the loop thread; idempotent, bounded (~0.5 s if wedged)."""
        with self._lock:
            if self._close_started:
                return
            self._close_started = True
        _live_clients.discard(self)
        self._closing.set()
        self._disconnect(self._conn)

    def _disconnect(self, conn: _Connection) -> None:
        """Stop one connection's server and loop thread, bounded; never leaves the process behind."""
        thread = conn.thread
        if thread is None:
            with self._lock:  # spawned, but the session thread never started: stop the server here
                popen = conn.popen
            if popen is not None:
                stop_process(conn.proc, grace=0.2)
                reap(popen)
            return
        try:
            loop, stop_event = conn.loop, conn.stop_event
            if loop is not None and stop_event is not None:
                try:
                    loop.call_soon_threadsafe(stop_event.set)
                except RuntimeError:  # loop already closed: the session is over
                    pass
            # A healthy server exits on stdin EOF and the thread ends by itself.
            # One that left a call unanswered is presumed wedged: no grace.
            thread.join(0.0 if conn.unanswered else EXIT_GRACE)
            if thread.is_alive():
                stop_process(conn.proc, grace=KILL_GRACE)
                thread.join(UNWIND_TIMEOUT)
        except BaseException:
            # Interrupted while closing (a second Ctrl-C): never leave the server behind.
            stop_process(conn.proc, grace=0.0)
            raise
        finally:
            # Last resort, e.g. the session's unwind stalled.
            if alive(conn.proc):
                stop_process(conn.proc, grace=0.2)
            reap(conn.popen)
            conn.session = None

    def _reconnect_if_broken(self, limit: float) -> None:
        """If the session ended on the client's side, replace it: stop what is left, start a new server.

        The new server must be up within ``limit`` seconds, else the client closes (ServerFailed).
        """
        conn = self._conn
        if self._close_started or conn.failure is None:
            return  # healthy, closed, or a server that died: nothing to restart
        if self.restarts >= MAX_RESTARTS:
            raise ServerFailed(
                f"the MCP session broke again ({type(conn.failure).__name__}) after {self.restarts} "
                "restarts of the server; giving up"
            )
        self._disconnect(conn)
        self.restarts += 1
        self._conn = _Connection()
        self._connect(min(limit, STARTUP_TIMEOUT))

    # -- requests ----------------------------------------------------------

    def _submit(self, make: Callable[[ClientSession], Awaitable[Any]], what: str, timeout: float | None) -> Any:
        """Run ``make(session)`` on the loop; translate every outcome into our errors."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        asked = self.timeout if timeout is None else timeout
        if asked <= 0:
            raise ToolTimeout(f"{what}: no time left for the call")
        started = time.monotonic()
        self._reconnect_if_broken(asked)  # a new server's start-up counts against the call's time
        limit = asked - (time.monotonic() - started)
        conn = self._conn
        session, loop, thread, proc = conn.session, conn.loop, conn.thread, conn.proc
        if self._close_started or session is None or loop is None or thread is None or not thread.is_alive():
            if self.start_failure:
                raise ServerFailed(self.start_failure)
            why = f": the session ended with {conn.failure!r}" if conn.failure else " (not started, or closed)"
            raise ServerFailed(f"the MCP client is not connected{why}")
        if proc is not None and not alive(proc):
            raise ServerFailed(f"the MCP server (pid {proc.pid}) is not running")
        try:
            future = submit_in_callers_context(make(session), loop)
        except RuntimeError as exc:  # the loop has stopped
            raise ServerFailed(f"the MCP connection is closed: {exc}") from None
        try:
            return wait_result(future, limit)
        except TimeoutError:
            # Cancelling the task abandons the request (the SDK sends a
            # courtesy notifications/cancelled); the next call starts clean.
            future.cancel()
            if proc is not None and not alive(proc):
                raise ServerFailed(f"the MCP server died during {what}") from None
            conn.unanswered = True
            raise ToolTimeout(f"{what}: no answer within {asked:g} s") from None
        except concurrent.futures.CancelledError:
            raise ServerFailed(f"the MCP client was closed during {what}") from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or (proc is not None and not alive(proc)):
                raise ServerFailed(self._broken(conn, what, exc.message)) from None
            # A protocol-level refusal (bad params...): the model can fix it.
            raise ToolError(f"{what}: {exc.message}") from None
        except (KeyboardInterrupt, SystemExit):
            # Ctrl-C / SIGTERM while waiting: the server may well be the reason
            # we waited, so close() should not give it the EOF grace either.
            future.cancel()
            conn.unanswered = True
            raise
        except Exception as exc:
            # Anything else is the connection misbehaving (e.g. a malformed
            # reply), not something the model can correct.
            raise ServerFailed(f"the MCP connection failed during {what}: {exc!r}") from exc

    def _broken(self, conn: _Connection, what: str, message: str) -> str:
        """Why the connection closed under a call: the server died, or the session broke on our side."""
        # A break on our side is recorded before the server is let go (its stdin closed, so it exits at once):
        # the server found dead after that is the consequence, not the cause.
        if conn.failure is None and conn.proc is not None and not alive(conn.proc):
            return f"the MCP server connection broke during {what}: {message} (the server is gone)"
        # The server did not die: wait (bounded) for the session loop to finish
        # unwinding, so the next call sees the break and starts a new server.
        if conn.thread is not None:
            conn.thread.join(UNWIND_TIMEOUT)
        if conn.failure is None:
            return f"the MCP server connection broke during {what}: {message}"
        after = "the next call starts a new server" if self.restarts < MAX_RESTARTS else "no restart is left"
        return (f"the MCP session broke during {what} on the client's side "
                f"({type(conn.failure).__name__}: {conn.failure}); {after}")

    def list_tools(self) -> list[str]:
        """Names of the tools the server offers."""
        result = self._submit(lambda s: s.list_tools(), "list_tools", None)
        return [tool.name for tool in result.tools]

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> str:
        """Call ``tool`` and return the text of its result.

        Raises ToolError (the tool answered with an error, or the arguments
        cannot be sent: see :func:`miniagent.tools.arguments.check_arguments`), ToolTimeout (no answer
        within ``timeout``, default ``self.timeout``) or ServerFailed (the
        server is gone or the connection broke).
        """
        check_arguments(tool, args)  # before sending: a bad argument must not break the session
        result = self._submit(lambda s: s.call_tool(tool, args), tool, timeout)
        text = "\n".join(block.text for block in result.content if getattr(block, "type", None) == "text")
        if result.is_error:
            refusal = (result.structured_content or {}).get("refusal")
            raise ToolError(text or f"{tool} failed without a message", refusal if isinstance(refusal, dict) else None)
        return text
