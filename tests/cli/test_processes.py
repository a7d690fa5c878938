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

from miniagent.processes import (Terminated, alive, install_sigterm_handler, reap, signal_group, signal_leader,
                                 stop_process, stops_unwind)


@pytest.fixture
def handlers():
    """The test process's own handlers, put back whatever a test does."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield saved
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
                "signal.signal(signal.SIGTERM, stop); print(1, flush=True); time.sleep(60)")


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
