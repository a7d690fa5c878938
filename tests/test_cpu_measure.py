"""How the lab measures the CPU that other programs use (``miniagent.processes``), on exact inputs.

One measure serves three readers: llama.cpp's thread count, the harness's busy-machine note and the
benchmark. A wrong sum here is not a crash: it quietly picks too many threads on a busy laptop (the threads
then stall on each other), too few on an idle one, or calls a disturbed run undisturbed. So each part is
checked on numbers worked out by hand.
"""

from __future__ import annotations

import os
import sys
import time
import types
from collections import namedtuple

import psutil
import pytest
from helpers import start_foreign_spinner

from miniagent import processes

LinuxTimes = namedtuple("LinuxTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
MacTimes = namedtuple("MacTimes", "user nice system idle")


def test_busy_counts_idle_and_iowait_as_idle_and_leaves_guest_time_out_of_the_total():
    # guest time is inside user (and guest_nice inside nice) already: counted twice it would inflate the total
    assert processes.busy_and_total(LinuxTimes(100, 20, 30, 400, 50, 6, 7, 8, 9, 10)) == (171, 621)


def test_a_reading_without_iowait_counts_idle_alone():
    assert processes.busy_and_total(MacTimes(1.0, 2.0, 3.0, 4.0)) == (6.0, 10.0)


def test_this_machine_reads_as_busy_less_than_its_total():
    busy, total = processes.machine_busy_s()
    assert 0 < busy < total


def test_a_machine_whose_cpu_cannot_be_read_is_none(monkeypatch):
    def unreadable():
        raise OSError("no /proc here")

    monkeypatch.setattr(psutil, "cpu_times", unreadable)
    assert processes.machine_busy_s() is None


class Clock:
    """time.monotonic and time.sleep over a list of readings, so that an interval has the length a test says."""

    def __init__(self, *readings):
        self.readings, self.slept = list(readings), []

    def monotonic(self):
        return self.readings.pop(0)

    def sleep(self, seconds):
        self.slept.append(seconds)


def fake_machine(monkeypatch, readings, clock, cores=2):
    readings = list(readings)
    monkeypatch.setattr(processes, "machine_busy_s", lambda: readings.pop(0))
    monkeypatch.setattr(processes, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    monkeypatch.setattr(os, "cpu_count", lambda: cores)


def test_other_programs_are_the_busy_share_of_all_cores_minus_ours(monkeypatch):
    # 1.5 of 2 tick-seconds busy on 2 cores = 1.5 cores busy; ours kept 0.5 busy: 1.0 core is others'
    fake_machine(monkeypatch, [(10.0, 100.0), (11.5, 102.0), (12.0, 104.0)], Clock(0.0, 1.0, 2.0))
    others = processes.OtherPrograms()
    assert others.cores(0.5) == pytest.approx(1.0)
    # each reading measures from the previous one: 0.5 of 2 tick-seconds on 2 cores = 0.5 busy, none ours
    assert others.cores(0.0) == pytest.approx(0.5)


def test_few_ticks_still_measure_because_they_are_a_share_not_seconds(monkeypatch):
    fake_machine(monkeypatch, [(10.0, 100.0), (10.25, 100.5)], Clock(0.0, 1.0), cores=4)
    assert processes.OtherPrograms().cores(0.0) == pytest.approx(2.0)


def test_ours_given_in_cpu_seconds_is_spread_over_the_interval_read(monkeypatch):
    # 1.5 cores busy over 4 s; ours 2 CPU-seconds in those 4 s is half a core, with 0.25 of a core given as cores
    fake_machine(monkeypatch, [(10.0, 100.0), (11.5, 102.0)], Clock(0.0, 4.0))
    assert processes.OtherPrograms().cores(0.25, ours_s=2.0) == pytest.approx(0.75)


def test_others_are_never_below_zero(monkeypatch):
    fake_machine(monkeypatch, [(10.0, 100.0), (10.2, 102.0)], Clock(0.0, 1.0))
    assert processes.OtherPrograms().cores(1.0) == 0.0  # we used more than the machine's busy share says


@pytest.mark.parametrize("readings, clock", [
    ([None, (10.0, 100.0)], (0.0, 1.0)),              # unreadable at the start
    ([(10.0, 100.0), None], (0.0, 1.0)),              # unreadable at the end
    ([(10.0, 100.0), (10.0, 100.0)], (0.0, 1.0)),     # no tick passed
    ([(10.0, 100.0), (11.0, 101.0)], (1.0, 1.0)),     # no time passed
])
def test_an_interval_that_measured_nothing_is_none(monkeypatch, readings, clock):
    fake_machine(monkeypatch, readings, Clock(*clock))
    assert processes.OtherPrograms().cores(0.0) is None


def test_busy_elsewhere_measures_a_quarter_second_and_counts_our_own_tree_as_ours(monkeypatch):
    own = [5.0, 5.0, 5.5]
    monkeypatch.setattr(processes, "own_tree_seconds", lambda: own.pop(0))
    # one clock for both sides: OtherPrograms reads it at the start, the early look and the end, nothing else does
    clock = Clock(0.0, 0.1, 1.0)
    # the early look: 0.2 of 0.2 tick-seconds busy on 2 cores, none of it ours: 2 cores elsewhere, not idle
    fake_machine(monkeypatch, [(10.0, 100.0), (10.2, 100.2), (11.5, 102.0)], clock)
    assert processes.busy_elsewhere() == pytest.approx(1.0)  # 1.5 cores busy, 0.5 of them ours
    assert clock.slept == [0.1, 0.15]  # the early look was not idle: the whole quarter second


def test_busy_elsewhere_takes_our_share_over_the_window_it_measured(monkeypatch):
    own = [5.0, 5.0, 5.5]
    monkeypatch.setattr(processes, "own_tree_seconds", lambda: own.pop(0))
    fake_machine(monkeypatch, [(10.0, 100.0), (10.2, 100.2), (11.5, 102.0)], Clock(10.0, 10.1, 12.0))
    assert processes.busy_elsewhere() == pytest.approx(1.25)  # 1.5 cores busy; ours 0.5 s in 2 s is 0.25 of one


@pytest.mark.parametrize("early_busy, returned, slept", [
    (0.01, 0.0, [0.1]),              # nothing elsewhere at the early look: idle, known at once
    (0.02, 0.1, [0.1]),              # 0.1 of a core (one tick): idle too
    (0.03, 0.6, [0.1, 0.15]),        # 0.2 of a core: the whole window decides (0.6 cores over it)
])
def test_an_idle_machine_is_known_at_the_early_look(monkeypatch, early_busy, returned, slept):
    # the early look: 0.1 s on 2 cores = 0.2 tick-seconds; ours 0.01 s in 0.1 s = 0.1 of a core. The whole
    # window: 0.2 of 0.5 tick-seconds busy = 0.8 cores, ours 0.05 s in 0.25 s = 0.2 of a core
    own = [1.0, 1.01, 1.05]
    monkeypatch.setattr(processes, "own_tree_seconds", lambda: own.pop(0))
    clock = Clock(0.0, 0.1, 0.25)
    fake_machine(monkeypatch, [(10.0, 100.0), (10.0 + early_busy, 100.2), (10.2, 100.5)], clock)
    assert processes.busy_elsewhere() == pytest.approx(returned)
    assert clock.slept == slept


def test_a_window_no_longer_than_the_early_look_is_measured_whole(monkeypatch):
    own = [5.0, 5.0]
    monkeypatch.setattr(processes, "own_tree_seconds", lambda: own.pop(0))
    clock = Clock(0.0, 0.05)
    fake_machine(monkeypatch, [(10.0, 100.0), (10.0, 100.1)], clock)
    assert processes.busy_elsewhere(0.05) == 0.0
    assert clock.slept == [0.05]


def test_busy_elsewhere_is_none_when_no_time_passed(monkeypatch):
    own = [5.0, 5.2, 5.5]
    monkeypatch.setattr(processes, "own_tree_seconds", lambda: own.pop(0))
    fake_machine(monkeypatch, [(10.0, 100.0), (10.2, 100.2), (11.5, 102.0)], Clock(5.0, 5.0, 5.0))
    assert processes.busy_elsewhere() is None


def test_busy_elsewhere_is_none_when_the_machine_cannot_be_read(monkeypatch):
    monkeypatch.setattr(processes, "machine_busy_s", lambda: None)
    assert processes.busy_elsewhere(0.01) is None


def test_the_machines_cores_are_its_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert processes.machine_cores() == 6


def test_an_unknown_core_count_counts_as_one(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert processes.machine_cores() == 1


def test_our_own_tree_is_this_process_and_every_descendant(monkeypatch):
    class Error(Exception):
        pass

    class Proc:
        def __init__(self, times, children=()):
            self.times, self.kids = times, list(children)

        def cpu_times(self):
            if self.times is None:
                raise Error("gone")
            return self.times

        def children(self, recursive=False):
            assert recursive is True  # grandchildren too: the MCP server's own children
            return self.kids

    me = Proc((1.0, 2.0, 100.0), [Proc((4.0, 5.0, 100.0)), Proc(None), Proc((7.0, 8.0, 100.0))])
    monkeypatch.setitem(sys.modules, "psutil", types.SimpleNamespace(Process=lambda: me, Error=Error))
    assert processes.own_tree_seconds() == 27.0  # user + system of each; one child gone meanwhile is skipped


def test_the_cores_this_process_may_use_fall_back_to_the_machines_count(monkeypatch):
    def no_affinity(pid):
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert processes.usable_cores() == 3


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_the_cores_this_process_may_use_are_its_affinity():
    assert processes.usable_cores() == len(os.sched_getaffinity(0))


def test_the_load_average_is_rounded_and_none_where_there_is_none(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (1.23456, 9.0, 9.0))
    assert processes.load_average() == 1.23

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert processes.load_average() is None


@pytest.mark.serial
def test_a_program_spinning_elsewhere_is_seen():
    """A busy loop that is not our child (its parent has exited) shows up as about one busy core."""
    spinner = start_foreign_spinner()
    try:
        time.sleep(0.3)  # let it get going
        others = processes.busy_elsewhere(1.0)
        assert others is not None and 0.7 <= others <= processes.machine_cores() + 0.1, others
    finally:
        spinner.kill()
        psutil.wait_procs([spinner], timeout=5)  # init reaps it; gone (or a zombie) is enough
