"""A shared model server, started as a teacher starts it, with its defaults: the lab's class server or
llama-cpp-python's.

:func:`model_server` starts one on loopback, yields its base URL once it answers a completion, and always
stops its whole process group and reaps it, whatever happened inside the block.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Iterator

from ..agent.errors import ModelFailed, ModelTimeout
from ..processes import stop_group


class ServerNotReady(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_it_answers(base_url: str, process: subprocess.Popen | None = None, *, timeout_s: float = 300.0) -> float:
    """Seconds until a one-token completion comes back; ServerNotReady if the process dies or time runs out."""
    from ..models.server_client import ModelServerClient

    server = ModelServerClient(base_url, max_retries=0)
    started = time.monotonic()
    deadline = started + timeout_s
    last = "no answer yet"
    try:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise ServerNotReady(f"the model server exited during start-up (exit code {process.returncode})")
            try:
                # A completion, not an open port: the model loads after the socket opens, and the first request
                # on a cold server evaluates the whole prompt.
                server.complete("Hello", 1, [], min(deadline, time.monotonic() + 10))
                return time.monotonic() - started
            except (ModelFailed, ModelTimeout) as err:  # not listening yet, or still loading
                last = str(err)
            time.sleep(0.3)
    finally:
        server.close()
    raise ServerNotReady(f"{base_url} did not answer a completion within {timeout_s:g} s ({last})")


# How long a server's group is given to exit on SIGTERM before it is killed: a group that obeys SIGTERM is
# gone at once; only a process that ignores it waits this out.
STOP_GRACE_S = 10.0


SERVERS = {  # --server of class-load: which model server a class shares
    "miniagent": "miniagent.serving.class_server",  # the lab's: a slot per learner, numpy's top log-probabilities
    "llama-cpp-python": "miniagent.serving.llama_cpp_server",  # llama-cpp-python's, with the lab's AMX choice
}


def llama_cpp_server(model_path: str | None = None, **how) -> contextlib.AbstractContextManager[str]:
    """llama-cpp-python's server with its defaults; see :func:`model_server`."""
    return model_server("llama-cpp-python", model_path, **how)


def class_server(model_path: str | None = None, **how) -> contextlib.AbstractContextManager[str]:
    """The lab's class server (:mod:`miniagent.serving.class_server`); see :func:`model_server`."""
    return model_server("miniagent", model_path, **how)


@contextlib.contextmanager
def model_server(kind: str, model_path: str | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 extra_args: tuple[str, ...] = (), log: IO | Path | None = None,
                 ready_timeout_s: float = 300.0) -> Iterator[str]:
    """A model server of ``kind`` (:data:`SERVERS`) on ``host:port`` with its defaults (plus ``extra_args``);
    yields the base URL once it answers a completion, and stops and reaps it whatever happens in the block.

    Its AMX path follows the setting ``llama_amx`` (config file, MINIAGENT_LLAMA_AMX, or ``--llama-amx`` in
    ``extra_args``)."""
    from ..models.model_file import default_model_path

    if kind not in SERVERS:
        raise ValueError(f"no model server named {kind!r}: the servers are {', '.join(SERVERS)}")
    port = port or free_port()
    command = [sys.executable, "-m", SERVERS[kind], "--model", model_path or default_model_path(),
               "--host", host, "--port", str(port), *extra_args]
    out = open(log, "w", encoding="utf-8") if isinstance(log, Path) else log  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out or subprocess.DEVNULL,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://{host}:{port}/v1"
        wait_until_it_answers(url, process, timeout_s=ready_timeout_s)
        yield url
    finally:
        stop_group(process, STOP_GRACE_S)  # the whole group: a child the server started too
        if isinstance(log, Path) and out is not None:
            out.close()
