"""The lab's words: one table per language, the same keys and placeholders in both, and no second table."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from rich.console import Console

from miniagent.lab import words as lab_words
from miniagent.lab.catalogue import find
from miniagent.lab import screen
from miniagent.lab.commands import experiment
from miniagent.lab.harness.record import RunRecord, deadline_note, machine_note
from miniagent.models.scripted import BEHAVIOURS

ROOT = Path(__file__).resolve().parents[2]
EN, ES = lab_words.words("en"), lab_words.words("es")

# The same text in both languages on purpose, each with why.
SAME_IN_BOTH = {
    "notebook.busy_line": "a line of the observed block, which stays machine-readable in either language",
    "notebook.comments.outcome": "the outcome words are identifiers the learner types",
    "progress.no": "a dash in a table cell",
    "docs.idx_real": "'real' is Spanish too, and the model's name is a name",
    "docs.sym_label.cpu": "CPU is CPU in Spanish",
    "docs_results.none": "a dash in a table cell",
    "verdict.when_plain": "a full stop",
}
# Only Spanish has it: the English descriptions of the scripted models are the package's own (scripted.BEHAVIOURS).
SPANISH_ONLY = {"behaviours"}


def leaves(table, path=""):
    """(dotted key, value) of every string in a table; lists by index."""
    if isinstance(table, dict):
        for key, value in table.items():
            yield from leaves(value, f"{path}.{key}" if path else key)
    elif isinstance(table, list):
        for i, value in enumerate(table):
            yield from leaves(value, f"{path}[{i}]")
    else:
        yield path, table


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def test_both_languages_have_the_same_keys_and_the_same_shape():
    en = dict(leaves(EN))
    es = {key: value for key, value in leaves(ES) if key.split(".")[0] not in SPANISH_ONLY}
    assert set(en) == set(es), {"only English": sorted(set(en) - set(es)), "only Spanish": sorted(set(es) - set(en))}
    assert all(isinstance(value, str) for value in en.values())


def test_each_text_has_the_same_placeholders_in_both_languages():
    es = dict(leaves(ES))
    differ = {key: (placeholders(text), placeholders(es[key])) for key, text in leaves(EN)
              if placeholders(text) != placeholders(es[key])}
    assert differ == {}


# The guards table's settings and stop reasons are identifiers, the same in every language.
IDENTIFIERS = ("setting", "stop")


def test_every_text_is_translated_but_the_few_that_are_the_same_on_purpose():
    es = dict(leaves(ES))
    same = {key for key, text in leaves(EN) if text == es[key]}
    identifiers = {key for key in same if key.startswith("guards.") and key.rsplit(".", 1)[1] in IDENTIFIERS}
    assert same - identifiers == set(SAME_IN_BOTH)


def test_the_spanish_descriptions_of_the_scripted_models_name_every_one():
    assert set(ES["behaviours"]) == set(BEHAVIOURS)


def written_out(node: ast.AST) -> bool:
    """Text typed into the code: a string, or a container (or f-string) of nothing else."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(written_out(item) for item in node.elts)
    if isinstance(node, ast.Dict):
        return all(written_out(value) for value in node.values)
    return isinstance(node, ast.JoinedStr)


def tables_of_words(tree: ast.AST) -> list[int]:
    """Lines of the dict literals keyed "en" and "es" whose values are written-out text."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            by_key = {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}
            if {"en", "es"} <= set(by_key) and written_out(by_key["en"]) and written_out(by_key["es"]):
                found.append(node.lineno)
    return found


# The agent stands on the standard library alone (tests/test_layout.py) and cannot read the lab's tables: the few
# sentences the tutor says to a user in their language (its no outside the grammar) are its own.
AGENTS_OWN = {"src/miniagent/agent/scope.py"}


def test_no_module_keeps_a_second_table_of_words():
    """Words typed in a table of their own, in the package or the docs hook, would be a second place to translate."""
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in [*sorted((ROOT / "src" / "miniagent").rglob("*.py")), *sorted((ROOT / "docs_hooks").rglob("*.py"))]
             for line in tables_of_words(ast.parse(path.read_text(encoding="utf-8")))
             if str(path.relative_to(ROOT)) not in AGENTS_OWN]
    assert found == []
    # the check itself sees one: the tables as they were before the move
    assert tables_of_words(ast.parse('TEXT = {"en": {"hint": "Hint {n}"}, "es": {"hint": "Pista {n}"}}')) == [1]
    assert tables_of_words(ast.parse('T = {"en": lines[0], "es": es}')) == []


def test_a_language_the_lab_does_not_have_is_refused_by_name():
    with pytest.raises(ValueError, match=r"one of en, es, not 'fr'"):
        lab_words.words("fr")
    assert lab_words.checked(None) == "en"


def test_each_table_read_afresh_is_the_one_the_modules_took_at_import():
    # Both tables are read (and cached) while the lab's modules import: only an uncached read reads the file again.
    assert (lab_words.words.__wrapped__("en"), lab_words.words.__wrapped__("es")) == (EN, ES)


BUSY_UNEXERCISED = dict(command=["x"], timeout=6.0, outcome="fallback", stop_reason="max_turns", wall_s=2.0,
                        clock="loop", loop_start_s=1.5, needs={"tool_calls": 3}, needs_met=False, tool_calls=1,
                        machine_busy=True, other_cpu_mean=120.0, cpus=2, load_avg_start=1.0, load_avg_end=2.5)


def printed(lang: str, record: RunRecord, tmp_path: Path) -> str:
    console = Console(record=True, width=400)
    old, screen.console = screen.console, console
    try:
        experiment.report(record, tmp_path / "r.json", tmp_path / "r.svg", find("no-cap"), "bea", lang=lang)
    finally:
        screen.console = old
    return console.export_text()


@pytest.mark.parametrize("lang", ["en", "es"])
def test_an_experiments_report_and_verdict_are_in_the_learners_language(lang, tmp_path):
    text = printed(lang, RunRecord(**BUSY_UNEXERCISED), tmp_path)
    t = lab_words.words(lang)
    for key in ("title", "outcome", "stop_reason", "turns", "others", "saved"):
        assert t["report"][key].split("{")[0].strip() in text, key
    assert t["verdict"]["not_exercised"].split(":")[0] in text
    assert t["verdict"]["why_busy"] in text and t["verdict"]["when_busy"].strip(", .") in text
    assert t["machine"]["busy"].split(":")[0] in text
    other = lab_words.words("es" if lang == "en" else "en")
    assert other["verdict"]["not_exercised"].split(":")[0] not in text  # nothing of the other language
    assert other["machine"]["busy"].split(":")[0] not in text


@pytest.mark.parametrize("lang", ["en", "es"])
def test_the_symptom_sentences_follow_the_language(lang):
    brk = find("no-cap")
    t = lab_words.words(lang)["verdict"]
    shown = experiment.verdict(brk, RunRecord(command=["x"], timeout=6.0, expect_failures=[]), lang=lang)
    assert shown == [("green", t["symptom_shown"].format(expected=brk.expect.describe()))]
    missed = experiment.verdict(brk, RunRecord(command=["x"], timeout=6.0, expect_failures=["outcome 'answer'"]),
                                lang=lang)
    assert missed == [("bold red", t["symptom_missing"].format(expected=brk.expect.describe(),
                                                               failures="outcome 'answer'", busy=""))]


def test_the_deadline_and_the_busy_machine_are_said_in_spanish():
    record = RunRecord(**{**BUSY_UNEXERCISED, "waited_for_needs_s": 2.0, "hard_capped": True, "hard_cap_s": 60.0})
    note = deadline_note(record, "es")
    assert note.startswith("El tiempo límite de 6 s se contó desde que empezó el bucle, 1,5 s después")
    assert "siguió 2,0 s después de su tiempo límite, hasta mostrar 3 tool calls" in note
    assert note.endswith("la terminó el tope fijo de 60 s desde el arranque.")
    busy = machine_note(record, "es")
    assert busy.startswith("La máquina estaba ocupada: otros programas usaron de media un 120 % de CPU")
    assert ", carga media 1 -> 2,5)" in busy
    assert re.search(r"[a-z]", deadline_note(record, "en")) and "timeout counted" in deadline_note(record, "en")


def test_a_figure_is_written_as_each_language_writes_it():
    from miniagent.lab.words import number

    assert (number(2.5, "en"), number(2.5, "es")) == ("2.5", "2,5")
    assert (number(3.14159, "es", ".2f"), number(12, "es", ".1f"), number(7, "es")) == ("3,14", "12,0", "7")
    assert number(None, "es") == number(None, "en") == "?"  # a figure the system did not give
    assert (number(0.00001, "en"), number(0.00001, "es")) == ("1e-05", "1e-05")  # Python's own small figures


def test_the_spanish_class_table_writes_decimal_commas_the_english_one_points():
    from miniagent.lab.maintainers import classload

    level = {"learners": 1, "questions": 30, "wall_s": 140.2, "turn_p50_s": 3.2, "turn_p95_s": 3.9, "turns": 60,
             "run_p50_s": 4.5, "run_p95_s": 5.4, "answered": 30, "stop_reasons": {"answered": 30}, "correct": 26}
    report = {"server": "miniagent", "cpus": 2, "eval_set": "labs/01-tutor-end-to-end/eval.jsonl",
              "questions_each": None, "settings": {}, "levels": [level], "measured_at": "2026-11-26 10:47",
              "load_before": 1.63, "others_cpu_mean": 3.5, "busy_others": 50.0}
    es, en = classload.markdown(report, "es"), classload.markdown(report, "en")
    assert "| 1 | 30 | 140 | 12,8 | 3,2 / 3,9 | 4,5 / 5,4 |" in es and "| 1 | 30 | 140 | 12.8 | 3.2 / 3.9 |" in en
    assert "un 3,5 % de un núcleo" in es and "(carga media de 1 minuto antes de empezar: 1,63)" in es


def test_a_section_holds_each_languages_own_words():
    from miniagent.lab.words import LANGS, section, words

    report = section("report")
    assert set(report) == set(LANGS) and all(report[lang] == words(lang)["report"] for lang in LANGS)
    assert report["es"] != report["en"]
