"""The counterexample and mutant tasks read what pytest and mutmut print; these check that reading."""

from __future__ import annotations

import json

from miniagent.lab.commands import counterexamples as ce
from miniagent.lab.commands import mutants
from miniagent.lab.catalogue import catalogue

WORLD = {"en": "A model that repeats one call.\nEvery tool call fails with a tool error.",
         "es": "Un modelo que repite una llamada.\nCada llamada a una herramienta falla."}
PYTEST_OUTPUT = f"""
=================================== FAILURES ===================================
_ test_forced_discovery_calls_are_counted_apart_and_follow_every_breaker_trip __
tests/agent/test_properties.py:219: in test_forced
E   AssertionError: assert ['model_action'] == ['failure_breaker']
E   Failing test case: test_forced(world=World(...))
E   counterexample-json: {json.dumps(WORLD, ensure_ascii=False)}
____________________ test_turns_never_pass_max_turns ____________________
E   AssertionError: Runaway: the model was called 100 times
=========================== short test summary info ============================
"""


def test_the_shrunk_world_and_the_first_error_line_are_read_per_failing_test():
    found = ce.parse(PYTEST_OUTPUT)
    world, error = found["test_forced_discovery_calls_are_counted_apart_and_follow_every_breaker_trip"]
    assert world == WORLD and error == "AssertionError: assert ['model_action'] == ['failure_breaker']"
    assert found["test_turns_never_pass_max_turns"] == (None, "AssertionError: Runaway: the model was called 100 times")


def test_the_page_lists_the_world_in_the_pages_language():
    found = [ce.Counterexample("tests/agent/test_properties.py::test_x", {"en": "It holds.", "es": "Se cumple."}, WORLD,
                               "assert `1` == 2")]
    en, es = ce.render(found, "en", "today"), ce.render(found, "es", "hoy")
    assert "- A model that repeats one call." in en and "Un modelo" not in en
    assert "- Un modelo que repite una llamada." in es and "**Se cumple.**" in es
    assert "`assert '1' == 2`" in en  # a backtick in the error cannot break the inline code


def test_every_break_names_a_property_test_with_two_language_titles():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for brk in catalogue(root):
        tests = ce.property_tests(brk)
        assert tests, f"{brk.id} names no property test in [check] tests"
        for test in tests:
            file, name = test.split("::")
            title = ce.titles(root / file)[name]
            assert title["en"] != title["es"], f"{test} has no Spanish line in its docstring"
            assert all(t.endswith(".") for t in title.values()), f"{test}: a title cut off mid-sentence: {title}"


def test_a_spanish_title_is_its_whole_paragraph(tmp_path):
    source = tmp_path / "test_x.py"
    source.write_text('def test_x():\n    """Every call returns.\n\n    (es) Toda llamada vuelve,\n'
                      '    aunque tarde.\n\n    More words.\n    """\n', encoding="utf-8")
    assert ce.titles(source) == {"test_x": {"en": "Every call returns.", "es": "Toda llamada vuelve, aunque tarde."}}


def test_survivors_are_explained_by_name_or_by_pattern(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / mutants.EXPLAINED).write_text(
        "# Survivors\n\n- `miniagent.agent.loop.xǁGrammarTutorǁfinish__mutmut_3`: the log line only\n"
        "- `miniagent.agent.loop.x_fallback_text__mutmut_*`: wording\n", encoding="utf-8")
    patterns = mutants.explained(tmp_path)
    assert mutants.is_explained("miniagent.agent.loop.xǁGrammarTutorǁfinish__mutmut_3", patterns)
    assert mutants.is_explained("miniagent.agent.loop.x_fallback_text__mutmut_12", patterns)
    assert not mutants.is_explained("miniagent.agent.loop.xǁGrammarTutorǁfinish__mutmut_4", patterns)
