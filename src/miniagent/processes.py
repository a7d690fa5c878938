"""Processes, threads and signals: what the tool client, the model backends and the harness share.

A leaf module: it imports nothing else of miniagent, so every wing may use it.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

# How often a waiting main thread wakes to run Python's signal handlers (see wait_result).
SIGNAL_CHECK_S = 0.05


def wait_result(future: concurrent.futures.Future, timeout: float | None) -> Any:
    """``future.result(timeout)``, woken every SIGNAL_CHECK_S so that Ctrl-C and SIGTERM interrupt it at once.

    The kernel hands a process's signal to any of its threads that does not block it: to the MCP client's
    event-loop thread, say, or to one of llama.cpp's.  Python then runs the handler in the main thread at
    its next bytecode, but a main thread blocked in a lock (which is what ``Future.result`` is) is woken only
    by a signal delivered to it.  Unwoken, Ctrl-C waited for the call's whole timeout (30 s).  Short waits
    give the interpreter a bytecode boundary 20 times a second, whichever thread the signal hit.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SIGNAL_CHECK_S if deadline is None else min(SIGNAL_CHECK_S, deadline - time.monotonic())
        try:
            return future.result(timeout=max(0.0, left))
        except concurrent.futures.TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise
