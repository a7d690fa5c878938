"""``invoke check-breaks --lines`` (lab/maintainers/partial_fixes.py): every piece a break removes is needed.

The pieces are computed from the real patches; pytest's runs are stand-ins that answer with the exit status the
test gives them (the real runs are in ``.ci/run``, ``invoke check-breaks --real --lines``)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from miniagent.lab.catalogue import ROOT, Break, catalogue, find
from miniagent.lab.maintainers import checks, partial_fixes
from miniagent.lab.patching import hunks

NO_CAP = find("no-cap")


def labels(brk: Break) -> list[str]:
    return [p.label for p in partial_fixes.pieces(brk)]


def test_the_pieces_of_no_cap_are_each_removed_statement_and_each_term_of_the_cap_check():
    found = labels(NO_CAP)
    assert "loop.py:153 without `self.turn_cap.check(self.stats.turns)`" in found
    # the learner's fix that counted the breaker's discovery calls against the model's cap (issue 49's item 5)
    assert "loop.py:208 without the term `- self.stats.forced_calls`" in found
    assert "loop.py:143-144 without `if action.plan_steps: …`" in found  # a compound statement, whole
    assert "loop.py:144 without `self.call_cap.declare_plan(action.plan_steps)`" in found  # and its body alone
    assert not any("one hunk" in label for label in found)  # its hunks only remove: their statements cover them


def test_a_term_drop_changes_only_that_term_and_every_piece_compiles():
    [piece] = [p for p in partial_fixes.pieces(NO_CAP) if p.label.endswith("`- self.stats.forced_calls`")]
    intact = (ROOT / piece.file).read_text(encoding="utf-8").splitlines()
    changed = [(a, b) for a, b in zip(intact, piece.text.splitlines()) if a != b]
    assert changed == [("        self.call_cap.check(sum(self.stats.tool_calls.values()) - self.stats.forced_calls)",
                        "        self.call_cap.check(sum(self.stats.tool_calls.values()))")]
    for brk in catalogue():
        for p in partial_fixes.pieces(brk):
            compile(p.text, p.label, "exec")


def test_a_docstring_is_no_piece_and_a_replacing_hunk_is_one():
    found = labels(find("broad-catch"))
    assert not any('"""' in label for label in found)
    first, second = hunks(find("broad-catch").patch)  # the first replaces lines, the second only removes them
    assert f"errors.py:{first.old_start} left broken (one hunk)" in found
    assert f"errors.py:{second.old_start} left broken (one hunk)" not in found


def test_each_hunk_applied_alone_then_all_gives_what_git_apply_gives(tmp_path):
    brk = find("no-wall-clock")
    file = "src/miniagent/agent/loop.py"
    text = (ROOT / file).read_text(encoding="utf-8")
    for hunk in reversed(hunks(brk.patch)):  # from the bottom, so that each hunk's line numbers still hold
        text = hunk.apply_to(text)
    (tmp_path / "src/miniagent/agent").mkdir(parents=True)
    (tmp_path / file).write_text((ROOT / file).read_text(encoding="utf-8"), encoding="utf-8")
    subprocess.run(["git", "apply", str(brk.patch)], cwd=tmp_path, check=True)
    assert text == (tmp_path / file).read_text(encoding="utf-8")


@pytest.fixture
def runs(monkeypatch):
    """Stand-ins for the check's copies and pytest runs: each piece's run exits with ``codes[its label]`` (1 when
    not given), found by the text it wrote, and prints ``out``."""
    how = {"codes": {}, "out": ""}
    label_of = {p.text: p.label for p in partial_fixes.pieces(NO_CAP)}  # here: ast.parse is not for threads (3.11)

    def work_copy(root, prefix):
        work = Path(tempfile.mkdtemp(prefix=prefix))
        (work / "src/miniagent/agent").mkdir(parents=True)
        shutil.copy(ROOT / "src/miniagent/agent/loop.py", work / "src/miniagent/agent/loop.py")  # intact
        return work

    def pytest_run(work, tests, timeout_s, *extra):
        text = (work / "src/miniagent/agent/loop.py").read_text(encoding="utf-8")
        label = label_of.get(text, "intact")
        return subprocess.CompletedProcess([], how["codes"].get(label, 1), stdout=how["out"], stderr="")

    monkeypatch.setattr(checks, "_work_copy", work_copy)
    monkeypatch.setattr(checks, "_pytest", pytest_run)
    return how


def test_a_piece_whose_guard_tests_pass_is_reported_and_a_red_one_is_not(runs):
    assert checks.check_pieces(NO_CAP) == []
    term = "loop.py:208 without the term `- self.stats.forced_calls`"
    runs["codes"] = {term: 0}
    assert checks.check_pieces(NO_CAP) == [
        f"a fix {term} passes its guard tests (or list it under [[check.cosmetic]] with why)"]


@pytest.mark.parametrize("code", [2, 4])
def test_tests_that_cannot_import_the_piece_are_red_and_any_other_usage_error_is_the_checks(runs, code):
    label = "loop.py:153 without `self.turn_cap.check(self.stats.turns)`"
    runs["codes"] = {label: code}
    runs["out"] = "____ ERROR collecting tests/agent/test_guards.py ____\nNameError: name 'CapHit' is not defined"
    assert checks.check_pieces(NO_CAP) == []
    runs["out"] = "ERROR: not found: tests/x.py::y"
    [problem] = checks.check_pieces(NO_CAP)
    assert problem.startswith(f"the check is broken: the guard tests exited {code}")


def test_a_cosmetic_piece_is_excused_only_while_it_passes_and_only_if_it_exists(runs):
    term = "loop.py:208 without the term `- self.stats.forced_calls`"
    excused = Break(**{**vars(NO_CAP), "cosmetic": [{"piece": term, "why": {"en": "x", "es": "x"}}]})
    runs["codes"] = {term: 0}
    assert checks.check_pieces(excused) == []
    runs["codes"] = {"intact": 0}
    assert checks.check_pieces(excused) == [
        f"{term} is listed as cosmetic, yet its guard tests catch it: take it off the list"]
    runs["codes"] = {"intact": 1}  # the intact source fails too (a busy machine): nothing is said about the list
    assert checks.check_pieces(excused) == []
    stale = Break(**{**vars(NO_CAP), "cosmetic": [{"piece": "loop.py:1 without `x`", "why": {"en": "x", "es": "x"}}]})
    assert checks.check_pieces(stale) == [
        "[[check.cosmetic]] names 'loop.py:1 without `x`', which is no piece of this break"]


def test_every_cosmetic_piece_says_why_in_both_languages():
    for brk in catalogue():
        for entry in brk.cosmetic:
            assert entry["why"]["en"].strip() and entry["why"]["es"].strip(), brk.id
