"""``python -m miniagent.lab.harness``: every flag reaches the run, the clock it picks, what it prints, how it
exits. The run itself is a stand-in here (test_harness_watch.py and test_harness.py run real ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from miniagent.lab.harness import __main__ as cli
from miniagent.lab.harness.record import RunRecord, crash_note, deadline_note, machine_note, summary

AGENT = ["python", "-m", "miniagent", "ask", "q"]


@pytest.fixture
def runs(monkeypatch):
    """run_experiment replaced: each call is kept, and the record it returns is ``runs.record``."""

    class Runs(list):
        record = RunRecord(command=AGENT, timeout=10.0, outcome="answer", stop_reason="answered", answer="she went")

    calls = Runs()

    def run_experiment(command, **kwargs):
        calls.append((command, kwargs))
        return calls.record

    monkeypatch.setattr(cli, "run_experiment", run_experiment)
    return calls


def test_every_flag_reaches_the_run(runs):
    assert cli.main(["--timeout", "2.5", "--trace", "t/x.jsonl", "--no-live", "--clock", "launch", "--needs",
                     "tool_calls=1", "--needs", "turns=3", "--hard-cap", "7.5", "--", *AGENT]) == 0
    assert runs == [(AGENT, {"timeout": 2.5, "trace_path": Path("t/x.jsonl"), "live": False, "clock": "launch",
                             "needs": {"tool_calls": 1, "turns": 3}, "hard_cap": 7.5})]


def test_either_clock_can_be_asked_for(runs):
    cli.main(["--clock", "loop", "sleep", "5"])
    cli.main(["--clock", "launch", "--", *AGENT])
    assert [kwargs["clock"] for _, kwargs in runs] == ["loop", "launch"]


def test_the_defaults_and_the_clock_each_command_gets(runs):
    cli.main(["--", *AGENT])
    cli.main(["sleep", "5"])  # no "--": the rest is the command all the same
    assert runs[0] == (AGENT, {"timeout": 10.0, "trace_path": Path("runs/trace.jsonl"), "live": True,
                               "clock": "loop", "needs": {}, "hard_cap": None})
    assert runs[1][0] == ["sleep", "5"] and runs[1][1]["clock"] == "launch"  # it writes no trace to count from


@pytest.mark.parametrize("outcome, code", [("answer", 0), ("fallback", 0), ("timeout", 1), ("crash", 1),
                                           ("interrupted", 1)])
def test_it_exits_0_only_for_a_run_that_ended_by_itself_with_a_stop_reason(runs, outcome, code):
    runs.record = RunRecord(command=AGENT, timeout=1.0, outcome=outcome)
    assert cli.main(["--", *AGENT]) == code


TIMED_OUT_ON_A_BUSY_MACHINE = RunRecord(
    command=AGENT, timeout=1.0, outcome="timeout", clock="loop", loop_start_s=1.5, needs={"tool_calls": 1},
    waited_for_needs_s=2.0, hard_capped=True, hard_cap_s=6.0, machine_busy=True, other_cpu_mean=95.0, cpus=2,
    scratchpad_tail=["turn 1: conjugate", "turn 2: conjugate"])
CRASHED = RunRecord(command=AGENT, timeout=1.0, outcome="crash", signal="SIGSEGV", exit_code=-11,
                    scratchpad_tail=["turn 1: conjugate"])


@pytest.mark.parametrize("record", [TIMED_OUT_ON_A_BUSY_MACHINE, CRASHED])
def test_it_prints_the_summary_the_notes_and_the_scratchpads_tail(runs, capsys, record):
    runs.record = record
    assert cli.main(["--", *AGENT]) == 1
    notes = [*crash_note(record), *(n for n in (deadline_note(record), machine_note(record)) if n)]
    assert len(notes) == (2 if record is TIMED_OUT_ON_A_BUSY_MACHINE else len(crash_note(record))) and notes
    tail = ["    " + line for line in record.scratchpad_tail]
    assert capsys.readouterr().out.splitlines() == [summary(record), *notes, *tail]


def test_out_saves_the_record_and_its_chart_and_says_where(runs, capsys, tmp_path):
    cli.main(["--out", str(tmp_path / "o"), "--", *AGENT])
    saved = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert len(saved) == 2 and {Path(n).suffix for n in saved} == {".json", ".svg"}
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"saved {tmp_path / 'o' / saved[0]} and {tmp_path / 'o' / saved[1]}"


@pytest.mark.parametrize("argv, said", [
    (["--"], "no command given"), ([], "no command given"),
    (["--needs", "tool_calls", "--", *AGENT], "--needs takes COUNTER=N, e.g. tool_calls=1"),
    (["--needs", "tool_calls=one", "--", *AGENT], "--needs takes COUNTER=N, e.g. tool_calls=1"),
    (["--needs", "tool_calls=1=2", "--", *AGENT], "--needs takes COUNTER=N, e.g. tool_calls=1"),
    (["--needs", "tools=1", "--needs", "calls=2", "--", *AGENT],
     "--needs: unknown counter(s) calls, tools; use turns, tool_calls, tool_errors"),
    (["--clock", "wall", "--", *AGENT], "argument --clock: invalid choice: 'wall' (choose from ")])
def test_a_command_line_it_cannot_run_is_refused_with_exit_2_and_the_reason(runs, capsys, argv, said):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and runs == []
    last = capsys.readouterr().err.splitlines()[-1]  # argparse words its list of choices by Python version
    assert last == f"python -m miniagent.lab.harness: error: {said}" or (
        said.endswith("(choose from ") and last.startswith(f"python -m miniagent.lab.harness: error: {said}"))
