"""The harness's own loop, rule by rule: when it samples, how long it sleeps, what the live panel is told,
when a run counts as ended by itself, what ``stop`` hands on, and what is read back from the agent's output.

The end-to-end runs (test_harness.py) start real agents on a real clock, so a sample a tick late or a panel
told the wrong status go unnoticed there. Here a stand-in clock, agent, trace and panel make every tick
exact: found by mutation testing on 16 cores, where 66 of the 165 changes to ``run.py`` it tested survived.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import SleepingClock

from miniagent.lab.harness import crash, run
from miniagent.lab.harness.deadline import Deadline
from miniagent.lab.harness.record import RunRecord
from miniagent.processes import usable_cores


class Agent:
    """A subprocess.Popen stand-in that runs for a number of polls, then exits with ``code``."""

    def __init__(self, polls: int, code: int = 0) -> None:
        self.polls, self.code, self.returncode = polls, code, None

    def poll(self) -> int | None:
        if self.polls > 0:
            self.polls -= 1
            return None
        self.returncode = self.code
        return self.code


class Trace:
    """A TraceFollower stand-in: the events each poll finds, then the last ones ``finish`` reads."""

    def __init__(self, batches: list[list[dict]] | None = None, last: list[dict] | None = None,
                 interrupt_at: int | None = None) -> None:
        self.batches, self.last, self.interrupt_at = list(batches or []), list(last or []), interrupt_at
        self.polled = 0
        self.bad_lines = 3

    def poll(self) -> list[dict]:
        self.polled += 1
        if self.polled == self.interrupt_at:
            raise KeyboardInterrupt
        return self.batches.pop(0) if self.batches else []

    def finish(self) -> list[dict]:
        return self.last


class Panel:
    """A LiveView stand-in that keeps every frame it was asked to draw."""

    def __init__(self) -> None:
        self.frames: list[dict] = []

    def update(self, **state) -> None:
        self.frames.append(state)


class Sampler:
    """A TreeSampler stand-in: a fixed sample, the processes it saw."""

    def __init__(self) -> None:
        self.seen = {7: {"pid": 7, "cmdline": "python -m miniagent ask"},
                     8: {"pid": 8, "cmdline": "python -m miniagent.tools.server"}}
        self.discovered = 0

    def sample(self) -> tuple[float, float, int]:
        return 50.0, 64.0, 2

    def discover(self) -> None:
        self.discovered += 1


class Machine:
    def sample(self, cpu: float) -> float:
        return 12.5


@pytest.fixture
def clock(monkeypatch) -> SleepingClock:
    fake = SleepingClock(1024.0)  # every tick below is a power of two: sums stay exact
    monkeypatch.setattr(run, "time", fake)
    monkeypatch.setattr(run, "MachineLoad", Machine)
    monkeypatch.setattr(run, "TICK", 0.25)
    return fake


def harness(trace: Trace, *, timeout: float = 100.0, interval: float = 0.5, needs: dict | None = None,
            clock: str = "launch") -> run._Run:
    """A _Run as run_experiment sets it up, on the stand-ins."""
    lived = run._Run(trace, Panel(), timeout, interval)
    lived.deadline = Deadline(lived.started, timeout, clock, needs or {}, None)
    lived.sampler = Sampler()
    return lived


def turn(n: int) -> dict:
    return {"event": "model_action", "turn": n, "text": "{}"}


# --------------------------------------------------------------------------- watch


def test_samples_fall_on_every_interval_from_the_launch_and_not_before(clock):
    """Ticks of 0.25 s, samples every 0.5 s: the first at 0.5 s exactly (not at 0 nor a tick late), then 1.0, 1.5."""
    lived = harness(Trace())
    lived.watch(Agent(polls=7))  # alive at 0, 0.25, ..., 1.5; gone at 1.75
    assert [s[0] for s in lived.samples] == [0.5, 1.0, 1.5]
    assert lived.samples[0] == [0.5, 50.0, 64.0, 2, 12.5]


def test_the_sleep_between_ticks_is_cut_short_by_the_deadline(clock):
    """A 0.625 s timeout, 0.25 s ticks: two whole ticks, then 0.125 s to the deadline, where the kill falls due."""
    lived = harness(Trace(), timeout=0.625)
    lived.watch(Agent(polls=100))
    assert clock.sleeps == [0.25, 0.25, 0.125]
    assert lived.timed_out is True and lived.exited_at is None
    assert lived.deadline.due == 1024.625


def test_a_run_that_ends_by_itself_is_stamped_when_the_harness_saw_it_gone(clock):
    lived = harness(Trace())
    lived.watch(Agent(polls=3))
    assert lived.exited_at == 1024.75 and lived.timed_out is False and lived.interrupted is False


def test_ctrl_c_in_the_watch_is_remembered_not_raised(clock):
    lived = harness(Trace(interrupt_at=2))
    lived.watch(Agent(polls=100))
    assert lived.interrupted is True and lived.exited_at is None and lived.timed_out is False


def test_the_events_of_each_poll_are_stamped_with_the_tick_that_read_them(clock):
    lived = harness(Trace(batches=[[], [turn(1)], [], [turn(2)]]))
    lived.watch(Agent(polls=5))
    assert lived.progress.first_event_at == 0.25 and lived.progress.turns == 2


# --------------------------------------------------------------------------- the live panel


def test_every_tick_draws_the_panel_with_the_runs_state(clock):
    lived = harness(Trace(batches=[[turn(1)]]), timeout=10.0, needs={"turns": 2})
    lived.watch(Agent(polls=3))
    assert len(lived.view.frames) == 3
    frame = lived.view.frames[-1]
    assert frame == {"elapsed": 0.5, "timeout": 10.0, "progress": lived.progress, "samples": lived.samples,
                     "status": "running", "counted": 0.5, "clock": "counted from launch; needs turns 1/2"}
    assert frame["progress"] is lived.progress and frame["samples"] is lived.samples


def test_the_panels_clock_line_and_counted_time_are_the_deadlines(clock):
    """On the loop's clock nothing is counted before the first event; the panel says so."""
    lived = harness(Trace(), clock="loop")
    lived._show(clock.now + 2.0)
    frame = lived.view.frames[-1]
    assert frame["elapsed"] == 2.0 and frame["counted"] == 0.0 and frame["status"] == "running"
    assert frame["clock"].startswith("waiting for the loop to start")


@pytest.mark.parametrize("interrupted, timed_out, status", [
    (True, True, "interrupted"), (False, True, "killed at the timeout"), (False, False, "finished")])
def test_the_last_frame_says_how_the_run_ended(clock, interrupted, timed_out, status):
    lived = harness(Trace())
    lived.interrupted, lived.timed_out = interrupted, timed_out
    clock.now += 3.0
    lived.collect()
    assert lived.ended == 1027.0
    assert lived.view.frames[-1]["status"] == status and lived.view.frames[-1]["elapsed"] == 3.0


def test_the_last_events_are_stamped_when_the_run_ended(clock):
    lived = harness(Trace(last=[turn(1)]))
    clock.now += 2.5
    lived.collect()
    assert lived.progress.first_event_at == 2.5 and lived.progress.turns == 1


# --------------------------------------------------------------------------- stop


@pytest.fixture
def stopping(monkeypatch):
    """stop()'s helpers replaced: what it asked of them is kept."""
    asked: dict = {"kill_all": []}

    def find_survivors(sampler, settle, since):
        asked["since"], asked["settle"] = since, settle
        return asked.get("survivors", []), asked.get("outlived", [])

    def kill_all(procs):
        asked["kill_all"].append(list(procs))
        return not procs  # as the real one: nothing to kill is done at once; these ones it could not kill

    def stop_group(proc, grace):
        asked["grace"] = grace
        run.time.now += grace
        return run.time.now

    monkeypatch.setattr(run, "find_survivors", find_survivors)
    monkeypatch.setattr(run, "kill_all", kill_all)
    monkeypatch.setattr(run, "stop_group", stop_group)
    monkeypatch.setattr(run, "_live_cmdline", lambda proc: asked.get("live", {}).get(proc.pid))
    return asked


class Survivor:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def test_an_agent_still_running_is_killed_and_survivors_are_counted_from_the_kill(clock, stopping):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0)
    clock.now += 5.0
    lived.stop(Agent(polls=100), record, grace=0.25, settle=0.75)
    assert lived.sampler.discovered == 1 and stopping["grace"] == 0.25
    assert lived.killed_at == 1029.25 and stopping["since"] == 1029.25 and stopping["settle"] == 0.75


def test_an_agent_that_exited_just_as_the_deadline_came_ended_by_itself(clock, stopping):
    """The deadline fell due, but the process was already gone: not a timeout, and it ended now."""
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0)
    lived.timed_out = True
    clock.now += 2.0
    lived.stop(Agent(polls=0), record, grace=0.25, settle=0.75)
    assert lived.timed_out is False and lived.exited_at == 1026.0 and stopping["since"] == 1026.0
    assert lived.killed_at is None and "grace" not in stopping


def test_an_agent_seen_exiting_keeps_its_exit_time(clock, stopping):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0)
    lived.exited_at = 1025.0
    clock.now += 2.0
    lived.stop(Agent(polls=0), record, grace=0.25, settle=0.75)
    assert lived.exited_at == 1025.0 and stopping["since"] == 1025.0


def test_a_survivor_is_named_by_its_live_command_line_else_as_seen_else_unknown(clock, stopping):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0)
    stopping["survivors"] = [Survivor(8), Survivor(99)]
    lived.stop(Agent(polls=0), record, grace=0.25, settle=0.75)
    assert record.processes_left == [{"pid": 8, "cmdline": "python -m miniagent.tools.server"},
                                     {"pid": 99, "cmdline": "?"}]
    assert record.cleanup_ok is False and [[p.pid for p in ps] for ps in stopping["kill_all"]] == [[8, 99]]
    stopping["live"] = {8: "python -m miniagent.tools.server --exec'd", 99: "sleep 60"}
    lived.stop(Agent(polls=0), record, grace=0.25, settle=0.75)
    assert [p["cmdline"] for p in record.processes_left] == ["python -m miniagent.tools.server --exec'd", "sleep 60"]


def test_nothing_left_is_a_clean_cleanup(clock, stopping):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0)
    lived.stop(Agent(polls=0), record, grace=0.25, settle=0.75)
    assert record.processes_left == [] and record.cleanup_ok is True


# --------------------------------------------------------------------------- what the run left


def test_fill_reads_the_agents_last_printed_line_and_the_traces_counts(clock):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0, exit_code=0)
    lived.progress.add({"event": "stop", "stop_reason": "max_turns"}, 0.5)
    lived.fill(record, 'log line\n{"stop_reason": "answered", "answer": "she went"}\n\n', "a\nb\n")
    assert (record.outcome, record.stop_reason, record.answer) == ("answer", "answered", "she went")
    assert record.stderr_tail == ["a", "b"] and record.bad_trace_lines == 3
    assert record.pids_seen == list(lived.sampler.seen.values())


@pytest.mark.parametrize("stdout", ["{}\n[1, 2]\n", '{"stop_reason": "answered"}\nnot json\n', ""])
def test_a_last_line_that_is_not_a_json_object_leaves_the_trace_to_speak(clock, stdout):
    lived, record = harness(Trace()), RunRecord(command=["x"], timeout=1.0, exit_code=0)
    lived.progress.add({"event": "stop", "stop_reason": "max_turns"}, 0.5)
    lived.fill(record, stdout, "")
    assert (record.outcome, record.stop_reason) == ("fallback", "max_turns")


def test_the_last_json_line_is_the_last_line_with_text():
    assert run._last_json_line('{"a": 1}\n{"b": 2}\n  \n\n') == {"b": 2}
    assert run._last_json_line('{"a": 1}\n"text"\n') is None
    assert run._last_json_line("\n\n") is None


def test_the_output_is_read_from_its_first_byte_and_bad_bytes_do_not_stop_it():
    with tempfile.TemporaryFile() as out:
        out.write(b"Traceback\n\xff\xfeend")
        assert run._read(out) == "Traceback\n\ufffd\ufffdend"


def test_the_times_of_a_run_killed_after_waiting_for_its_needs(clock):
    """Timeout 0.5 s, but the run needed 2 turns, reached at 1.25 s; the kill landed 0.125 s after it fell due."""
    lived = harness(Trace(batches=[[turn(1)], [], [], [], [], [turn(2)]]), timeout=0.5, needs={"turns": 2})
    lived.watch(Agent(polls=100))
    assert lived.timed_out and lived.deadline.due == 1025.25
    assert clock.sleeps == [0.25] * 5  # past the timeout, still a tick at a time: the harness does not spin
    lived.killed_at = 1025.375
    record = RunRecord(command=["x"], timeout=0.5, needs={"turns": 2})
    lived._fill_times(record)
    assert (record.wall_s, record.kill_latency_s, record.deadline_s, record.waited_for_needs_s) == (
        1.375, 0.125, 1.25, 0.75)
    assert (record.hard_cap_s, record.hard_capped, record.needs_met) == (60.0, False, True)


def test_the_times_of_a_run_that_hit_the_hard_cap_without_its_needs(clock):
    lived = harness(Trace(), timeout=0.5, needs={"tool_calls": 1})
    lived.deadline.hard_cap = 1.0
    lived.watch(Agent(polls=100))
    lived.killed_at = 1025.25
    record = RunRecord(command=["x"], timeout=0.5, needs={"tool_calls": 1})
    lived._fill_times(record)
    assert (record.wall_s, record.kill_latency_s, record.deadline_s, record.waited_for_needs_s) == (
        1.25, 0.25, 1.0, 0.5)
    assert (record.hard_cap_s, record.hard_capped, record.needs_met) == (1.0, True, False)


def test_a_run_that_ended_by_itself_has_a_wall_time_and_no_kill_figures(clock):
    lived = harness(Trace(), timeout=10.0)
    lived.watch(Agent(polls=2))
    clock.now += 5.0
    lived.collect()
    record = RunRecord(command=["x"], timeout=10.0)
    lived._fill_times(record)
    assert record.wall_s == 0.5 and record.kill_latency_s is None and record.deadline_s is None
    assert record.waited_for_needs_s == 0.0 and record.needs_met is None and record.hard_capped is False
    lived.exited_at = None  # neither killed nor seen exiting (a harness error): the run lasted until collect
    lived._fill_times(record)
    assert record.wall_s == 5.5


def test_a_deadline_that_did_not_wait_for_needs_records_no_wait(clock):
    lived = harness(Trace(batches=[[turn(1)]]), timeout=0.5, needs={"turns": 1})
    lived.watch(Agent(polls=100))
    lived.killed_at = lived.deadline.due
    record = RunRecord(command=["x"], timeout=0.5, needs={"turns": 1})
    lived._fill_times(record)
    assert (record.deadline_s, record.kill_latency_s, record.waited_for_needs_s) == (0.5, 0.0, 0.0)


def test_a_timed_out_run_that_was_not_killed_has_no_kill_latency(clock):
    lived = harness(Trace(), timeout=0.5)
    lived.watch(Agent(polls=100))
    record = RunRecord(command=["x"], timeout=0.5)
    lived._fill_times(record)
    assert record.kill_latency_s is None and record.deadline_s is None


def test_the_times_keep_three_decimals(clock):
    lived = harness(Trace(), timeout=0.5, needs={"turns": 1})
    lived.timed_out, lived.killed_at, lived.deadline.due = True, 1024 + 2.123456, 1024 + 2.0004
    record = RunRecord(command=["x"], timeout=0.5, needs={"turns": 1})
    lived._fill_times(record)
    assert (record.wall_s, record.kill_latency_s, record.deadline_s, record.waited_for_needs_s) == (
        2.123, 0.123, 2.0, 1.5)


def test_on_the_loops_clock_a_hard_cap_before_any_event_waited_for_nothing(clock):
    lived = harness(Trace(), timeout=0.5, clock="loop")
    lived.deadline.hard_cap = 0.75
    lived.watch(Agent(polls=100))
    lived.killed_at = 1024.75
    lived.collect()
    record = RunRecord(command=["x"], timeout=0.5, clock="loop")
    lived._fill_times(record)
    assert (record.hard_capped, record.deadline_s, record.waited_for_needs_s) == (True, 0.75, 0.0)


def test_on_the_loops_clock_events_read_only_at_the_end_still_date_the_wait(clock):
    """Hard-capped at 2 s; the loop's first event is read once the agent is gone (at 2 s): its timeout would
    have fallen due at 2.5 s, later than the cap, so the run waited for nothing."""
    lived = harness(Trace(last=[turn(1)]), timeout=0.5, clock="loop")
    lived.deadline.hard_cap = 2.0
    lived.watch(Agent(polls=100))
    lived.killed_at = 1026.0
    lived.collect()
    record = RunRecord(command=["x"], timeout=0.5, clock="loop")
    lived._fill_times(record)
    assert lived.deadline.plain(lived.progress) == 1026.5
    assert (record.hard_capped, record.deadline_s, record.waited_for_needs_s) == (True, 2.0, 0.0)


def test_fill_hands_on_the_loops_start_the_crash_report_and_the_load(clock, monkeypatch):
    monkeypatch.setattr(run, "load_average", lambda: 1.75)
    lived = harness(Trace())
    lived.samples = [[0.5, 100.0, 64.0, 2, 0.0], [1.0, 10.0, 64.0, 2, 0.0], [1.5, 10.0, 64.0, 2, 0.0]]
    lived.progress.add(turn(1), 0.5)
    lived.interrupted = True
    record = RunRecord(command=["x"], timeout=1.0, exit_code=-11)
    stderr = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x01 (most recent call first):\n  File x\n"
    lived.fill(record, "", stderr)
    assert record.cpu_mean == 10.0 and record.cpu_mean_total == 40.0  # the loop began at 0.5 s
    assert record.fatal_error == crash.fatal_error(stderr.splitlines()) and record.fatal_error
    assert record.load_avg_end == 1.75 and record.outcome == "interrupted"


def test_a_fresh_run_has_nothing_sampled_nor_ended(clock):
    lived = run._Run(Trace(), Panel(), 3.0, 0.5)
    assert (lived.started, lived.ended, lived.timeout, lived.sample_interval) == (1024.0, 1024.0, 3.0, 0.5)
    assert lived.samples == [] and lived.progress.turns == 0 and isinstance(lived.machine, Machine)
    assert lived.interrupted is False and lived.timed_out is False
    assert lived.killed_at is None and lived.exited_at is None


# --------------------------------------------------------------------------- the command it runs


@pytest.mark.parametrize("command, ours", [
    (["python", "-m", "miniagent", "ask", "q"], True), ([".venv/bin/miniagent", "ask"], True),
    (["miniagent"], True), (["python", "-m", "miniagent.lab.harness"], False),
    (["python", "-c", "print('miniagent')"], False), (["/opt/notminiagent"], False), ([], False)])
def test_a_miniagent_command_is_named_by_a_whole_argument(command, ours):
    assert run.is_miniagent(command) is ours


def test_a_miniagent_ask_gets_the_trace_and_json_flags_the_harness_reads(tmp_path):
    trace = tmp_path / "t.jsonl"
    assert run._with_trace_flags(["miniagent", "ask", "q"], trace) == [
        "miniagent", "ask", "q", "--trace", str(trace), "--json"]
    assert run._with_trace_flags(["miniagent", "ask", "q", "--json", "--trace", str(trace)], trace) == [
        "miniagent", "ask", "q", "--json", "--trace", str(trace)]
    assert run._with_trace_flags(["miniagent", "eval"], trace) == ["miniagent", "eval", "--trace", str(trace)]
    other = ["python", "-c", "pass"]
    assert run._with_trace_flags(other, trace) == other and run._with_trace_flags(other, trace) is not other


def test_a_trace_flag_naming_another_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--trace must be trace_path \(.*t\.jsonl\)"):
        run._with_trace_flags(["miniagent", "ask", "--trace", str(tmp_path / "other.jsonl")], tmp_path / "t.jsonl")


# --------------------------------------------------------------------------- run_experiment, on small real processes

# A stand-in for the agent's command: named miniagent, so the harness adds its flags; it writes one turn to the
# trace it is given, prints what it sees (stdin, environment, folder, session) as its JSON line, and exits 3.
FAKE_AGENT = """\
import json, os, sys
args = sys.argv[1:]
trace = args[args.index("--trace") + 1]
with open(trace, "a") as f:
    f.write(json.dumps({"event": "model_action", "turn": 1, "text": "{}"}) + "\\n")
sys.stderr.write("a warning\\n")
print(json.dumps({"stop_reason": "answered", "answer": json.dumps({
    "args": args, "stdin": sys.stdin.read(), "x": os.environ.get("LAB_X"), "path": "PATH" in os.environ,
    "cwd": os.getcwd(), "own_session": os.getsid(0) == os.getpid()})}))
sys.exit(3)
"""


@pytest.fixture
def fake_agent(tmp_path):
    script = tmp_path / "bin" / "miniagent"
    script.parent.mkdir()
    script.write_text(FAKE_AGENT)
    return [sys.executable, str(script)]


@pytest.fixture
def typed_stdin():
    """The harness's own stdin has text waiting (a learner typing in its terminal) for the length of a test."""
    read, write = os.pipe()
    os.write(write, b"typed by the learner\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    os.close(read)
    yield
    os.dup2(saved, 0)
    os.close(saved)


def test_a_run_hands_the_agent_its_flags_environment_folder_and_own_session(tmp_path, fake_agent, monkeypatch,
                                                                          typed_stdin):
    """Not the harness's stdin: the agent must not read (or wait on) what the learner types in the terminal."""
    monkeypatch.setattr(run, "load_average", lambda: 0.75)
    trace = tmp_path / "new" / "deeper" / "t.jsonl"
    record = run.run_experiment([*fake_agent, "ask", "q"], timeout=30.0, trace_path=trace, env={"LAB_X": "on"},
                                cwd=tmp_path / "bin", live=False, settle=0.1)
    seen = json.loads(record.answer)
    assert seen == {"args": ["ask", "q", "--trace", str(trace), "--json"], "stdin": "", "x": "on", "path": True,
                    "cwd": str(tmp_path / "bin"), "own_session": True}
    assert record.command == [*fake_agent, "ask", "q", "--trace", str(trace), "--json"]
    assert (record.exit_code, record.outcome, record.turns, record.stderr_tail) == (3, "answer", 1, ["a warning"])
    assert (record.timeout, record.trace_path, record.clock, record.needs) == (30.0, str(trace), "launch", {})
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", record.started_at)
    assert record.cpus == usable_cores() and record.load_avg_start == 0.75 == record.load_avg_end
    assert record.processes_left == [] and record.cleanup_ok is True and record.kill_latency_s is None


def test_a_run_without_an_environment_of_its_own_gets_the_harnesss(tmp_path, fake_agent, monkeypatch):
    monkeypatch.setenv("LAB_X", "inherited")
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"event": "model_action", "turn": 7, "text": "{}"}) + "\n")  # a run before this one
    record = run.run_experiment([*fake_agent, "ask", "q"], timeout=30.0, trace_path=trace, live=False, settle=0.1,
                                needs={"turns": 1}, clock="loop")
    assert json.loads(record.answer)["x"] == "inherited" and json.loads(record.answer)["cwd"] == os.getcwd()
    assert record.turns == 1 and record.needs == {"turns": 1} and record.needs_met is True and record.clock == "loop"


def test_a_run_past_its_timeout_is_killed_after_the_grace_and_its_survivors_settle(tmp_path, monkeypatch):
    asked = {}
    real_stop, real_find = run.stop_group, run.find_survivors

    def stop_group(proc, grace):
        asked["grace"] = grace
        return real_stop(proc, grace)

    def find_survivors(sampler, settle, since):
        asked["settle"] = settle
        return real_find(sampler, settle, since=since)

    monkeypatch.setattr(run, "stop_group", stop_group)
    monkeypatch.setattr(run, "find_survivors", find_survivors)
    record = run.run_experiment([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.25,
                                trace_path=tmp_path / "t.jsonl", live=False, grace=0.125, settle=0.0625,
                                hard_cap=5.0)
    assert asked == {"grace": 0.125, "settle": 0.0625}
    assert record.outcome == "timeout" and record.exit_code == -15 and record.hard_cap_s == 5.0
    assert record.deadline_s == 0.25 and record.kill_latency_s is not None


def test_by_default_the_harness_samples_kills_and_settles_as_the_breaks_page_says(tmp_path, monkeypatch):
    """"every 0.2 s" and "a second to exit" (docs/breaks/index.md and its Spanish twin); SIGTERM, then SIGKILL
    0.3 s later. The whole run on stand-ins (the agent, its tree, the clock), so the figures are exact."""
    fake, asked = SleepingClock(), {}
    agent = Agent(polls=2**20)
    agent.pid = 4242

    class View(Panel):
        def __init__(self, live, force):
            super().__init__()
            asked["view"] = (live, force)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def stop_group(proc, grace):
        asked["grace"] = grace
        return fake.now

    def find_survivors(sampler, settle, since):
        asked["settle"] = settle
        return [], []

    monkeypatch.setattr(run, "time", fake)
    monkeypatch.setattr(run, "MachineLoad", Machine)
    monkeypatch.setattr(run.subprocess, "Popen", lambda *args, **kwargs: agent)
    monkeypatch.setattr(run, "TreeSampler", lambda pid: Sampler())
    monkeypatch.setattr(run, "LiveView", View)
    monkeypatch.setattr(run, "stop_group", stop_group)
    monkeypatch.setattr(run, "find_survivors", find_survivors)
    record = run.run_experiment(["python", "-c", "pass"], timeout=1.0, trace_path=tmp_path / "t.jsonl")
    times = [s[0] for s in record.samples]
    assert len(times) in (4, 5) and all(abs(t - 0.2 * k) < 0.06 for k, t in enumerate(times, 1))
    assert asked == {"view": (True, False), "grace": 0.3, "settle": 1.0} == {
        "view": (True, False), "grace": 0.3, "settle": run.SETTLE}
    assert record.clock == "launch" and record.outcome == "timeout" and record.deadline_s == 1.0
    root = Path(__file__).parents[3] / "docs" / "breaks"
    assert "every 0.2 s" in (root / "index.md").read_text() and "a\nsecond to exit" in (root / "index.md").read_text()
    assert "cada 0,2 s" in (root / "index.es.md").read_text()


def test_a_forced_live_panel_is_drawn_and_an_unforced_one_stays_off_a_pipe(tmp_path, capsys):
    command = [sys.executable, "-c", "pass"]
    run.run_experiment(command, timeout=30.0, trace_path=tmp_path / "t.jsonl", settle=0.0)
    assert capsys.readouterr().out == ""
    run.run_experiment(command, timeout=30.0, trace_path=tmp_path / "t.jsonl", settle=0.0, force_live=True)
    assert "miniagent run: finished" in capsys.readouterr().out
    run.run_experiment(command, timeout=30.0, trace_path=tmp_path / "t.jsonl", settle=0.0, force_live=True,
                       live=False)
    assert capsys.readouterr().out == ""
