"""processes.py in the test process: SIGTERM and SIGHUP turned into an unwinding exception, and put back after.

The tasks' and the agent's own tests send these signals to subprocesses (tests/test_tasks.py,
tests/tools/test_mcp_server.py); these send them to the test process itself, so each line of the handlers runs here.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from miniagent.processes import Terminated, install_sigterm_handler, stops_unwind


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
