"""The counterexample and mutant tasks read what pytest and mutmut print; these check that reading."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.lab.maintainers import counterexamples as ce
from miniagent.lab.maintainers import mutants
from miniagent.lab.catalogue import ROOT, catalogue, find as find_break

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

    root = Path(__file__).resolve().parents[3]
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


# --- find and write, with pytest's run stood in -------------------------------------------------------------

@pytest.fixture
def pytest_run(monkeypatch):
    """pytest's run in the sandbox, stood in: what it was asked, the sandbox as it was, and its printed output."""
    seen = {}
    real_run = subprocess.run

    def run(command, *, cwd, capture_output, text, env=None):
        if command[1:3] != ["-m", "pytest"]:  # git, applying the break to the copy
            return real_run(command, cwd=cwd, capture_output=capture_output, text=text, env=env)
        sandbox = Path(cwd)
        seen.update(command=command, cwd=sandbox, env=env, capture_output=capture_output, text=text,
                    tests_copied=(sandbox / "tests" / "agent" / "test_properties.py").is_file(),
                    pyproject=(sandbox / "pyproject.toml").read_text(encoding="utf-8"),
                    loop=(sandbox / "src" / "miniagent" / "agent" / "loop.py").read_text(encoding="utf-8"))
        return subprocess.CompletedProcess(command, 1, stdout=seen.get("output", PYTEST_OUTPUT), stderr="")

    monkeypatch.setattr(ce.subprocess, "run", run)
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "3")
    return seen


def test_find_runs_the_breaks_property_tests_against_the_broken_copy_and_removes_it(pytest_run):
    brk = dataclasses.replace(find_break("no-cap"), tests=[
        "tests/agent/test_properties.py::test_turns_never_pass_max_turns",
        "tests/agent/test_guards.py::test_turn_cap_stops_a_model_that_never_answers",
        "tests/agent/test_properties.py::test_forced_discovery_calls_are_counted_apart_and_follow_every_breaker_trip",
        "tests/agent/test_properties.py::test_some_property_that_held"])
    found = ce.find(brk)
    sandbox = pytest_run["cwd"]
    assert not sandbox.exists(), "the sandbox outlived the run"
    assert pytest_run["command"] == [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short",
                                     "--timeout", "600", brk.tests[0], brk.tests[2], brk.tests[3]]
    assert pytest_run["capture_output"] is True and pytest_run["text"] is True
    env = pytest_run["env"]
    assert env["PYTHONPATH"] == str(sandbox / "src") and env["HYPOTHESIS_PROFILE"] == "counterexamples"
    assert not any(key.startswith("MINIAGENT_") for key in env) and env["PATH"] == os.environ["PATH"]
    assert pytest_run["tests_copied"] and pytest_run["pyproject"] == (ROOT / "pyproject.toml").read_text("utf-8")
    assert pytest_run["loop"] != (ROOT / "src/miniagent/agent/loop.py").read_text("utf-8"), "the break was not applied"
    titles = ce.titles(ROOT / "tests/agent/test_properties.py")
    assert found == [
        ce.Counterexample(brk.tests[0], titles["test_turns_never_pass_max_turns"], None,
                          "AssertionError: Runaway: the model was called 100 times"),
        ce.Counterexample(brk.tests[2],
                          titles["test_forced_discovery_calls_are_counted_apart_and_follow_every_breaker_trip"],
                          WORLD, "AssertionError: assert ['model_action'] == ['failure_breaker']")]


def test_find_copies_the_source_of_the_root_it_is_given(pytest_run, tmp_path):
    root = tmp_path / "lab"
    for folder in ("src", "tests", "breaks"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "pyproject.toml").write_text("# this lab's own\n", encoding="utf-8")
    loop = root / "src/miniagent/agent/loop.py"
    loop.write_text(loop.read_text(encoding="utf-8") + "# this lab's own\n", encoding="utf-8")
    ce.find(find_break("no-cap", root), root)
    assert pytest_run["loop"].endswith("# this lab's own\n") and pytest_run["pyproject"] == "# this lab's own\n"


def test_write_finds_the_breaks_of_the_root_it_is_given(tmp_path, monkeypatch):
    root = tmp_path / "lab"
    shutil.copytree(ROOT / "breaks", root / "breaks")
    seen = []
    monkeypatch.setattr(ce, "find", lambda brk, given_root: seen.append((brk.patch, given_root)) or [])
    ce.write(tmp_path / "out", only="no-cap", root=root)
    ce.write(tmp_path / "out", root=root)
    every = len([p for p in (root / "breaks").iterdir() if (p / "break.toml").is_file()])
    assert all(patch.is_relative_to(root) and given == root for patch, given in seen) and len(seen) == 1 + every == 18


def test_a_failing_test_without_a_docstring_title_is_named_by_itself(pytest_run):
    pytest_run["output"] = "_____ test_not_in_the_file _____\nE   AssertionError: no\n"
    brk = dataclasses.replace(find_break("no-cap"), tests=["tests/agent/test_properties.py::test_not_in_the_file"])
    [found] = ce.find(brk)
    assert found.title == {"en": "test_not_in_the_file", "es": "test_not_in_the_file"} and found.world is None


def test_a_break_without_property_tests_runs_nothing(pytest_run):
    brk = dataclasses.replace(find_break("no-cap"), tests=["tests/agent/test_guards.py::test_x"])
    assert ce.find(brk) == [] and pytest_run == {}


def test_write_makes_both_pages_of_every_chosen_break_and_says_what_failed(tmp_path, monkeypatch, capsys):
    found = [ce.Counterexample("tests/agent/test_properties.py::test_x", {"en": "It holds.", "es": "Se cumple."},
                               WORLD, ""),
             ce.Counterexample("tests/agent/test_properties.py::test_y", {"en": "Y.", "es": "Y."}, None, "")]
    monkeypatch.setattr(ce, "find", lambda brk, root: found if brk.id == "00-no-cap" else [])
    monkeypatch.setattr(ce, "datetime", type("D", (), {"now": staticmethod(lambda: __import__("datetime").datetime(
        2026, 11, 27))}))
    clock = iter([10.0, 12.6])
    monkeypatch.setattr(ce.time, "monotonic", lambda: next(clock))
    written = ce.write(tmp_path / "docs" / "results", only="no-cap")
    assert written == [tmp_path / "docs" / "results" / "00-no-cap-counterexample.md",
                       tmp_path / "docs" / "results" / "00-no-cap-counterexample.es.md"]
    assert written[0].read_text(encoding="utf-8") == ce.render(found, "en", "2026-11-27, 3 s")
    assert written[1].read_text(encoding="utf-8") == ce.render(found, "es", "2026-11-27, 3 s")
    assert capsys.readouterr().out == "00-no-cap: test_x; test_y\n"


def test_write_without_a_choice_writes_every_break(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ce, "find", lambda brk, root: [])
    written = ce.write(tmp_path)
    assert len(written) == 2 * len(catalogue()) and all(p.is_file() for p in written)
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{brk.id}: no property fails" for brk in catalogue()]


def test_the_page_says_when_no_property_fails_or_a_test_failed_outside_a_world():
    assert ce.render([], "en", "today") == "\n".join([ce.TEXT["en"]["intro"].format(stamp="today"), "",
                                                      ce.TEXT["en"]["none"], ""])
    page = ce.render([ce.Counterexample("t.py::test_y", {"en": "Y.", "es": "Y es."}, None, "")], "es", "hoy")
    assert page == "\n".join([ce.TEXT["es"]["intro"].format(stamp="hoy"), "",
                              ce.TEXT["es"]["fails"].format(title="Y es.", test="test_y"), "",
                              ce.TEXT["es"]["no_world"], ""])


def test_a_numbered_world_stays_a_numbered_list():
    world = {"en": "1. The model calls conjugate.\n2. The server hangs.\nEvery call times out.", "es": "x"}
    page = ce.render([ce.Counterexample("t.py::test_z", {"en": "Z.", "es": "Z."}, world, "boom")], "en", "now")
    assert page.split("\n")[4:] == ["    1. The model calls conjugate.", "    2. The server hangs.",
                                     "- Every call times out.", "", ce.TEXT["en"]["error"].format(error="boom"), ""]
    assert page.split("\n")[2] == ce.TEXT["en"]["fails"].format(title="Z.", test="test_z")


def test_a_title_without_a_spanish_paragraph_is_the_english_one_in_both(tmp_path):
    source = tmp_path / "test_t.py"
    source.write_text('def test_x():\n    """Every call returns.\n\n    More words."""\n\n\n'
                      'def test_y():\n    """Every run ends.\n\n    (es)Toda ejecución acaba."""\n', encoding="utf-8")
    assert ce.titles(source) == {"test_x": {"en": "Every call returns.", "es": "Every call returns."},
                                 "test_y": {"en": "Every run ends.", "es": "Toda ejecución acaba."}}
