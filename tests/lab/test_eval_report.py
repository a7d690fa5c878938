"""``miniagent eval`` in the test process: what counts as right, every figure of the report, and its command line.

The tutor session is a stand-in here (it hands back prepared outcomes, on a stand-in clock): the figures are then
known exactly. ``test_evaluation.py`` holds the scorer's rules and the eval files; ``test_tutor_e2e.py`` runs the
real model through them.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter

import pytest
from helpers import SleepingClock

from miniagent.agent.loop import Outcome, Stats
from miniagent.agent.trace import Trace
from miniagent.lab import evaluation, session
from miniagent.lab.evaluation import EvalItem, percentile, print_report, run_eval, run_eval_cli
from miniagent.settings import Settings, load_config


def outcome(answer: str, stop_reason: str = "answered", seconds: float = 1.0, turns: int = 2,
            calls: dict | None = None, declined: str = "") -> Outcome:
    return Outcome(answer=answer, stop_reason=stop_reason, declined=declined,
                   stats=Stats(turns=turns, tool_calls=Counter(calls or {"conjugate": 1}), seconds=seconds))


class StandInSession:
    """TutorSession's shape: opened (taking ``startup`` s of the clock), asked, closed."""

    opened: list["StandInSession"] = []

    def __init__(self, settings, trace=None, *, outcomes, clock, startup=0.5):
        self.settings, self.trace, self.outcomes = settings, trace, list(outcomes)
        self.clock, self.startup = clock, startup
        self.asked: list[str] = []
        self.closed = False
        StandInSession.opened.append(self)

    def __enter__(self):
        self.clock.now += self.startup
        return self

    def ask(self, question):
        self.asked.append(question)
        result = self.outcomes.pop(0)
        self.clock.now += result.stats.seconds
        return result

    def __exit__(self, *exc):
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch):
    clock = SleepingClock(100.0)
    monkeypatch.setattr(evaluation.time, "monotonic", clock.monotonic)
    StandInSession.opened = []

    def install(*outcomes, startup=0.5):
        monkeypatch.setattr(session, "TutorSession",
                            lambda settings, trace=None: StandInSession(settings, trace, outcomes=outcomes,
                                                                        clock=clock, startup=startup))
        return clock

    return install


ITEMS = [EvalItem("What is the past simple of go for she?", ["she went"]),
         EvalItem("What is the past simple of eat for I?", ["I ate"]),
         EvalItem("What is the present perfect of see for he?", ["he has seen"]),
         EvalItem("What is the future simple of be for they?", ["they will be"])]


def test_only_an_answer_that_is_exactly_an_accepted_one_counts(stand_in):
    stand_in(outcome("She went."),
             outcome("it ate"),                                                  # the wrong subject
             outcome("Fallback. Final answer: he has seen", "max_turns"),        # right words, but not an answer
             outcome("Future simple: they will be\nbecause...", seconds=3.0))   # a lead-in, then more lines
    report = run_eval(ITEMS, Settings())
    assert [item["correct"] for item in report["items"]] == [True, False, False, False]
    assert (report["n"], report["correct"], report["accuracy"]) == (4, 1, 0.25)


def test_the_report_has_every_figure_from_the_runs(stand_in):
    settings = load_config({"llm": "scripted:oracle"})
    trace = Trace.memory()
    stand_in(outcome("she went", seconds=1.0), outcome("I ate", seconds=4.0, turns=3, calls={"conjugate": 2}),
             outcome("fallback", "max_turns", seconds=2.0), startup=0.75)
    report = run_eval(ITEMS[:3], settings, trace)
    others, busy = report.pop("others_cpu_pct"), report.pop("machine_busy")  # read from the machine
    assert (others is None or others >= 0) and busy is (others is not None and others >= 50)
    [opened] = StandInSession.opened
    assert opened.settings is settings and opened.trace is trace and opened.closed
    assert opened.asked == [item.question for item in ITEMS[:3]]
    assert report == {
        "n": 3, "correct": 2, "accuracy": 0.6667, "answer_items": 3, "answered_right": 2, "decline_items": 0,
        "declined_right": 0, "made_up_answers": 0, "stop_reasons": {"answered": 2, "max_turns": 1},
        "latency_p50_s": 2.0, "latency_p95_s": 4.0, "startup_s": 0.75, "total_s": 7.75, "llm": "scripted:oracle",
        "items": [
            {"question": ITEMS[0].question, "accept": ["she went"], "decline": "", "decline_kind": "", "answer": "she went", "declined": "",
             "correct": True, "stop_reason": "answered", "turns": 2, "tool_calls": {"conjugate": 1}, "seconds": 1.0},
            {"question": ITEMS[1].question, "accept": ["I ate"], "decline": "", "decline_kind": "", "answer": "I ate", "declined": "", "correct": True,
             "stop_reason": "answered", "turns": 3, "tool_calls": {"conjugate": 2}, "seconds": 4.0},
            {"question": ITEMS[2].question, "accept": ["he has seen"], "decline": "", "decline_kind": "", "answer": "fallback", "declined": "",
             "correct": False, "stop_reason": "max_turns", "turns": 2, "tool_calls": {"conjugate": 1},
             "seconds": 2.0}]}
    assert type(report["items"][0]["tool_calls"]) is dict


def test_each_question_done_is_told_to_the_progress_bar(stand_in):
    stand_in(outcome("she went"), outcome("I ate"), outcome("x"))
    told = []
    run_eval(ITEMS[:3], Settings(), on_item=lambda done, total: told.append((done, total)))
    assert told == [(1, 3), (2, 3), (3, 3)]


def test_the_bar_shows_only_in_a_terminal():
    import io

    from rich.console import Console

    from miniagent.lab import screen

    quiet = Console(file=io.StringIO(), force_terminal=True, width=100)
    with screen.progress_bar("eval", 2, shown=False, on=quiet) as step:  # --json, or a pipe: nothing but the report
        step(1, now="x")
    assert quiet.file.getvalue() == ""
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    with screen.progress_bar("docs-results", 2, shown=True, on=terminal) as step:
        step(1, now="03-no-dedup")
    drawn = terminal.file.getvalue()
    assert "docs-results 03-no-dedup" in drawn and "1/2" in drawn  # what runs now, and how far


def test_a_long_command_says_how_far_it_is(monkeypatch):
    from miniagent.lab import screen

    monkeypatch.setattr(screen.time, "monotonic", lambda: 130.0)
    assert screen.so_far(0, 17, 100.0) == "0/17, 0:30 so far"
    assert screen.so_far(3, 17, 100.0) == "3/17, 0:30 so far, about 2:20 left"
    assert screen.so_far(17, 17, 100.0) == "17/17, 0:30 so far"


def test_figures_are_rounded_as_the_report_says(stand_in):
    stand_in(outcome("she went", seconds=1.23456), outcome("x", seconds=2.34567), outcome("x", seconds=0.5),
             startup=0.12345)
    report = run_eval(ITEMS[:3], Settings())
    assert (report["accuracy"], report["latency_p50_s"], report["latency_p95_s"]) == (0.3333, 1.235, 2.346)
    assert (report["startup_s"], report["total_s"]) == (0.123, 4.204)


def test_p95_is_the_95th_percentile_of_the_runs_not_the_slowest(stand_in):
    stand_in(*(outcome("x", seconds=float(s)) for s in range(1, 22)))
    report = run_eval([ITEMS[0]] * 21, Settings())
    assert (report["latency_p50_s"], report["latency_p95_s"]) == (11.0, 20.0)


def test_the_eval_quiets_the_agents_log_to_warnings(stand_in):
    stand_in(outcome("she went"))
    logging.getLogger("miniagent").setLevel(logging.DEBUG)
    run_eval(ITEMS[:1], Settings())
    assert logging.getLogger("miniagent").level == logging.WARNING


@pytest.mark.parametrize("values, q, expected", [
    ([], 0.5, 0.0),
    ([3.0], 0.95, 3.0),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 0.5, 3.0),           # sorted first
    ([5.0, 1.0, 4.0, 2.0, 3.0], 0.0, 1.0),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 1.0, 5.0),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 0.95, 5.0),          # index round(3.8) = 4
    ([5.0, 1.0, 4.0, 2.0, 3.0], 0.6, 3.0),           # index round(2.4) = 2
    ([5.0, 1.0, 4.0, 2.0, 3.0], 0.7, 4.0),           # index round(2.8) = 3
    ([1.0, 2.0], 0.5, 1.0),                          # index round(0.5) = 0 (round half to even)
    ([1.0, 2.0, 3.0, 4.0], 0.5, 3.0),                # index round(1.5) = 2
    ([1.0, 2.0, 3.0], 2.0, 3.0),                     # past the end: the last
    ([1.0, 2.0, 3.0], -1.0, 1.0),                    # before the start: the first
])
def test_a_percentile_is_the_nearest_rank(values, q, expected):
    before = list(values)
    assert percentile(values, q) == expected
    assert values == before, "the caller's list was sorted in place"


def a_report(**extra) -> dict:
    report = {"n": 2, "correct": 1, "accuracy": 0.5, "stop_reasons": {"answered": 1, "max_turns": 1},
              "latency_p50_s": 1.234, "latency_p95_s": 2.5, "startup_s": 0.756, "total_s": 4.25,
              "llm": "scripted:oracle",
              "items": [{"question": "Q one?", "accept": ["she went", "he went"], "answer": "she went\nmore",
                         "correct": True, "stop_reason": "answered", "seconds": 1.234},
                        {"question": "Q two?", "accept": ["I ate"], "answer": "", "correct": False,
                         "stop_reason": "max_turns", "seconds": 2.5}]}
    report.update(extra)
    return report


def test_the_printed_report_has_a_row_per_question_and_the_figures_below(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    print_report(a_report())
    out = capsys.readouterr().out.splitlines()
    assert out[0].strip() == "eval (scripted:oracle)"
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out if line.count("│") == 8]
    assert rows == [["1", "Q one?", "she went / he went", "she went", "yes", "answered", "1.23"],
                    ["2", "Q two?", "I ate", "", "no", "max_turns", "2.50"]]
    assert not any(line.startswith("├") for line in out), "a line between the rows"
    header = [line for line in out if "┃" in line][0]
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["#", "question", "accepted", "answer", "ok", "stop",
                                                                  "s"]
    assert out[-3:] == ["accuracy: 1/2 = 50.0%", "stop reasons: {'answered': 1, 'max_turns': 1}",
                        "latency p50 1.23 s, p95 2.50 s; start-up 0.76 s; total 4.2 s"]


def test_the_report_says_when_other_programs_disturbed_its_times(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    print_report({**a_report(), "others_cpu_pct": 140, "machine_busy": True})
    assert capsys.readouterr().out.splitlines()[-1] == (
        "The machine was busy: other programs used 140 % of a core on average meanwhile, so these times are "
        "disturbed (the answers are not). Run it again on a quieter machine to compare times with the docs.")
    print_report({**a_report(), "others_cpu_pct": 3, "machine_busy": False})
    assert "busy" not in capsys.readouterr().out


def test_the_printed_report_colours_yes_and_no(monkeypatch):
    import io

    from rich.console import Console

    recorded = Console(record=True, width=200, file=io.StringIO(), force_terminal=True, color_system="standard")
    monkeypatch.setattr("rich.console.Console", lambda: recorded)
    print_report(a_report())
    text = recorded.export_text(styles=True)
    assert "\x1b[32myes\x1b[0m" in text and "\x1b[31mno\x1b[0m" in text


def test_a_long_answer_folds_in_its_column_and_is_not_cut(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    long = "she_went_" + "very_" * 20 + "far"  # one word: wrapping alone would cut it
    print_report(a_report(items=[{**a_report()["items"][0], "answer": long}]))
    out = capsys.readouterr().out
    assert "far" in out and "…" not in out
    cells = [line.split("│")[4].strip() for line in out.splitlines() if line.count("│") == 8]
    assert "".join(cells) == long


def args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"eval_set": None, "limit": None, "trace": None, "json": False, **given})


def test_the_command_line_refuses_a_bad_set_with_status_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Q?"}\n', encoding="utf-8")
    assert run_eval_cli(args(eval_set=str(bad)), Settings()) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"miniagent eval: {bad}:1: ") and err.endswith("\n")


def test_the_command_line_reads_the_default_set_limits_it_and_prints_json(monkeypatch, capsys):
    seen = {}

    def fake_run(items, settings, trace=None, on_item=None):
        seen.update(items=items, settings=settings, trace=trace, on_item=on_item)
        return a_report(llm="é")

    monkeypatch.setattr(evaluation, "run_eval", fake_run)
    settings = Settings()
    assert run_eval_cli(args(limit=3, json=True), settings) == 0
    assert seen["items"] == evaluation.load_eval_set(evaluation.DEFAULT_SET)[:3] and seen["settings"] is settings
    assert seen["trace"] is None and seen["on_item"] is None  # --json: no progress bar
    out = capsys.readouterr().out
    assert json.loads(out) == a_report(llm="é") and '"é"' in out


def test_the_command_line_prints_the_table_without_json_and_closes_its_trace(monkeypatch, capsys, tmp_path):
    seen = {}
    monkeypatch.setattr(evaluation, "run_eval", lambda items, settings, trace=None, on_item=None: seen.update(
        n=len(items), trace=trace) or a_report())
    monkeypatch.setattr(evaluation, "print_report", lambda report: print("TABLE", report["n"]))
    assert run_eval_cli(args(trace=str(tmp_path / "t.jsonl")), Settings()) == 0
    assert capsys.readouterr().out == "TABLE 2\n"
    assert seen["n"] == len(evaluation.load_eval_set(evaluation.DEFAULT_SET))
    assert seen["trace"] is not None and seen["trace"]._stream is None


def test_the_trace_is_closed_even_when_the_eval_fails(monkeypatch, tmp_path):
    traces = []

    def fails(items, settings, trace=None, on_item=None):
        traces.append(trace)
        raise RuntimeError("the model failed")

    monkeypatch.setattr(evaluation, "run_eval", fails)
    with pytest.raises(RuntimeError):
        run_eval_cli(args(trace=str(tmp_path / "t.jsonl")), Settings())
    assert traces[0]._stream is None


def test_answered_right_counts_answer_items_only_and_declines_apart(stand_in, capsys):
    """Issue 63: a right decline is no right answer; the printed line keeps the two apart."""
    declined = EvalItem("What is the dreaming tense of eat for I?", [], decline="dreaming")
    stand_in(outcome("she went"), outcome("I eat"),
             outcome("I cannot answer that: there is no 'dreaming' tense", "out_of_grammar", turns=0, calls={}))
    report = run_eval([*ITEMS[:2], declined], load_config({"llm": "scripted:oracle"}))
    assert (report["correct"], report["answer_items"], report["answered_right"]) == (2, 2, 1)
    assert (report["decline_items"], report["declined_right"], report["made_up_answers"]) == (1, 1, 0)
    print_report(report)
    assert "answered right: 1/2; declined right: 1/1; made-up forms stated as answers: 0" in capsys.readouterr().out


def test_a_no_of_the_kind_asked_for_is_right_and_a_no_of_another_kind_is_not(stand_in):
    """Issue 62: "nothing to conjugate" names no word; only the no's kind, as data, says it was the right no."""
    nothing = EvalItem("What is the capital of France?", [], decline_kind="nothing")
    comer = EvalItem("Conjugate comer in the past simple for I.", [], decline="comer", decline_kind="verb")
    stand_in(outcome("I conjugate English verbs.", "out_of_grammar", turns=0, calls={}, declined="nothing"),
             outcome("I conjugate English verbs.", "out_of_grammar", turns=0, calls={}, declined="no_tense"),
             outcome("'comer' is a Spanish word", "out_of_grammar", turns=1, declined="verb"),
             outcome("there is no 'comer' tense", "out_of_grammar", turns=0, calls={}, declined="tense"),
             outcome("I will mount", "answered"))
    report = run_eval([nothing, nothing, comer, comer, nothing], load_config({"llm": "scripted:oracle"}))
    assert [r["correct"] for r in report["items"]] == [True, False, True, False, False]
    assert [r["declined"] for r in report["items"]] == ["nothing", "no_tense", "verb", "tense", ""]
    assert (report["decline_items"], report["declined_right"], report["made_up_answers"]) == (5, 2, 1)

