"""The paragraph an observed block opens with when its run scored nothing or was disturbed, word for word.

A run that crashed, never reached the broken code, or ran on a busy machine must say so in the learner's
notebook, and say which (a crash is not a slow machine; an unexercised run names what it lacked and the command
that runs it again). A clean run gets no such paragraph.
"""

from __future__ import annotations

import pytest

from miniagent.lab.learner.notebook import DEFAULT_HEADER, TEXT, PredictionError, append_observation, how_to_predict
from miniagent.lab.learner.scoring import compare

CLEAN = {"outcome": "timeout", "stop_reason": None, "wall_s": 30.4, "cpu_mean": 97.2, "tool_calls": 180,
         "turns": 181, "processes_left": [], "loop_start_s": 0.8}


def block(tmp_path, lang="en", **changes) -> str:
    observed = {**CLEAN, **changes}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, compare({"outcome": "timeout"}, observed),
                              None, None, "now", lang)
    return last_block(path)


def last_block(path) -> str:
    """The observed block appended last, from its heading on."""
    text = path.read_text(encoding="utf-8")
    return text[text.rindex("### "):]


def test_a_clean_run_opens_with_no_paragraph(tmp_path):
    text = block(tmp_path)
    assert "crashed" not in text and "never exercised" not in text and "was busy" not in text


@pytest.mark.parametrize("loop_start_s, turns, when", [(0.8, 3, "after 3 turn(s)"), (0.8, None, "after 0 turn(s)"),
                                                        (None, 3, "before its loop started")])
def test_a_crash_says_the_signal_and_when_it_came(tmp_path, loop_start_s, turns, when):
    text = block(tmp_path, signal="SIGSEGV", loop_start_s=loop_start_s, turns=turns)
    assert f"This run crashed: the agent died of SIGSEGV {when}. A crash says nothing about the break" in text
    assert "never exercised" not in text  # a crash is said once, as a crash


def test_a_crash_in_spanish(tmp_path):
    text = block(tmp_path, "es", signal="SIGABRT", loop_start_s=None)
    assert "Esta ejecución se rompió: el agente murió por SIGABRT antes de que empezara su bucle." in text


def test_an_unexercised_run_names_what_it_needed_and_how_to_run_it_again(tmp_path):
    text = block(tmp_path, needs_met=False, needs={"tool_calls": 1, "identical_calls": 2})
    assert ("This run never exercised the break (it needs 1 tool calls, 2 identical calls before its timeout may "
            "end it)") in text
    assert "Run it again: `invoke exp no-cap --learner bea`." in text


def test_an_unexercised_run_without_named_needs_asks_for_more_of_the_loop(tmp_path):
    text = block(tmp_path, needs_met=False)
    assert "(it needs more of the loop before its timeout may end it)" in text
    assert "(necesita recorrer más bucle antes" in block(tmp_path, "es", needs_met=False)


def test_a_busy_machine_is_said_only_when_the_run_was_scored(tmp_path):
    assert "The machine was busy during this run: wall time and CPU figures are disturbed." in \
        block(tmp_path, machine_busy=True)
    unexercised = block(tmp_path, machine_busy=True, needs_met=False)
    assert "never exercised" in unexercised and "was busy during this run" not in unexercised


# A whole block, as the learner's file gets it: the record, the paragraph, the table, the links, blank lines and
# all (Markdown needs the blank lines: without the one before a table, the table is a paragraph of pipes).

def test_a_crashed_run_in_spanish_is_written_whole(tmp_path):
    (tmp_path / "runs").mkdir()
    observed = {"outcome": "crash", "stop_reason": None, "wall_s": 1.5, "cpu_mean": 40.0, "tool_calls": 0, "turns": 1,
                "processes_left": [], "loop_start_s": 0.5, "signal": "SIGSEGV"}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, compare({"outcome": "timeout", "wall_s": 30}, observed),
                              tmp_path / "runs" / "r.json", tmp_path / "runs" / "r.svg", "2026-11-26 08:00", "es")
    assert last_block(path) == (
        "### Observado — 00-no-cap (2026-11-26 08:00)\n\n"
        "```observed\noutcome: crash\nstop_reason: none\nwall_s: 1.5\ncpu_percent: 40\ntool_calls: 0\n"
        "processes_left: 0\ncrashed: SIGSEGV\n```\n\n"
        "Esta ejecución se rompió: el agente murió por SIGSEGV tras 1 turno(s). Un fallo así no dice nada de la avería, "
        "así que no se ha puntuado nada, y repetirla con la máquina más tranquila no servirá de nada: mira «Cuando el "
        "modelo se rompe» en el lab 02.\n\n"
        "| | predicho | observado | acierto/fallo | tolerancia |\n|---|---|---|---|---|\n"
        "| outcome | timeout | crash | se rompió | exacto |\n"
        "| wall_s | 30 | 1.5 | se rompió | ±15 s (15–45 s) |\n"
        "| cpu_percent | ? | 40 | sin predecir | ±25 puntos |\n"
        "| tool_calls | ? | 0 | sin predecir | ×2 o ±2 |\n"
        "| processes_left | ? | 0 | sin predecir | exacto |\n\n"
        "- registro de la ejecución: [r.json](../../runs/r.json)\n- gráfica: [r.svg](../../runs/r.svg)\n")


def test_a_scored_run_with_misses_asks_what_surprised_the_learner_whole(tmp_path):
    observed = {"outcome": "crash", "stop_reason": None, "wall_s": 1.5, "cpu_mean": 40.0, "tool_calls": 0,
                "processes_left": []}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, compare({"outcome": "timeout", "wall_s": 30},
                                                                               observed), None, None, "w", "en")
    assert last_block(path) == (
        "### Observed — 00-no-cap (w)\n\n"
        "```observed\noutcome: crash\nstop_reason: none\nwall_s: 1.5\ncpu_percent: 40\ntool_calls: 0\n"
        "processes_left: 0\n```\n\n"
        "| | predicted | observed | hit/miss | tolerance |\n|---|---|---|---|---|\n"
        "| outcome | timeout | crash | miss | exact |\n"
        "| wall_s | 30 | 1.5 | miss | ±15 s (15–45 s) |\n"
        "| cpu_percent | ? | 40 | not predicted | ±25 points |\n"
        "| tool_calls | ? | 0 | not predicted | ×2 or ±2 |\n"
        "| processes_left | ? | 0 | not predicted | exact |\n\n"
        "**What surprised you?** 2 of your 2 predictions missed. Before you read on, write here what you expected, "
        "what happened instead, and what in the loop could explain the gap. Stuck? `invoke hint no-cap` gives hint 1 "
        "(then 2, then 3).\n")


def test_a_run_without_a_prediction_says_so_and_nothing_more(tmp_path):
    observed = {"outcome": "answer", "stop_reason": "answered", "wall_s": 1.0, "cpu_mean": 10.0, "tool_calls": 1,
                "processes_left": []}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, None, None, None, "w")
    assert last_block(path).endswith("```\n\n" + TEXT["en"]["no_prediction"] + "\n")


def test_a_prediction_error_names_the_file_the_line_and_what_it_holds():
    assert str(PredictionError("learners/bea/notebook.md", 12, "  wall_s: soon  ", "wall_s: not a number")) == \
        'learners/bea/notebook.md:12: "wall_s: soon" wall_s: not a number'
    assert str(PredictionError("learners/bea/notebook.md", None, None, "no prediction block")) == \
        "learners/bea/notebook.md: no prediction block"


@pytest.mark.parametrize("lang, first", [
    ("en", "You have no prediction for 00-no-cap yet (a block whose values are all still ? counts as none)."),
    ("es", "Todavía no tienes una predicción para 00-no-cap (un bloque que aún tiene ? en todos sus valores no "
           "cuenta).")])
def test_the_way_to_predict_names_the_break_the_learner_and_their_notebook(lang, first):
    text = how_to_predict("00-no-cap", "bea", lang)
    assert " ".join(text.split()).startswith(first) and "invoke predict no-cap --learner bea" in text
    assert "learners/bea/notebook.md" in text and text.endswith("invoke exp no-cap --learner bea")


@pytest.mark.parametrize("changes, paragraph", [
    ({"needs_met": False}, "Run it again: `invoke exp no-cap --learner bea`."),
    ({"machine_busy": True}, "The machine was busy during this run: wall time and CPU figures are disturbed."),
])
def test_the_paragraph_stands_apart_from_the_table_by_a_blank_line(tmp_path, changes, paragraph):
    assert paragraph + "\n\n| | predicted |" in block(tmp_path, **changes)


def test_a_prediction_the_run_has_no_figure_for_reads_not_observed(tmp_path):
    observed = {**CLEAN, "wall_s": None}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, compare({"wall_s": 10}, observed), None, None, "w")
    assert "| wall_s | 10 | ? | not observed | ±5 s (5–15 s) |" in path.read_text(encoding="utf-8")


def test_a_notebook_an_observation_creates_is_in_the_learners_language(tmp_path):
    path = append_observation(tmp_path, "bea", "00-no-cap", CLEAN, None, None, None, "w", "es")
    assert path.read_text(encoding="utf-8").startswith(DEFAULT_HEADER["es"]) and DEFAULT_HEADER["es"] != DEFAULT_HEADER["en"]
