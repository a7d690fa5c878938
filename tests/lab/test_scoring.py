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
