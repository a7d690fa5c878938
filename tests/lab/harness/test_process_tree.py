"""The harness's process tree, rule by rule: what a sample adds up, when the agent's group gets SIGKILL, what
``kill_all`` reports, what the rest of the machine used, and the figures the run's record keeps from them.

The end-to-end runs (test_harness.py) start real agents, so they reach these branches only when a race
happens to go that way. Here stand-in processes and a stand-in clock make each branch happen every time:
found by mutation testing on 16 cores, where 68 of the 214 changes it tested went unnoticed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest
from helpers import SleepingClock

from miniagent.lab.harness import process_tree, run
from miniagent.lab.harness.process_tree import MachineLoad, TreeSampler, kill_all

MB = 2**20


@pytest.fixture
def clock(monkeypatch) -> SleepingClock:
    fake = SleepingClock()
    monkeypatch.setattr(process_tree, "time", fake)
    return fake


class Proc:
    """A psutil.Process stand-in: its CPU, memory, status and command line, and whether it is gone."""

    def __init__(self, pid: int, *, cpu: float = 0.0, rss: int = 0, zombie: bool = False, gone: bool = False,
                 line: str = "python -m miniagent ask", group: int | None = None, dies_at: float | None = None,
                 clock: SleepingClock | None = None) -> None:
        self.pid, self.cpu, self.rss, self.zombie, self.gone, self.line = pid, cpu, rss, zombie, gone, line
        self.group, self.dies_at, self.clock = group, dies_at, clock
        self.killed = False

    def _check(self) -> None:
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)

    def status(self) -> str:
        self._check()
        return psutil.STATUS_ZOMBIE if self.zombie else psutil.STATUS_RUNNING

    def is_running(self) -> bool:
        if self.dies_at is not None and self.clock.now >= self.dies_at:
            return False
        return not (self.gone or self.killed)

    def cpu_percent(self, interval=None) -> float:
        self._check()
        return self.cpu

    def memory_info(self) -> SimpleNamespace:
        self._check()
        return SimpleNamespace(rss=self.rss)

    def cmdline(self) -> list[str]:
        if self.line is None:
            raise psutil.AccessDenied(self.pid)
        return self.line.split()

    def name(self) -> str:
        return "python"

    def kill(self) -> None:
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)
        self.killed = True


def sampler_of(*procs: Proc) -> TreeSampler:
    """A sampler that already knows these processes (and finds no new ones)."""
    sampler = TreeSampler.__new__(TreeSampler)
    sampler.root_pid = procs[0].pid
    sampler.procs = {p.pid: p for p in procs}
    sampler.seen = {p.pid: {"pid": p.pid, "cmdline": "python", "create_time": 0.0} for p in procs}
    sampler.discover = lambda: None
    return sampler


# --------------------------------------------------------------------------- sampling


def test_a_sample_sums_cpu_and_memory_of_the_live_processes_only():
    """A zombie and a process gone since the last sample are skipped; the ones after them still count."""
    agent = Proc(10, cpu=50.0, rss=100 * MB)
    zombie = Proc(11, cpu=99.0, rss=7 * MB, zombie=True)
    gone = Proc(12, cpu=99.0, rss=7 * MB, gone=True)
    server = Proc(13, cpu=25.0, rss=60 * MB)
    assert sampler_of(agent, zombie, gone, server).sample() == (75.0, 160.0, 2)
    assert sampler_of(Proc(20)).sample() == (0.0, 0.0, 1)


def test_a_sample_reads_again_a_command_line_first_seen_between_fork_and_exec():
    """The server was first seen with its parent's command line; once it runs, the record names the server.
    A line that cannot be read any more ("?") does not replace the one seen."""
    server, hidden = Proc(30, line="python -m miniagent.tools.server"), Proc(31, line=None)
    sampler = sampler_of(server, hidden)
    sampler.sample()
    assert sampler.seen[30]["cmdline"] == "python -m miniagent.tools.server"
    assert sampler.seen[31]["cmdline"] == "python"


def test_a_sampler_finds_its_root_and_not_the_process_that_watches_it():
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        sampler = TreeSampler(root.pid)
        assert sampler.root_pid == root.pid
        assert set(sampler.seen) == {root.pid} and set(sampler.procs) == {root.pid}
        assert sampler.seen[root.pid]["create_time"] == psutil.Process(root.pid).create_time()
    finally:
        root.kill()
        root.wait()


def test_the_rest_of_the_machine_is_the_machine_minus_the_tree_and_the_harness():
    """cores() is told what the tree and the harness used, in cores; its answer comes back in percent."""
    asked = []
    load = MachineLoad.__new__(MachineLoad)
    load.me = SimpleNamespace(cpu_percent=lambda interval=None: 20.0)
    load.others = SimpleNamespace(cores=lambda ours: asked.append(ours) or 0.25)
    assert load.sample(130.0) == 25.0 and asked == [1.5]

    def denied(interval=None):
        raise psutil.AccessDenied(1)

    load.me = SimpleNamespace(cpu_percent=denied)  # the harness's own CPU unreadable: counted as none
    assert load.sample(130.0) == 25.0 and asked == [1.5, 1.3]
    load.others = SimpleNamespace(cores=lambda ours: None)  # no interval measured yet
    assert load.sample(130.0) == 0.0


def test_the_run_keeps_each_sample_rounded_as_the_record_shows_it():
    one = run._Run.__new__(run._Run)
    one.started, one.samples = 10.0, []
    one.sampler = SimpleNamespace(sample=lambda: (12.345, 100.06, 3))
    one.machine = SimpleNamespace(sample=lambda tree_cpu: 7.77 if tree_cpu == 12.345 else -1.0)
    one._sample(11.23456)
    assert one.samples == [[1.235, 12.3, 100.1, 3, 7.8]]


def test_a_survivors_command_line_is_the_live_one_when_it_can_be_read():
    assert run._live_cmdline(Proc(40, line="python -m miniagent.tools.server")) == "python -m miniagent.tools.server"
    assert run._live_cmdline(Proc(41, line=None)) is None


# --------------------------------------------------------------------------- killing what is left


@pytest.fixture
def groups(monkeypatch) -> dict:
    """os.getpgid and signal_group stand-ins over Proc objects: a group kill kills its members; a pid in
    ``vanished`` has no group any more, a group in ``refuse`` cannot be signalled."""
    state = {"members": {}, "vanished": set(), "refuse": set(), "sent": []}

    def getpgid(pid: int) -> int:
        if pid in state["vanished"]:
            raise ProcessLookupError(pid)
        return next(group for group, procs in state["members"].items() if any(p.pid == pid for p in procs))

    def signal_group(pgid: int, sig: int) -> bool:
        state["sent"].append((pgid, sig))
        if pgid in state["refuse"]:
            return False
        for proc in state["members"].get(pgid, []):
            proc.killed = True
        return True

    monkeypatch.setattr(process_tree.os, "getpgid", getpgid)
    monkeypatch.setattr(process_tree, "signal_group", signal_group)
    return state


def test_kill_all_goes_on_past_a_process_already_gone(clock, groups):
    gone, server = Proc(60, gone=True), Proc(61)
    groups["members"][610] = [server]
    groups["vanished"].add(60)
    assert kill_all([gone, server]) is True
    assert server.killed and groups["sent"] == [(610, signal.SIGKILL)] and clock.sleeps == []


def test_kill_all_kills_the_process_itself_when_its_group_cannot_be_signalled(clock, groups):
    stray = Proc(62)
    groups["members"][620] = [stray]
    groups["refuse"].add(620)
    assert kill_all([stray]) is True and stray.killed


def test_kill_all_ignores_a_process_that_exits_while_it_is_killed(clock, groups):
    late = Proc(63, gone=True)  # its group was found a moment ago; it was gone before the kill
    groups["members"][630] = [late]
    groups["refuse"].add(630)
    assert kill_all([late]) is True


def test_kill_all_returns_as_soon_as_the_last_one_is_gone(clock, groups):
    slow = Proc(64, dies_at=clock.now + 0.3, clock=clock)
    groups["members"][640] = [slow]
    groups["refuse"].add(640)
    slow.kill = lambda: None  # the SIGKILL lands, the process is reaped 0.3 s later
    assert kill_all([slow]) is True
    assert clock.now - 1000.0 < 0.32


def test_kill_all_says_false_when_something_outlives_its_bound(clock, groups):
    immortal = Proc(65)
    immortal.kill = lambda: None
    groups["members"][650] = [immortal]
    groups["refuse"].add(650)
    assert kill_all([immortal]) is False
    assert 1.0 <= clock.now - 1000.0 < 1.02



# --------------------------------------------------------------------------- finding the tree


class Table:
    """A process table stand-in for psutil.Process, psutil.process_iter and os.getsid: each process has a
    parent and a session; a gone one is in no listing."""

    def __init__(self) -> None:
        self.procs: dict[int, Proc] = {}

    def add(self, pid: int, parent: int | None, sid: int, **kw) -> Proc:
        proc = Proc(pid, line=f"prog{pid}", **kw)
        proc.parent, proc.sid = parent, sid
        proc.create_time = lambda: 500.0 + pid
        proc.children = lambda recursive=False: self.children(pid, recursive)
        self.procs[pid] = proc
        return proc

    def children(self, pid: int, recursive: bool) -> list[Proc]:
        direct = [p for p in self.procs.values() if p.parent == pid and not p.gone]
        return direct + [g for c in direct for g in self.children(c.pid, True)] if recursive is True else direct

    def Process(self, pid: int) -> Proc:
        if pid not in self.procs or self.procs[pid].gone:
            raise psutil.NoSuchProcess(pid)
        return self.procs[pid]

    def process_iter(self) -> list[Proc]:
        return [p for p in self.procs.values() if not p.gone]

    def getsid(self, pid: int) -> int:
        if self.procs[pid].sid is None:
            raise ProcessLookupError(pid)
        return self.procs[pid].sid


@pytest.fixture
def table(monkeypatch) -> Table:
    fake = Table()
    monkeypatch.setattr(process_tree, "psutil", SimpleNamespace(
        Process=fake.Process, process_iter=fake.process_iter, Error=psutil.Error, STATUS_ZOMBIE=psutil.STATUS_ZOMBIE))
    monkeypatch.setattr(process_tree.os, "getsid", fake.getsid)
    return fake


def entry(pid: int) -> dict:
    return {"pid": pid, "cmdline": f"prog{pid}", "create_time": 500.0 + pid}


def test_the_sampler_finds_every_descendant_and_the_orphans_of_the_session(table):
    """Root 100 (a session of its own) -> 101 (the server, a session of its own) -> 102 (found only as a
    descendant); 103 lost its parent but kept the session; 104 belongs to another session; 105 vanished before
    it could be asked; 106 died while it was being primed."""
    table.add(100, None, 100)
    table.add(101, 100, 101)
    table.add(102, 101, 101)
    table.add(104, None, 7)
    table.add(105, None, None)
    table.add(106, 100, 100).cpu_percent = lambda interval=None: (_ for _ in ()).throw(psutil.NoSuchProcess(106))
    table.add(103, None, 100)
    sampler = TreeSampler(100)
    assert sampler.seen == {pid: entry(pid) for pid in (100, 101, 102, 103)}
    assert list(sampler.procs) == [100, 101, 102, 103]
    table.add(107, 102, 100)  # born since: found by the next discovery, the others kept as they were
    sampler.discover()
    assert list(sampler.seen) == [100, 101, 102, 103, 107] and sampler.seen[107] == entry(107)


def test_a_root_that_is_gone_leaves_its_session_to_be_found(table):
    table.add(110, None, 110, gone=True)
    table.add(111, None, 110)
    assert list(TreeSampler(110).seen) == [111]


def test_alive_is_what_still_runs_and_what_those_started_since(table):
    """The server (120) left the session and its parent: it is found only because it was seen. What it started
    since (121 -> 122) is found through it, and named in ``seen``; what died (123) is not alive."""
    server = table.add(120, None, 120)
    stray = table.add(123, None, 123)
    locked = table.add(124, None, 124)
    sampler = sampler_of(server, stray, locked)
    sampler.seen = {pid: {"pid": pid, "cmdline": "as first seen", "create_time": 1.0} for pid in (120, 123, 124)}
    table.add(121, 120, 120)
    table.add(122, 121, 120)
    table.add(125, 120, 120).create_time = lambda: (_ for _ in ()).throw(psutil.AccessDenied(125))
    stray.gone = True
    locked.children = lambda recursive=False: (_ for _ in ()).throw(psutil.AccessDenied(124))
    assert [p.pid for p in sampler.alive()] == [120, 121, 125, 122, 124]
    assert sampler.seen[120]["cmdline"] == "as first seen"  # known ones are not read again
    assert sampler.seen[121] == entry(121) and sampler.seen[122] == entry(122) and 125 not in sampler.seen


def test_find_survivors_names_what_exited_meanwhile_and_when(clock):
    """Polled every 20 ms until ``settle``: 131 exits after two polls, 132 (never seen before) after three, 130
    outlives the settle time. ``outlived_s`` counts from ``since``, when the agent was gone."""
    a, b, c = Proc(130), Proc(131), Proc(132)
    polls = iter([[a, b, c], [a, b, c], [a, b, c], [a, c], [a]] + [[a]] * 100)
    sampler = SimpleNamespace(alive=lambda: next(polls), seen={130: entry(130), 131: entry(131)})
    left, outlived = process_tree.find_survivors(sampler, settle=0.1, since=clock.now - 0.5004)
    assert left == [a]
    assert outlived == [{"pid": 131, "cmdline": "prog131", "outlived_s": 0.54},
                        {"pid": 132, "cmdline": "?", "outlived_s": 0.56}]  # to the millisecond
    assert 0.1 <= clock.now - 1000.0 < 0.13 and set(clock.sleeps) == {0.02}


def test_find_survivors_stops_as_soon_as_nothing_is_left(clock):
    a = Proc(140)
    polls = iter([[a], [a], []])
    left, outlived = process_tree.find_survivors(SimpleNamespace(alive=lambda: next(polls), seen={}), settle=5.0,
                                                 since=clock.now)
    assert left == [] and outlived == [{"pid": 140, "cmdline": "?", "outlived_s": 0.02}]
    assert clock.sleeps == [0.02]


# --------------------------------------------------------------------------- the figures the record keeps


def record() -> run.RunRecord:
    return run.RunRecord(command=["python", "-m", "miniagent"], timeout=5.0)


def test_the_cpu_figures_count_only_samples_wholly_inside_the_loop():
    """Samples are [t, cpu %, rss MB, live processes, other programs %]; the loop started at 1.0 s. The 150 %
    at 1.0 s covers the imports (0.5 -> 1.0), so it counts in the total only."""
    samples = [[0.5, 180.0, 50.0, 1, 10.0], [1.0, 150.0, 80.0, 2, 20.0], [1.5, 5.0, 90.0, 2, 70.0],
               [2.0, 15.26, 85.5, 2, 90.56]]
    rec = record()
    run._fill_cpu(rec, samples, loop_start=1.0)
    assert rec.samples is samples and rec.cpu_loop_samples == 2
    assert (rec.cpu_mean, rec.cpu_max, rec.cpu_mean_total, rec.rss_max_mb) == (10.1, 15.3, 87.6, 90.0)
    assert (rec.other_cpu_mean, rec.other_cpu_max, rec.machine_busy) == (47.6, 90.6, False)
    run._fill_cpu(rec, [[0.5, 30.0, 1.0, 1, 50.0]], loop_start=None)  # no loop seen: the whole run counts
    assert (rec.cpu_loop_samples, rec.cpu_mean, rec.cpu_max, rec.other_cpu_mean, rec.machine_busy) == \
        (0, 30.0, 30.0, 50.0, True)


def test_no_samples_leave_the_cpu_figures_unset_and_old_samples_without_others_leave_the_machine_alone():
    rec, before = record(), record()
    run._fill_cpu(rec, [], loop_start=0.0)
    assert rec == before
    run._fill_cpu(rec, [[0.1, 1.04, 2.06, 1], [0.2, 3.0, 1.0, 1]], loop_start=None)
    assert (rec.cpu_mean, rec.rss_max_mb) == (2.0, 2.1)
    assert (rec.other_cpu_mean, rec.other_cpu_max, rec.machine_busy) == \
        (before.other_cpu_mean, before.other_cpu_max, before.machine_busy)


@pytest.mark.parametrize("timed_out, interrupted, exit_code, stop, outcome", [
    (False, True, 0, "answered", "interrupted"),  # Ctrl-C wins over everything
    (True, False, -9, "answered", "timeout"),  # killed at the deadline, even after its stop event
    (False, False, -11, "answered", "crash"),  # a signal nobody in the lab sent
    (False, False, 0, "answered", "answer"),
    (False, False, 0, "stuck", "fallback"),
    (False, False, 1, None, "crash"),  # ended without saying how
])
def test_the_outcome_is_decided_in_order(timed_out, interrupted, exit_code, stop, outcome):
    progress = run.Progress()
    progress.stop = {"stop_reason": stop, "answer": "trace", "final_answer": "trace final"} if stop else None
    rec = record()
    rec.exit_code = exit_code
    run._fill_outcome(rec, progress, None, timed_out=timed_out, interrupted=interrupted)
    assert rec.outcome == outcome
    assert rec.signal == ("SIGSEGV" if outcome == "crash" and exit_code == -11 else None)
    assert (rec.stop_reason, rec.answer, rec.final_answer) == \
        ((stop, "trace", "trace final") if stop else (None, None, None))


def test_what_the_agent_printed_wins_over_its_trace():
    progress = run.Progress()
    progress.stop = {"stop_reason": "stuck", "answer": "from the trace", "final_answer": "x"}
    rec = record()
    rec.exit_code = 0
    run._fill_outcome(rec, progress, {"stop_reason": "answered", "answer": "printed", "final_answer": ""},
                      timed_out=False, interrupted=False)
    assert (rec.outcome, rec.stop_reason, rec.answer, rec.final_answer) == ("answer", "answered", "printed", "")


def test_the_counts_come_from_the_trace_as_it_was_read():
    progress = run.Progress()
    call = {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}}
    for event in ({"event": "run_start"}, {"event": "model_action", "turn": 1, "text": "call"}, call,
                  {"event": "tool_error", "tool": "conjugate"}, {"event": "model_action", "turn": 2, "text": "again"},
                  call, {"event": "tool_call", "tool": "list_tenses", "args": {}}):
        progress.add(event, 0.1234567)
    rec = record()
    run._fill_from_trace(rec, progress)
    assert (rec.turns, rec.tool_calls, rec.tool_calls_by_tool) == (2, 3, {"conjugate": 2, "list_tenses": 1})
    assert (rec.identical_calls, rec.tool_errors, rec.last_action) == (1, 1, "again")
    assert rec.loop_start_s == 0.123 and len(rec.scratchpad_tail) == 7 and rec.scratchpad_tail == list(progress.tail)
    assert record().loop_start_s is None


# --------------------------------------------------------------------------- the clean-up's own guards


@pytest.fixture
def own_sigint():
    """A SIGINT handler of the test's own for the test's length, whatever the suite was started with (a job
    started in the background runs with SIGINT ignored): the one the clean-up must leave, or give back."""
    def mine(signum, frame):  # pragma: no cover - never called
        raise AssertionError

    before = signal.signal(signal.SIGINT, mine)
    try:
        yield mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_during_the_clean_up_is_ignored_and_the_handler_comes_back_after_it(own_sigint):
    with pytest.raises(RuntimeError), process_tree.sigint_ignored():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        raise RuntimeError("the block fails: the handler still comes back")
    assert signal.getsignal(signal.SIGINT) is own_sigint


def test_outside_the_main_thread_the_clean_up_runs_and_leaves_the_handler_alone(own_sigint):
    import threading

    seen: list = []

    def clean_up() -> None:  # signal.signal() would raise ValueError here: only the main thread may set it
        with process_tree.sigint_ignored():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=clean_up)
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and seen == [own_sigint]


def test_a_spinning_core_spins_until_the_block_ends_then_is_killed_and_reaped():
    with process_tree.spinning_core() as spinner:
        proc = psutil.Process(spinner.pid)
        # waits on the event itself: the spinner has burnt a tenth of a second of CPU (one that exits early fails)
        while sum(proc.cpu_times()[:2]) < 0.1:
            assert spinner.poll() is None, "the spinner exited instead of spinning"
            time.sleep(0.01)
    assert spinner.returncode == -signal.SIGKILL  # killed and waited for: no zombie, no orphan
