"""A tutor session: one model and one MCP server, opened together, always closed.

The model and the server start in parallel (the server is a subprocess, so
its start-up overlaps the model load).  Eval reuses one session for every
question; ``invoke ask`` opens one for a single question.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..agent.ports import Backend
from ..models import make_backend, start_loading, threads_for
from ..agent.loop import Outcome, grammar_tutor
from ..processes import wait_result
from ..tools.mcp_client import MCPClient
from ..agent.trace import Trace
from ..settings import Settings


class TutorSession:
    def __init__(self, settings: Settings, trace: Trace | None = None) -> None:
        self.settings = settings
        self.trace = trace or Trace.memory()
        self.model: Backend | None = None
        self.tools: MCPClient | None = None

    def __enter__(self) -> "TutorSession":
        faults = self.settings.faults
        self.tools = MCPClient(delay=faults.fault_delay_s, hang_on=faults.fault_hang_on or None,
                               timeout=self.settings.tutor.tool_timeout_s)
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            loading = start_loading(self.settings.model)  # the model file, in a thread of its own (C code, no GIL)
            threads = threads_for(self.settings.model)  # before the server: its start-up would crowd others out
            server_started = pool.submit(self.tools.start)
            weights = wait_result(loading, None) if loading else None  # woken often: Ctrl-C ends it at once
            self.model = make_backend(self.settings.model, threads, weights)
            wait_result(server_started, None)
        except BaseException:
            # Ctrl-C or SIGTERM during start-up: close() stops a server that is still starting.
            self.close()
            raise
        finally:
            pool.shutdown(wait=False)  # never wait here: an interrupted start must unwind at once
        return self

    def ask(self, question: str, cancel: Callable[[], bool] | None = None) -> Outcome:
        assert self.model is not None and self.tools is not None, "use TutorSession as a context manager"
        return grammar_tutor(question, model=self.model, tools=self.tools, config=self.settings.tutor,
                             trace=self.trace, cancel=cancel)

    def close(self) -> None:
        if self.tools is not None:
            self.tools.close()
        if self.model is not None:
            self.model.close()

    def __exit__(self, *exc_info) -> None:
        self.close()
