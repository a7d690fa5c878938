"""When a run may be killed: the timeout, the clock it is counted on, the needs it waits for, the hard cap."""

from __future__ import annotations

from .follow import Progress

# With clock="loop" or needs, nothing runs longer than this unless the caller says otherwise.
HARD_CAP_MIN = 60.0
NEEDS_KEYS = ("turns", "tool_calls", "tool_errors")


def unknown_counters(needs: dict[str, int]) -> list[str]:
    """The counters of ``needs`` the trace does not count, sorted (the deadline and the command line refuse them)."""
    return sorted(set(needs) - set(NEEDS_KEYS))


class Deadline:
    """When the run may be killed: ``timeout`` after the clock starts, once ``needs`` are met, never after the cap.

    ``clock="launch"`` starts counting when the process starts; ``"loop"`` at
    the first trace event, so the imports and the model load (1-2 s idle,
    much more on a busy machine) do not eat into the time the loop gets.
    ``needs`` (e.g. ``{"tool_calls": 1}``) keeps the run going past that
    deadline until the trace shows that much of the loop; ``hard_cap``
    (seconds after launch) ends it whatever happened.
    """

    def __init__(self, started: float, timeout: float, clock: str, needs: dict[str, int],
                 hard_cap: float | None) -> None:
        if clock not in ("launch", "loop"):
            raise ValueError(f"clock must be 'launch' or 'loop', not {clock!r}")
        unknown = unknown_counters(needs)
        if unknown:
            raise ValueError(f"needs: unknown counter(s) {unknown}; use {', '.join(NEEDS_KEYS)}")
        self.started, self.timeout, self.clock, self.needs = started, timeout, clock, dict(needs)
        if hard_cap is None and (clock == "loop" or needs):
            hard_cap = max(HARD_CAP_MIN, 3 * timeout)
        self.hard_cap = hard_cap
        self.base: float | None = started + timeout if clock == "launch" else None
        self.due: float | None = None  # when the kill fell due
        self.hard_capped = False
        self._met_at: float | None = None

    def met(self, progress: Progress) -> bool:
        return all(progress.count(key) >= n for key, n in self.needs.items())

    def plain(self, progress: Progress) -> float | None:
        """The deadline before any waiting for needs (None: the loop has not started yet)."""
        if self.base is None and self.clock == "loop" and progress.first_event_at is not None:
            self.base = self.started + progress.first_event_at + self.timeout
        return self.base

    def next_wake(self, progress: Progress) -> float:
        """The earliest moment the kill can fall due (for the sleep between ticks).

        While the needs are not met the timeout is no such moment, even once passed: they can only be met by
        events the next tick reads, and waking at a deadline already gone would spin the harness on a core.
        """
        times = [t for t in (self.plain(progress),) if t is not None and self.met(progress)]
        if self.hard_cap is not None:
            times.append(self.started + self.hard_cap)
        return min(times) if times else float("inf")

    def reached(self, now: float, progress: Progress) -> bool:
        if self.hard_cap is not None and now >= self.started + self.hard_cap:
            self.due, self.hard_capped = self.started + self.hard_cap, True
            return True
        base = self.plain(progress)
        if base is not None and now >= base and self.met(progress):
            self.due = max(base, now if self._met_at is None else self._met_at)
            return True
        return False

    def observe(self, now: float, progress: Progress) -> None:
        """Called after each batch of trace events: remembers when the needs were first met."""
        if self._met_at is None and self.met(progress):
            self._met_at = now

    def counted(self, now: float, progress: Progress) -> float:
        """Seconds on the timeout's clock so far."""
        base = self.plain(progress)
        return 0.0 if base is None else max(0.0, now - (base - self.timeout))

    def status(self, now: float, progress: Progress) -> str:
        """One line for the live panel."""
        if self.clock == "loop" and self.plain(progress) is None:
            return "waiting for the loop to start (imports, model load): the timeout has not started"
        missing = [f"{key} {progress.count(key)}/{n}" for key, n in self.needs.items() if progress.count(key) < n]
        base = self.plain(progress)
        if missing and base is not None and now >= base:
            return "timeout reached, but the break has not been exercised yet: waiting for " + ", ".join(missing)
        clock = "counted from the loop's start" if self.clock == "loop" else "counted from launch"
        return clock + (f"; needs {', '.join(missing)}" if missing else "")
