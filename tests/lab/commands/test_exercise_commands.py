"""The exercise commands read whole: ``invoke list``, ``break``, ``fix``, ``reset``, ``hint`` and ``watch``.

The changes to the learner's source are stood in here (what the command asked for is recorded): these tests read
the command's own decisions, what it remembers in ``progress.json`` and every line it prints. The patching itself
runs on a learner's clone in ``test_exercise_loop.py`` and ``test_reset.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import printed, screen_console
from rich.console import Console

from miniagent.lab.catalogue import ALL, ROOT, catalogue, find
from miniagent.lab.commands import exercises
from miniagent.lab.learner import progress
from miniagent.lab.learner.progress import StateError
from miniagent.lab.patching import ResetResult

NOW = "2026-11-27T01:02:03"


@pytest.fixture
def shown(monkeypatch) -> Console:
    return screen_console(monkeypatch, colours=True, width=300)


@pytest.fixture
def source(monkeypatch):
    """The learner's source, stood in: which breaks are applied, and what each command asked of it."""
    class Source:
        applied: set[str] = set()
        asked: list[tuple[str, str]] = []
        reset = ResetResult("reverted", ["src/miniagent/agent/loop.py"])

    src = Source()
    src.applied, src.asked = set(), []
    monkeypatch.setattr(exercises, "is_applied", lambda brk: brk.id in src.applied)
    monkeypatch.setattr(exercises, "apply_to_tree", lambda brk: src.asked.append(("apply", brk.id)))
    monkeypatch.setattr(exercises, "revert_in_tree", lambda brk: src.asked.append(("revert", brk.id)))
    monkeypatch.setattr(exercises, "reset_in_tree", lambda brk: src.asked.append(("reset", brk.id)) or src.reset)
    monkeypatch.setattr(progress, "now", lambda: NOW)
    return src


def state(learner: str, break_id: str) -> dict:
    return progress.load(ROOT, learner)["breaks"].get(break_id, {})


def damage(learner: str) -> None:
    folder = ROOT / "learners" / learner
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "progress.json").write_text("{not json", encoding="utf-8")


# --- list --------------------------------------------------------------------------------------------------

def test_the_catalogue_lists_every_break_with_its_model_and_whether_it_is_applied(shown, source):
    source.applied = {"03-no-dedup"}
    exercises.list_breaks()
    lines = printed(shown)
    assert lines[0] == "The break catalogue: `invoke exp ALIAS` runs one, `invoke break ALIAS` applies it"
    expected = []
    for brk in catalogue():
        model = "real model" if brk.real_model else f"stand-in {brk.llm}"
        applied = " (applied in your src/)" if brk.id == "03-no-dedup" else ""
        expected.append(f"  {brk.id:<20} {brk.title['en']} ({model}){applied}")
    assert lines[1:] == expected
    colours = printed(shown, styles=True)
    dedup = next(line for line in colours if "03-no-dedup" in line)
    assert "\x1b[31m(applied in your src/)\x1b[0m" in dedup and "\x1b[1m03-no-dedup         \x1b[0m" in dedup
    assert "\x1b[2m(stand-in scripted:stubborn)\x1b[0m" in dedup
    assert "1m00-no-cap" in colours[1] and "\x1b[1;36m" not in "".join(colours[1:]), "a number was painted"


# --- break and fix -----------------------------------------------------------------------------------------

def test_break_applies_it_remembers_when_and_says_how_to_fix_it(shown, source, learner):
    brk = find("no-dedup")
    exercises.break_tree("no-dedup", learner)
    assert source.asked == [("apply", "03-no-dedup")]
    assert state(learner, "03-no-dedup") == {"broken_at": NOW}
    assert printed(shown) == [
        f"03-no-dedup applied to src/: {brk.removes['en']}.",
        "Now find what is missing, without the diff: `invoke watch no-dedup` runs its guard tests on every save, "
        "`invoke hint no-dedup` gives one hint at a time. `invoke fix no-dedup` reverts it exactly."]
    first = printed(shown, styles=True)[0]
    assert first.startswith("\x1b[1;31m") and "-no-dedup\x1b[0m applied to src/: identical-call dedup." in first


def test_a_spanish_learner_reads_break_fix_and_the_catalogue_in_spanish(shown, source, learner):
    """Issue 65: the learner's language, chosen once, for every line these commands print."""
    progress.learner_lang(ROOT, learner, "es")
    brk = find("no-dedup")
    exercises.break_tree("no-dedup", learner)
    exercises.fix_tree("no-dedup", learner)
    exercises.list_breaks("es")
    lines = printed(shown)
    assert lines[:3] == [
        f"03-no-dedup aplicada en src/: {brk.removes['es']}.",
        "Ahora busca lo que falta, sin mirar el diff: `invoke watch no-dedup` ejecuta sus pruebas de la guarda cada "
        "vez que guardas, `invoke hint no-dedup` da una pista cada vez. `invoke fix no-dedup` la revierte "
        "exactamente.",
        "03-no-dedup revertida: src/ está como antes de la avería."]
    assert lines[3] == "El catálogo de averías: `invoke exp ALIAS` ejecuta una, `invoke break ALIAS` la aplica"
    assert f"  {brk.id:<20} {brk.title['es']} (sustituto {brk.llm})" in lines[4:]


def test_fix_reverts_it_and_remembers_when(shown, source, learner):
    exercises.break_tree("no-dedup", learner)
    exercises.fix_tree("no-dedup", learner)
    assert source.asked == [("apply", "03-no-dedup"), ("revert", "03-no-dedup")]
    assert state(learner, "03-no-dedup") == {"broken_at": None, "reverted_at": NOW}
    assert printed(shown)[-1] == "03-no-dedup reverted: src/ is as before the break."
    last = printed(shown, styles=True)[-1]
    assert last.startswith("\x1b[1;32m") and last.endswith("-no-dedup\x1b[0m reverted: src/ is as before the break.")


def learner_folders() -> list[str]:
    """The checkout's learner folders, less the throwaway learners that tests on other workers come and go with."""
    return sorted(p.name for p in (ROOT / "learners").iterdir() if not p.name.startswith("pytest-loop-"))


def test_without_a_learner_break_and_fix_remember_nothing(shown, source):
    before = learner_folders()
    exercises.break_tree("no-dedup")
    exercises.fix_tree("no-dedup")
    assert source.asked == [("apply", "03-no-dedup"), ("revert", "03-no-dedup")]
    assert learner_folders() == before


@pytest.mark.parametrize("command", [exercises.break_tree, exercises.fix_tree, exercises.reset_tree])
def test_a_damaged_progress_file_stops_a_change_to_the_source_before_it_is_made(shown, source, learner, command):
    damage(learner)
    with pytest.raises(StateError):
        command("no-dedup", learner)
    assert source.asked == []


# --- reset ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how, files, backup, lines", [
    ("intact", [], None, ["03-no-dedup: src/ is already intact for this break; nothing changed."]),
    ("reverted", ["src/miniagent/agent/loop.py"], None,
     ["03-no-dedup: reverted exactly (the break was applied as it was)."]),
    ("merged", ["src/a [b].py", "src/b.py"], Path("/tmp/backup [b]"),
     ["03-no-dedup: its lines are intact again in src/a [b].py, src/b.py; your other edits stay.",
      "Your version before the reset is saved in /tmp/backup [b]."]),
])
def test_reset_says_what_it_did_and_remembers_only_a_change(shown, source, learner, how, files, backup, lines):
    exercises.break_tree("no-dedup", learner)
    source.reset = ResetResult(how, files, backup)
    exercises.reset_tree("no-dedup", learner)
    assert source.asked[-1] == ("reset", "03-no-dedup")
    assert printed(shown)[2:] == lines
    assert "\x1b[" not in "".join(printed(shown, styles=True)[2:]), "a line to copy was painted"
    expected = {"broken_at": NOW} if how == "intact" else {"broken_at": None, "reverted_at": NOW}
    assert state(learner, "03-no-dedup") == expected


def test_reset_speaks_the_learners_language_or_the_one_given(shown, source, learner):
    progress.learner_lang(ROOT, learner, "es")
    source.reset = ResetResult("intact")
    exercises.reset_tree("no-dedup", learner)
    exercises.reset_tree("no-dedup", None, "es")
    exercises.reset_tree("no-dedup")
    spanish = exercises.TEXT["es"]["intact"].format(id="03-no-dedup", files="")
    assert printed(shown) == [spanish, spanish, "03-no-dedup: src/ is already intact for this break; nothing changed."]
    assert spanish != printed(shown)[-1]


# --- hint ------------------------------------------------------------------------------------------------------

def test_a_hint_is_bold_its_text_plain_and_the_next_step_dim(shown, learner):
    brk = find("no-cap")
    exercises.hint("no-cap", learner)
    lines = printed(shown, styles=True)
    assert lines == ["\x1b[1mHint 1 of 3 for 00-no-cap\x1b[0m", f"  {brk.hints['en'][0]}",
                     "\x1b[2mRun `invoke hint no-cap` again for hint 2.\x1b[0m"]


def test_after_the_last_hint_every_hint_is_shown_again_numbered(shown, learner):
    brk = find("no-cap")
    for _ in range(3):
        exercises.hint("no-cap", learner)
    last = "That was the last hint. The hidden cause is folded on the break's page."
    assert printed(shown, styles=True)[-1] == f"\x1b[2m{last}\x1b[0m"
    shown.export_text()  # clears the record
    assert exercises.hint("no-cap", learner) == 3
    assert printed(shown, styles=True) == ["\x1b[1mYou have seen all 3 hints for 00-no-cap:\x1b[0m",
                             *(f"  {i}. {text}" for i, text in enumerate(brk.hints["en"], 1))]
    assert state(learner, "00-no-cap")["hints"] == 3


def test_a_break_without_hints_in_the_learners_language_gives_the_english_ones(shown, learner, monkeypatch):
    import dataclasses

    english_only = dataclasses.replace(find("no-cap"), hints={"en": find("no-cap").hints["en"]})
    monkeypatch.setattr(exercises, "find", lambda variant: english_only)
    exercises.hint("no-cap", learner, lang="es")
    assert printed(shown)[1] == f"  {english_only.hints['en'][0]}"
    assert printed(shown)[0] == exercises.TEXT["es"]["hint"].format(n=1, total=3, id="00-no-cap")


# --- watch -----------------------------------------------------------------------------------------------------

@pytest.fixture
def watcher(monkeypatch):
    from miniagent.lab.commands import watch as watch_module

    calls = []

    def fake_watch(variant, root, *, lang, max_runs, console, on_result):
        calls.append({"variant": variant, "root": root, "lang": lang, "max_runs": max_runs, "console": console})
        for green in results:
            on_result(green)
        return 7

    results: list[bool] = []
    monkeypatch.setattr(watch_module, "watch", fake_watch)
    return calls, results


def test_watch_hands_the_watcher_the_break_the_language_and_the_screen(shown, source, watcher, learner):
    calls, _ = watcher
    assert exercises.watch_tree("no-dedup", learner, max_runs=2) == 7
    assert calls == [{"variant": "no-dedup", "root": ROOT, "lang": "en", "max_runs": 2, "console": shown}]
    exercises.watch_tree(ALL, None, "es")
    assert calls[-1]["variant"] == ALL and calls[-1]["lang"] == "es" and calls[-1]["max_runs"] is None


def test_a_green_run_after_you_broke_it_is_fixed_and_verified_once(shown, source, watcher, learner):
    _, results = watcher
    results.extend([False, True, True])
    exercises.break_tree("no-dedup", learner)
    exercises.watch_tree("no-dedup", learner)
    verified = "03-no-dedup: fixed and verified by you. `invoke next` shows what comes next."
    assert printed(shown).count(verified) == 1
    assert f"\x1b[1;32m{verified}\x1b[0m" in printed(shown, styles=True)
    assert state(learner, "03-no-dedup") == {"broken_at": None, "fixed_at": NOW}


def test_a_green_run_is_not_a_fix_while_the_break_is_applied_or_never_was(shown, source, watcher, learner):
    _, results = watcher
    results.append(True)
    exercises.watch_tree("no-dedup", learner)  # never broken by this learner
    source.applied = {"03-no-dedup"}
    exercises.break_tree("no-dedup", learner)
    exercises.watch_tree("no-dedup", learner)  # still applied
    exercises.watch_tree(ALL, learner)  # every break's tests: no one break to verify
    exercises.watch_tree("no-dedup")  # nobody to remember it for
    assert not any("verified" in line for line in printed(shown))
    assert state(learner, "03-no-dedup") == {"broken_at": NOW}


def test_watch_refuses_a_damaged_progress_file_before_it_starts(shown, source, watcher, learner):
    calls, _ = watcher
    damage(learner)
    with pytest.raises(StateError):
        exercises.watch_tree("no-dedup", learner)
    assert calls == []


# --- a second look, after mutation testing -----------------------------------------------------------------

def old_notebook(learner: str) -> Path:
    path = ROOT / "learners" / learner / "phase-32" / "notes" / "breaks.md"
    path.parent.mkdir(parents=True)
    path.write_text("# mine\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["break_tree", "fix_tree", "reset_tree", "watch_tree"])
def test_every_command_moves_an_old_notebook_first_and_says_so_plainly(shown, source, watcher, learner, command):
    old = old_notebook(learner)
    getattr(exercises, command)("no-dedup", learner)
    moved = f"Your notebook moved, byte for byte, from {old.relative_to(ROOT)} to learners/{learner}/notebook.md."
    assert printed(shown)[0] == moved and printed(shown, styles=True)[0] == moved, "the line is painted or cut"
    assert not old.exists()


def test_reset_and_watch_remember_a_first_language_given_with_the_learner(shown, source, watcher, learner):
    calls, _ = watcher
    source.reset = ResetResult("intact")
    exercises.reset_tree("no-dedup", learner, "es")
    assert printed(shown)[-1] == exercises.TEXT["es"]["intact"].format(id="03-no-dedup", files="")
    assert progress.load(ROOT, learner)["lang"] == "es"
    exercises.watch_tree("no-dedup", learner)
    exercises.watch_tree("no-dedup", learner, "en")  # a later --lang is for this once
    exercises.watch_tree("no-dedup")
    assert [call["lang"] for call in calls] == ["es", "en", "en"]


def test_a_hints_own_brackets_and_numbers_are_printed_as_they_are(shown, learner, monkeypatch):
    import dataclasses

    hints = ["Look at [bold]line 3[/bold].", "Then 2 [x].", "Last [y] 1."]
    stand_in = dataclasses.replace(find("no-cap"), hints={"en": hints, "es": hints})
    monkeypatch.setattr(exercises, "find", lambda variant: stand_in)
    for _ in range(4):
        exercises.hint("no-cap", learner)
    lines = printed(shown, styles=True)
    assert "  Look at [bold]line 3[/bold]." in lines and "  Then 2 [x]." in lines
    assert lines[-3:] == [f"  {i}. {text}" for i, text in enumerate(hints, 1)]


def test_the_notebook_keeps_its_first_language_and_says_so_plainly(shown, learner):
    progress.learner_lang(ROOT, learner, "es")
    assert exercises.notebook_lang(learner, "en") == "es"
    line = (f"Tu cuaderno está en 'es' y seguirá así (el laboratorio no lo reescribe). Para cambiarlo, edita "
            f"learners/{learner}/progress.json.")  # in the notebook's language, which it keeps
    assert printed(shown) == [line] and printed(shown, styles=True) == [line]


def test_a_report_is_in_the_remembered_learners_language_else_english(monkeypatch, learner):
    progress.learner_lang(ROOT, learner, "es")
    assert exercises.report_lang(learner) == "es"
    monkeypatch.setattr(progress, "resolve_learner", lambda root, name, required: learner if required is False
                        else pytest.fail("a report must not require a learner"))
    assert exercises.report_lang() == "es"
    monkeypatch.setattr(progress, "resolve_learner", lambda root, name, required: None)
    assert exercises.report_lang() == "en"

    def unreadable(root, name, required):
        raise StateError("bad progress file")

    monkeypatch.setattr(progress, "resolve_learner", unreadable)
    assert exercises.report_lang() == "en"
