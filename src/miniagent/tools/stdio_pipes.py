"""The MCP server as a child process, and an MCP session's streams over its pipes (the stdio transport).

The server is spawned with :mod:`subprocess` alone, before the client imports the SDK, so the two imports
run side by side.  The messages are still the SDK's (``SessionMessage``), one line of JSON-RPC each, for
:class:`mcp.client.session.ClientSession`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from typing import IO, Any, AsyncIterator, Callable

# What the child inherits from our environment (the SDK's stdio client passes the same on POSIX).
INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
# A JSON-RPC line may be long (a tool result): readline's default limit (64 KiB) would end the session.
LINE_LIMIT = 16 * 1024 * 1024
# After stdin closes: how long a healthy server may take to exit (it takes milliseconds).
EXIT_WAIT = 2.0
_POLL = 0.01


def inheritable_stderr() -> IO[str]:
    """A stderr the child can inherit (it needs a real file descriptor)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # noqa: SIM115 - lives as long as the server


def spawn(command: list[str], env: dict[str, str], errlog: IO[str]) -> subprocess.Popen[bytes]:
    """Start the server with pipes on stdin and stdout, in its own process group."""
    base = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ and not os.environ[k].startswith("()")}
    # A session of its own: a Ctrl-C in the terminal does not reach it; the client stops and reaps it
    # (MCPClient._disconnect).
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                            env=base | env, start_new_session=True)


@asynccontextmanager
async def session_streams(process: subprocess.Popen[bytes],
                          on_error: Callable[[BaseException], None] | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """``(read_stream, write_stream)`` for ``ClientSession``, bridged to ``process``'s stdout and stdin.

    On the way out, stdin is closed (a healthy server exits on EOF) and the process is waited for, up to
    :data:`EXIT_WAIT`; one that does not exit is the caller's to stop. A bridge that fails on our side ends the
    session, and ``on_error`` hears of it before the server is let go: its exit is not taken for the cause.
    """
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    loop = asyncio.get_running_loop()
    assert process.stdin is not None and process.stdout is not None, "spawn() opens both pipes"
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    read_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), process.stdout)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, process.stdin)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    to_session, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, from_session = anyio.create_memory_object_stream[Any](0)

    async def stdout_to_session() -> None:
        async with to_session:  # closed at EOF: the session sees the connection end
            while line := await reader.readline():
                try:
                    message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValueError as exc:  # a malformed line: the session reports it, the connection goes on
                    await to_session.send(exc)
                    continue
                await to_session.send(SessionMessage(message))

    async def session_to_stdin() -> None:
        try:
            async with from_session:
                async for session_message in from_session:
                    line = session_message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    writer.write(line.encode("utf-8"))
                    await writer.drain()
        except (ConnectionError, OSError):  # the server closed its stdin: no request may hang on it
            await to_session.aclose()
        except Exception as exc:
            if on_error is not None:
                on_error(exc)
            raise

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(stdout_to_session)
        tasks.start_soon(session_to_stdin)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                writer.close()
                deadline = time.monotonic() + EXIT_WAIT
                while process.poll() is None and time.monotonic() < deadline:
                    await anyio.sleep(_POLL)
            tasks.cancel_scope.cancel()
    read_transport.close()
    for stream in (read_stream, write_stream):
        await stream.aclose()
