"""How the lab measures the CPU other programs use before it picks llama.cpp's thread count, on exact inputs.

A wrong sum here is not a crash: it quietly picks too many threads on a busy laptop (the threads then stall
on each other) or too few on an idle one. So each part is checked on numbers worked out by hand.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from miniagent import models

HZ = os.sysconf("SC_CLK_TCK")


def stat_file(tmp_path: Path, line: str) -> str:
    path = tmp_path / "stat"
    path.write_text(line + "\ncpu0 1 2 3 4 5 6 7 8\n", encoding="ascii")
    return str(path)


def test_busy_ticks_counts_idle_and_iowait_as_idle_and_the_first_eight_fields_as_the_total(tmp_path):
    # user nice system idle iowait irq softirq steal guest guest_nice: guest is inside user already
    busy, total = models._busy_ticks(stat_file(tmp_path, "cpu  100 20 30 400 50 6 7 8 9 10"))
    assert (busy, total) == (pytest.approx(171 / HZ), pytest.approx(621 / HZ))


def test_busy_ticks_reads_an_old_kernels_line_without_iowait(tmp_path):
    assert models._busy_ticks(stat_file(tmp_path, "cpu 1 2 3 4")) == (pytest.approx(6 / HZ), pytest.approx(10 / HZ))
    # five fields: the fifth is iowait
    assert models._busy_ticks(stat_file(tmp_path, "cpu 1 2 3 4 5")) == (pytest.approx(6 / HZ), pytest.approx(15 / HZ))


@pytest.mark.parametrize("line", ["cpu  1 2 three 4", "intr 12", ""])
def test_busy_ticks_is_none_when_the_file_cannot_be_read_as_numbers(tmp_path, line):
    assert models._busy_ticks(str(tmp_path / "missing")) is None
    assert models._busy_ticks(stat_file(tmp_path, line)) is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="Linux only")
def test_busy_ticks_reads_this_machines_proc_stat_by_default():
    busy, total = models._busy_ticks()
    assert 0 < busy < total


class Clock:
    """time.monotonic and time.sleep over a list of readings, so that a window has the length a test says."""

    def __init__(self, *readings):
        self.readings, self.slept = list(readings), []

    def monotonic(self):
        return self.readings.pop(0)

    def sleep(self, seconds):
        self.slept.append(seconds)


def measure(monkeypatch, ticks, own, readings=(10.0, 11.0), cores=2, window=0.25):
    ticks, own = list(ticks), list(own)
    monkeypatch.setattr(models, "_busy_ticks", lambda: ticks.pop(0))
    monkeypatch.setattr(models, "_own_tree_seconds", lambda: own.pop(0))
    clock = Clock(*readings)
    monkeypatch.setattr(models, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    return models.busy_elsewhere(window), clock


def test_busy_elsewhere_is_the_machines_busy_share_in_cores_minus_our_own_tree(monkeypatch):
    # 1.5 of 2 tick-seconds busy on 2 cores = 1.5 cores; we used 0.5 s of CPU in the 1 s window: 1.0 core is others'
    others, clock = measure(monkeypatch, [(10.0, 100.0), (11.5, 102.0)], [5.0, 5.5])
    assert others == pytest.approx(1.0)
    assert clock.slept == [0.25]
    # a window of 2 s: our 0.5 s is a quarter of a core
    others, _ = measure(monkeypatch, [(10.0, 100.0), (11.5, 102.0)], [5.0, 5.5], readings=(3.0, 5.0))
    assert others == pytest.approx(1.25)
    # fewer ticks than a second's worth still measure (ticks are a share, not seconds)
    others, _ = measure(monkeypatch, [(10.0, 100.0), (10.25, 100.5)], [5.0, 5.0], cores=4)
    assert others == pytest.approx(2.0)
    # never below zero: we used more than the machine's busy share says
    others, _ = measure(monkeypatch, [(10.0, 100.0), (10.2, 102.0)], [5.0, 6.0])
    assert others == 0.0


@pytest.mark.parametrize("ticks, readings", [
    ([(10.0, 100.0), None], (10.0, 11.0)),            # /proc/stat went away
    ([(10.0, 100.0), (10.0, 100.0)], (10.0, 11.0)),   # no tick passed
    ([(10.0, 100.0), (11.0, 101.0)], (10.0, 10.0)),   # no time passed
])
def test_busy_elsewhere_is_none_when_the_window_measured_nothing(monkeypatch, ticks, readings):
    others, _ = measure(monkeypatch, ticks, [5.0, 5.0], readings=readings)
    assert others is None


@pytest.mark.parametrize("load, expected", [((3.0, 9.0, 9.0), 2.0), ((0.5, 9.0, 9.0), 0.0)])
def test_without_proc_stat_the_load_average_minus_ourselves_is_used(monkeypatch, load, expected):
    monkeypatch.setattr(models, "_busy_ticks", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: load)
    assert models.busy_elsewhere() == expected


def test_with_neither_the_measure_is_none(monkeypatch):
    monkeypatch.setattr(models, "_busy_ticks", lambda: None)

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert models.busy_elsewhere() is None


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
    fake = types.SimpleNamespace(Process=lambda: me, Error=Error)
    monkeypatch.setitem(sys.modules, "psutil", fake)
    assert models._own_tree_seconds() == 27.0  # user + system of each; one child gone meanwhile is skipped


def test_the_cpus_this_process_may_use_fall_back_to_the_machines_count(monkeypatch):
    def no_affinity(pid):
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert models.usable_cpus() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert models.usable_cpus() == 1


def test_choose_threads_keeps_a_given_count_and_otherwise_leaves_others_their_cores(monkeypatch):
    asked = []
    monkeypatch.setattr(models, "busy_elsewhere", lambda: asked.append(1) or 1.5)
    monkeypatch.setattr(models, "usable_cpus", lambda: 4)
    assert models.choose_threads(1) == (1, "")
    assert models.choose_threads(6) == (6, "")
    assert asked == []
    # 4 usable, 1.5 busy elsewhere: a core counts as free when others use under half of it -> 3 (2.5 rounds up)
    assert models.choose_threads(0) == (3, "auto: usable CPUs 4, busy with other programs 1.5")
    monkeypatch.setattr(models, "busy_elsewhere", lambda: None)
    assert models.choose_threads(0) == (4, "auto: usable CPUs 4, busy with other programs unknown")
    monkeypatch.setattr(models, "busy_elsewhere", lambda: 9.0)
    assert models.choose_threads(0) == (1, "auto: usable CPUs 4, busy with other programs 9.0")  # at least one


def test_one_usable_cpu_is_not_measured(monkeypatch):
    monkeypatch.setattr(models, "usable_cpus", lambda: 1)
    monkeypatch.setattr(models, "busy_elsewhere", lambda: pytest.fail("measured a single CPU"))
    assert models.choose_threads(0) == (1, "auto: usable CPUs 1, busy with other programs 0.0")


def test_busy_ticks_divides_by_the_kernels_tick_rate_and_assumes_100_where_there_is_none(tmp_path, monkeypatch):
    stat = stat_file(tmp_path, "cpu  100 20 30 400 50 6 7 8")
    asked = []
    monkeypatch.setattr(os, "sysconf", lambda name: asked.append(name) or 250)
    assert models._busy_ticks(stat) == (pytest.approx(171 / 250), pytest.approx(621 / 250))
    assert asked == ["SC_CLK_TCK"]
    monkeypatch.delattr(os, "sysconf")
    assert models._busy_ticks(stat) == (pytest.approx(1.71), pytest.approx(6.21))


def test_busy_elsewhere_measures_a_quarter_second_by_default_and_one_core_when_the_count_is_unknown(monkeypatch):
    ticks, own = [(10.0, 100.0), (11.5, 102.0)], [5.0, 5.0]
    monkeypatch.setattr(models, "_busy_ticks", lambda: ticks.pop(0))
    monkeypatch.setattr(models, "_own_tree_seconds", lambda: own.pop(0))
    clock = Clock(10.0, 11.0)
    monkeypatch.setattr(models, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert models.busy_elsewhere() == pytest.approx(0.75)  # 1.5 of 2 tick-seconds busy, on one core
    assert clock.slept == [0.25]
