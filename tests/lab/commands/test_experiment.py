"""``invoke exp``, ``invoke predict`` and ``invoke tour``, read whole: what a run is given, what is kept of it, and
every line a learner reads after it.

The harness is a stand-in here (``run_experiment`` replaced by a function that records what it was asked and
hands back a record): these tests read the command's own decisions, each figure in its row and each sentence
whole. The real runs, with the harness and an agent, are in ``test_breaks.py`` and ``test_crash.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import printed, screen_console
from rich.console import Console

from miniagent.lab.catalogue import ROOT, find
from miniagent.lab import screen
from miniagent.lab.commands import experiment
from miniagent.lab.harness.record import RunRecord, crash_note
from miniagent.lab.learner import notebook, progress
from miniagent.lab.learner.progress import StateError
from miniagent.lab.patching import agent_command
from miniagent.telemetry.settings import sandbox_env
from miniagent.lab.words import words


@pytest.fixture
def shown(monkeypatch) -> Console:
    return screen_console(monkeypatch, colours=False)


class StandInHarness:
    """``run_experiment`` as the command calls it: what it was given, the sandbox as it was during the run."""

    def __init__(self, record: RunRecord | None = None, trace: str | None = '{"event": "run_start"}\n',
                 fails: bool = False):
        self.record = record or RunRecord(command=[], timeout=0.0, outcome="answer", stop_reason="answer",
                                          answer="She went.", turns=2, tool_calls=1, started_at="2026-11-27T01:02:03")
        self.trace, self.fails = trace, fails
        self.calls: list[tuple[list[str], dict]] = []
        self.sandbox: Path | None = None

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs))
        self.sandbox = Path(kwargs["cwd"])
        assert (self.sandbox / "src" / "miniagent" / "agent" / "loop.py").is_file(), "the run needs its copy"
        if self.trace is not None:
            (self.sandbox / "trace.jsonl").write_text(self.trace, encoding="utf-8")
        if self.fails:
            raise RuntimeError("the harness failed")
        return self.record


@pytest.fixture
def harness(monkeypatch) -> StandInHarness:
    stand_in = StandInHarness()
    monkeypatch.setattr(experiment, "run_experiment", stand_in)
    return stand_in


# --- what a run is given ------------------------------------------------------------------------------------

def test_a_break_runs_with_its_own_question_timeout_model_and_flags(harness, shown, tmp_path):
    brk = find("no-dedup")
    record = experiment.exp("no-dedup", live=False, runs_dir=tmp_path, model_flags=["--decode", "greedy"])
    assert record is harness.record
    [(command, kwargs)] = harness.calls
    sandbox = harness.sandbox
    assert command == agent_command(brk.input, sandbox / "trace.jsonl", llm=brk.llm,
                                    flags=[*brk.flags, "--decode", "greedy"])
    assert kwargs == {"timeout": brk.timeout_s, "trace_path": sandbox / "trace.jsonl",
                      "env": {"PYTHONPATH": str(sandbox / "src"), **sandbox_env(ROOT)}, "cwd": sandbox, "live": False,
                      "clock": "loop",
                      "needs": brk.needs, "hard_cap": None}
    assert not sandbox.exists(), "the source copy outlived its run"


def test_a_file_the_learner_names_is_found_from_where_they_typed_not_in_the_sandbox(harness, shown, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path, model_flags=[
        "--traces-file", "mine.jsonl", "--model", "models/other.gguf", "--decode", "greedy", "--cache-dir", "c"])
    [(command, _kwargs)] = harness.calls
    assert command[-8:] == ["--traces-file", str(tmp_path / "mine.jsonl"),
                            "--model", str(tmp_path / "models/other.gguf"),
                            "--decode", "greedy", "--cache-dir", str(tmp_path / "c")]
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path, model_flags=["--cache-dir", ""])
    assert harness.calls[1][0][-2:] == ["--cache-dir", ""], "the cache turned off stays off"


def test_what_the_learner_gives_replaces_the_breaks_own_setup(harness, shown, tmp_path):
    experiment.exp("no-cap", question="Q?", timeout=2.5, llm="scripted:oracle", flags=[], live=True,
                   runs_dir=tmp_path)
    [(command, kwargs)] = harness.calls
    assert command == agent_command("Q?", harness.sandbox / "trace.jsonl", llm="scripted:oracle", flags=[])
    assert kwargs["timeout"] == 2.5 and kwargs["live"] is True and kwargs["needs"] == {"tool_calls": 5}


def test_a_break_with_a_hard_cap_hands_it_to_the_harness(harness, shown, tmp_path, monkeypatch):
    capped = dataclasses.replace(find("no-dedup"), hard_cap_s=42.0)
    monkeypatch.setattr(experiment, "find", lambda variant, also=(): capped)
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    assert harness.calls[0][1]["hard_cap"] == 42.0


def test_an_unknown_variant_is_refused_naming_the_baseline_too(harness, shown, tmp_path):
    """exp runs the intact loop as "baseline" (break, fix and the rest do not, and do not offer it)."""
    from miniagent.lab.catalogue import BreakError

    with pytest.raises(BreakError, match=r"^unknown variant 'nope'; choose one of: baseline, no-cap, "):
        experiment.exp("nope", live=False, runs_dir=tmp_path)
    assert harness.calls == []


def test_the_baseline_runs_the_intact_loop_on_the_capped_question(harness, shown, tmp_path):
    experiment.exp("baseline", live=False, runs_dir=tmp_path)
    [(command, kwargs)] = harness.calls
    assert command == agent_command("What is the present perfect of would for you?", harness.sandbox / "trace.jsonl",
                                    llm="llama", flags=[])
    assert kwargs["timeout"] == 30.0 and kwargs["needs"] is None and kwargs["hard_cap"] is None
    assert harness.sandbox.name.startswith("miniagent-baseline-")
    assert [p.parent.name for p in tmp_path.glob("*/*.json")] == ["baseline"]
    assert printed(shown)[0] == (f"baseline with llama on 'What is the present perfect of would for you?', "
                                 f"timeout 30 s from the loop's start (source copy: {harness.sandbox})")


def test_the_first_line_says_what_runs_and_what_it_needs(harness, shown, tmp_path):
    experiment.exp("no-dedup", timeout=2.5, live=False, runs_dir=tmp_path)
    assert printed(shown)[0] == ("03-no-dedup with scripted:stubborn on 'What is the past simple of go for she?', "
                               f"timeout 2.5 s from the loop's start, needs {{'tool_calls': 2}} "
                               f"(source copy: {harness.sandbox})")


# --- what is kept of it -------------------------------------------------------------------------------------

def test_the_record_and_the_whole_trace_are_kept_beside_each_other(harness, shown, tmp_path):
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    [saved] = (tmp_path / "03-no-dedup").glob("*.json")
    trace = saved.with_name(saved.stem + "-trace.jsonl")
    assert saved.name == "20261127T010203-answer.json" and saved.with_suffix(".svg").is_file()
    assert trace.read_text(encoding="utf-8") == '{"event": "run_start"}\n'
    assert harness.record.trace_path == str(trace)
    assert json.loads(saved.read_text(encoding="utf-8"))["trace_path"] == str(trace)


def test_a_run_that_left_no_trace_keeps_its_record_alone(monkeypatch, shown, tmp_path):
    harness = StandInHarness(trace=None)
    monkeypatch.setattr(experiment, "run_experiment", harness)
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    assert [p.name for p in sorted((tmp_path / "03-no-dedup").iterdir())] == ["20261127T010203-answer.json",
                                                                             "20261127T010203-answer.svg"]
    assert harness.record.trace_path == ""


def test_the_source_copy_goes_even_when_the_harness_fails(monkeypatch, shown, tmp_path):
    harness = StandInHarness(fails=True)
    monkeypatch.setattr(experiment, "run_experiment", harness)
    with pytest.raises(RuntimeError, match="the harness failed"):
        experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    assert harness.sandbox is not None and not harness.sandbox.exists()


@pytest.mark.parametrize("said, exit_code, loop_start_s, refused", [
    (["miniagent: unknown llm 'nosuch': use llama, openai or scripted:<behaviour>", ""], 2, None,
     "the run did not start: unknown llm 'nosuch': use llama, openai or scripted:<behaviour>"),
    (["usage: miniagent ask ...", "miniagent ask: error: argument --n-ctx: invalid int value: 'abc'"], 2, None,
     "the run did not start: error: argument --n-ctx: invalid int value: 'abc'"),
    ([], 2, None, "the run did not start: no reason given"),
    (["Traceback ..."], 1, None, None),   # a crash before the loop: reported as one, with its record
    (["miniagent: interrupted"], 2, 0.8, None),  # a run that started is a run, whatever its status
])
def test_a_run_whose_agent_refused_its_command_line_is_refused_by_name_and_leaves_no_record(
        monkeypatch, shown, tmp_path, said, exit_code, loop_start_s, refused):
    """Seen: `invoke exp no-dedup --llm nosuch` reported a crash, "not exercised: run it again", saved its record
    and exited 0; the agent's own words (an unknown model) were nowhere."""
    record = RunRecord(command=[], timeout=0.0, outcome="crash", exit_code=exit_code, loop_start_s=loop_start_s,
                       stderr_tail=said, started_at="2026-11-27T01:02:03")
    harness = StandInHarness(record=record, trace=None)
    monkeypatch.setattr(experiment, "run_experiment", harness)
    if refused is None:
        assert experiment.exp("no-dedup", live=False, runs_dir=tmp_path) is record
        assert (tmp_path / "03-no-dedup").is_dir()
        return
    with pytest.raises(ValueError) as err:
        experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    assert str(err.value) == refused
    assert not (tmp_path / "03-no-dedup").exists() and not harness.sandbox.exists()


@pytest.mark.parametrize("change, checked", [
    ({}, True),
    ({"llm": "scripted:stubborn"}, True),           # 03's own model and its CI model are the same
    ({"question": "What is the past simple of eat for I?"}, False),
    ({"llm": "scripted:oracle"}, False),
    ({"flags": ["--max-turns", "3"]}, False),
    ({"model_flags": ["--decode", "greedy"]}, False),
])
def test_the_symptom_is_checked_only_for_the_breaks_own_setup(harness, shown, tmp_path, change, checked):
    harness.record.needs_met = True
    record = experiment.exp("no-dedup", live=False, runs_dir=tmp_path, **change)
    assert (record.expect_failures is not None) is checked
    if checked:  # the stand-in's record has one tool call, where 03's symptom wants repeats
        assert record.expect_failures == find("no-dedup").expect.failures({**record.to_dict(), "expect_failures": None})
        assert record.expect_failures


def test_the_ci_model_of_a_break_is_its_own_setup_too(harness, shown, tmp_path):
    harness.record.needs_met = True
    assert experiment.exp("dead-config", llm="scripted:oracle", live=False, runs_dir=tmp_path).expect_failures \
        is not None
    assert experiment._own_setup(find("dead-config"), find("dead-config").input, "llama", ["--max-turns", "1"])


def test_a_run_that_never_reached_the_broken_code_is_not_checked(harness, shown, tmp_path):
    harness.record.needs_met = False
    assert experiment.exp("no-dedup", live=False, runs_dir=tmp_path).expect_failures is None
    harness.record.needs_met = None  # nothing was asked of it: checked
    assert experiment.exp("no-dedup", live=False, runs_dir=tmp_path).expect_failures is not None


def test_json_prints_the_record_and_where_it_is_and_nothing_else(harness, shown, tmp_path, capsys):
    experiment.exp("no-dedup", as_json=True, runs_dir=tmp_path)
    got = json.loads(capsys.readouterr().out)
    [saved] = (tmp_path / "03-no-dedup").glob("*.json")
    assert got == {**json.loads(saved.read_text(encoding="utf-8")), "variant": "03-no-dedup",
                       "llm": "scripted:stubborn", "json_path": str(saved), "svg_path": str(saved.with_suffix(".svg"))}
    assert harness.calls[0][1]["live"] is False and printed(shown) == []


# --- predictions and scores ---------------------------------------------------------------------------------

def test_predict_adds_a_section_once_and_then_says_where_it_is(shown, learner):
    experiment.predict("no-dedup", learner)
    path = Path("learners") / learner / "notebook.md"
    assert printed(shown)[-2:] == [f"Added a prediction section for 03-no-dedup to {path}.",
                                 f"Fill in the values, say why, then run `invoke exp no-dedup --learner {learner}`."]
    experiment.predict("no-dedup", learner)
    assert printed(shown)[-1] == f"You already have a prediction section for 03-no-dedup in {path}; edit it there."
    text = (ROOT / path).read_text(encoding="utf-8")
    assert text.count("## 03-no-dedup — ") == 1 and f"## 03-no-dedup — {find('no-dedup').title['en']}\n" in text


def test_predict_writes_the_title_in_the_notebooks_language(shown, learner):
    experiment.predict("no-dedup", learner, lang="es")
    text = (ROOT / "learners" / learner / "notebook.md").read_text(encoding="utf-8")
    assert f"## 03-no-dedup — {find('no-dedup').title['es']}\n" in text and find("no-dedup").title["en"] not in text


def test_a_learner_without_a_prediction_is_told_how_and_nothing_runs(harness, shown, tmp_path, learner):
    assert experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path) is None
    assert harness.calls == []
    assert shown.export_text(clear=False).strip() == notebook.how_to_predict("03-no-dedup", learner).strip()


def test_a_damaged_progress_file_stops_the_run_before_it_starts(harness, shown, tmp_path, learner):
    experiment.predict("no-dedup", learner)
    (ROOT / "learners" / learner / "progress.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(StateError):
        experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    assert harness.calls == []


def _predicted(learner: str, **values: str) -> Path:
    path, _ = notebook.add_prediction(ROOT, learner, "03-no-dedup", "No dedup")
    text = path.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"{key}: ?", f"{key}: {value}")
    path.write_text(text, encoding="utf-8")
    return path


def test_a_prediction_is_scored_appended_and_counted(harness, shown, tmp_path, learner):
    path = _predicted(learner, outcome="answer", tool_calls="9")
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    state = progress.break_state(progress.load(ROOT, learner), "03-no-dedup")
    assert (state["runs"], state["hits"], state["fields"]) == (2, 1, 2)
    assert path.read_text(encoding="utf-8").count("### Observed") == 2
    notes = Path("learners") / learner / "notebook.md"
    assert printed(shown)[-1] == f"Observation appended to {notes}."
    compared = [[cell.strip() for cell in line.split("│")[1:-1]] for line in printed(shown) if line.count("│") > 3]
    assert compared[-5][:3] == ["outcome", "answer", "answer"] and compared[-2][:3] == ["tool_calls", "9", "1"]


def test_a_run_with_nothing_to_score_is_appended_but_not_counted(harness, shown, tmp_path, learner):
    path = _predicted(learner, outcome="answer")
    harness.record.needs_met = False  # it never reached the broken code: no field is scored
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    assert "### Observed" in path.read_text(encoding="utf-8")
    assert "runs" not in progress.break_state(progress.load(ROOT, learner), "03-no-dedup")


def test_a_runs_count_adds_one_and_keeps_the_last_score():
    state = {"runs": 2, "hits": 1, "fields": 1, "done": True}
    experiment._count_run(state, [True, False, True])
    assert state == {"runs": 3, "hits": 2, "fields": 3, "done": True}
    first = {"runs": None}
    experiment._count_run(first, [])
    assert first == {"runs": 1, "hits": 0, "fields": 0}


# --- what a learner reads after a run -----------------------------------------------------------------------

def full_record(**extra) -> RunRecord:
    values = dict(command=["x"], timeout=6.0, outcome="timeout", stop_reason=None, wall_s=7.25, cpu_mean=98.4,
                  cpu_max=101.6, tool_calls=12, tool_calls_by_tool={"conjugate": 12}, identical_calls=11,
                  tool_errors=3, turns=13, other_cpu_mean=12.4, other_cpu_max=40.6, cpus=2, load_avg_start=0.25,
                  load_avg_end=1.5, clock="launch")
    values.update(extra)
    return RunRecord(**values)


def test_the_report_has_every_figure_in_its_row(shown, tmp_path):
    json_path = ROOT / "runs" / "00-no-cap" / "x.json"
    experiment.report(full_record(kill_latency_s=0.126, processes_left=[{"pid": 7, "cmdline": "s" * 70}]),
                      json_path, tmp_path / "x.svg")
    rows = [line.split("│")[1:3] for line in printed(shown) if line.count("│") == 3]
    rows = [[cell.strip() for cell in row] for row in rows]
    assert rows == [
        ["outcome", "timeout"], ["stop reason", "none"], ["wall", "7.2 s (timeout 6 s)"],
        ["CPU mean / max", "98 % / 102 % (100 % = one core)"], ["tool calls", "12 {'conjugate': 12}"],
        ["identical calls", "11"], ["tool errors", "3"], ["turns", "13"], ["processes left", f"7 {'s' * 60}"],
        ["other programs", "12 % CPU mean, 41 % max (2 usable CPUs, load average 0.25 -> 1.5)"],
        ["killed", "+0.13 s after the deadline"]]
    assert printed(shown)[0].strip() == "observed"
    assert printed(shown)[-1] == "saved: runs/00-no-cap/x.json and x.svg"


def test_the_report_of_a_quiet_run_says_what_did_not_happen(shown, tmp_path):
    experiment.report(full_record(tool_calls=0, tool_calls_by_tool={}, clock="loop", loop_start_s=1.25,
                                  machine_busy=True, other_cpu_mean=150.0),
                      tmp_path / "x.json", tmp_path / "x.svg")
    text = shown.export_text(clear=False)
    assert "│ tool calls      │ 0 " in text and "│ processes left  │ 0 " in text and "killed" not in text
    assert "7.2 s (timeout 6 s from the loop's start at 1.2 s)" in text
    assert "150 % CPU mean, 41 % max (2 usable CPUs, load average 0.25 -> 1.5): BUSY MACHINE" in text
    assert printed(shown)[-1] == f"saved: {tmp_path / 'x.json'} and x.svg"
    assert "answer:" not in text and "scratchpad" not in text


def test_the_saved_line_names_the_trace_exp_keeps(shown, tmp_path):
    experiment.report(full_record(trace_path=str(tmp_path / "x-trace.jsonl")), tmp_path / "x.json", tmp_path / "x.svg")
    assert printed(shown)[-1] == f"saved: {tmp_path / 'x.json'}, its trace x-trace.jsonl and its CPU chart x.svg"


def test_the_report_shows_the_answer_and_the_scratchpads_last_lines(shown, tmp_path):
    experiment.report(full_record(answer="She went.", scratchpad_tail=["[turn 3]", "thought"]),
                      tmp_path / "x.json", tmp_path / "x.svg")
    assert printed(shown)[-5:-1] == ["answer: She went.", "last lines of the scratchpad:", "  [turn 3]", "  thought"]


def test_the_report_is_in_the_learners_language(shown, tmp_path):
    experiment.report(full_record(), tmp_path / "x.json", tmp_path / "x.svg", lang="es")
    assert "7,2 s" in shown.export_text(clear=False) and "observed" not in printed(shown)[0]


def test_the_report_ends_with_the_verdict_before_where_it_was_saved(shown, tmp_path):
    brk = find("no-dedup")
    record = full_record(clock="loop", loop_start_s=1.25, expect_failures=[])
    experiment.report(record, tmp_path / "x.json", tmp_path / "x.svg", brk)
    verdict = [sentence for _, sentence in experiment.verdict(brk, record)]
    assert len(verdict) == 2 and printed(shown)[-3:-1] == verdict


def test_the_verdict_of_the_baseline_is_only_how_the_deadline_and_the_machine_were(shown):
    assert experiment.verdict(None, full_record()) == []
    busy = full_record(clock="loop", loop_start_s=1.25, machine_busy=True, other_cpu_mean=150.0)
    assert experiment.verdict(None, busy) == [
        ("dim", "The 6 s timeout counted from the loop's start, 1.2 s after launch (imports and model load before "
                "it)."),
        ("yellow", "The machine was busy: other programs used 150 % CPU on average during this run (100 % = one core; "
                   "2 usable CPUs, load average 0.25 -> 1.5).  The run competed with them for the CPU, so its wall "
                   "time, its CPU figures and how far the loop got are disturbed.")]


def test_a_crashed_run_gets_the_crash_report_and_nothing_else():
    crashed = full_record(signal="SIGSEGV", outcome="crash", machine_busy=True, clock="loop", loop_start_s=1.0,
                          expect_failures=["outcome crash != timeout"])
    got = experiment.verdict(find("no-dedup"), crashed)
    note = crash_note(crashed)
    assert len(note) > 1 and got == [("bold red", note[0]), *(("red", line) for line in note[1:])]


@pytest.mark.parametrize("busy, learner", [(False, None), (True, "ana")])
def test_a_run_that_never_reached_the_broken_code_says_so_and_how_to_rerun(busy, learner):
    brk = find("no-breaker")
    record = full_record(needs_met=False, tool_errors=1, machine_busy=busy, other_cpu_mean=150.0 if busy else 0.0,
                         expect_failures=["ignored"])
    rerun = "`invoke exp no-breaker --learner ana`" if learner else "`invoke exp no-breaker`"
    why, when = ("the machine was busy", ", when the machine is quieter.") if busy else ("the run ended first", ".")
    assert experiment.verdict(brk, record, learner)[-1] == (
        "bold yellow", "NOT EXERCISED: this run never reached the broken code. The break needs 3 tool errors before "
                       f"its timeout may end it; this run had 1 tool errors ({why}). It says nothing about the break, "
                       f"and nothing was scored. Run it again: {rerun}{when}")


@pytest.mark.parametrize("busy", [False, True])
def test_a_missing_symptom_names_what_failed(busy):
    brk = find("no-dedup")
    record = full_record(needs_met=True, machine_busy=busy, other_cpu_mean=150.0 if busy else 0.0,
                         expect_failures=["identical_calls 0 < 1", "outcome answer != timeout"])
    tail = (" The machine was busy, which may be the reason: run it again when it is quieter "
            "(`invoke exp no-dedup --learner bo`).") if busy else ""
    assert experiment.verdict(brk, record, "bo")[-1] == (
        "bold red", f"The break's symptom did not show ({brk.expect.describe()}): identical_calls 0 < 1; "
                    f"outcome answer != timeout.{tail}")


def test_an_unchecked_run_gets_no_sentence_about_the_symptom():
    assert experiment.verdict(find("no-dedup"), full_record(needs_met=True, expect_failures=None)) == []


def test_the_verdict_is_in_the_learners_language():
    brk = find("no-dedup")
    [(_, sentence)] = experiment.verdict(brk, full_record(needs_met=True, expect_failures=[]), lang="es")
    assert sentence != experiment.verdict(brk, full_record(needs_met=True, expect_failures=[]))[0][1]
    assert brk.expect.describe() in sentence


# --- the tour -----------------------------------------------------------------------------------------------

def tour_row(record: dict | None, **extra) -> dict:
    return {"id": "03-no-dedup", "llm": "scripted:stubborn", "real_model": False, "predicted": None,
            "record": record, "hits": 0, "fields": 0, **extra}


def test_the_tour_table_says_how_each_run_went(shown, monkeypatch):
    base = full_record(outcome="fallback", stop_reason="max_turns", cpu_mean=3.6, needs_met=True,
                       needs={"tool_calls": 1}).to_dict()
    rows = [tour_row(base, predicted={"outcome": "timeout"}, hits=2, fields=3),
            tour_row({**base, "machine_busy": True}),
            tour_row({**base, "needs_met": False}),
            tour_row({**base, "signal": "SIGSEGV", "outcome": "crash"}),
            tour_row(None)]
    monkeypatch.setattr(experiment, "_tour_runs", lambda *args: rows)
    assert experiment.tour() == rows
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in printed(shown) if line.count("│") == 6]
    assert table == [
        ["03-no-dedup", "scripted:stubborn", "timeout", "fallback / max_turns / cpu 4 %", "2/3 fields"],
        ["03-no-dedup", "scripted:stubborn", "-", "fallback / max_turns / cpu 4 %", "no prediction (busy machine)"],
        ["03-no-dedup", "scripted:stubborn", "-", "fallback / max_turns / cpu 4 %", "not exercised: run it again"],
        ["03-no-dedup", "scripted:stubborn", "-", "crash / max_turns / cpu 4 %",
         "crashed (SIGSEGV): see lab 02"],
        ["03-no-dedup", "scripted:stubborn", "-", "None / none / cpu 0 %", "no prediction"]]
    header = [line for line in printed(shown) if "┃" in line][0]
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["break", "model", "predicted outcome", "observed",
                                                                  "hit/miss"]
    assert "failure-mode tour" in printed(shown)[0]


def test_the_tour_as_json_prints_only_json_and_gives_the_console_back(shown, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(experiment, "_tour_runs", lambda *args: seen.append((args, screen.console.quiet)) or [])
    assert experiment.tour(as_json=True, llm="scripted:oracle") == []
    assert seen == [((None, True, "scripted:oracle"), True)] and screen.console.quiet is False
    assert capsys.readouterr().out == "[]\n" and printed(shown) == []

    def fails(*args):
        raise RuntimeError("a run failed")

    monkeypatch.setattr(experiment, "_tour_runs", fails)
    with pytest.raises(RuntimeError):
        experiment.tour(as_json=True)
    assert screen.console.quiet is False


def test_the_tour_refuses_a_damaged_progress_file_before_its_first_run(shown, monkeypatch, learner):
    experiment.predict("no-dedup", learner)
    (ROOT / "learners" / learner / "progress.json").write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(experiment, "_tour_runs", lambda *args: pytest.fail("a run started"))
    with pytest.raises(StateError):
        experiment.tour(learner)


def test_the_tour_runs_every_break_and_scores_the_predicted_ones(shown, monkeypatch, learner):
    _predicted(learner, outcome="answer", tool_calls="9")
    calls = []

    def exp(alias, **kwargs):
        calls.append((alias, kwargs))
        return None if alias == "no-cap" else full_record(outcome="answer", tool_calls=1, needs_met=True,
                                                          needs={"tool_calls": 1})

    monkeypatch.setattr(experiment, "exp", exp)
    results = experiment._tour_runs(learner, False, None)
    ids = [brk.id for brk in experiment.catalogue()]
    assert [r["id"] for r in results] == ids
    assert [alias for alias, _ in calls] == [brk.alias for brk in experiment.catalogue()]
    dedup = results[ids.index("03-no-dedup")]
    assert calls[ids.index("03-no-dedup")][1] == {"learner": learner, "live": True, "llm": None, "lang": "en"}
    assert calls[0][1] == {"learner": None, "live": True, "llm": None, "lang": "en"}
    assert (dedup["hits"], dedup["fields"], dedup["llm"], dedup["real_model"]) == (1, 2, "scripted:stubborn", False)
    assert dedup["predicted"]["outcome"] == "answer" and dedup["exercised"] is True
    assert dedup["record"]["tool_calls"] == 1
    assert results[0] == {"id": "00-no-cap", "llm": "llama", "real_model": True, "predicted": None, "record": None,
                          "hits": 0, "fields": 0, "exercised": None}
    text = shown.export_text(clear=False)
    assert f"(no prediction for 00-no-cap in your notes, or every value still `?`: `invoke predict no-cap " \
           f"--learner {learner}`, then fill it in, to be scored)" in " ".join(text.split())
    assert "no prediction for 03-no-dedup" not in text
    assert "03-no-dedup: " + find("no-dedup").title["en"] in text
    # each break's heading says how far the tour is: none done before the first, 3 before break 03
    assert re.search(r"00-no-cap: .* · 0/17, \d+:\d\d so far", " ".join(text.split()))
    assert re.search(r"03-no-dedup: .* · 3/17, \d+:\d\d so far, about \d+:\d\d left", " ".join(text.split()))


def test_the_tour_reports_an_unpredicted_break_in_the_named_learners_language(shown, monkeypatch, learner):
    """Run unscored, a break used to report in the remembered learner's language, not in the named one's."""
    progress.learner_lang(ROOT, learner, "es")
    _predicted(learner, outcome="answer")
    remembered = ROOT / progress.CURRENT_LEARNER
    remembered.parent.mkdir(parents=True, exist_ok=True)
    remembered.write_text("someone-else-en\n", encoding="utf-8")  # put back by the learner fixture
    calls = []
    monkeypatch.setattr(experiment, "exp", lambda alias, **kw: calls.append((alias, kw)) or None)
    experiment._tour_runs(learner, False, None)
    by_alias = dict(calls)
    assert by_alias["no-cap"] == {"learner": None, "live": True, "llm": None, "lang": "es"}
    # scored: the learner's own run, in the learner's language
    assert by_alias["no-dedup"] == {"learner": learner, "live": True, "llm": None, "lang": "es"}


def test_an_unscored_run_reports_in_the_language_it_is_given(harness, shown, monkeypatch, tmp_path):
    langs = []
    monkeypatch.setattr(experiment, "report", lambda *a, lang, **kw: langs.append(lang))
    experiment.exp("no-dedup", live=False, lang="es", runs_dir=tmp_path)
    assert langs == ["es"]


def test_the_tour_with_one_model_runs_every_break_on_it_unscored_in_json(shown, monkeypatch, learner):
    _predicted(learner, outcome="answer")
    calls = []
    monkeypatch.setattr(experiment, "exp", lambda alias, **kw: calls.append(kw) or full_record(needs_met=True))
    results = experiment._tour_runs(learner, True, "scripted:oracle")
    assert {r["llm"] for r in results} == {"scripted:oracle"} and not any(r["real_model"] for r in results)
    unscored = {"learner": None, "live": False, "llm": "scripted:oracle", "lang": "en"}
    assert calls == [unscored] * len(experiment.catalogue())
    assert "(no prediction for" in shown.export_text(clear=False)  # told, though nothing is scored in JSON


# --- a second look, after mutation testing: languages, plain lines, what the notebook keeps ------------------

@pytest.fixture
def styled(monkeypatch) -> Console:
    return screen_console(monkeypatch, colours=True)


def spanish(learner: str) -> str:
    progress.learner_lang(ROOT, learner, "es")
    return learner


def test_the_lines_a_learner_copies_are_printed_as_they_are(styled, harness, tmp_path, learner):
    """No markup read and no number painted: a path or a command is copied from these lines."""
    experiment.predict("no-dedup", learner)
    runs = tmp_path / "runs [b]"
    assert experiment.exp("no-dedup", learner=learner, live=False, runs_dir=runs) is None
    harness.record.scratchpad_tail = ["[turn 3] conjugate 3"]
    harness.record.answer = "She went 3 times [b]."
    _predicted(learner, outcome="answer")
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=runs)
    lines = printed(styled, styles=True)
    notebook_file = Path("learners") / learner / "notebook.md"
    plain = [f"Added a prediction section for 03-no-dedup to {notebook_file}.",
             *notebook.how_to_predict("03-no-dedup", learner).strip().splitlines(),
             "  [turn 3] conjugate 3", f"Observation appended to {notebook_file}."]
    assert all(line in lines for line in plain), lines
    assert "\x1b[1manswer:\x1b[0m She went 3 times [b]." in lines
    [saved] = [line for line in lines if line.startswith("saved: ")]
    assert "\x1b" not in saved and "runs [b]" in saved


def test_the_verdict_keeps_its_colour(styled):
    experiment.report(full_record(needs_met=True, expect_failures=[]), ROOT / "x.json", ROOT / "x.svg",
                      find("no-dedup"))
    expected = experiment.verdict(find("no-dedup"), full_record(needs_met=True, expect_failures=[]))[-1][1]
    assert f"\x1b[32m{expected}\x1b[0m" in printed(styled, styles=True)


def test_a_spanish_learner_reads_every_line_of_a_run_in_spanish(harness, shown, tmp_path, learner):
    spanish(learner)
    assert experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path) is None
    assert shown.export_text(clear=False).strip() == notebook.how_to_predict("03-no-dedup", learner, "es").strip()
    _predicted(learner, outcome="answer", tool_calls="9")
    harness.record.needs_met = True
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    text = shown.export_text(clear=False)
    assert "observado" in text.lower() and "observed" not in text
    compared = scoring_rows(shown)
    assert compared and all(row[0] != "outcome" or row[3] == "acierto" for row in compared), compared
    notes = (ROOT / "learners" / learner / "notebook.md").read_text(encoding="utf-8")
    assert "### Observado — 03-no-dedup" in notes
    appended = words("es")["report"]["appended"]
    assert printed(shown)[-1] == appended.format(path=Path("learners") / learner / "notebook.md") != \
        words("en")["report"]["appended"].format(path=Path("learners") / learner / "notebook.md")


def scoring_rows(console: Console) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in printed(console) if line.count("│") > 3]


def test_the_notebook_keeps_when_the_run_was_and_links_its_record_and_chart(harness, shown, tmp_path, learner):
    path = _predicted(learner, outcome="answer")
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    notes = path.read_text(encoding="utf-8")
    [saved] = (tmp_path / "03-no-dedup").glob("*.json")
    assert re.search(r"^### Observed — 03-no-dedup \(\d{8}-\d{6}\)$", notes, re.M), notes[-800:]
    assert saved.name in notes and saved.with_suffix(".svg").name in notes


def test_the_saved_record_is_the_records_json_indented_and_its_chart_is_titled(harness, shown, tmp_path):
    experiment.exp("no-dedup", live=False, runs_dir=tmp_path)
    [saved] = (tmp_path / "03-no-dedup").glob("*.json")
    assert saved.read_text(encoding="utf-8") == json.dumps(harness.record.to_dict(), indent=2)
    assert "03-no-dedup — scripted:stubborn" in saved.with_suffix(".svg").read_text(encoding="utf-8")


def test_a_source_copy_the_run_removed_itself_is_no_error(monkeypatch, shown, tmp_path):
    class RemovesItsCopy(StandInHarness):
        def __call__(self, command, **kwargs):
            record = super().__call__(command, **kwargs)
            shutil.rmtree(self.sandbox)
            return record

    monkeypatch.setattr(experiment, "run_experiment", RemovesItsCopy())
    assert experiment.exp("no-dedup", live=False, runs_dir=tmp_path).outcome == "answer"


def test_a_run_is_live_unless_told_otherwise(harness, shown, tmp_path):
    experiment.exp("no-dedup", runs_dir=tmp_path)
    assert harness.calls[0][1]["live"] is True


def test_the_baseline_with_a_learner_runs_and_scores_nothing(harness, shown, tmp_path, learner):
    record = experiment.exp("baseline", learner=learner, live=False, runs_dir=tmp_path)
    assert record is harness.record and not (ROOT / "learners" / learner / "notebook.md").exists()


def test_an_old_notebook_is_moved_before_a_prediction_is_read(harness, shown, tmp_path, learner):
    path = _predicted(learner, outcome="answer")
    old = path.parent / "phase-32" / "notes" / "breaks.md"
    old.parent.mkdir(parents=True)
    path.rename(old)
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    assert len(harness.calls) == 1 and "### Observed" in path.read_text(encoding="utf-8") and not old.exists()
    assert printed(shown)[0].startswith("Your notebook moved, byte for byte,")


def test_predict_moves_an_old_notebook_first(shown, learner):
    path = ROOT / "learners" / learner / "phase-32" / "notes" / "breaks.md"
    path.parent.mkdir(parents=True)
    path.write_text("# mine\n", encoding="utf-8")
    experiment.predict("no-dedup", learner)
    moved = ROOT / "learners" / learner / "notebook.md"
    assert moved.read_text(encoding="utf-8").startswith("# mine\n") and "## 03-no-dedup" in moved.read_text()
    assert printed(shown)[0].startswith("Your notebook moved, byte for byte,")


def test_a_damaged_progress_file_stops_a_predicted_run_before_it_starts(harness, shown, tmp_path, learner):
    _predicted(learner, outcome="answer")
    (ROOT / "learners" / learner / "progress.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(StateError):
        experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    assert harness.calls == []


def test_a_scored_run_that_was_not_exercised_tells_the_learner_to_rerun_with_their_name(harness, shown, tmp_path,
                                                                                         learner):
    _predicted(learner, outcome="answer")
    harness.record.needs_met = False
    experiment.exp("no-dedup", learner=learner, live=False, runs_dir=tmp_path)
    assert f"Run it again: `invoke exp no-dedup --learner {learner}`." in " ".join(printed(shown))


def test_the_report_passes_the_learner_to_the_verdict(shown, tmp_path):
    record = full_record(needs_met=False, tool_calls=0)
    experiment.report(record, tmp_path / "x.json", tmp_path / "x.svg", find("no-dedup"), "ana")
    assert "Run it again: `invoke exp no-dedup --learner ana`." in " ".join(printed(shown))


def test_the_report_in_spanish_writes_every_number_the_spanish_way(shown, tmp_path):
    experiment.report(full_record(clock="loop", loop_start_s=1.25, timeout=6.5, load_avg_start=0.25,
                                  load_avg_end=1.5, kill_latency_s=0.126),
                      tmp_path / "x.json", tmp_path / "x.svg", lang="es")
    rows = [[cell.strip() for cell in line.split("│")[1:3]] for line in printed(shown) if line.count("│") == 3]
    values = [value for _, value in rows]
    assert "7,2 s (tiempo límite 6,5 s desde que empezó el bucle, a los 1,2 s)" in values
    assert any("0,25 -> 1,5" in value for value in values) and any(value.startswith("+0,13 s") for value in values)


def test_the_report_table_has_no_header_and_each_row_its_own_figure(shown, tmp_path):
    experiment.report(full_record(stop_reason="max_turns", tool_calls=0, tool_calls_by_tool={}, clock="launch",
                                  loop_start_s=1.25, processes_left=[{"pid": 7, "cmdline": "a"},
                                                                     {"pid": 8, "cmdline": "b"}]),
                      tmp_path / "x.json", tmp_path / "x.svg")
    assert "┃" not in shown.export_text(clear=False)
    rows = dict([cell.strip() for cell in line.split("│")[1:3]] for line in printed(shown) if line.count("│") == 3)
    assert rows["stop reason"] == "max_turns" and rows["tool calls"] == "0"
    assert rows["processes left"] == "7 a, 8 b" and rows["wall"] == "7.2 s (timeout 6 s)"


def test_the_verdict_names_every_need_of_a_break(shown):
    brk = dataclasses.replace(find("no-dedup"), needs={"tool_calls": 2, "turns": 3})
    sentence = experiment.verdict(brk, full_record(needs_met=False, tool_calls=1, turns=2))[-1][1]
    assert "needs 2 tool calls, 3 turns before" in sentence and "had 1 tool calls, 2 turns (" in sentence


def test_the_verdict_in_spanish_says_how_the_deadline_was_counted_and_how_it_crashed():
    record = full_record(clock="loop", loop_start_s=1.25)
    assert experiment.verdict(None, record, lang="es") == [("dim", deadline_note_es(record))]
    crashed = full_record(signal="SIGSEGV", outcome="crash")
    assert [s for _, s in experiment.verdict(None, crashed, lang="es")] == crash_note(crashed, "es")
    assert crash_note(crashed, "es") != crash_note(crashed)


def deadline_note_es(record: RunRecord) -> str:
    from miniagent.lab.harness.record import deadline_note

    note = deadline_note(record, "es")
    assert note != deadline_note(record) and "1,2" in note
    return note


def test_the_tour_hands_the_learner_to_its_runs_and_titles_its_table(shown, monkeypatch, learner):
    seen = []
    monkeypatch.setattr(experiment, "_tour_runs", lambda *args: seen.append(args) or [])
    experiment.tour(learner)
    assert seen == [(learner, False, None)] and printed(shown)[0].strip() == "failure-mode tour"


def test_the_tour_without_a_learner_reads_no_notebook(shown, monkeypatch):
    monkeypatch.setattr(notebook, "read_prediction", lambda *args: pytest.fail("a notebook was read"))
    monkeypatch.setattr(experiment, "exp", lambda alias, **kw: None)
    results = experiment._tour_runs(None, True, None)
    assert len(results) == len(experiment.catalogue())
    assert all(r["predicted"] is None and r["record"] is None for r in results)


def test_a_predicted_break_whose_run_gave_nothing_scores_nothing(shown, monkeypatch, learner):
    _predicted(learner, outcome="answer")
    monkeypatch.setattr(experiment, "exp", lambda alias, **kw: None)
    dedup = experiment._tour_runs(learner, False, None)[3]
    assert dedup["id"] == "03-no-dedup" and dedup["predicted"] is not None
    assert (dedup["record"], dedup["hits"], dedup["fields"], dedup["exercised"]) == (None, 0, 0, None)
