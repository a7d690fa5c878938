"""What the lab prints through rich: text from the model, the agent and the learner is shown as it is.

rich reads ``[word]`` as markup, so an unescaped fallback answer such as
"... reached max_turns=1 [stop_reason: max_turns]." loses its bracket on screen.
"""

from __future__ import annotations

import io
from rich.console import Console

from helpers import screen_console

from miniagent.lab.learner import scoring
from miniagent.lab import screen
from miniagent.lab.commands import experiment
from miniagent.lab.harness.follow import Progress
from miniagent.lab.harness.record import RunRecord
from miniagent.lab.harness.panel import render_panel

ANSWER = "The conjugation server failed: reached max_turns=1 [stop_reason: server_failed]."


def recording_console(monkeypatch) -> Console:
    return screen_console(monkeypatch, colours=False, width=200)


def a_record(**extra) -> RunRecord:
    return RunRecord(command=["x"], timeout=6.0, outcome="fallback", stop_reason="server_failed", answer=ANSWER,
                     wall_s=2.0, processes_left=[{"pid": 1, "cmdline": "python -m x [bold]"}],
                     tool_calls_by_tool={"[conjugate]": 1}, tool_calls=1, **extra)


def test_the_report_shows_the_answer_and_the_table_unchanged(monkeypatch, tmp_path):
    console = recording_console(monkeypatch)
    experiment.report(a_record(), tmp_path / "run[1].json", tmp_path / "run[1].svg")
    text = console.export_text()
    assert ANSWER in text
    assert "python -m x [bold]" in text and "[conjugate]" in text
    assert "run[1].json" in text


def test_the_live_panel_shows_the_last_action_unchanged():
    progress = Progress()
    progress.add({"event": "model_action", "turn": 1, "text": '{"answer": "[b]she went[/b]"}'}, 0.1)
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    console.print(render_panel(elapsed=1.0, timeout=6.0, progress=progress, samples=[]))
    assert '{"answer": "[b]she went[/b]"}' in console.export_text()


def test_the_comparison_table_shows_values_unchanged():
    rows = [scoring.Row("outcome", "[timeout]", "fallback", False, "exact [strict]")]
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    console.print(scoring.render_comparison(rows))
    text = console.export_text()
    assert "[timeout]" in text and "exact [strict]" in text


def test_the_tour_table_shows_the_stop_reason_unchanged(monkeypatch):
    console = recording_console(monkeypatch)
    record = a_record().to_dict()
    record["stop_reason"] = "[max_turns]"
    monkeypatch.setattr(experiment, "_tour_runs", lambda *a: [{"id": "02-broad-catch", "llm": "llama", "real_model": True,
                                                         "predicted": None, "record": record, "hits": 0,
                                                         "fields": 0}])
    experiment.tour()
    assert "[max_turns]" in console.export_text()


def test_the_recording_console_does_read_markup():
    """The tests above would prove nothing if this console ignored markup."""
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    console.print(ANSWER)
    assert ANSWER not in console.export_text()


def test_the_live_panel_shows_the_clock_and_a_busy_machine():
    progress = Progress()
    progress.add({"event": "run_start"}, 2.5)
    samples = [[2.6 + 0.2 * i, 95.0, 500.0, 2, 120.0] for i in range(10)]
    console = Console(record=True, width=160, file=io.StringIO(), color_system=None)
    console.print(render_panel(elapsed=4.5, timeout=6.0, progress=progress, samples=samples, counted=2.0,
                               clock="counted from the loop's start; needs tool_calls 0/1"))
    text = console.export_text()
    assert "2.0 / 6.0 s" in text and "counted from the loop's start; needs tool_calls 0/1" in text
    assert "120 % used by other programs" in text and "busy machine" in text
    quiet = [[*s[:4], 10.0] for s in samples]
    console = Console(record=True, width=160, file=io.StringIO(), color_system=None)
    console.print(render_panel(elapsed=4.5, timeout=6.0, progress=progress, samples=quiet))
    assert "busy machine" not in console.export_text()
