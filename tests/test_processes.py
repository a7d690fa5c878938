"""processes.py in the test process: SIGTERM and SIGHUP turned into an unwinding exception (and put back after),
and the process-group helpers the MCP client and the harness stop their children with, on real children.

The tasks' and the agent's own tests send these signals to subprocesses (tests/test_tasks.py,
tests/tools/test_mcp_server.py); these send them to the test process itself, so each line of the handlers runs here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import psutil
import pytest

from helpers import NAPS_60_S, SleepingClock, pid_alive, wait_gone

from miniagent import processes
from miniagent.processes import (Terminated, alive, install_sigterm_handler, reap, signal_group, signal_leader,
                                 stop_group, stop_process, stops_unwind)


@pytest.fixture
def handlers():
    """Handlers of the test's own for SIGTERM and SIGHUP, the process's put back afterwards whatever a test does.

    A signal that gets past the code under test then fails the test; with the default handlers it would end the
    test process (a mutation run read that as a mutant that survived)."""
    def escaped(sig, frame):
        raise AssertionError(f"signal {sig} reached the handler outside the code under test")

    saved = {sig: signal.signal(sig, escaped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield {sig: escaped for sig in saved}
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_inside_the_block_the_signal_unwinds_it_with_128_plus_its_number(sig, handlers):
    cleaned = []
    with pytest.raises(Terminated) as stopped:
        with stops_unwind():
            try:
                os.kill(os.getpid(), sig)
                signal.sigtimedwait([], 0)  # a bytecode boundary: the handler runs here at the latest
                pytest.fail("the signal did not interrupt the block")
            finally:
                cleaned.append(True)
    assert stopped.value.code == 128 + sig and cleaned == [True]
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # put back


def test_a_second_signal_during_the_clean_up_is_said_and_does_not_interrupt_it(handlers, capsys):
    steps = []
    with pytest.raises(Terminated):
        with stops_unwind():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                signal.sigtimedwait([], 0)
            finally:
                os.kill(os.getpid(), signal.SIGHUP)  # the terminal closes while the first one is handled
                signal.sigtimedwait([], 0)
                steps.append("cleaned up")
    assert steps == ["cleaned up"]
    assert capsys.readouterr().err == "SIGHUP again: already shutting down\n"


def test_outside_the_main_thread_nothing_changes(handlers):
    seen = {}

    def body():
        with stops_unwind():
            seen["inside"] = {s: signal.getsignal(s) for s in handlers}

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    assert seen["inside"] == handlers


def test_the_agents_handler_turns_only_the_first_sigterm_into_terminated(handlers, capsys):
    previous = install_sigterm_handler()
    assert previous == handlers[signal.SIGTERM]
    with pytest.raises(Terminated) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)
    assert stopped.value.code == 143
    os.kill(os.getpid(), signal.SIGTERM)  # a second one: said, not raised
    signal.sigtimedwait([], 0)
    assert capsys.readouterr().err == "SIGTERM again: already shutting down\n"


# --- the process-group helpers, on real children ---------------------------------------------------------------
TRAPS_SIGTERM = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
# Takes a moment to exit on SIGTERM (it cleans up), then exits with status 3.
SLOW_TO_EXIT = ("import signal, sys, time\n"
                "def stop(*_):\n    time.sleep(0.3)\n    sys.exit(3)\n"
                f"signal.signal(signal.SIGTERM, stop); print(1, flush=True)\n{NAPS_60_S}")  # see NAPS_60_S


def child(*, own_group: bool, traps_sigterm: bool = False, code: str | None = None) -> subprocess.Popen:
    code = code or (TRAPS_SIGTERM if traps_sigterm else "import time; print(1, flush=True); time.sleep(60)")
    popen = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=own_group)
    popen.stdout.readline()  # running (and its SIGTERM trap set)
    return popen


def test_signal_group_signals_a_group_refuses_our_own_and_says_when_there_is_none():
    popen = child(own_group=True)
    try:
        assert signal_group(popen.pid, 0) is True  # it exists
        assert signal_group(os.getpgrp(), signal.SIGTERM) is False  # never our own group (we would be signalled)
        assert signal_group(popen.pid, signal.SIGKILL) is True
        popen.wait(10)
        assert signal_group(popen.pid, 0) is False  # gone
    finally:
        reap(popen)


def test_signal_leader_signals_a_leaders_group_a_member_alone_and_nothing_once_it_is_gone():
    leader = child(own_group=True)
    member = child(own_group=False)  # in our group: signalling its group would signal us
    try:
        signal_leader(psutil.Process(member.pid), signal.SIGKILL)
        assert member.wait(10) == -signal.SIGKILL
        signal_leader(psutil.Process(leader.pid), signal.SIGKILL)
        assert leader.wait(10) == -signal.SIGKILL
    finally:
        reap(leader)
        reap(member)
    gone = psutil.Process.__new__(psutil.Process)
    gone.is_running = lambda: False  # a process whose pid may already be someone else's
    signal_leader(gone, signal.SIGKILL)  # not sent, no error


def test_stop_process_terminates_within_the_grace_and_kills_what_ignores_sigterm():
    polite, stubborn = child(own_group=True), child(own_group=True, traps_sigterm=True)
    try:
        stop_process(psutil.Process(polite.pid), grace=30)
        assert polite.wait(10) == -signal.SIGTERM  # SIGTERM was enough: no SIGKILL after it
        stop_process(psutil.Process(stubborn.pid), grace=0.2)
        assert stubborn.wait(10) == -signal.SIGKILL  # ignored SIGTERM for the whole grace, then killed
        stop_process(None, grace=0)  # nothing to stop
    finally:
        reap(polite)
        reap(stubborn)


def test_stop_process_waits_the_grace_for_a_child_that_takes_a_moment_to_exit():
    slow = child(own_group=True, code=SLOW_TO_EXIT)
    try:
        stop_process(psutil.Process(slow.pid), grace=30)
        assert slow.wait(10) == 3  # it finished its clean-up: not killed 0.3 s into it
    finally:
        reap(slow)


# A leader that obeys SIGTERM, with a child of its group that ignores it; the leader prints the child's pid.
LEADS_A_STUBBORN_CHILD = ("import subprocess, sys, time\n"
                          f"kid = subprocess.Popen([sys.executable, '-c', {TRAPS_SIGTERM!r}], stdout=subprocess.PIPE)\n"
                          "kid.stdout.readline(); print(kid.pid, flush=True); time.sleep(60)")


def leader_of_a_stubborn_child() -> tuple[subprocess.Popen, int]:
    """A group leader that obeys SIGTERM, and the pid of its child that ignores it (both running)."""
    leader = subprocess.Popen([sys.executable, "-c", LEADS_A_STUBBORN_CHILD], stdout=subprocess.PIPE,
                              start_new_session=True)
    return leader, int(leader.stdout.readline())


def test_stop_group_asks_first_and_kills_a_leader_that_ignores_sigterm_after_the_grace():
    polite, stubborn = child(own_group=True), child(own_group=True, traps_sigterm=True)
    try:
        stop_group(polite, grace=30)
        assert polite.returncode == -signal.SIGTERM  # reaped, and SIGTERM was enough
        stop_group(stubborn, grace=0.2)
        assert stubborn.returncode == -signal.SIGKILL
    finally:
        reap(polite)
        reap(stubborn)


def test_stop_group_kills_a_child_that_ignores_sigterm_when_its_leader_obeys():
    """The case a wait for the leader alone misses: the leader is gone at once, its child would run on, orphaned."""
    leader, kid = leader_of_a_stubborn_child()
    try:
        stop_group(leader, grace=0.3)
        assert leader.returncode == -signal.SIGTERM
        assert wait_gone(kid, within=10.0), "the child that ignored SIGTERM was left running"
    finally:
        reap(leader)
        signal_group(leader.pid, signal.SIGKILL)


def test_stop_group_stops_what_a_leader_that_already_exited_left_behind():
    """A server that died during start-up (already reaped by the wait that saw it die) with a child still running."""
    leader, kid = leader_of_a_stubborn_child()
    try:
        leader.kill()
        leader.wait(10)
        assert pid_alive(kid)
        stop_group(leader, grace=0.3)
        assert wait_gone(kid, within=10.0)
    finally:
        signal_group(leader.pid, signal.SIGKILL)


class Leader:
    """A subprocess.Popen stand-in: its exit code, and the bounds it was waited with."""

    def __init__(self, pid: int, returncode: int | None, wedged: bool = False) -> None:
        self.pid, self.returncode, self.wedged, self.waits = pid, returncode, wedged, []

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout=None) -> int:
        self.waits.append(timeout)
        if timeout is None:
            raise AssertionError("a wait without a bound")
        if self.wedged:
            raise subprocess.TimeoutExpired("leader", timeout)
        return self.returncode


@pytest.fixture
def clock(monkeypatch) -> SleepingClock:
    fake = SleepingClock()
    monkeypatch.setattr(processes, "time", fake)
    return fake


@pytest.fixture
def signals(monkeypatch) -> dict:
    """signal_group stand-in: records each (group, signal); the group exists while ``alive`` says so."""
    state = {"sent": [], "alive": True}

    def signal_group(pgid: int, sig: int) -> bool:
        state["sent"].append((pgid, sig))
        if sig == signal.SIGKILL:
            state["alive"] = False
        return state["alive"]

    monkeypatch.setattr(processes, "signal_group", signal_group)
    return state


def test_a_group_that_empties_at_once_is_not_waited_for_nor_killed(clock, signals):
    leader = Leader(50, returncode=0)
    signals["alive"] = False  # the leader and its children ended on SIGTERM
    assert stop_group(leader, grace=5.0) == clock.now == 1000.0
    assert signals["sent"] == [(50, signal.SIGTERM), (50, 0)] and clock.sleeps == []


def test_a_leader_that_exited_but_left_its_group_alive_gets_sigkill_after_the_grace(clock, signals):
    """The leader ended on SIGTERM, but a process of its group (a child ignoring SIGTERM) did not: the grace is
    waited out, then the whole group is killed."""
    leader = Leader(51, returncode=-15)
    ended_at = stop_group(leader, grace=0.5)
    assert signals["sent"][0] == (51, signal.SIGTERM) and signals["sent"][-1] == (51, signal.SIGKILL)
    assert set(signals["sent"][1:-1]) == {(51, 0)}
    assert 0.5 <= sum(clock.sleeps) < 0.52 and ended_at == clock.now
    assert set(clock.sleeps) == {0.01}  # polled often: a group that empties is seen within 10 ms


def test_the_last_wait_for_the_leader_has_a_bound_and_its_timeout_is_not_an_error(clock, signals):
    leader = Leader(52, returncode=None, wedged=True)  # it never exits, not even on SIGKILL (a D-state process)
    assert stop_group(leader, grace=0.1) == clock.now
    assert signals["sent"][-1] == (52, signal.SIGKILL)
    assert len(leader.waits) == 1 and 0 < leader.waits[0] <= 2


def test_a_process_whose_state_cannot_be_read_is_not_alive():
    class Unreadable:
        def is_running(self):
            return True

        def status(self):
            raise psutil.AccessDenied(1)

    assert alive(Unreadable()) is False and alive(None) is False


def test_reap_collects_a_dead_child_and_kills_one_that_outlives_its_wait():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    reap(dead, timeout=30)
    assert dead.returncode == 0
    stubborn = child(own_group=True, traps_sigterm=True)
    reap(stubborn, timeout=0.1)  # still alive after 0.1 s: SIGKILL, then reaped
    assert stubborn.returncode == -signal.SIGKILL
    reap(None)


def test_a_request_runs_on_the_other_thread_s_loop_with_the_caller_s_context_and_is_closed_if_it_cannot():
    import asyncio
    import contextvars
    import gc
    import inspect
    import warnings

    asked = contextvars.ContextVar("asked", default="nobody")

    async def who():
        return asked.get()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asked.set("the caller")
        assert processes.submit_in_callers_context(who(), loop).result(timeout=30) == "the caller"
        assert processes.submit_in_callers_context(asyncio.sleep(0, "x"), loop).result(timeout=30) == "x"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
    request = who()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Event loop is closed"):
            processes.submit_in_callers_context(request, loop)
        gc.collect()
    assert inspect.getcoroutinestate(request) == inspect.CORO_CLOSED
    assert [str(w.message) for w in said] == [], "nothing left for the garbage collector to warn about"
