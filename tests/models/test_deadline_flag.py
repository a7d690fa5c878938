"""The flag llama.cpp's abort callback reads (models/deadline_flag.py): raised at the deadline by a timer, read
from C by libc's atoi, lowered by a new deadline; no Python runs inside a decode."""

from __future__ import annotations

import ctypes
import threading
import time

from helpers import wait_for

from miniagent.models.deadline_flag import DeadlineFlag

ABORT = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)  # llama.cpp's ggml_abort_callback


def test_the_callback_reads_the_flag_as_llama_cpp_would():
    flag = DeadlineFlag()
    callback, data = flag.callback(ABORT)
    assert callback(data) is False
    flag.set(time.monotonic() - 1)  # a deadline already past: raised at once
    assert flag.raised and callback(data) is True
    flag.set(None)
    assert not flag.raised and callback(data) is False


def test_the_flag_rises_at_its_deadline_and_not_before():
    flag = DeadlineFlag()
    try:
        deadline = time.monotonic() + 0.3
        flag.set(deadline)
        assert not flag.raised
        wait_for(lambda: flag.raised, within=10, what="the flag raised at its deadline")
        assert time.monotonic() >= deadline
    finally:
        flag.close()


def test_a_new_deadline_lowers_the_flag_and_the_old_timer_raises_nothing():
    flag = DeadlineFlag()
    try:
        flag.set(time.monotonic() + 0.05)
        old = flag._timer
        flag.set(time.monotonic() + 3600)
        old.join(timeout=5)
        assert not old.is_alive() and not flag.raised
        flag.set(None)
        assert flag._timer is None and not flag.raised
    finally:
        flag.close()


def test_a_timer_that_fires_after_it_was_replaced_raises_nothing():
    flag = DeadlineFlag()
    flag.set(time.monotonic() + 3600)
    stale = threading.Thread(target=flag._raise)  # not the flag's timer: the one a later set() replaced
    stale.start()
    stale.join()
    assert not flag.raised
    flag.close()


def test_no_thread_is_left_once_the_deadline_is_cleared():
    flag = DeadlineFlag()
    flag.set(time.monotonic() + 3600)
    timer = flag._timer
    assert timer.daemon
    flag.close()
    timer.join(timeout=5)
    assert not timer.is_alive()
