"""JSON-lines trace of a run: one event per line, flushed at once.

A harness can follow a run live by tailing the file.  Event names:
``run_start``, ``model_action``, ``tool_call``, ``tool_result``,
``tool_error``, ``guard``, ``final_round``, ``stop``.  A call the loop
forces (the breaker's ``list_tenses``) says ``forced: true`` on its call and
on its result or error.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable


class Trace:
    def __init__(self, stream: IO[str] | None = None, *, close: bool = False) -> None:
        self._stream = stream
        self._close = close
        self._t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        # Called with each event as it is emitted: OpenTelemetry spans are made from the same events (telemetry).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    @classmethod
    def to_path(cls, path: str | Path) -> "Trace":
        if str(path) == "-":
            return cls(sys.stdout)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return cls(open(path, "a", encoding="utf-8"), close=True)

    @classmethod
    def memory(cls) -> "Trace":
        """Keeps events in ``self.events`` only (tests, eval)."""
        return cls(None)

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "t": round(time.monotonic() - self._t0, 4), **fields}
        self.events.append(record)
        if self._stream is not None:
            self._stream.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._stream.flush()
        for listener in self.listeners:
            listener(record)

    def close(self) -> None:
        if self._close and self._stream is not None:
            self._stream.close()
            self._stream = None
