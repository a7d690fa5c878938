"""The loop's guards: each one a small named unit with one job and one test.

The loop asks each guard at the moment it matters (before a model call,
before a tool call, after a tool result).  A guard that trips raises a
``Terminal`` error carrying its stop reason, or tells the loop what to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .errors import (
    AutoContinueLimit,
    CallBudgetExhausted,
    Cancelled,
    FormatErrorLimit,
    ModelTimeout,
    StuckLoop,
    TokenBudgetSpent,
    ToolCallCapHit,
    TurnCapHit,
    WallClockExceeded,
)


@dataclass
class TurnCap:
    """At most ``max_turns`` model calls per run."""

    max_turns: int

    def check(self, turns_done: int) -> None:
        if turns_done >= self.max_turns:
            raise TurnCapHit(f"reached max_turns={self.max_turns}")


@dataclass
class ToolCallCap:
    """At most ``max_tool_calls`` executed tool calls, unless a declared plan raises it.

    With a plan of N steps the limit becomes clamp(max_tool_calls, N x per_step, ceiling):
    a three-verb question may make three calls, but never more than the ceiling.
    """

    max_tool_calls: int
    per_step: int = 1
    ceiling: int = 6
    plan_steps: int | None = None

    def declare_plan(self, steps: int) -> None:
        self.plan_steps = steps

    @property
    def limit(self) -> int:
        if self.plan_steps is None:
            return self.max_tool_calls
        return max(self.max_tool_calls, min(self.plan_steps * self.per_step, self.ceiling))

    def check(self, calls_done: int) -> None:
        if calls_done < self.limit:
            return
        if self.plan_steps is not None and self.limit > self.max_tool_calls:
            raise CallBudgetExhausted(f"used the plan's budget of {self.limit} tool calls")
        raise ToolCallCapHit(f"reached max_tool_calls={self.max_tool_calls}")


@dataclass
class CallDedup:
    """The same tool with the same arguments is not executed twice."""

    results: dict[str, str] = field(default_factory=dict)

    def earlier_result(self, key: str) -> str | None:
        return self.results.get(key)

    def remember(self, key: str, result: str) -> None:
        self.results[key] = result


@dataclass
class FailureBreaker:
    """After ``threshold`` tool failures in a row, force a discovery step."""

    threshold: int
    consecutive: int = 0

    def record(self, ok: bool) -> bool:
        """Record one tool result; True when the breaker trips (and resets)."""
        self.consecutive = 0 if ok else self.consecutive + 1
        if self.consecutive >= self.threshold:
            self.consecutive = 0
            return True
        return False


@dataclass
class FormatBreaker:
    """After ``threshold`` invalid actions in a row, end the run: the model is not following the format."""

    threshold: int
    consecutive: int = 0

    def record(self, valid: bool) -> None:
        self.consecutive = 0 if valid else self.consecutive + 1
        if self.consecutive >= self.threshold:
            raise FormatErrorLimit(f"{self.consecutive} invalid actions in a row; max_format_errors={self.threshold}")


@dataclass
class StuckDetector:
    """Ends a run that repeats itself (after OpenHands' StuckDetector).

    A step is one tool call and its result (or error).  Stuck means the same step
    ``repeats`` times in a row, or two different steps taking turns over the last
    ``alternation`` steps (A, B, A, B, A, B).  ``repeats=0`` turns the detector off.
    The caps would end such a run too, but only after spending the whole budget.
    """

    repeats: int
    alternation: int = 6
    steps: list[tuple[str, str]] = field(default_factory=list)

    def record(self, call_key: str, result: str) -> None:
        if self.repeats <= 0:
            return
        self.steps.append((call_key, result))
        last = self.steps[-self.repeats:]
        if len(last) == self.repeats and len(set(last)) == 1:
            raise StuckLoop(f"the same call gave the same result {self.repeats} times in a row;"
                            f" max_repeats={self.repeats}")
        window = self.steps[-self.alternation:]
        if (len(window) == self.alternation and window[0] != window[1]
                and set(window[0::2]) == {window[0]} and set(window[1::2]) == {window[1]}):
            raise StuckLoop(f"two calls took turns over the last {self.alternation} steps, with the same results")


@dataclass
class WallClock:
    """The run's time budget. Tool timeouts are cut to what is left of it."""

    limit_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    excluded: float = 0.0  # time another clock bounds (ModelClock): not counted here

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return self.limit_s - (self.elapsed() - self.excluded)

    def exclude(self, seconds: float) -> None:
        self.excluded += seconds

    def check(self) -> None:
        if self.remaining() <= 0:
            raise WallClockExceeded(f"ran past wall_clock_s={self.limit_s:g}")

    def time_left(self) -> float:
        """What a model call may take: the rest of the run (raises if nothing is left)."""
        self.check()
        return self.remaining()

    def tool_timeout(self, per_call_s: float) -> float:
        """The per-call timeout, never longer than the time the run has left.

        0 when nothing is left: the tool client refuses the call as a timeout, so the trace and the stats,
        which count the call before it is made, still tell the truth, and the next check ends the run."""
        return min(per_call_s, max(0.0, self.remaining()))


class ModelClock:
    """A shared model server's own time budget per run (model_wall_clock_s): its queue is not a hang.

    Stands between the loop and the model.  The run's model calls may take ``limit_s`` in all, each
    one what is left of it (instead of what is left of the wall clock), and their time is taken off
    the wall clock's count, which goes on bounding the tools and the loop itself.
    """

    def __init__(self, model, limit_s: float, wall_clock: WallClock) -> None:
        self.model, self.limit_s, self.wall_clock = model, limit_s, wall_clock
        self.name = getattr(model, "name", "?")
        self.spent = 0.0

    def next_action(self, scratchpad, *, timeout_s: float | None = None, **kwargs):
        left = self.limit_s - self.spent
        if left <= 0:
            raise WallClockExceeded(f"waited {self.spent:.1f} s for the model; model_wall_clock_s={self.limit_s:g}")
        started = self.wall_clock.clock()
        try:
            return self.model.next_action(scratchpad, timeout_s=left, **kwargs)
        except ModelTimeout:
            raise WallClockExceeded(f"the model was still replying when model_wall_clock_s={self.limit_s:g} "
                                    "ran out") from None
        finally:
            waited = self.wall_clock.clock() - started
            self.spent += waited
            self.wall_clock.exclude(waited)

    def close(self) -> None:
        self.model.close()


@dataclass
class AutoContinue:
    """Continue a truncated action at most ``max_continues`` times per turn."""

    max_continues: int
    used: int = 0

    def next(self) -> None:
        if self.used >= self.max_continues:
            raise AutoContinueLimit(f"output still truncated after {self.used} continuations")
        self.used += 1


@dataclass
class TokenBudget:
    """At most ``max_tokens`` prompt + completion tokens per run, whatever the turns and continuations."""

    max_tokens: int

    def check(self, tokens_used: int) -> None:
        if tokens_used >= self.max_tokens:
            raise TokenBudgetSpent(f"used {tokens_used} tokens; max_run_tokens={self.max_tokens}")


@dataclass
class CancelCheck:
    """Ends the run cleanly when the caller's cancel callback says so."""

    is_cancelled: Callable[[], bool] | None = None

    def check(self) -> None:
        if self.is_cancelled is not None and self.is_cancelled():
            raise Cancelled("cancelled by the caller")
