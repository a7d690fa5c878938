"""When the harness may kill a run (``lab.harness.deadline.Deadline``), moment by moment, with no process.

The harness's own tests run real agents against it; here each rule is read at the instant it changes: the
plain deadline on either clock, waiting for a break's needs, when the kill fell due, and the hard cap that
bounds every wait.
"""

from __future__ import annotations

import math

import pytest

from miniagent.lab.harness.deadline import HARD_CAP_MIN, Deadline
from miniagent.lab.harness.follow import Progress

T0 = 1000.0  # the harness's clock when the agent was launched


def progress(first_event_at: float | None = None, tool_calls: int = 0) -> Progress:
    p = Progress()
    p.first_event_at = first_event_at
    for _ in range(tool_calls):
        p.tool_calls["conjugate"] += 1
    return p


def test_a_clock_or_a_need_it_does_not_know_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^clock must be 'launch' or 'loop', not 'wall'$"):
        Deadline(T0, 5.0, "wall", {}, None)
    with pytest.raises(ValueError, match=r"^needs: unknown counter\(s\) \['calls', 'x'\]; use turns, tool_calls, "
                                         r"tool_errors$"):
        Deadline(T0, 5.0, "launch", {"x": 1, "calls": 2, "turns": 1}, None)


@pytest.mark.parametrize("clock, needs, given, cap", [
    ("launch", {}, None, None),                       # nothing to wait for: the timeout is the bound
    ("loop", {}, None, HARD_CAP_MIN),                 # the loop may never start: a cap
    ("launch", {"tool_calls": 1}, None, HARD_CAP_MIN),  # the needs may never be met: a cap
    ("loop", {}, 30.0, 30.0),                         # the caller's own cap is kept
])
def test_every_wait_has_a_hard_cap(clock, needs, given, cap):
    assert Deadline(T0, 5.0, clock, needs, given).hard_cap == cap


def test_the_default_cap_is_three_timeouts_when_that_is_longer_than_a_minute():
    assert Deadline(T0, 25.0, "loop", {}, None).hard_cap == 75.0
    assert Deadline(T0, 20.0, "loop", {}, None).hard_cap == 60.0


def test_from_launch_the_kill_falls_due_at_the_timeout_exactly():
    deadline, p = Deadline(T0, 5.0, "launch", {}, None), progress()
    assert deadline.plain(p) == T0 + 5.0 and deadline.next_wake(p) == T0 + 5.0
    assert not deadline.reached(T0 + 4.999, p) and deadline.due is None
    assert deadline.reached(T0 + 5.0, p) and deadline.due == T0 + 5.0 and not deadline.hard_capped
    assert deadline.counted(T0 + 2.5, p) == 2.5 and deadline.counted(T0 - 1.0, p) == 0.0


def test_on_the_loops_clock_nothing_counts_until_the_first_event():
    deadline = Deadline(T0, 5.0, "loop", {}, 40.0)
    waiting = progress()
    assert deadline.plain(waiting) is None and deadline.counted(T0 + 30.0, waiting) == 0.0
    assert deadline.next_wake(waiting) == T0 + 40.0  # only the cap can end it yet
    assert not deadline.reached(T0 + 39.9, waiting)
    started = progress(first_event_at=2.0)  # the loop's first event came 2 s after launch
    assert deadline.plain(started) == T0 + 7.0 and deadline.next_wake(started) == T0 + 7.0
    assert deadline.counted(T0 + 3.5, started) == 1.5
    assert not deadline.reached(T0 + 6.9, started) and deadline.reached(T0 + 7.0, started)
    assert deadline.due == T0 + 7.0


def test_with_no_deadline_and_no_cap_there_is_nothing_to_wake_for():
    deadline = Deadline(T0, 5.0, "loop", {}, None)
    deadline.hard_cap = None  # (a caller that turned the cap off) and the loop has not started
    assert math.isinf(deadline.next_wake(progress()))


def test_a_need_not_met_is_waited_for_tick_by_tick_not_at_a_deadline_already_gone():
    """Waking at the passed timeout would make every sleep zero: the harness would spin on a core."""
    deadline = Deadline(T0, 5.0, "launch", {"tool_calls": 1}, 40.0)
    assert deadline.next_wake(progress()) == T0 + 40.0
    assert deadline.next_wake(progress(tool_calls=1)) == T0 + 5.0


def test_a_need_not_met_keeps_the_run_going_past_the_timeout_and_the_kill_is_due_when_it_is_met():
    deadline = Deadline(T0, 5.0, "launch", {"tool_calls": 1}, None)
    idle = progress()
    assert not deadline.reached(T0 + 6.0, idle)
    deadline.observe(T0 + 6.0, idle)  # not met yet: nothing remembered
    assert not deadline.reached(T0 + 7.0, idle)
    met = progress(tool_calls=1)
    deadline.observe(T0 + 7.5, met)  # first seen met here
    deadline.observe(T0 + 8.0, met)  # seen again later: the first moment stays
    assert deadline.reached(T0 + 8.2, met) and deadline.due == T0 + 7.5


def test_a_need_met_before_the_timeout_changes_nothing():
    deadline = Deadline(T0, 5.0, "launch", {"tool_calls": 1}, None)
    met = progress(tool_calls=2)
    deadline.observe(T0 + 1.0, met)
    assert not deadline.reached(T0 + 4.0, met)
    assert deadline.reached(T0 + 5.3, met) and deadline.due == T0 + 5.0


def test_a_need_met_but_never_observed_falls_due_when_it_is_seen():
    deadline = Deadline(T0, 5.0, "launch", {"tool_calls": 1}, None)
    assert deadline.reached(T0 + 6.5, progress(tool_calls=1)) and deadline.due == T0 + 6.5


def test_the_hard_cap_ends_the_run_whatever_it_waits_for():
    deadline = Deadline(T0, 5.0, "loop", {"tool_calls": 1}, 20.0)
    assert not deadline.reached(T0 + 19.99, progress())
    assert deadline.reached(T0 + 20.0, progress()) and deadline.hard_capped and deadline.due == T0 + 20.0


def test_the_panels_line_says_which_clock_and_what_is_still_missing():
    loop = Deadline(T0, 5.0, "loop", {"tool_calls": 2}, None)
    assert loop.status(T0 + 1.0, progress()) == ("waiting for the loop to start (imports, model load): the timeout "
                                                 "has not started")
    assert loop.status(T0 + 2.0, progress(first_event_at=1.0, tool_calls=1)) == (
        "counted from the loop's start; needs tool_calls 1/2")
    assert loop.status(T0 + 6.0, progress(first_event_at=1.0, tool_calls=1)) == (
        "timeout reached, but the break has not been exercised yet: waiting for tool_calls 1/2")
    assert loop.status(T0 + 6.0, progress(first_event_at=1.0, tool_calls=2)) == "counted from the loop's start"
    assert Deadline(T0, 5.0, "launch", {}, None).status(T0 + 9.0, progress()) == "counted from launch"
    two = Deadline(T0, 5.0, "launch", {"tool_calls": 2, "turns": 3}, None)
    assert two.status(T0 + 1.0, progress()) == "counted from launch; needs tool_calls 0/2, turns 0/3"
    assert two.status(T0 + 6.0, progress()) == ("timeout reached, but the break has not been exercised yet: waiting "
                                                "for tool_calls 0/2, turns 0/3")


def test_a_fresh_deadline_has_not_capped_anything():
    deadline = Deadline(T0, 5.0, "launch", {}, None)
    assert deadline.hard_capped is False and deadline.due is None  # the record's JSON says false, not null
