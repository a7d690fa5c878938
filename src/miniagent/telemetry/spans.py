"""The spans of a run, made from the loop's trace events as they are emitted: one record, two views.

Names and attributes follow the OpenTelemetry GenAI semantic conventions v1.41.0: ``invoke_agent grammar_tutor``
for a run, ``chat {model}`` for a model call, ``execute_tool {tool}`` for a tool call (the MCP SDK's own spans sit
under it), each guard's decision an event of the run's span. What the conventions do not name is ``miniagent.*``.
Why: docs/maintainers.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

SEMCONV_VERSION = "1.41.0"
AGENT = "grammar_tutor"
# Stops that gave the user what they asked for: an answer, or the honest "no such tense".
ANSWERED = ("answered", "out_of_grammar")


def model_names(llm: str, model: str, openai_model: str) -> tuple[str, str]:
    """(gen_ai.provider.name, gen_ai.request.model) for the ``llm`` and model settings."""
    if llm == "openai":
        return "openai", openai_model
    if llm == "llama":
        return "llama_cpp", Path(model).stem if model else "gemma-3-270m-q4_k_m"
    return "miniagent_scripted", llm.removeprefix("scripted:")


def _attribute(value: Any) -> Any:
    """A span attribute holds text, numbers, booleans or lists of one of them: anything else as JSON."""
    if isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class RunSpans:
    """A :class:`~miniagent.agent.trace.Trace` listener: every run it sees becomes one trace."""

    def __init__(self, tracer: trace.Tracer, provider: str, model: str) -> None:
        self.tracer, self.provider, self.model = tracer, provider, model
        self.open: list[tuple[trace.Span, object]] = []  # the run's span, then a tool call's: (span, context token)

    def __call__(self, event: dict[str, Any]) -> None:
        handle = getattr(self, f"_on_{event['event']}", None)
        if handle is not None:
            handle(event)

    def _start(self, name: str, **attributes: Any) -> None:
        span = self.tracer.start_span(name, kind=SpanKind.INTERNAL,
                                      attributes={k: _attribute(v) for k, v in attributes.items()})
        # Current while open: the MCP SDK's client span of a tool call becomes its child, in this trace.
        self.open.append((span, context.attach(trace.set_span_in_context(span))))

    def _end(self) -> None:
        span, token = self.open.pop()
        span.end()
        context.detach(token)

    def _fail(self, error: str, error_type: str) -> None:
        """End the innermost open span in error: red in a viewer, with why."""
        span = self.open[-1][0]
        span.set_attributes({"error.type": error_type})
        span.set_status(Status(StatusCode.ERROR, error))
        self._end()

    def end_open(self, stopped_by: BaseException | None) -> None:
        """End the spans a run left open when its process is stopped from outside (SIGTERM, Ctrl-C): they are
        written, marked with what stopped them, instead of lost."""
        why = type(stopped_by).__name__ if stopped_by is not None else "closed"
        while self.open:
            self.open[-1][0].set_attribute("miniagent.stopped_by", why)
            self._fail(f"the process was stopped ({why}) before the run ended", why)

    def _on_run_start(self, e: dict) -> None:
        self._start(f"invoke_agent {AGENT}", **{
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT,
            "gen_ai.provider.name": self.provider, "gen_ai.request.model": self.model,
            "miniagent.question": e["question"],
            **{f"miniagent.config.{k}": v for k, v in (e.get("config") or {}).items()}})

    def _on_model_action(self, e: dict) -> None:
        # Emitted when the reply is in: the span is drawn back to when the call began.
        end = time.time_ns()
        span = self.tracer.start_span(
            f"chat {self.model}", start_time=end - int(float(e.get("latency_s") or 0) * 1e9),
            kind=SpanKind.CLIENT if self.provider == "openai" else SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider,
                        "gen_ai.request.model": self.model,
                        "gen_ai.usage.input_tokens": int(e.get("prompt_tokens") or 0),
                        "gen_ai.usage.output_tokens": int(e.get("completion_tokens") or 0),
                        "gen_ai.response.finish_reasons": [str(e.get("finish_reason") or "")],
                        "miniagent.final": bool(e.get("final")),
                        # the final round has no turn number: no attribute, rather than a "null"
                        **({"miniagent.turn": int(e["turn"])} if e.get("turn") is not None else {}),
                        "miniagent.scoring_tokens": int(e.get("scoring_tokens") or 0),
                        "miniagent.reply": str(e.get("text") or "")})
        span.end(end_time=end)

    def _on_tool_call(self, e: dict) -> None:
        self._start(f"execute_tool {e['tool']}", **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": e["tool"], "gen_ai.tool.type": "extension",
            "gen_ai.tool.call.arguments": e.get("args") or {}, "miniagent.forced": bool(e.get("forced"))})

    def _on_tool_result(self, e: dict) -> None:
        if len(self.open) > 1:
            self.open[-1][0].set_attribute("gen_ai.tool.call.result", str(e["result"]))
            self._end()

    def _on_tool_error(self, e: dict) -> None:
        if len(self.open) > 1:
            error = str(e["error"])  # "ToolError: no such verb": its type is what comes before the colon
            self._fail(error, error.partition(":")[0] or "ToolError")

    def _on_guard(self, e: dict) -> None:
        if self.open:
            fields = {f"miniagent.{k}": _attribute(v) for k, v in e.items() if k not in ("event", "t", "name")}
            self.open[0][0].add_event(f"guard {e.get('name')}", attributes=fields)

    def _on_final_round(self, e: dict) -> None:
        if self.open:
            self.open[0][0].add_event("final_round", attributes={
                "miniagent.answer": str(e["answer"]), "miniagent.detail": str(e.get("detail", ""))})

    def _on_stop(self, e: dict) -> None:
        while len(self.open) > 1:  # a call the run did not see end (a terminal error, Ctrl-C, SIGTERM)
            self._fail("the run stopped while this call was in flight", "unfinished")
        if not self.open:
            return
        stats, reason = e.get("stats") or {}, str(e["stop_reason"])
        calls = stats.get("tool_calls") or {}
        self.open[0][0].set_attributes({
            "miniagent.stop_reason": reason, "miniagent.answer": str(e["answer"]),
            "miniagent.final_answer": str(e.get("final_answer", "")),
            "gen_ai.usage.input_tokens": int(stats.get("prompt_tokens") or 0),
            "gen_ai.usage.output_tokens": int(stats.get("completion_tokens") or 0),
            "miniagent.turns": int(stats.get("turns") or 0), "miniagent.tool_calls": sum(calls.values()),
            "miniagent.tool_errors": int(stats.get("tool_errors") or 0),
            "miniagent.identical_calls": int(stats.get("identical_calls") or 0)})
        if reason in ANSWERED:
            self.open[0][0].set_status(Status(StatusCode.OK))
            self._end()
        else:  # a fallback: the user got no answer, and the viewer shows why in red
            self._fail(f"stop_reason {reason}", reason)
