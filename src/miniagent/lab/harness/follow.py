"""Following a run's trace as it is written: the complete lines so far, one line per event, the counters.

:class:`TraceFollower` reads the JSON lines the agent appends (a half-written last line waits for its newline);
:class:`Progress` keeps the counters the live panel, the deadline's ``needs`` and the record show.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from pathlib import Path
from typing import Any

TAIL_EVENTS = 8
ACTION_TEXT_MAX = 4096  # characters of one turn's action kept (a whole action is a few hundred)


class TraceFollower:
    """Reads the new complete lines of a JSON-lines file each time :meth:`poll` is called.

    The agent may be in the middle of writing a line (or be killed there), so
    bytes after the last newline stay in a buffer until the newline arrives.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh: Any = None
        self._partial = b""
        self.bad_lines = 0
        self._finished = False

    def poll(self) -> list[dict[str, Any]]:
        if self._finished:  # read whole once: a second read would count every event twice
            return []
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open to tail it
            except FileNotFoundError:
                return []  # not created yet
        data = self._partial + self._fh.read()
        *lines, self._partial = data.split(b"\n")
        return [e for e in map(self._parse, lines) if e is not None]

    def finish(self) -> list[dict[str, Any]]:
        """Last read after the writer is gone; a final line without newline still counts if it parses."""
        events = self.poll()
        rest, self._partial = self._partial, b""
        if rest.strip():
            event = self._parse(rest)
            if event is not None:
                events.append(event)
        self.close()
        self._finished = True
        return events

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError:  # a line torn by a kill, or not ours
            self.bad_lines += 1
            return None
        return event if isinstance(event, dict) else None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def describe(event: dict[str, Any], width: int = 90) -> str:
    """One short human line per trace event, for the scratchpad tail."""
    kind = event.get("event", "?")
    if kind == "model_action":
        where = "final round" if event.get("final") else f"turn {event.get('turn')}"
        text = f"{where} action {event.get('text', '')}"
    elif kind == "tool_call":
        args = ", ".join(f"{k}={v}" for k, v in (event.get("args") or {}).items())
        text = f"call {event.get('tool')}({args})" + (" [forced]" if event.get("forced") else "")
    elif kind == "tool_result":
        text = f"tool {event.get('tool')} -> {event.get('result')}"
    elif kind == "tool_error":
        text = f"tool {event.get('tool')} !! {event.get('error')}"
    elif kind == "guard":
        text = f"guard {event.get('name')}"
    elif kind == "stop":
        text = f"stop {event.get('stop_reason')}: {event.get('answer')}"
    elif kind == "run_start":
        text = f"run_start {event.get('llm', '')}"
    else:
        text = kind
    text = " ".join(str(text).split())  # one line: answers and errors may hold newlines
    return text if len(text) <= width else text[: width - 1] + "…"


class Progress:
    """Counters kept from the trace events as they arrive (the same ones the panel and the record show)."""

    # The guards that refuse a call the model asked for: the refused call leaves no tool_call event.
    REFUSING = ("max_tool_calls", "call_budget")

    def __init__(self) -> None:
        self.turns = 0
        self.tool_calls: Counter[str] = Counter()
        self.identical_calls = 0
        self.tool_errors = 0
        self.last_action = ""
        self.stop: dict[str, Any] | None = None
        self.first_event_at: float | None = None  # harness clock
        self.tail: deque[str] = deque(maxlen=TAIL_EVENTS)
        self._calls_seen: set[str] = set()
        self._turn_text = ""  # the current turn's action, its continued pieces joined

    def count(self, key: str) -> int:
        """turns, tool_calls or tool_errors so far (what a break's ``needs`` are written in)."""
        return {"turns": self.turns, "tool_calls": sum(self.tool_calls.values()),
                "tool_errors": self.tool_errors}[key]

    def add(self, event: dict[str, Any], now: float) -> None:
        if self.first_event_at is None:
            self.first_event_at = now
        kind = event.get("event")
        if kind == "model_action":
            if not event.get("final"):  # the final-answer round after a limit is not one more turn
                turn = int(event.get("turn") or 0)
                if turn != self.turns:
                    self._turn_text = ""
                if len(self._turn_text) < ACTION_TEXT_MAX:  # a reply continued without end is no action anyway
                    self._turn_text += str(event.get("text", ""))
                self.turns = max(self.turns, turn)
            self.last_action = str(event.get("text", ""))
        elif kind == "tool_call":
            self.tool_calls[str(event.get("tool"))] += 1
            # A repeat is counted whether or not a dedup guard stops it (break 03 removes that guard).
            if not event.get("forced"):
                self._repeat(_call_key(event.get("tool"), event.get("args")))
        elif kind == "tool_error" and not event.get("forced"):  # the loop's count: the model's calls only
            self.tool_errors += 1
        elif kind == "guard" and event.get("name") == "dedup":
            self.identical_calls += 1  # a repeat the guard answered from memory
        elif kind == "guard" and event.get("name") in self.REFUSING:
            self._refused()
        elif kind == "stop":
            self.stop = event
        self.tail.append(describe(event))

    def _repeat(self, key: str) -> None:
        self.identical_calls += key in self._calls_seen
        self._calls_seen.add(key)

    def _refused(self) -> None:
        """The call a cap refused is the turn's action, read as the loop reads it: a repeat counts as one."""
        from ...agent.actions import InvalidAction, parse_action

        try:
            action = parse_action(self._turn_text, first_turn=self.turns == 1, may_answer=True)
        except InvalidAction:
            return
        if action.kind == "tool":
            self.identical_calls += _call_key(action.tool, action.args) in self._calls_seen


def _call_key(tool: Any, args: Any) -> str:
    return json.dumps([tool, args], sort_keys=True)
