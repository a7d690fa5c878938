"""The invoke layer: every task exits with its command's status, and refuses bad learner state the same way.

A failing `invoke test` that exited 0 would make CI green on a red suite; a task that let a damaged
progress.json through as a traceback would teach that the lab's own tools fail untidily.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from helpers import NAPS_60_S, exit_status, repo_tasks
from invoke import Config, Context

from miniagent.lab import task_kit as kit
from miniagent.lab.learner import progress

ROOT = Path(__file__).resolve().parents[1]
tasks = repo_tasks()

DAMAGED = b'{"version": 1, "breaks": {"00-no-cap": {"hints": 1}},}'


class Result:
    def __init__(self, exited: int, stderr: str = "") -> None:
        self.exited, self.stderr = exited, stderr


class FakeContext(Context):
    """Runs nothing: every command "exits" with the status the test chose, and is remembered."""

    def __init__(self, exited: int, stderr: str = "") -> None:
        super().__init__()
        self.result = Result(exited, stderr)
        self.commands: list[str] = []

    def run(self, command, **kwargs):
        self.commands.append(command)
        return self.result

    def _run(self, runner, command, **kwargs):  # kit.status's way in, with its own runner
        return self.run(command, **kwargs)


@pytest.fixture
def english_reports(monkeypatch):
    """A crash report speaks the remembered learner's language: these tests read the English one, whoever did
    the lab in this checkout before (a learner who worked in Spanish gets "SE HA ROTO")."""
    from miniagent.lab.commands import exercises

    monkeypatch.setattr(exercises, "report_lang", lambda learner=None: "en")


# The tasks whose work is one command: their exit status must be that command's.
COMMAND_TASKS = {
    "test": lambda c: tasks.test(c),
    "test --quick": lambda c: tasks.test(c, quick=True),
    "bench": lambda c: tasks.bench(c, only="c", amx="on,off"),
    "docs": lambda c: tasks.docs(c),
    "docs-build": lambda c: tasks.docs_build(c),
    "docs-check": lambda c: tasks.docs_check(c),
    "ask": lambda c: tasks.ask(c, "What is the past simple of go for she?", llm="scripted:oracle"),
    "eval": lambda c: tasks.eval_(c, llm="scripted:oracle"),
}


@pytest.mark.parametrize("name", sorted(COMMAND_TASKS))
@given(status=st.one_of(st.integers(0, 255), st.sampled_from([-signal.SIGSEGV, -signal.SIGKILL, -signal.SIGABRT])))
def test_a_task_exits_with_its_commands_status(name, status):
    c = FakeContext(status, stderr="Fatal Python error: Segmentation fault\n")
    code = exit_status(lambda: COMMAND_TASKS[name](c))
    assert c.commands, "the task ran its command"
    assert code == (status if status >= 0 else 128 - status), (name, status, code)


class PassesContext(FakeContext):
    """Each command "exits" with the next of the given statuses."""

    def __init__(self, *statuses: int) -> None:
        super().__init__(0)
        self.statuses = list(statuses)

    def run(self, command, **kwargs):
        self.commands.append(command)
        return Result(self.statuses.pop(0), "")


@pytest.mark.parametrize("first, second, expected", [
    (0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1),
    (5, 0, 0), (0, 5, 0), (5, 5, 5),  # nothing collected counts only when no pass collected anything
    (0, 4, 4), (5, 4, 4), (1, 4, 1),  # the first failure is the one reported
])
def test_the_suite_runs_in_parallel_then_the_serial_tests_and_exits_with_one_status(first, second, expected):
    c = PassesContext(first, second)
    assert exit_status(lambda: tasks.test(c)) == expected
    parallel, serial = c.commands
    assert f"-n {kit.WORKERS}" in parallel and "-m 'not serial'" in parallel
    assert "-n " not in serial and "-p no:xdist" in serial and "-m serial" in serial


def test_pytest_loads_the_plugins_the_project_names_and_rewrites_no_installed_package(pytestconfig):
    """The suite's plugins come by name (pyproject's addopts), none by autoload, so pytest rewrites the asserts of
    no third-party package: without .pyc files (PYTHONDONTWRITEBYTECODE) it would redo that in every pytest
    process the suite starts. A plugin the command line blocks (`-p no:timeout`) stays out."""
    from _pytest.assertion.rewrite import AssertionRewritingHook
    import anyio
    import hypothesis

    manager = pytestconfig.pluginmanager
    loaded = {name for name, plugin in manager.list_name_plugin() if plugin is not None}
    named = {"xdist", "timeout", "hypothesispytest"}
    assert {name for name in named if not manager.is_blocked(name)} <= loaded
    assert not {"anyio", "platformdirs", "xdist.looponfail"} & loaded
    for package in (hypothesis, anyio):
        assert not isinstance(package.__loader__, AssertionRewritingHook), package.__name__


@pytest.mark.parametrize("codes, expected", [([0, 0], 0), ([0], 0), ([5, 0], 0), ([5, 5], 5), ([0, 1], 1), ([4, 1], 4)])
def test_the_suites_status_is_a_number_whatever_the_passes_said(codes, expected):
    assert kit.suite_status(codes) == expected


@pytest.mark.parametrize("first", [2, 3, 4, 130, -signal.SIGSEGV])
def test_an_interrupted_broken_or_crashed_first_pass_ends_the_suite(first):
    c = PassesContext(first, 0)
    assert exit_status(lambda: tasks.test(c)) == (first if first > 0 else 128 - first)
    assert len(c.commands) == 1


def test_the_suite_keeps_the_rewritten_test_modules_where_the_environment_says_to_write_no_bytecode(monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    c = PassesContext(0, 0)
    assert exit_status(lambda: tasks.test(c)) == 0
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ  # the passes, and every pytest run in them, inherit it


def test_k_reaches_both_passes_and_quick_is_the_parallel_pass_without_the_slow_kinds():
    c = PassesContext(0, 0)
    assert exit_status(lambda: tasks.test(c, k="guard and not slow")) == 0
    [parallel, serial] = c.commands
    assert "-n 2 --dist load -m 'not serial' -k 'guard and not slow'" in parallel
    assert "-p no:xdist -m serial -k 'guard and not slow'" in serial
    c = PassesContext(0, 0)
    assert exit_status(lambda: tasks.test(c, k="guard", quick=True)) == 0
    [parallel] = c.commands
    assert "-n 2 --dist worksteal -m 'not serial and not real_model and not slow and not browser' -k guard" in parallel
    c = PassesContext(1, 0)
    assert exit_status(lambda: tasks.test(c, quick=True)) == 1 and len(c.commands) == 1, "its status is its own"


def test_a_crashed_command_is_named_once_and_clearly(english_reports, capsys):
    code = exit_status(lambda: tasks.test(FakeContext(-signal.SIGSEGV, "Fatal Python error: Segmentation fault\n")))
    assert code == 139
    err = capsys.readouterr().err
    assert err.startswith("miniagent: CRASHED: the test run (pytest) died of SIGSEGV (signal 11, a segmentation "
                          "fault).")
    assert err.count("CRASHED") == 1 and "Traceback" not in err


@pytest.mark.parametrize("name, part, lab_function, call", [
    ("check", "commands.exercises", "check", lambda: tasks.check(Context(), "no-cap")),
    ("watch", "commands.exercises", "watch_tree", lambda: tasks.watch(Context(), "no-cap")),
    ("check-breaks", "maintainers.checks", "check_breaks", lambda: tasks.check_breaks(Context(), only="no-cap")),
])
@pytest.mark.parametrize("status", [0, 1, 2, 4, 5])
def test_an_in_process_task_exits_with_the_status_its_check_returned(monkeypatch, name, part, lab_function, call,
                                                                     status):
    import importlib

    monkeypatch.setattr(importlib.import_module(f"miniagent.lab.{part}"), lab_function,
                        lambda *args, **kwargs: status)
    assert exit_status(call) == status


@pytest.mark.parametrize("call, says", [
    (lambda: tasks.counterexamples(Context(), only="nosuch"), "unknown variant 'nosuch'; choose one of: no-cap"),
    (lambda: tasks.docs_results(Context(), only="nosuch"), "unknown variant 'nosuch'; choose one of: no-cap"),
    (lambda: tasks.check_breaks(Context(), only=""), "unknown variant ''; choose one of: no-cap"),
    (lambda: tasks.counterexamples(Context(), only=""), "unknown variant ''; choose one of: no-cap"),
    (lambda: tasks.mutants(Context(), wing=""), "no wing named '': the wings are agent, "),
    (lambda: tasks.mutants(Context(), wing="agent,"), "no wing named '': the wings are agent, "),
])
def test_a_maintainer_task_refuses_a_name_it_does_not_know_or_an_empty_one_before_it_runs(monkeypatch, capsys,
                                                                                          call, says):
    """An empty --only or --wing read as "not given" and started every break or every wing (hours); an unknown
    break ended counterexamples and docs-results in a traceback."""
    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: pytest.fail(f"ran {a}"))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: pytest.fail(f"started {a}"))
    assert exit_status(call) == 2
    assert capsys.readouterr().err.startswith(f"miniagent: {says}")


def test_mutants_exit_1_when_a_survivor_is_unexplained_and_2_when_a_wing_tested_nothing(monkeypatch):
    from miniagent.lab.maintainers import mutants

    for unexplained, problem, status in (([], None, 0), (["x"], None, 1), ([], "mutmut exited with status 1", 2),
                                         (["x"], "3 of 5 mutants were never tested", 2)):
        monkeypatch.setattr(mutants, "run", lambda **kw: {"unexplained": unexplained, "problem": problem})
        monkeypatch.setattr(mutants, "report", lambda result: "")
        assert exit_status(lambda: tasks.mutants(Context())) == status


def test_a_mutation_run_that_tested_nothing_is_a_broken_check_not_a_clean_one():
    # seen: mutmut stopped before its first mutant (a test file did not import), and the wing read 0 survivors
    from miniagent.lab.maintainers import mutants

    figures = {"killed": 0, "survived": 0, "total": 273, "no_tests": 0, "skipped": 0, "timeout": 0}
    assert "exited with status 1" in mutants.check_problem(1, figures)
    assert "273 of 273 mutants were never tested" in mutants.check_problem(0, figures)
    assert "no mutants" in mutants.check_problem(0, {**figures, "total": 0})
    done = {**figures, "killed": 200, "survived": 10, "no_tests": 60, "timeout": 3}
    assert mutants.check_problem(0, done) is None
    assert "1 of 273" in mutants.check_problem(0, {**done, "killed": 199})
    # seen on the tools wing: one mutant mutmut ran and called suspicious (slow, not timed out) is not untested
    assert mutants.check_problem(0, {**done, "killed": 199, "suspicious": 1}) is None


LEARNER_TASKS = {
    "break": lambda who: tasks.break_(Context(), "no-cap", learner=who),
    "fix": lambda who: tasks.fix(Context(), "no-cap", learner=who),
    "reset": lambda who: tasks.reset(Context(), "no-cap", learner=who),
    "check": lambda who: tasks.check(Context(), "no-cap", learner=who),
    "hint": lambda who: tasks.hint(Context(), "no-cap", learner=who),
    "progress": lambda who: tasks.progress(Context(), learner=who),
    "next": lambda who: tasks.next_(Context(), learner=who),
    "predict": lambda who: tasks.predict(Context(), "no-cap", learner=who),
    "watch": lambda who: tasks.watch(Context(), "no-cap", learner=who),
    "exp": lambda who: tasks.exp(Context(), "no-cap", learner=who, llm="scripted:oracle"),
    "tour": lambda who: tasks.tour(Context(), learner=who, llm="scripted:oracle"),
}


@pytest.mark.parametrize("name", sorted(LEARNER_TASKS))
def test_every_learner_task_refuses_a_damaged_progress_file_and_changes_nothing(name, learner, capsys):
    path = progress.state_path(ROOT, learner)
    path.parent.mkdir(parents=True)
    path.write_bytes(DAMAGED)
    src = {p: p.read_bytes() for p in (ROOT / "src").rglob("*.py")}
    assert exit_status(lambda: LEARNER_TASKS[name](learner)) == 2
    err = capsys.readouterr().err
    assert err.startswith("miniagent: ") and str(path) in err and "Traceback" not in err, err
    assert path.read_bytes() == DAMAGED
    assert {p: p.read_bytes() for p in (ROOT / "src").rglob("*.py")} == src, "a refused command changed src/"


@pytest.mark.parametrize("option", sorted(kit.MODEL_HELP))
def test_every_model_option_of_a_task_reaches_the_agents_command_line(option, monkeypatch):
    """`invoke ask/eval/exp --OPTION V` gives the agent `--OPTION V` (exp: through its run's flags)."""
    from miniagent.cli import build_parser

    from test_settings_reach import VALUES

    flag, value = "--" + option.replace("_", "-"), str(VALUES[option])
    for call in (lambda c: tasks.ask(c, "q", **{option: value}), lambda c: tasks.eval_(c, **{option: value})):
        c = FakeContext(0)
        call(c)
        words = c.commands[-1].split()
        assert words[words.index(flag) + 1] == value, c.commands[-1]
    assert str(getattr(build_parser().parse_args(["ask", "q", flag, value]), option)) == value, "the agent takes it"
    from miniagent.lab.commands import experiment

    given: dict = {}
    monkeypatch.setattr(experiment, "exp", lambda variant, **kwargs: given.update(kwargs))
    exit_status(lambda: tasks.exp(Context(), "no-cap", **{option: value}))
    if option == "llm":
        assert given["llm"] == value
    else:
        assert given["model_flags"][given["model_flags"].index(flag) + 1] == value


@pytest.mark.parametrize("made_first", [True, False])
def test_a_mutation_run_imports_mutmuts_copy_although_mutmut_writes_it_after_the_interpreter_starts(made_first,
                                                                                                     tmp_path):
    """Seen on the cli wing: mutmut's process imported the checkout's package (the editable install) and a test's
    learner task applied a break to the checkout. The interpreter starts before mutmut writes its copy."""
    from miniagent.lab.maintainers import mutants

    checkout = tmp_path / "checkout" / "src" / "pkg"
    checkout.mkdir(parents=True)
    (checkout / "__init__.py").write_text("WHERE = 'checkout'\n")
    work = tmp_path / "work"
    copy_first = mutants.import_path(work) if made_first else str(work / "mutants" / "src")
    script = ("import pathlib, sys; d = pathlib.Path(sys.argv[1]) / 'mutants' / 'src' / 'pkg'; "
              "d.mkdir(parents=True); (d / '__init__.py').write_text(\"WHERE = 'copy'\"); import pkg; print(pkg.WHERE)")
    env = {**os.environ, "PYTHONPATH": copy_first + os.pathsep + str(checkout.parent)}
    ran = subprocess.run([sys.executable, "-c", script, str(work)], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    # without the folders made first, the interpreter has cached the copy's folder as absent: the checkout wins
    assert ran.stdout.strip() == ("copy" if made_first else "checkout")


def test_a_mutation_run_that_changed_the_checkout_is_a_broken_check(tmp_path):
    from miniagent.lab.maintainers import mutants

    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "loop.py").write_text("x = 1\n")
    (tmp_path / "tasks.py").write_text("")
    before = mutants.checkout_digest(tmp_path)
    (tmp_path / "src" / "pkg" / "loop.py").write_text("x = 2\n")
    (tmp_path / "learners" / "ada").mkdir(parents=True)
    (tmp_path / "learners" / "ada" / "progress.json").write_text("{}")
    (tmp_path / "tasks.py").write_text("# changed\n")
    after = mutants.checkout_digest(tmp_path)
    touched = mutants.changed(before, after)
    assert touched == ["learners/ada/progress.json", "src/pkg/loop.py", "tasks.py"]
    figures = {"killed": 200, "survived": 10, "total": 273, "no_tests": 60, "skipped": 0, "timeout": 3}
    assert "src/pkg/loop.py" in mutants.check_problem(0, figures, touched)
    assert mutants.check_problem(0, figures, []) is None


# --- kit.run with invoke's real Context, and the crash report's trace (found by `invoke mutants --wing tasks`)
def test_a_command_runs_from_the_repository_root_and_its_failure_is_its_exit_status(monkeypatch, tmp_path, capfd):
    monkeypatch.chdir(tmp_path)
    py = shlex.quote(sys.executable)
    c = Context(Config(overrides={"run": {"in_stream": False}}))  # pytest's stdin cannot be read
    assert kit.run(c, f"{py} -c 'import os; print(os.getcwd())'") == 0
    assert capfd.readouterr().out.strip() == str(tasks.ROOT)
    # warn=True: a failing command is its exit status, not invoke's UnexpectedExit and its traceback
    assert exit_status(lambda: kit.run(c, f"{py} -c 'import sys; sys.exit(3)'")) == 3


class TracingContext(FakeContext):
    """The agent writes ``turns`` turns to the trace it was given, then "dies" with the status chosen."""

    def __init__(self, exited: int, stderr: str | None, turns: int) -> None:
        super().__init__(exited, stderr)
        self.turns = turns

    def run(self, command, **kwargs):
        words = shlex.split(command)
        events = [{"event": "model_action", "turn": t, "text": "{}"} for t in range(1, self.turns + 1)]
        Path(words[words.index("--trace") + 1]).write_text("".join(json.dumps(e) + "\n" for e in events))
        return super().run(command, **kwargs)


@pytest.mark.parametrize("turns, when", [(2, "after its loop started, with 2 turn(s) done"),
                                         (0, "before its loop started")])
def test_a_crashed_agent_is_reported_with_how_far_its_loop_got_and_its_last_words(english_reports, turns, when,
                                                                                   capsys):
    c = TracingContext(-signal.SIGSEGV, "loading the model\nSegmentation fault in ggml\n", turns)
    assert exit_status(lambda: tasks.ask(c, "What is the past simple of go for she?")) == 139
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"miniagent: CRASHED: the agent died of SIGSEGV (signal 11, a segmentation fault) {when}.", lines
    assert [line for line in lines if line.startswith("miniagent: ")] == lines[:1], "one report, named once"
    assert "    Segmentation fault in ggml" in lines and "XX" not in "".join(lines)


def test_a_crashed_agent_that_wrote_nothing_is_reported_as_silent(english_reports, capsys):
    assert exit_status(lambda: tasks.ask(TracingContext(-signal.SIGKILL, None, 1), "q")) == 137
    err = capsys.readouterr().err
    assert "It wrote nothing to stderr." in err and "XXXX" not in err


def test_the_flags_given_to_the_agent_leave_out_what_was_not_given():
    assert kit.flags(a=None, b=False, c=True, max_turns=3, d="it's") == "--c --max-turns 3 --d 'it'\"'\"'s'"
    assert kit.flags() == ""


def test_a_learner_command_without_a_learner_asks_who_you_are(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tasks, "ROOT", tmp_path)  # nobody remembered there
    assert exit_status(lambda: tasks.progress(Context())) == 2
    assert ("who are you? Name yourself once with --learner NAME (your folder under learners/); the lab remembers "
            "it for the next commands") in capsys.readouterr().err


def test_a_crash_report_is_in_the_learners_language(monkeypatch, capsys):
    from miniagent.lab.commands import exercises

    monkeypatch.setattr(exercises, "report_lang", lambda learner=None: "es")
    assert exit_status(lambda: tasks.ask(TracingContext(-signal.SIGSEGV, "x\n", 1), "q")) == 139
    assert capsys.readouterr().err.startswith("miniagent: SE HA ROTO: ")


def test_a_process_a_mutation_run_left_behind_is_killed_and_named(tmp_path, monkeypatch):
    """A test killed on mutmut's timeout cannot stop the server it started: the run's end finds it by the
    sandbox in its PYTHONPATH and kills it; a process outside the sandbox is left alone.

    The process table it is shown holds this test's own processes only: `invoke mutants` mutates this code too,
    and a mutant that kills what it should spare (seen: the maintainer's shell, twice) must find nothing else."""
    import psutil

    from miniagent.lab.maintainers import mutants

    work = tmp_path / "miniagent-mutants-tools-x"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    inside = subprocess.Popen(sleeper, env={**os.environ, "PYTHONPATH": mutants.import_path(work)})
    # another run's sandbox, whose name begins with this one's: a process there is not this run's
    outside = subprocess.Popen(sleeper, env={**os.environ, "PYTHONPATH": mutants.import_path(tmp_path / (work.name + "2"))})
    no_path = subprocess.Popen(sleeper, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    # an experiment's agent, its own copy's src/ on its path, and the server it started with few variables
    server_starts_its_own = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                             "'import time; time.sleep(62)']); time.sleep(61)")
    agent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                              f"'-c', {server_starts_its_own!r}], env={{}}); time.sleep(60)"],
                             env={**os.environ, "PYTHONPATH": str(tmp_path / "exp" / "src"), mutants.RUN_MARK: str(work)})
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_seen = psutil.Process(gone.pid)
    gone.wait()  # shown in the table, gone when it is read: the next ones are still looked at
    try:
        for proc in (inside, outside, no_path, agent):  # until each has exec'd: before that it has our environment
            deadline = time.monotonic() + 10
            while "time.sleep(60)" not in " ".join(psutil.Process(proc.pid).cmdline()):
                assert time.monotonic() < deadline, "the sleeper never started"
                time.sleep(0.01)
        deadline = time.monotonic() + 10
        while [" ".join(c.cmdline())[-14:] for c in psutil.Process(agent.pid).children(recursive=True)] != [
                "time.sleep(61)", "time.sleep(62)"]:
            assert time.monotonic() < deadline, "the agent's server and what it started never started"
            time.sleep(0.01)
        server, its_own = psutil.Process(agent.pid).children(recursive=True)
        own = [gone_seen, *(psutil.Process(pid) for pid in (no_path.pid, inside.pid, agent.pid, outside.pid,
                                                            os.getpid()))]

        def own_processes(attrs):
            for proc in own:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.info = proc.as_dict(attrs)
                yield proc

        monkeypatch.setattr(psutil, "process_iter", own_processes)
        left = mutants.reap_leftovers(work)
        assert left == [f"{sys.executable} -c import time; time.sleep(60)", " ".join(agent.args),
                        f"{sys.executable} -c {server_starts_its_own}", f"{sys.executable} -c import time; time.sleep(62)"]
        assert not psutil.pid_exists(inside.pid), "killed and reaped (here our child; an orphan is init's)"
        assert not psutil.pid_exists(agent.pid), "the agent killed"
        assert not server.is_running() and not its_own.is_running(), "and what it started, to the last"
        assert outside.poll() is None and no_path.poll() is None, "a process outside the sandbox is not touched"
    finally:
        for proc in (inside, outside, no_path, agent):
            proc.kill()
            proc.wait(timeout=5)
        for started in (locals().get("server"), locals().get("its_own")):
            with contextlib.suppress(AttributeError, psutil.Error):
                started.kill()


@pytest.mark.parametrize("flag, settings", [({}, {}), ({"grounding": False}, {"ground_arguments": False})])
def test_class_load_passes_no_grounding_to_every_learner(monkeypatch, flag, settings):
    from miniagent.lab.maintainers import classload

    given = {}
    monkeypatch.setattr(classload, "class_load", lambda sizes, **kw: given.update(kw) or {"levels": []})
    monkeypatch.setattr(classload, "markdown", lambda report: "")
    assert exit_status(lambda: tasks.class_load(Context(), learners="1", **flag)) == 0
    assert given["settings"] == settings


@pytest.mark.parametrize("flag, server", [({}, "miniagent"), ({"server": "local"}, "local"),
                                          ({"server": "llama-cpp-python"}, "llama-cpp-python")])
def test_class_load_passes_the_server_it_is_given(monkeypatch, flag, server):
    from miniagent.lab.maintainers import classload

    given = {}
    monkeypatch.setattr(classload, "class_load", lambda sizes, **kw: given.update(kw) or {"levels": []})
    monkeypatch.setattr(classload, "markdown", lambda report: "")
    assert exit_status(lambda: tasks.class_load(Context(), learners="1", **flag)) == 0
    assert (given["server"], given["base_url"]) == (server, None)


@pytest.mark.parametrize("flags, says", [
    ({"learners": "1,,x"}, "--learners takes class sizes of 1 or more, comma-separated, got '1,,x'"),
    ({"learners": ""}, "--learners takes class sizes of 1 or more, comma-separated, got ''"),
    ({"learners": "4,0"}, "--learners takes class sizes of 1 or more, comma-separated, got '4,0'"),
    ({"questions_each": "0"}, "--questions-each takes 1 or more, got '0'"),
    ({"questions_each": "two"}, "--questions-each takes a whole number, got 'two'"),
    ({"wall_clock_s": "nan"}, "--wall-clock-s takes a number, got 'nan'"),
    ({"wall_clock_s": "-1"}, "wall_clock_s must be positive"),
    ({"model_wall_clock_s": "soon"}, "--model-wall-clock-s takes a number, got 'soon'"),
    ({"set": "/nonexistent/eval.jsonl"}, "eval set not found: /nonexistent/eval.jsonl"),
    ({"model": "/nonexistent/model.gguf"}, "--model: model file not found: /nonexistent/model.gguf"),
    ({"save": "../../x"}, "--save takes a name (letters, digits, - and _), got '../../x'"),
    ({"base_url": "not-a-url"}, "--base-url takes a server's URL (http://HOST:PORT/v1), got 'not-a-url'"),
])
def test_class_load_refuses_what_it_cannot_measure_before_any_learner_starts(monkeypatch, capsys, flags, says):
    """A class takes minutes: a flag it cannot honour is refused by name at once (status 2), not found out by a
    learner that then only says it did not start, or by a traceback after the measurement."""
    from miniagent.lab.maintainers import classload

    monkeypatch.setattr(classload, "class_load", lambda sizes, **kw: pytest.fail("started a class"))
    assert exit_status(lambda: tasks.class_load(Context(), **flags)) == 2
    assert capsys.readouterr().err == f"miniagent: {says}\n"


@pytest.mark.parametrize("flags, says", [
    ({"load": "x"}, "--load takes idle or busy (or both, comma-separated), got 'x'"),
    ({"load": "idle,one core busy"}, "--load takes idle or busy (or both, comma-separated), got 'idle,one core busy'"),
    ({"runs": "0"}, "--runs takes 1 or more, got '0'"),
    ({"runs": "five"}, "--runs takes a whole number, got 'five'"),
    ({"save": "../x"}, "--save takes a name (letters, digits, - and _), got '../x'"),
])
def test_bench_refuses_its_flags_before_it_measures(flags, says, capsys):
    """bench's own --load names ('one core busy') are not the task's (busy): the refusal came from the bench process
    in its words; a bad --runs or --save came after minutes of measuring."""
    c = FakeContext(0)
    assert exit_status(lambda: tasks.bench(c, only="c", **flags)) == 2
    assert c.commands == [] and capsys.readouterr().err == f"miniagent: {says}\n"


def test_bench_hands_each_load_to_the_bench_in_its_own_words():
    c = FakeContext(0)
    assert exit_status(lambda: tasks.bench(c, only="c", load="busy,idle", runs="3", save="Lab_2-b")) == 0
    assert c.commands[0].endswith("--only c --runs 3 --save Lab_2-b --load 'one core busy' --load idle")


@pytest.mark.parametrize("timeout, says", [("nan", "--timeout takes a number, got 'nan'"),
                                           ("abc", "--timeout takes a number, got 'abc'"),
                                           ("0", "--timeout takes a number of seconds above 0, got '0'"),
                                           ("-1", "--timeout takes a number of seconds above 0, got '-1'")])
def test_exp_refuses_a_timeout_no_clock_can_reach(monkeypatch, capsys, timeout, says):
    """A nan timeout compared false with the deadline: the harness never killed the run."""
    from miniagent.lab.commands import experiment

    monkeypatch.setattr(experiment, "exp", lambda *a, **kw: pytest.fail("ran an experiment"))
    assert exit_status(lambda: tasks.exp(Context(), "no-cap", timeout=timeout)) == 2
    assert capsys.readouterr().err == f"miniagent: {says}\n"


def test_class_load_refuses_a_server_it_does_not_know_naming_every_one_it_does(monkeypatch, capsys):
    from miniagent.lab.maintainers import classload
    from miniagent.serving.start import SERVERS

    monkeypatch.setattr(classload, "class_load", lambda sizes, **kw: pytest.fail("started a class"))
    assert exit_status(lambda: tasks.class_load(Context(), learners="1", server="vllm")) == 2
    assert capsys.readouterr().err == (f"miniagent: no server named 'vllm': choose one of "
                                       f"{', '.join((*SERVERS, classload.LOCAL))}, or give --base-url\n")


@pytest.mark.parametrize("failure", ["a learner did not start (see /tmp/class): ''",
                                     "the model server exited during start-up (exit code 3)"])
def test_a_class_that_cannot_be_measured_says_why_in_one_line_and_fails(monkeypatch, capsys, failure):
    from miniagent.serving import start as model_server
    from miniagent.lab.maintainers import classload

    kind = classload.ClassFailed if failure.startswith("a learner") else model_server.ServerNotReady

    def class_load(sizes, **kw):
        raise kind(failure)

    monkeypatch.setattr(classload, "class_load", class_load)
    assert exit_status(lambda: tasks.class_load(Context(), learners="1")) == 1
    assert capsys.readouterr().err == f"miniagent: {failure}\n"


def test_every_test_file_is_run_by_a_mutation_wing_or_says_why_not():
    """Found when two new test files of the tools wing were in no wing: mutmut never ran them, and the wing's
    survivors were the very mutants they kill."""
    from miniagent.lab.maintainers.mutants import NO_WING, WINGS

    files = {path.relative_to(ROOT / "tests").with_suffix("").as_posix() for path in (ROOT / "tests").rglob("test_*.py")}
    named = {test for _paths, tests in WINGS.values() for test in tests}
    assert files - named - set(NO_WING) == set(), "a test file no wing runs and NO_WING does not explain"
    assert named | set(NO_WING) <= files, "a wing or NO_WING names a test file that does not exist"
    assert not named & set(NO_WING)


def test_the_mutants_help_names_every_wing_in_order():
    from miniagent.lab.maintainers.mutants import WINGS

    assert kit.help_for("mutants")["wing"] == (
        f"the wings to mutate, comma-separated: {', '.join(WINGS)} (default: all)")


def test_every_source_file_is_mutated_by_a_wing():
    """The same for the code: a module no wing's paths match (miniagent/settings.py, when it was new) is a part of
    the package that mutation testing never changes."""
    import fnmatch

    from miniagent.lab.maintainers.mutants import WINGS

    sources = [path.relative_to(ROOT).as_posix() for path in [*(ROOT / "src" / "miniagent").rglob("*.py"), ROOT / "tasks.py"]]
    patterns = [pattern for paths, _tests in WINGS.values() for pattern in paths]
    unmutated = [s for s in sources if not any(fnmatch.fnmatch(s, pattern) for pattern in patterns)]
    assert unmutated == [], "source files no mutation wing changes"


HOLDS_A_CHILD = """
import subprocess, sys, time
sys.path.insert(0, {root!r})
import tasks
from invoke import Context

@tasks.task
def holds(c):
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a session of its own, like the agent's
    try:
        print(child.pid, flush=True)
        {naps}  # not one long sleep: helpers.NAPS_60_S says why
    finally:
        child.kill()
        child.wait()
        print("stopped it", flush=True)

holds(Context())
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_task_killed_by_sigterm_or_a_closed_terminal_still_stops_what_it_started(sig):
    """Every task runs under processes.stops_unwind: its finally blocks run, its exit status names the signal."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDS_A_CHILD.format(root=str(ROOT), naps=NAPS_60_S)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())  # the task is running and holds its child
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert "stopped it" in out, err
    assert proc.returncode == 128 + sig
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


RUNS_A_COMMAND = """
import sys
sys.path.insert(0, {root!r})
import tasks
from invoke import Context

@tasks.task
def runs(c):
    tasks.kit.run(c, {command!r})

runs(Context())
"""
# The command: what a lab command does (it unwinds on SIGTERM, stops what it started, then says so).
STOPPABLE_COMMAND = """
import sys, time
from miniagent.processes import stops_unwind
with stops_unwind():
    try:
        print("running", flush=True)
        {naps}
    finally:
        print("the command stopped what it started", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_task_killed_by_sigterm_or_sighup_stops_the_command_it_runs(sig, tmp_path):
    """invoke passes on only Ctrl-C (as a byte on stdin): without kit.StoppingRunner, `kill` of `invoke traces`
    left invoke waiting and the viewer running."""
    script = tmp_path / "command.py"
    script.write_text(STOPPABLE_COMMAND.format(naps=NAPS_60_S), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-c", RUNS_A_COMMAND.format(
        root=str(ROOT), command=f"{sys.executable} {script}")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "running\n"
    command = psutil.Process(proc.pid).children()[0]
    try:
        proc.send_signal(sig)  # to the task only, as `kill PID` does (a terminal's Ctrl-C reaches the whole group)
        assert proc.wait(timeout=60) == 128 + sig
    finally:
        with contextlib.suppress(psutil.Error):
            command.kill()
    assert proc.stdout.read() == "the command stopped what it started\n"
    assert not command.is_running() or command.status() == psutil.STATUS_ZOMBIE


def test_without_it_a_sigterm_skips_the_finally_and_leaves_the_child():
    """The control experiment: the same body under invoke's own @task."""
    script = HOLDS_A_CHILD.format(root=str(ROOT), naps=NAPS_60_S).replace("@tasks.task", "@tasks.kit.invoke_task")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM  # died on the spot (the orphan still holds its stdout)
        os.kill(child, 0)  # still there: the orphan the wrapper prevents
    finally:
        os.kill(child, signal.SIGKILL)
    assert "stopped it" not in proc.stdout.read()


def test_the_wrapper_keeps_each_tasks_flags_and_help():
    import tasks

    assert [a.name for a in tasks.exp.get_arguments()][:3] == ["variant", "input", "timeout"]
    assert "question" in {a.name for a in tasks.ask.get_arguments()}
    assert tasks.check_breaks.help["real"].startswith("use each break's own model")


def test_task_decorates_both_ways_and_runs_the_body_with_sigterm_and_sighup_unwinding():
    import tasks
    from invoke import Task

    def handlers():
        return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    before, seen = handlers(), {}

    def plain(c, name="x"):
        """A plain task."""
        seen["plain"] = (name, handlers())
        return "plain done"

    def with_help(c, name="y"):
        seen["with_help"] = (name, handlers())
        return "help done"

    bare, helped = tasks.task(plain), tasks.task(help={"name": "who"}, positional=["name"])(with_help)
    assert isinstance(bare, Task) and isinstance(helped, Task)
    assert bare.__doc__ == "A plain task." and helped.help == {"name": "who"} and helped.positional == ["name"]
    assert [a.name for a in helped.get_arguments()] == ["name"]
    assert bare(Context(), name="a") == "plain done" and helped(Context(), "b") == "help done"
    for name, (arg, inside) in seen.items():
        assert arg in ("a", "b")
        assert all(callable(h) and h not in (signal.SIG_DFL, signal.SIG_IGN) for h in inside.values()), name
    assert handlers() == before  # put back after each body
    # invoke's other forms pass through as they are: @task() and @task(pre_task, ...)
    assert tasks.task()(plain)(Context()) == "plain done"
    after = tasks.task(bare, name="after")(with_help)
    assert list(after.pre) == [bare] and after.name == "after"


def test_every_wings_mutants_run_in_processes_forked_from_a_server_that_ran_no_test():
    """Forked from a process that had run llama.cpp, a mutant's real-model tests hang and count as killed."""
    import tomllib

    from miniagent.lab.maintainers.mutants import WINGS, mutmut_config

    for wing in WINGS:
        table = tomllib.loads(mutmut_config(wing))["tool"]["mutmut"]
        assert table["process_isolation"] == "forkserver", wing
        assert table["only_mutate"] == WINGS[wing][0]


def with_a_closed_reader(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command whose stdout's reader has already gone, as after `... | head -1` once head has exited."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, timeout=120)
    finally:
        os.close(write)


def test_a_command_whose_reader_went_away_is_stopped_and_the_task_ends_quietly():
    """`invoke ask --trace - | head -1`: invoke's copying thread died of the broken pipe, invoke printed its
    ThreadException traceback, stopped waiting and left the agent running (here with no cap and no clock)."""
    mark = f"/nonexistent-reader-gone-{os.getpid()}"  # PATH reaches the agent and its MCP server alike
    env = {**os.environ, "PATH": os.environ["PATH"] + os.pathsep + mark, "MINIAGENT_MAX_RUN_TOKENS": "1000000000"}
    proc = with_a_closed_reader([sys.executable, "-m", "invoke", "ask", "Please conjugate the verb eat lovingly",
                                 "--llm", "scripted:wanderer", "--max-turns", "100000", "--max-tool-calls", "100000",
                                 "--wall-clock-s", "100000", "--trace", "-"], env=env)
    assert proc.returncode == kit.READER_GONE == 128 + signal.SIGPIPE, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if mark in p.environ().get("PATH", ""):
                left.append(p.cmdline())
    assert left == [], "the command outlived its task"


READER_GONE_BODY = """
import sys
sys.path.insert(0, {root!r})
import tasks
from invoke import Context

@tasks.task
def prints(c):
    try:
        print("x" * 100_000, flush=True)
    finally:
        sys.stderr.write("unwound\\n")

prints(Context())
"""


def test_a_task_that_prints_to_a_reader_gone_unwinds_and_ends_quietly():
    proc = with_a_closed_reader([sys.executable, "-c", READER_GONE_BODY.format(root=str(ROOT))])
    assert proc.returncode == 141 and proc.stderr == "unwound\n"


class Pipe:
    """One of our streams: it keeps what is written; once ``gone``, its flush fails as a pipe without a reader does."""

    def __init__(self) -> None:
        self.gone, self.written = False, []

    def write(self, text: str) -> None:
        self.written.append(text)

    def flush(self) -> None:
        if self.gone:
            raise BrokenPipeError(32, "Broken pipe")


def test_a_commands_output_is_copied_until_the_reader_goes_then_the_command_is_stopped_and_the_rest_dropped(
        monkeypatch):
    sleeper, quick = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["true"])
    command, ended = psutil.Process(sleeper.pid), psutil.Process(quick.pid)
    quick.wait()  # a child that is already gone must not keep the others from being stopped
    monkeypatch.setattr(kit, "our_children", lambda: [ended, command])
    pipe = Pipe()
    out = kit.Output(pipe)
    out.write("one\n")
    out.flush()
    assert pipe.written == ["one\n"] and not out.reader_gone and sleeper.poll() is None
    pipe.gone = True
    out.write("two\n")
    assert out.reader_gone is True and sleeper.wait(timeout=30) == -signal.SIGTERM
    out.write("three\n")
    assert pipe.written == ["one\n", "two\n"]


def test_our_children_are_the_processes_this_one_started():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in {p.pid for p in kit.our_children()}
    finally:
        child.kill()
        child.wait()


class Writing(FakeContext):
    """A command that writes to one of the task's streams, then is stopped (SIGTERM) as its reader went away."""

    def __init__(self, stream: str) -> None:
        super().__init__(-signal.SIGTERM)
        self.stream, self.calls = stream, []  # a list: invoke's Context keeps a copy of what is set on it

    def run(self, command, **kwargs):
        self.calls.append(kwargs)
        kwargs[f"{self.stream}_stream"].write("a line\n")
        return super().run(command)


@pytest.mark.parametrize("broken", ["out", "err"])
def test_a_command_whose_reader_went_away_ends_the_task_quietly_not_as_a_crash(broken, monkeypatch):
    pipes = {"out": Pipe(), "err": Pipe()}
    pipes[broken].gone = True
    monkeypatch.setattr(kit.sys, "stdout", pipes["out"])
    monkeypatch.setattr(kit.sys, "stderr", pipes["err"])
    monkeypatch.setattr(kit, "our_children", list)
    monkeypatch.setattr(kit, "report_crash", lambda *a, **k: pytest.fail("a reader gone is not a crash"))
    monkeypatch.setattr(kit, "reader_gone", lambda: sys.exit("reader gone"))
    c = Writing(broken)
    assert exit_status(lambda: kit.status(c, "python -m miniagent ask x", who="agent")) == "reader gone"
    [got] = c.calls
    assert got["warn"] is True and {type(got[f"{s}_stream"]) for s in pipes} == {kit.Output}
    assert {s: got[f"{s}_stream"].reader_gone for s in pipes} == {s: s == broken for s in pipes}


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_task_whose_reader_went_away_points_its_streams_at_devnull_and_exits_141(closed, monkeypatch):
    def fileno(name):
        def give():
            if name == closed:
                raise (OSError if closed == "stdout" else ValueError)("closed")
            return {"stdout": 1, "stderr": 2}[name]
        return give

    opened, duplicated = [], []
    for name in ("stdout", "stderr"):
        monkeypatch.setattr(kit.sys, name, types.SimpleNamespace(fileno=fileno(name)))
    monkeypatch.setattr(kit.os, "open", lambda path, flags: opened.append((path, flags)) or 99)
    monkeypatch.setattr(kit.os, "dup2", lambda fd, onto: duplicated.append((fd, onto)))
    assert exit_status(kit.reader_gone) == 141
    assert opened == [(os.devnull, os.O_WRONLY)]
    assert duplicated == [(99, 2 if closed == "stdout" else 1)]


@pytest.mark.parametrize("before", [None, b"ada\n"])
def test_a_learner_named_on_a_refused_command_is_not_remembered(before, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    current = tmp_path / progress.CURRENT_LEARNER
    if before is not None:
        current.parent.mkdir()
        current.write_bytes(before)
    assert exit_status(lambda: tasks.break_(Context(), "nosuch", learner="bob")) == 2
    assert "unknown variant 'nosuch'" in capsys.readouterr().err
    assert (current.read_bytes() if current.exists() else None) == before
    assert exit_status(lambda: tasks.check(Context(), "no-cap", dry_run=True, learner="bob")) == 0
    assert current.read_text() == "bob\n"  # a command that goes through remembers its learner


def test_what_is_put_back_on_a_refusal_is_what_was_remembered_before_and_the_refusal_goes_on(tmp_path):
    current = tmp_path / progress.CURRENT_LEARNER
    with pytest.raises(ValueError, match="refused"), progress.remembered_unless_refused(tmp_path):
        progress.remember_learner(tmp_path, "bob")
        raise ValueError("refused")
    assert not current.exists()
    progress.remember_learner(tmp_path, "ada")
    with pytest.raises(KeyError), progress.remembered_unless_refused(tmp_path):
        progress.remember_learner(tmp_path, "bob")
        raise KeyError("any error")
    assert current.read_text() == "ada\n"
    with progress.remembered_unless_refused(tmp_path):
        progress.remember_learner(tmp_path, "bob")
    assert current.read_text() == "bob\n"
