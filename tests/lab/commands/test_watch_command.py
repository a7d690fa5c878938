"""``python -m miniagent.lab.commands.watch`` in the test process: its command line and how it tells a save that
has settled. The watcher's loop runs for real, on a learner's clone, in ``test_exercise_loop.py``."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from helpers import SleepingClock

from miniagent.lab.catalogue import ROOT, BreakError
from miniagent.lab.commands import watch


@pytest.fixture
def watched(monkeypatch):
    calls = []

    def fake(variant, root, *, lang, max_runs):
        calls.append((variant, root, lang, max_runs))
        if variant == "nope":
            raise BreakError("no break named 'nope'")
        return 0

    monkeypatch.setattr(watch, "watch", fake)
    before = signal.getsignal(signal.SIGTERM)
    yield calls
    signal.signal(signal.SIGTERM, before)


def test_the_command_line_hands_every_flag_to_the_watcher(watched, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert watch.main(["no-cap", "--root", "lab", "--lang", "es", "--max-runs", "3"]) == 0
    assert watched == [("no-cap", tmp_path / "lab", "es", 3)]


def test_the_command_line_defaults_to_this_checkout_in_english_for_ever(watched):
    watch.main(["all"])
    assert watched == [("all", ROOT.resolve(), "en", None)]


def test_a_sigterm_ends_the_watcher_as_ctrl_c_does(watched):
    watch.main(["no-cap"])
    assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler


def test_an_unknown_break_is_a_clear_error_with_status_2(watched, capsys):
    assert watch.main(["nope"]) == 2
    assert capsys.readouterr().err == "miniagent: no break named 'nope'\n"


def test_a_bad_flag_is_refused_by_the_parser(watched, capsys):
    with pytest.raises(SystemExit) as exit_:
        watch.main(["no-cap", "--lang", "fr"])
    assert exit_.value.code == 2 and watched == []
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m miniagent.lab.commands.watch") and "invalid choice: 'fr'" in err
    with pytest.raises(SystemExit):
        watch.main(["no-cap", "--max-runs", "two"])


def test_a_save_counts_once_no_event_came_for_the_debounce(monkeypatch):
    clock = SleepingClock(50.0)
    monkeypatch.setattr(watch.time, "monotonic", clock.monotonic)
    changes = watch._Changes()
    assert changes.settled(0.25) is None, "nothing was saved"
    changes.saw("/x/src/miniagent/agent/loop.py")
    clock.now += 0.125
    changes.saw("/x/src/miniagent/agent/guards.py")  # an editor's second event: the wait starts again
    clock.now += 0.125
    assert changes.settled(0.25) is None
    clock.now += 0.125
    assert changes.settled(0.25) == "guards.py", "the last file saved, once 0.25 s passed without an event"
    assert changes.settled(0.25) is None, "each save is reported once"
    clock.now += 10
    assert changes.settled(0.25) is None


def test_a_save_exactly_at_the_debounce_has_settled(monkeypatch):
    clock = SleepingClock(50.0)
    monkeypatch.setattr(watch.time, "monotonic", clock.monotonic)
    changes = watch._Changes()
    changes.saw(str(Path("a") / "b.py"))
    clock.now += 0.5
    assert changes.settled(0.5) == "b.py"


def test_the_guard_tests_run_against_the_learners_source_and_their_failures_are_named(monkeypatch, tmp_path):
    import subprocess
    import sys

    seen = {}

    def run(command, *, cwd, capture_output, text, env):
        seen.update(command=command, cwd=cwd, env=env)
        return subprocess.CompletedProcess(command, seen.get("code", 1), stdout=seen.get("out", ""),
                                           stderr=seen.get("err", ""))

    monkeypatch.setattr(watch.subprocess, "run", run)
    seen["out"] = ("FAILED tests/agent/test_guards.py::test_a - assert 1\nERROR tests/agent/test_b.py::test_b\n"
                   "========= 1 failed, 1 error in 0.12s =========\n")
    assert watch.run_tests(["tests/agent/test_guards.py::test_a"], tmp_path) == (
        False, "1 failed, 1 error in 0.12s", ["tests/agent/test_guards.py::test_a", "tests/agent/test_b.py::test_b"])
    assert seen["command"] == [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "60",
                               "tests/agent/test_guards.py::test_a"]
    assert seen["cwd"] == tmp_path and seen["env"]["PYTHONPATH"] == str(tmp_path / "src")
    seen.update(code=0, out="", err="ImportError: no module\nERROR: could not import\n")
    assert watch.run_tests([], tmp_path) == (True, "ERROR: could not import", [])
    seen.update(err="")
    assert watch.run_tests([], tmp_path) == (True, "no output", [])


@pytest.mark.parametrize("code, said", [
    (2, "1 error in 0.05s"),  # a save that breaks collection (a syntax error in src/)
    (4, "ERROR: not found: tests/agent/test_guards.py::test_none"),  # a test id that does not exist
    (5, "no tests ran in 0.01s"),  # nothing collected
])
def test_a_run_that_is_not_tests_passing_never_reads_green(monkeypatch, tmp_path, code, said):
    """Issue 63: only pytest's exit 0 is green; a collection error, a usage error or no test is not."""
    import subprocess

    monkeypatch.setattr(watch.subprocess, "run", lambda command, **how: subprocess.CompletedProcess(
        command, code, stdout=f"===== {said} =====\n", stderr=""))
    assert watch.run_tests(["tests/agent/test_guards.py::test_a"], tmp_path) == (False, said, [])
