"""The comparison a learner reads after a run: each row's word, its tolerance and its colour, in both languages.

``test_notebook.py`` judges predictions; this file checks what the judgement looks like on the screen (the rich
table ``invoke exp`` prints) and in the notebook (the words), exactly: a row shown green that missed, a tolerance
left in English on the Spanish table, or a column shifted would tell the learner something the run did not say.
"""

from __future__ import annotations

import pytest
from rich.text import Text

from miniagent.lab.learner.scoring import Row, hit_word, render_comparison, tolerance_text


@pytest.mark.parametrize("lang, words", [
    ("en", ("hit", "miss", "not predicted", "not observed", "not exercised", "crashed")),
    ("es", ("acierto", "fallo", "sin predecir", "sin observar", "no ejercitada", "se rompió")),
])
def test_each_kind_of_row_has_its_word(lang, words):
    hit, miss, not_predicted, not_observed, not_exercised, crashed = words
    assert hit_word(True, 3, lang=lang) == hit
    assert hit_word(False, 3, lang=lang) == miss
    assert hit_word(None, None, lang=lang) == not_predicted
    assert hit_word(None, 3, lang=lang) == not_observed  # predicted, but the run has no such figure
    assert hit_word(True, 3, "not exercised", lang) == not_exercised  # a note wins over the judgement
    assert hit_word(False, 3, "crashed", lang) == crashed
    assert hit_word(None, 3, "some other note", lang) == "some other note"


def test_a_tolerance_is_translated_word_by_word_and_numbers_are_kept():
    assert tolerance_text("×2 or ±2 (0–4)", "es") == "×2 o ±2 (0–4)"
    assert tolerance_text("±25 points (0–75 %)", "es") == "±25 puntos (0–75 %)"
    assert tolerance_text("exact", "es") == "exacto"
    assert tolerance_text("±50 % or ±3 s", "es") == "±50 % o ±3 s"
    for rule in ("×2 or ±2 (0–4)", "±25 points (0–75 %)", "exact"):
        assert tolerance_text(rule, "en") == rule


ROWS = [Row("outcome", "timeout", "timeout", True, "exact"),
        Row("wall_s", 2, 30.5, False, "±3 s (0–5 s)"),
        Row("cpu_percent", None, 98.0, None, "±25 points"),
        Row("tool_calls", 4, 1, None, "×2 or ±2 (2–8)", note="not exercised")]


FMT_NONE = "?"  # a field not predicted


def cells(table, row: int) -> list[str]:
    return [str(column._cells[row]) for column in table.columns]


@pytest.mark.parametrize("lang, title, columns, words", [
    ("en", "Your prediction vs what happened", ["field", "predicted", "observed", "result", "tolerance"],
     ("hit", "miss", "not predicted", "not exercised", "±25 points", "×2 or ±2 (2–8)")),
    ("es", "Tu predicción frente a lo que pasó", ["campo", "predicho", "observado", "resultado", "tolerancia"],
     ("acierto", "fallo", "sin predecir", "no ejercitada", "±25 puntos", "×2 o ±2 (2–8)")),
])
def test_the_table_has_one_row_per_field_in_the_learners_language(lang, title, columns, words):
    table = render_comparison(ROWS, lang)
    assert table.title == title and table.title_justify == "left"
    assert [c.header for c in table.columns] == columns
    assert [c.justify for c in table.columns] == ["left", "right", "right", "left", "left"]  # numbers line up
    assert [c.style for c in table.columns] == ["", "", "", "", "dim"]  # the tolerance is a footnote
    hit, miss, not_predicted, not_exercised, tolerance, factor = words
    assert cells(table, 0) == ["outcome", "timeout", "timeout", hit, "exact" if lang == "en" else "exacto"]
    assert cells(table, 1)[3] == miss and cells(table, 2)[3] == not_predicted and cells(table, 3)[3] == not_exercised
    assert cells(table, 2)[4] == tolerance and cells(table, 3)[4] == factor
    assert cells(table, 1)[1:3] == ["2", "30.5"] and cells(table, 2)[1] == FMT_NONE


def test_the_colour_says_the_judgement_and_a_note_stands_out():
    table = render_comparison(ROWS)
    result = table.columns[3]._cells
    assert [cell.style for cell in result] == ["bold green", "bold red", "", "bold yellow"]
    assert [row.style for row in table.rows] == [None, None, "dim", None]  # a field not predicted is dimmed whole


def test_a_learners_text_is_shown_as_written_never_read_as_markup():
    table = render_comparison([Row("outcome", "[bold]answer[/bold]", "[red]x", False, "exact")])
    shown = table.columns[1]._cells[0]
    assert isinstance(shown, Text) and str(shown) == "[bold]answer[/bold]"
    assert isinstance(table.columns[2]._cells[0], Text) and str(table.columns[2]._cells[0]) == "[red]x"


def test_no_language_is_english_and_an_unknown_one_is_refused():
    assert render_comparison(ROWS, None).title == "Your prediction vs what happened"
    assert cells(render_comparison(ROWS, None), 0)[3] == "hit"
    with pytest.raises(ValueError, match="language must be one of"):
        render_comparison(ROWS, "fr")


# How a prediction is judged, on numbers worked out by hand: the tolerance a row shows and its edges.

from miniagent.lab.learner.fields import fmt  # noqa: E402
from miniagent.lab.learner.scoring import compare, exercised, observed_values  # noqa: E402

RUN = {"outcome": "timeout", "wall_s": 30.0, "cpu_mean": 98.0, "tool_calls": 180, "processes_left": []}


def row(field: str, predicted, **observed):
    return next(r for r in compare({field: predicted}, {**RUN, **observed}) if r.field == field)


@pytest.mark.parametrize("field, predicted, tolerance", [
    ("wall_s", 2, "±3 s (0–5 s)"), ("wall_s", 20, "±10 s (10–30 s)"),
    ("cpu_percent", 10, "±25 points (0–35 %)"), ("cpu_percent", 50, "±25 points (25–75 %)"),
    ("tool_calls", 1, "×2 or ±2 (0–3)"), ("tool_calls", 3, "×2 or ±2 (1–6)"), ("tool_calls", 10, "×2 or ±2 (5–20)"),
    ("outcome", "timeout", "exact"), ("processes_left", 0, "exact"),
    ("wall_s", None, "±50 % or ±3 s"), ("cpu_percent", None, "±25 points"), ("tool_calls", None, "×2 or ±2"),
    ("outcome", None, "exact"), ("processes_left", None, "exact"),
])
def test_each_field_shows_its_band_worked_out_from_the_prediction(field, predicted, tolerance):
    assert row(field, predicted).tolerance == tolerance


@pytest.mark.parametrize("field, predicted, observed, hit", [
    ("wall_s", 10, {"wall_s": 5.0}, True), ("wall_s", 10, {"wall_s": 15.0}, True),
    ("wall_s", 10, {"wall_s": 4.99}, False), ("wall_s", 10, {"wall_s": 15.01}, False),
    ("cpu_percent", 50, {"cpu_mean": 25.0}, True), ("cpu_percent", 50, {"cpu_mean": 75.0}, True),
    ("cpu_percent", 50, {"cpu_mean": 24.9}, False), ("cpu_percent", 50, {"cpu_mean": 75.1}, False),
    ("tool_calls", 3, {"tool_calls": 1}, True), ("tool_calls", 3, {"tool_calls": 6}, True),
    ("tool_calls", 3, {"tool_calls": 0}, False), ("tool_calls", 3, {"tool_calls": 7}, False),
    ("tool_calls", 10, {"tool_calls": 5}, True), ("tool_calls", 10, {"tool_calls": 4}, False),
    ("outcome", "TIMEOUT", {"outcome": "timeout"}, True), ("outcome", "answer", {}, False),
    ("processes_left", 1, {"processes_left": [{"pid": 9}]}, True), ("processes_left", 0, {"processes_left": [1]}, False),
    ("processes_left", 2, {"processes_left": 2}, True),  # a count already: taken as it is
])
def test_a_band_holds_its_edges_and_nothing_past_them(field, predicted, observed, hit):
    assert row(field, predicted, **observed).hit is hit


def test_a_figure_the_run_lacks_is_not_observed_rather_than_missed():
    assert row("wall_s", 10, wall_s=None).hit is None and row("outcome", "answer", outcome=None).hit is None


def test_the_record_maps_onto_the_prediction_fields():
    assert observed_values({**RUN, "stop_reason": "max_turns", "processes_left": [{"pid": 1}, {"pid": 2}]}) == {
        "outcome": "timeout", "stop_reason": "max_turns", "wall_s": 30.0, "cpu_percent": 98.0, "processes_left": 2,
        "tool_calls": 180}
    assert observed_values({"processes_left": 3})["processes_left"] == 3 and observed_values({})["processes_left"] is None


def test_a_crashed_or_unexercised_run_is_not_exercised():
    assert exercised(RUN) and exercised({**RUN, "needs_met": True}) and exercised({**RUN, "signal": ""})
    assert not exercised({**RUN, "needs_met": False}) and not exercised({**RUN, "signal": "SIGSEGV"})


@pytest.mark.parametrize("value, shown", [(None, "?"), (True, "true"), (False, "false"), (30.0, "30"), (98.666, "98.7"),
                                          (0.05, "0.1"), (2.96, "3"), (2, "2"), (float("inf"), "inf"), (float("nan"), "nan"),
                                          ("Timeout", "Timeout")])
def test_numbers_are_shown_for_people(value, shown):
    assert fmt(value) == shown


def test_hit_word_is_english_by_default():
    assert hit_word(True, 1) == "hit" and hit_word(None, None) == "not predicted"


def test_a_value_not_predicted_but_observed_reads_not_predicted_in_the_table():
    table = render_comparison([Row("wall_s", None, 30.0, None, "±50 % or ±3 s")])
    assert str(table.columns[3]._cells[0]) == "not predicted"


def test_a_prediction_without_an_observed_figure_reads_not_observed_in_the_table():
    table = render_comparison([Row("wall_s", 10, None, None, "±5 s (5–15 s)")], "es")
    assert str(table.columns[3]._cells[0]) == "sin observar"
