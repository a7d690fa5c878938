"""The exercise loop in the terminal: progress, hint, next, reset, watch, and the state behind them.

The state (``learners/NAME/progress.json``) must survive every command and must never be overwritten
when it is bad; reset must bring one break's lines back and touch nothing else; watch must re-run the
guard tests on a save and end cleanly on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from miniagent.lab.learner import notebook, paths, progress
from miniagent.lab.commands import exercises, experiment
from miniagent.lab.catalogue import find
from miniagent.lab.patching import apply_to_tree, is_applied, reset_in_tree

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tree(tmp_path):
    """A learner's clone: src/, breaks/, tests/ under git, as after `git clone`."""
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "breaks", "tests"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    subprocess.run("git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm clone",
                   shell=True, cwd=tree, check=True)
    return tree


# --------------------------------------------------------------------------
# The state file
# --------------------------------------------------------------------------

def test_the_state_survives_and_is_written_atomically(tmp_path):
    assert progress.load(tmp_path, "bea") == {"version": 1, "lang": None, "breaks": {}}
    progress.update(tmp_path, "bea", lambda s: progress.break_state(s, "00-no-cap").update(hints=1))
    progress.update(tmp_path, "bea", lambda s: s.update(lang="es"))
    state = progress.load(tmp_path, "bea")
    assert state["breaks"] == {"00-no-cap": {"hints": 1}} and state["lang"] == "es"
    folder = tmp_path / "learners" / "bea"
    assert sorted(p.name for p in folder.iterdir()) == ["progress.json"], "no temporary file left behind"


@pytest.mark.parametrize("content, problem", [
    ("{ not json", "line 1, column 3"),
    ('{"version": 1, "breaks": {"00-no-cap": {"hints": "two"}}}', "hints must be int"),
    ('{"version": 1, "breaks": {"00-no-cap": {"hints": true}}}', "hints must be int"),
    ('{"version": 1, "breaks": {"00-no-cap": {"mood": 1}}}', "not a field the lab knows"),
    ('{"version": 9, "breaks": {}}', "version 9"),
    ('{"version": 1, "lang": "fr", "breaks": {}}', "lang must be one of en, es"),
    ("[]", "expected a JSON object"),
])
def test_a_bad_state_file_is_a_clear_error_and_is_never_overwritten(tmp_path, content, problem):
    path = progress.state_path(tmp_path, "bea")
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    for attempt in (lambda: progress.load(tmp_path, "bea"),
                    lambda: progress.update(tmp_path, "bea", lambda s: s.update(lang="en"))):
        with pytest.raises(progress.StateError) as err:
            attempt()
        assert str(path) in str(err.value) and problem in str(err.value) and "not changed" in str(err.value)
    assert path.read_text(encoding="utf-8") == content


def test_every_command_refuses_a_bad_state_file_and_changes_nothing(learner, capsys):
    path = progress.state_path(ROOT, learner)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"version": 1, "breaks": {"00-no-cap": {"hints": 1}},}')
    src = {p: p.read_bytes() for p in (ROOT / "src").rglob("*.py")}
    for command in (lambda: exercises.hint("no-cap", learner), lambda: exercises.progress_report(learner),
                    lambda: exercises.next_break(learner), lambda: exercises.break_tree("no-cap", learner),
                    lambda: exercises.fix_tree("no-cap", learner), lambda: exercises.reset_tree("no-cap", learner),
                    lambda: exercises.check("no-cap", learner=learner),
                    lambda: experiment.exp("no-cap", learner=learner, llm="scripted:oracle", live=False)):
        with pytest.raises(progress.StateError):
            command()
    assert path.read_bytes() == b'{"version": 1, "breaks": {"00-no-cap": {"hints": 1}},}'
    assert {p: p.read_bytes() for p in (ROOT / "src").rglob("*.py")} == src, "a refused command changed src/"


def test_the_learner_is_remembered_once_named(tmp_path):
    with pytest.raises(ValueError, match="--learner NAME"):
        progress.resolve_learner(tmp_path, None)
    assert progress.resolve_learner(tmp_path, None, required=False) is None
    assert progress.resolve_learner(tmp_path, "bea") == "bea"
    assert progress.resolve_learner(tmp_path, None) == "bea"
    with pytest.raises(ValueError, match="not usable"):
        progress.resolve_learner(tmp_path, "../x")


@pytest.mark.parametrize("name", ["", "x" * 65, "a/b", "a..b"])
def test_a_name_no_folder_can_have_is_refused_and_not_remembered(tmp_path, name):
    """Seen: a 300-character name reached the file system (File name too long), after it had been remembered, so
    every later command failed the same way. An empty one was read as no name at all."""
    progress.resolve_learner(tmp_path, "bea")
    with pytest.raises(ValueError, match=r"is not usable as a folder name: use up to 64 letters"):
        progress.resolve_learner(tmp_path, name)
    assert progress.resolve_learner(tmp_path, None) == "bea", "the learner named before is still the one remembered"
    assert progress.resolve_learner(tmp_path, "x" * 64) == "x" * 64


def test_a_remembered_name_no_folder_can_have_says_how_to_name_yourself(tmp_path):
    (tmp_path / progress.CURRENT_LEARNER).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / progress.CURRENT_LEARNER).write_text("x" * 300 + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^the remembered learner name 'x+' is not usable as a folder name: .*"
                                         r"; name yourself with --learner NAME$"):
        progress.resolve_learner(tmp_path, None)


# --------------------------------------------------------------------------
# hint, progress, next
# --------------------------------------------------------------------------

def test_hints_come_one_at_a_time_and_are_remembered(learner, capsys):
    brk = find("no-cap")
    assert exercises.hint("no-cap", learner) == 1
    out = capsys.readouterr().out
    assert "Hint 1 of 3" in out and brk.hints["en"][0][:30] in out and brk.hints["en"][1][:30] not in out
    assert exercises.hint("no-cap", learner, lang="es") == 2  # the first --lang is the learner's choice, remembered
    out = capsys.readouterr().out
    assert "Pista 2 de 3" in out and brk.hints["es"][1][:30] in out and "`invoke hint no-cap` para la pista 3" in out
    assert exercises.hint("no-cap", learner) == 3  # as that line says: no --lang, still Spanish
    assert "Era la última pista" in capsys.readouterr().out
    assert exercises.hint("no-cap", learner, lang="en") == 3  # no fourth: all three again; a later --lang is one-off
    out = capsys.readouterr().out
    assert all(h[:30] in out for h in brk.hints["en"])
    assert progress.load(ROOT, learner)["lang"] == "es"
    assert exercises.hint("dead-config", learner, lang="en") == 1
    assert "Run `invoke hint dead-config --lang en` again for hint 2." in capsys.readouterr().out
    assert progress.load(ROOT, learner)["breaks"]["00-no-cap"]["hints"] == 3
    assert exercises.hint("dead-config", learner) == 2, "each break counts its own hints"


def test_progress_follows_the_learner_through_one_break(tree):
    """predict -> run -> break -> fix by hand -> verified: each step moves the break to the next stage."""
    def stage() -> str:
        return progress.rows(tree, "bea")[0].stage

    assert stage() == progress.PREDICT
    path, _ = notebook.add_prediction(tree, "bea", "00-no-cap", "no caps")
    path.write_text(path.read_text(encoding="utf-8").replace("outcome: ?", "outcome: timeout"), encoding="utf-8")
    assert stage() == progress.RUN
    progress.update(tree, "bea", lambda s: progress.break_state(s, "00-no-cap").update(runs=1, hits=1, fields=1))
    assert stage() == progress.BREAK
    apply_to_tree(find("no-cap", tree), tree)
    progress.update(tree, "bea", lambda s: progress.break_state(s, "00-no-cap").update(broken_at=progress.now()))
    assert stage() == progress.FIX and progress.rows(tree, "bea")[0].applied
    # a break applied in src/ comes first in `next`, whatever its place in the catalogue
    assert progress.next_row(progress.rows(tree, "bea")).break_id == "00-no-cap"
    reset_in_tree(find("no-cap", tree), tree)
    progress.update(tree, "bea", lambda s: progress.break_state(s, "00-no-cap").update(fixed_at=progress.now()))
    rows = progress.rows(tree, "bea")
    assert rows[0].stage == progress.DONE and rows[0].fixed
    assert rows[0].broken, "a verified fix still shows the break as broken once (issue 63)"
    assert progress.next_row(rows).break_id == "01-dead-config"
    steps = progress.next_steps(tree, "bea", progress.next_row(rows), "es")
    assert steps[0].startswith("Siguiente: 01-dead-config") and "invoke predict dead-config" in steps[1]


def test_a_break_applied_again_after_its_fix_is_to_fix_again_not_done(tree):
    """Fixed and verified, then `invoke break` once more: src/ decides, not the old verdict. The table shows the
    break to fix, and `next` points at it again with the fixing commands."""
    path, _ = notebook.add_prediction(tree, "bea", "00-no-cap", "no caps")
    path.write_text(path.read_text(encoding="utf-8").replace("outcome: ?", "outcome: timeout"), encoding="utf-8")
    progress.update(tree, "bea", lambda s: progress.break_state(s, "00-no-cap").update(runs=1, fixed_at=progress.now()))
    assert progress.rows(tree, "bea")[0].stage == progress.DONE
    apply_to_tree(find("no-cap", tree), tree)  # what `invoke break no-cap` does to src/ and to the progress file
    progress.update(tree, "bea", lambda s: progress.break_state(s, "00-no-cap").update(broken_at=progress.now()))
    rows = progress.rows(tree, "bea")
    assert (rows[0].stage, rows[0].applied, rows[0].fixed) == (progress.FIX, True, False)
    assert progress.next_row(rows) is rows[0]
    steps = progress.next_steps(tree, "bea", rows[0], "en")
    assert steps[0].startswith("Next: 00-no-cap") and any("invoke watch no-cap" in step for step in steps[1:]), steps


def test_an_unreadable_prediction_is_shown_not_fatal(tree):
    path, _ = notebook.add_prediction(tree, "bea", "00-no-cap", "no caps")
    path.write_text(path.read_text(encoding="utf-8").replace("outcome: ?", "outcome: maybe"), encoding="utf-8")
    row = progress.rows(tree, "bea")[0]
    assert row.predicted is None and "outcome must be one of" in row.prediction_problem
    assert any("cannot be read" in line for line in progress.next_steps(tree, "bea", row, "en"))


@pytest.mark.parametrize("lang", ["en", "es"])
def test_the_progress_table_fits_80_columns_without_a_word_cut(learner, lang, monkeypatch):
    import io

    from rich.console import Console

    from miniagent.lab import screen

    narrow = Console(file=io.StringIO(), width=80, color_system=None)
    monkeypatch.setattr(screen, "console", narrow)
    progress.update(ROOT, learner, lambda s: progress.break_state(s, "13-final-round-offers-tools").update(
        broken_at=progress.now()))
    exercises.progress_report(learner, lang)
    shown = narrow.file.getvalue()
    assert "…" not in shown and "13-final-round-offers-tools" in shown, shown
    assert all(len(line) <= 80 for line in shown.splitlines())
    for header in progress.TEXT[lang]["cols"]:
        assert header in shown


def test_progress_and_next_print_the_table_and_the_commands(learner, capsys):
    exercises.progress_report(learner)
    out = capsys.readouterr().out
    assert "00-no-cap" in out and "14-ungrounded-answer" in out
    assert f"invoke predict no-cap" in out
    exercises.next_break(learner, lang="es")
    assert "Siguiente: 00-no-cap" in capsys.readouterr().out


def test_a_green_check_after_you_broke_it_is_fixed_and_verified(learner, capsys):
    progress.update(ROOT, learner, lambda s: progress.break_state(s, "00-no-cap").update(broken_at=progress.now()))
    assert not is_applied(find("no-cap"))
    assert exercises.check("no-cap", learner=learner) == 0
    state = progress.load(ROOT, learner)["breaks"]["00-no-cap"]
    assert state["fixed_at"] and state["broken_at"] is None
    assert "fixed and verified by you" in capsys.readouterr().out
    [row] = [r for r in progress.rows(ROOT, learner) if r.break_id == "00-no-cap"]
    assert (row.broken, row.fixed) == (True, True), "after a verified fix: broken once, and fixed (issue 63)"
    # a green check on a break you never broke verifies nothing
    assert exercises.check("dead-config", learner=learner) == 0
    assert "01-dead-config" not in progress.load(ROOT, learner)["breaks"]


@pytest.mark.parametrize("how", ["dry run", "still applied"])
def test_no_state_changes_without_its_precondition(learner, how, monkeypatch):
    """Verified means: you broke it, it is no longer applied, and its guard tests *ran* green. A dry run only
    collects them; a break still applied is not fixed, whatever the tests say."""
    progress.update(ROOT, learner, lambda s: progress.break_state(s, "00-no-cap").update(broken_at=progress.now()))
    before = progress.load(ROOT, learner)
    if how == "dry run":
        assert exercises.check("no-cap", dry_run=True, learner=learner) == 0
    else:  # the guard tests pass (here: said to), but the break is still in src/
        monkeypatch.setattr(exercises, "is_applied", lambda brk, root=None: True)
        monkeypatch.setattr(exercises.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
        assert exercises.check("no-cap", learner=learner) == 0
    assert progress.load(ROOT, learner) == before


@pytest.mark.parametrize("code", [1, 2, 4, 5])
def test_a_check_that_is_not_green_records_no_fix_whatever_broke_it(learner, code, monkeypatch, capsys):
    """Issue 63: a save that breaks collection (a syntax error in src/: pytest exits 2; a test that no longer
    exists: 4; none collected: 5) is no fix, however it exits; only 0 is."""
    progress.update(ROOT, learner, lambda s: progress.break_state(s, "00-no-cap").update(broken_at=progress.now()))
    before = progress.load(ROOT, learner)
    said = "ERROR src/miniagent/agent/loop.py - SyntaxError: invalid syntax\n"
    monkeypatch.setattr(exercises.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, code, stdout=said, stderr=""))
    assert exercises.check("no-cap", learner=learner) == code
    assert progress.load(ROOT, learner) == before
    assert "fixed and verified" not in capsys.readouterr().out


# --------------------------------------------------------------------------
# reset
# --------------------------------------------------------------------------

def test_reset_when_intact_or_applied_as_is(tree):
    brk = find("no-cap", tree)
    before = {p: p.read_bytes() for p in (tree / "src").rglob("*.py")}
    assert reset_in_tree(brk, tree).how == "intact"
    apply_to_tree(brk, tree)
    result = reset_in_tree(brk, tree)
    assert result.how == "reverted" and result.files == ["src/miniagent/agent/loop.py"]
    assert {p: p.read_bytes() for p in (tree / "src").rglob("*.py")} == before


def test_reset_puts_the_break_back_to_intact_and_keeps_every_other_edit(tree):
    brk = find("dead-config", tree)
    apply_to_tree(brk, tree)
    loop = tree / "src/miniagent/agent/loop.py"
    broken = loop.read_text()
    # a fix in progress on the broken line, and edits of the learner's own elsewhere
    attempt = broken.replace("TurnCap(TutorConfig.max_turns)", "TurnCap(TutorConfig.max_turns + 0)  # my try")
    assert attempt != broken
    attempt = attempt.replace('"""', '"""My note at the top of the loop.\n', 1)
    loop.write_text(attempt)
    other = tree / "src/miniagent/agent/guards.py"
    other.write_text(other.read_text() + "\n# my own edit in another file\n")
    result = reset_in_tree(brk, tree, backups=tree / "backups")
    assert result.how == "merged" and result.files == ["src/miniagent/agent/loop.py"]
    now = loop.read_text()
    assert "my try" not in now and "My note at the top of the loop." in now, "only the break's lines changed"
    assert other.read_text().endswith("# my own edit in another file\n"), "another file was touched"
    assert not is_applied(brk, tree)
    assert subprocess.run(["git", "apply", "--check", str(brk.patch)], cwd=tree).returncode == 0, \
        "the break's lines are intact again (the break applies cleanly)"
    saved = result.backup / "src/miniagent/agent/loop.py"
    assert saved.read_text() == attempt, "the learner's attempt was saved before it was replaced"


# --------------------------------------------------------------------------
# watch
# --------------------------------------------------------------------------

def _read_until(proc: subprocess.Popen, needle: str, lines: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return
    raise AssertionError(f"no {needle!r} within {timeout} s; output so far:\n{''.join(lines)}")


def test_watch_reruns_the_guard_tests_on_a_save_and_stops_cleanly_on_ctrl_c(tree):
    """A short-lived watcher: the first run, a save, the second run, then Ctrl-C (SIGINT)."""
    apply_to_tree(find("no-cap", tree), tree)
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "miniagent.lab.commands.watch", "no-cap", "--root", str(tree)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tree)
    lines: list[str] = []
    try:
        _read_until(proc, "first run", lines)
        assert " RED " in lines[-1], "the break is applied: its guard tests fail"
        reset_in_tree(find("no-cap", tree), tree)  # the learner's fix, saved
        _read_until(proc, "saved loop.py", lines)
        # an editor (or git) may write a file in more than one step: the run after the last step is green
        while " GREEN " not in lines[-1]:
            _read_until(proc, "saved loop.py", lines)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines)
    assert "Stopped watching." in "".join(lines) and "Traceback" not in "".join(lines)


def test_only_a_save_of_a_python_file_wakes_the_watcher():
    from watchdog import events as ev

    from miniagent.lab.commands.watch import saved_file

    saves = [ev.FileModifiedEvent("/s/loop.py"), ev.FileClosedEvent("/s/loop.py"), ev.FileCreatedEvent("/s/new.py"),
             ev.FileDeletedEvent("/s/gone.py"), ev.FileMovedEvent("/s/.loop.py.swp", "/s/loop.py")]
    assert [saved_file(e) for e in saves] == ["/s/loop.py", "/s/loop.py", "/s/new.py", "/s/gone.py", "/s/loop.py"]
    not_saves = [ev.FileOpenedEvent("/s/loop.py"), ev.FileClosedNoWriteEvent("/s/loop.py"),
                 ev.DirModifiedEvent("/s"), ev.FileModifiedEvent("/s/__pycache__/loop.cpython-311.pyc"),
                 ev.FileModifiedEvent("/s/.loop.py.swp"), ev.FileModifiedEvent("/s/notes.txt"),
                 ev.FileMovedEvent("/s/loop.py", "/s/loop.py.bak")]
    assert [saved_file(e) for e in not_saves] == [None] * len(not_saves)


def test_watch_stops_after_max_runs(tree, capsys):
    from miniagent.lab.commands.watch import watch

    seen = []
    assert watch("no-cap", tree, max_runs=1, on_result=seen.append) == 0
    assert seen == [True]
    assert "GREEN" in capsys.readouterr().out


def test_the_notebook_language_is_chosen_once(learner, capsys):
    experiment.predict("no-cap", learner, lang="es")
    path = paths.notebook_path(ROOT, learner)
    assert path.read_text(encoding="utf-8").startswith("# Mis predicciones para las averías")
    assert "## 00-no-cap — Agente sin terminación" in path.read_text(encoding="utf-8")
    assert "Sección de predicción para 00-no-cap añadida" in capsys.readouterr().out
    assert progress.load(ROOT, learner)["lang"] == "es"
    experiment.predict("dead-config", learner, lang="en")  # a later --lang does not switch the notebook
    assert "seguirá así" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert "### Por qué lo creo" in text.split("## 01-dead-config")[1] and "Why I think so" not in text
    assert progress.load(ROOT, learner)["lang"] == "es"
    exercises.hint("no-cap", learner)  # the hints follow the notebook's language
    assert "Pista 1 de 3" in capsys.readouterr().out


PYTEST_RED = """____________________ test_turns_never_pass_max_turns ____________________
tests/agent/test_properties.py:30: in test_turns_never_pass_max_turns
E   AssertionError: Runaway: the tools were called 100 times
Falsifying example: ...
counterexample-json: {"en": "A model that answers for ever.", "es": "Un modelo que responde sin fin."}
You can add @seed(1) to this test or run pytest with --hypothesis-seed=1 to reproduce this failure.
1 failed, 4 passed in 1.00s
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_red_check_says_one_thing_per_failing_test_and_keeps_pytest_for_verbose(verbose, monkeypatch, capsys):
    monkeypatch.setattr(exercises.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, PYTEST_RED, "git apply .hypothesis/patches/x"))
    assert exercises.check("no-cap", verbose=verbose) == 1
    out = capsys.readouterr().out
    ours = out[out.index("✗"):]  # after pytest's own output, when asked for
    assert " ".join(ours.split()) == (
        "✗ A run never takes more turns than max_turns. A model that answers for ever. what the test saw: "
        "AssertionError: Runaway: the tools were called 100 times 1 of 5 guard tests fail. `invoke check no-cap "
        "--verbose` shows pytest's own output; `invoke hint no-cap` gives a hint.")
    assert out.startswith("✗") != verbose
    assert (".hypothesis/patches" in out) == verbose and ("@seed" in out) == verbose  # pytest's words: asked for


def test_a_red_check_speaks_the_learners_language(learner, monkeypatch, capsys):
    progress.update(ROOT, learner, lambda s: s.update(lang="es"))
    monkeypatch.setattr(exercises.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, PYTEST_RED, ""))
    assert exercises.check("no-cap", learner=learner) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "✗ Una ejecución nunca dura más turnos que max_turns."
    assert "    Un modelo que responde sin fin." in out and "Fallan 1 de 5 pruebas de la guarda." in out
