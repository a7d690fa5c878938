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
from ..telemetry.settings import export_to, server_env
from ..tools.mcp_client import MCPClient
from ..agent.trace import Trace
from ..settings import Settings


class TutorSession:
    def __init__(self, settings: Settings, trace: Trace | None = None) -> None:
        self.settings = settings
        self.trace = trace or Trace.memory()
        self.model: Backend | None = None
        self.tools: MCPClient | None = None
        self.spans_provider = None  # the OpenTelemetry SDK's, when runs are traced
        self.run_spans = None

    def __enter__(self) -> "TutorSession":
        faults = self.settings.faults
        self.tools = MCPClient(delay=faults.fault_delay_s, hang_on=faults.fault_hang_on or None,
                               timeout=self.settings.tutor.tool_timeout_s, env=server_env(self.settings.traces))
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            loading = start_loading(self.settings.model)  # the model file, in a thread of its own (C code, no GIL)
            threads = threads_for(self.settings.model)  # before the server: its start-up would crowd others out
            server_started = pool.submit(self.tools.start)
            if export_to(self.settings.traces) is not None:  # the SDK's set-up, while the model loads
                self._trace_runs()
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

    def _trace_runs(self) -> None:
        """Every run of this session becomes an OpenTelemetry trace, made from its trace events."""
        from ..telemetry import export, spans

        # Sent often: a harness gives a killed run 0.3 s of grace, so little may be left to send then.
        self.spans_provider = export.start(self.settings.traces, "miniagent", send_every_s=0.2)
        model = self.settings.model
        provider, name = spans.model_names(model.llm, model.model, model.openai_model)
        self.run_spans = spans.RunSpans(export.tracer(), provider, name)
        self.trace.listeners.append(self.run_spans)

    def close(self, stopped_by: BaseException | None = None) -> None:
        if self.run_spans is not None:  # a run cut short (SIGTERM, Ctrl-C) still has its spans written
            self.run_spans.end_open(stopped_by)
        if self.spans_provider is not None:  # first: a harness gives a stopped run a short grace before SIGKILL
            self.spans_provider.shutdown()  # sends what is still queued (the server flushes its own)
            self.spans_provider = None
        if self.tools is not None:
            self.tools.close()
        if self.model is not None:
            self.model.close()

    def __exit__(self, *exc_info) -> None:
        self.close(exc_info[1])
