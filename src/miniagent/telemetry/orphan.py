"""A traced MCP server that outlives the agent that started it says so in the trace (break 09).

Once its parent process is gone, the server ends a span ``orphaned {request}`` under each request still open, then
another after each interval while it lives, the intervals doubling. Why: docs/maintainers.md, telemetry/.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import Status, StatusCode

POLL_S = 0.1  # how soon the server notices that its parent is gone
FIRST_S, MOST_S = 0.25, 60.0  # the first interval between orphaned spans, and the longest


class OpenSpans(SpanProcessor):
    """The spans of this process that have started and not ended yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, Span] = {}

    def on_start(self, span: Span, parent_context=None) -> None:
        with self._lock:
            self._open[span.context.span_id] = span

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._open.pop(span.context.span_id, None)

    def now(self) -> list[Span]:
        with self._lock:
            return list(self._open.values())


def watch(provider: TracerProvider, poll_s: float = POLL_S, first_s: float = FIRST_S,
          most_s: float = MOST_S) -> threading.Thread:
    """Start watching this process's parent (a daemon thread); call it before the first request is traced."""
    open_spans = OpenSpans()
    provider.add_span_processor(open_spans)
    thread = threading.Thread(target=_watch, args=(provider, open_spans, os.getppid(), poll_s, first_s, most_s),
                              name="orphan-watch", daemon=True)
    thread.start()
    return thread


def _watch(provider: TracerProvider, open_spans: OpenSpans, parent: int, poll_s: float, first_s: float,
           most_s: float, parent_now: Callable[[], int] = os.getppid) -> None:
    seen_alive = time.time_ns()
    while parent_now() == parent:
        seen_alive = time.time_ns()
        time.sleep(poll_s)
    tracer = provider.get_tracer("miniagent")
    since = seen_alive
    for interval in doubling(first_s, most_s):
        requests = open_spans.now()  # an orphaned span is ended as soon as it is made: never among them
        if not requests:
            return
        now = time.time_ns()
        for request in requests:
            span = tracer.start_span(f"orphaned {request.name}", context=trace.set_span_in_context(request),
                                     start_time=since, attributes={
                                         "miniagent.orphan.agent_pid": parent, "process.pid": os.getpid(),
                                         "process.parent_pid": parent_now(),
                                         "miniagent.orphan.alone_s": round((now - seen_alive) / 1e9, 3)})
            span.set_status(Status(StatusCode.ERROR, f"the agent (pid {parent}) is gone; this server still runs"))
            span.end(end_time=now)
        provider.force_flush()
        since = now
        time.sleep(interval)


def doubling(first_s: float, most_s: float) -> Iterator[float]:
    """``first_s``, then twice the one before, never more than ``most_s``."""
    interval = first_s
    while True:
        yield interval
        interval = min(interval * 2, most_s)
