"""``invoke mutants``' own run (lab/maintainers/mutants.py) with a stand-in mutmut: what it hands mutmut, where, and
how it reads mutmut's answers back into a verdict and a report. The real mutmut runs are the maintainers' (the
figures on docs/maintainers.md); tests/test_tasks.py holds the task's exit status and the checks on a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from datetime import datetime
from pathlib import Path

import pytest

from miniagent.lab.maintainers import mutants
from miniagent.lab.maintainers.undecorated import decorated, undecorate

LISTING = """
    miniagent.agent.loop.x_a__mutmut_1: killed
    miniagent.agent.loop.x_a__mutmut_2: survived
    miniagent.agent.loop.x_b__mutmut_1: survived
    miniagent.agent.loop.x_c__mutmut_1: no tests
    miniagent.agent.loop.x_c__mutmut_2: timeout
"""
STATS = {"killed": 6, "survived": 2, "total": 12, "no_tests": 2, "skipped": 1, "timeout": 1, "suspicious": 0}


class StandInMutmut:
    """Answers each of mutmut's commands as mutmut does: the run writes its log, export-cicd-stats writes the
    figures' file in the sandbox, results lists every mutant, show prints one's diff."""

    def __init__(self, *, status: int = 0, stats: dict = STATS, listing: str = LISTING, during_run=None):
        self.status, self.stats, self.listing, self.during_run = status, stats, listing, during_run
        self.calls: list[tuple[list[str], Path, dict]] = []
        self.sandbox_during_run: dict[str, str] = {}

    def run(self, argv, *, cwd, env, stdout=None, stderr=None, capture_output=False, text=False):
        assert argv[:3] == [sys.executable, "-m", "mutmut"]
        command, cwd = argv[3:], Path(cwd)
        self.calls.append((command, cwd, env))
        out = ""
        if command[0] == "run":
            assert stderr is subprocess.STDOUT
            stdout.write("mutmut's progress\n")
            self.sandbox_during_run = {p.relative_to(cwd).as_posix(): p.read_text(encoding="utf-8")
                                       for p in cwd.rglob("*") if p.is_file()}
            if self.during_run:
                self.during_run()
            return subprocess.CompletedProcess(argv, self.status)
        if command[0] == "export-cicd-stats":
            (cwd / "mutants").mkdir(exist_ok=True)
            (cwd / "mutants" / "mutmut-cicd-stats.json").write_text(json.dumps(self.stats), encoding="utf-8")
        elif command[0] == "results":
            assert command[1:] == ["--all", "true"]
            out = self.listing
        elif command[0] == "show":
            out = f"--- {command[1]}\n+++ the diff\n"
        assert capture_output
        return subprocess.CompletedProcess(argv, 0, out if text else out.encode(), "" if text else b"")

DECORATED = "import functools\n\n\n@functools.cache\ndef f():\n    return 1\n"


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with a package, its tests, a tasks.py, the files the tests read and an explanation."""
    root = tmp_path / "checkout"
    (root / "src" / "miniagent" / "agent").mkdir(parents=True)
    (root / "src" / "miniagent" / "agent" / "loop.py").write_text("x = 1\n")
    (root / "src" / "miniagent" / "agent" / "guards.py").write_text(DECORATED)  # in the agent wing
    (root / "src" / "miniagent" / "tools").mkdir()
    (root / "src" / "miniagent" / "tools" / "lexicon.py").write_text(DECORATED)  # in none of the runs below
    (root / "src" / "miniagent" / "__pycache__").mkdir()
    (root / "src" / "miniagent" / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"\0")
    (root / "src" / "miniagent.egg-info").mkdir()
    (root / "src" / "miniagent.egg-info" / "PKG-INFO").write_text("the install's record\n")
    (root / "tests" / "__pycache__").mkdir(parents=True)
    (root / "tests" / "__pycache__" / "test_loop.cpython-311.pyc").write_bytes(b"\0")
    (root / "tests" / "test_loop.py").write_text("def test_x():\n    pass\n")
    (root / mutants.EXPLAINED).write_text("- `miniagent.agent.loop.x_b__mutmut_*`: explained, for the test.\n")
    (root / "tasks.py").write_text("")
    (root / "README.md").write_text("read by a test\n")
    (root / "docs" / "__pycache__").mkdir(parents=True)
    (root / "docs" / "__pycache__" / "hook.cpython-311.pyc").write_bytes(b"\0")
    (root / "docs" / "index.md").write_text("a page\n")
    (root / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.mutmut]\nonly_mutate = ["old"]\n'
                                         'also_copy = ["old too"]\n\n'
                                         '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    monkeypatch.setattr(mutants.tempfile, "tempdir", str(tmp_path))  # the sandbox, and the log, under tmp_path
    monkeypatch.setenv("MINIAGENT_LLM", "scripted")  # a learner's setting must not reach the mutants' tests
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "deep")  # the maintainer's own profile: the run sets its own
    return root


def run_with(monkeypatch, stand_in: StandInMutmut, root: Path, **how) -> dict:
    monkeypatch.setattr(mutants, "subprocess", types.SimpleNamespace(run=stand_in.run, STDOUT=subprocess.STDOUT))
    def reap_leftovers(work):
        assert work == stand_in.calls[0][1], "the processes of this run's sandbox"
        return ["python -m the-leftover"]

    monkeypatch.setattr(mutants, "reap_leftovers", reap_leftovers)
    return mutants.run(root, **how)


def test_mutmut_runs_in_a_sandbox_with_the_wing_s_config_and_the_sandbox_goes(monkeypatch, checkout):
    stand_in = StandInMutmut()
    result = run_with(monkeypatch, stand_in, checkout, max_children=3, wing="agent")
    assert [call[0] for call in stand_in.calls] == [
        ["run", "--max-children", "3"], ["export-cicd-stats"], ["results", "--all", "true"],
        ["show", "miniagent.agent.loop.x_a__mutmut_2"], ["show", "miniagent.agent.loop.x_b__mutmut_1"]]
    work = stand_in.calls[0][1]
    assert work.parent == checkout.parent and work.name.startswith("miniagent-mutants-agent-")
    assert {call[1] for call in stand_in.calls} == {work} and not work.exists(), "one sandbox, removed afterwards"
    copied = stand_in.sandbox_during_run
    assert copied["src/miniagent/agent/loop.py"] == "x = 1\n" and copied["tests/test_loop.py"].startswith("def")
    assert copied["README.md"] == "read by a test\n" and copied["docs/index.md"] == "a page\n"
    assert copied["src/miniagent/agent/guards.py"] == undecorate(DECORATED) != DECORATED  # mutmut mutates f()
    assert copied["src/miniagent/tools/lexicon.py"] == DECORATED  # not this wing's
    assert copied["tasks.py"] == "" and not any("__pycache__" in name or "egg-info" in name for name in copied)
    # the checkout's own [tool.mutmut] table, every line of it, gives way to the wing's
    assert copied["pyproject.toml"] == ('[project]\nname = "x"\n\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]'
                                        '\n\n' + mutants.mutmut_config("agent"))
    for _, _, env in stand_in.calls:
        assert env["HYPOTHESIS_PROFILE"] == "mutants" and env["PYTHONPATH"] == mutants.import_path(work)
        assert not [name for name in env if name.startswith("MINIAGENT_")]
        assert env["PATH"] == os.environ["PATH"]
    assert mutants.log_path("agent").read_text(encoding="utf-8") == "mutmut's progress\n"


def test_the_wing_s_config_names_its_code_its_tests_and_what_every_run_leaves_out():
    lines = mutants.mutmut_config("tasks").splitlines()
    assert lines == [
        "[tool.mutmut]", 'source_paths = ["src", "tasks.py"]', 'only_mutate = ["tasks.py"]',
        f"also_copy = {json.dumps(list(mutants.ALSO_COPY))}",
        'pytest_add_cli_args_test_selection = ["tests/test_tasks.py", "tests/test_task_bodies.py", "tests/docs/test_docs_commands.py"]',
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "not slow and not timing"]',
        'process_isolation = "forkserver"']


def test_the_import_path_names_mutmut_s_copy_and_its_folder_and_makes_both(tmp_path):
    work = tmp_path / "work"
    assert mutants.import_path(work) == f"{work / 'mutants' / 'src'}{os.pathsep}{work / 'mutants'}"
    assert (work / "mutants" / "src").is_dir()


def test_the_figures_count_what_mutmut_left_out_only_when_it_says_so():
    """mutmut's figures name a count only when it has one of that kind: a missing count is none."""
    assert mutants.unchecked({"total": 10, "killed": 5, "survived": 2, "no_tests": 3}) == 0
    assert mutants.unchecked({"total": 10, "killed": 5, "survived": 2, "no_tests": 1, "timeout": 1,
                              "skipped": 1}) == 0


def test_a_run_whose_figures_have_no_skipped_and_no_timed_out_mutants_scores_the_rest(monkeypatch, checkout):
    stats = {"killed": 3, "survived": 1, "total": 5, "no_tests": 1}
    result = run_with(monkeypatch, StandInMutmut(stats=stats), checkout, wing="agent")
    assert result["score"] == 75.0 and result["problem"] is None and 0 <= result["seconds"] < 60


@pytest.mark.parametrize("touched, named", [
    (["src/a.py"], "src/a.py (see `git status`)"),
    ([f"src/{n}.py" for n in "abcde"], "src/a.py, src/b.py, src/c.py, src/d.py, src/e.py (see `git status`)"),
    ([f"src/{n}.py" for n in "abcdef"], "src/a.py, src/b.py, src/c.py, src/d.py, src/e.py ... (see `git status`)")])
def test_a_run_that_touched_the_checkout_names_the_first_five_files(touched, named):
    figures = {"killed": 1, "survived": 0, "total": 1, "no_tests": 0}
    assert mutants.check_problem(0, figures, touched) == (
        "the run changed the checkout's own files, not mutmut's copy: " + named)


def test_each_problem_of_a_run_is_said_whole():
    assert mutants.check_problem(3, {"total": 1}) == "mutmut exited with status 3: see mutmut's log"
    assert mutants.check_problem(0, {"total": 0}) == "mutmut generated no mutants: check the wing's paths"


def test_without_a_wing_the_agent_s_runs_on_two_children(monkeypatch, checkout):
    stand_in = StandInMutmut()
    assert run_with(monkeypatch, stand_in, checkout)["wing"] == "agent"
    assert stand_in.calls[0][0] == ["run", "--max-children", "2"]
    assert stand_in.sandbox_during_run["pyproject.toml"].endswith(mutants.mutmut_config("agent"))


def test_the_result_reads_mutmut_s_figures_and_lists(monkeypatch, checkout):
    result = run_with(monkeypatch, StandInMutmut(), checkout, wing="agent")
    assert result["wing"] == "agent" and result["date"] == f"{datetime.now():%Y-%m-%d}"
    assert result["stats"] == STATS and isinstance(result["seconds"], int)
    assert result["score"] == 77.8  # (6 killed + 1 timed out) of the 9 tested: 12 made, 1 skipped, 2 reached by none
    assert result["survivors"] == ["miniagent.agent.loop.x_a__mutmut_2", "miniagent.agent.loop.x_b__mutmut_1"]
    assert result["untested"] == ["miniagent.agent.loop.x_c__mutmut_1"]
    assert result["unexplained"] == ["miniagent.agent.loop.x_a__mutmut_2"]
    assert result["diffs"] == {name: f"--- {name}\n+++ the diff\n" for name in result["survivors"]}
    assert result["left_behind"] == ["python -m the-leftover"] and result["problem"] is None


def test_a_run_that_tested_no_mutant_reached_by_a_test_scores_zero(monkeypatch, checkout):
    stats = {"killed": 0, "survived": 0, "total": 3, "no_tests": 3, "skipped": 0, "timeout": 0}
    result = run_with(monkeypatch, StandInMutmut(stats=stats, listing=""), checkout, wing="cli")
    assert result["score"] == 0.0 and result["survivors"] == [] and result["problem"] is None


def test_mutmut_s_exit_status_makes_the_run_a_broken_check(monkeypatch, checkout):
    result = run_with(monkeypatch, StandInMutmut(status=2), checkout, wing="tools")
    assert result["problem"] == f"mutmut exited with status 2: see {mutants.log_path('tools')}"


def test_a_run_that_changes_the_checkout_is_a_broken_check(monkeypatch, checkout):
    loop = checkout / "src" / "miniagent" / "agent" / "loop.py"
    result = run_with(monkeypatch, StandInMutmut(during_run=lambda: loop.write_text("x = 2\n")), checkout,
                      wing="agent")
    assert result["problem"].startswith("the run changed the checkout's own files, not mutmut's copy: "
                                        "src/miniagent/agent/loop.py")


def test_an_unknown_wing_is_refused_before_a_sandbox_is_made(monkeypatch, checkout):
    stand_in = StandInMutmut()
    with pytest.raises(ValueError, match="wing must be one of agent, models, serving, tools, lab, telemetry, cli, tasks, not 'web'"):
        run_with(monkeypatch, stand_in, checkout, wing="web")
    assert stand_in.calls == [] and not list(checkout.parent.glob("miniagent-mutants-*"))


def test_the_report_gives_the_score_the_figures_and_each_survivor_s_diff(monkeypatch, checkout):
    result = run_with(monkeypatch, StandInMutmut(), checkout, wing="agent")
    result["seconds"] = 42
    lines = mutants.report(result).splitlines()
    assert lines[0] == (f"agent: mutation score 77.8 % (7 of 9 mutants that a test reaches killed; 2 survived; 2 "
                        f"reached by no test in the test process) on {result['date']}, in 42 s")
    assert lines[1] == f"mutmut's figures: {json.dumps(STATS)}; its log: {mutants.log_path('agent')}"
    assert lines[2] == f"survivors not explained in {mutants.EXPLAINED}: 1"
    assert lines[3] == ("processes the run's tests left behind (killed at its end): 1, e.g. python -m the-leftover")
    assert lines[4:] == ["", "miniagent.agent.loop.x_a__mutmut_2", "--- miniagent.agent.loop.x_a__mutmut_2",
                         "+++ the diff", "", "miniagent.agent.loop.x_b__mutmut_1 (explained)",
                         "--- miniagent.agent.loop.x_b__mutmut_1", "+++ the diff"]


def test_a_survivor_whose_diff_mutmut_did_not_show_is_listed_by_name():
    stats = {"killed": 1, "survived": 1, "total": 2, "no_tests": 0}
    result = {"wing": "cli", "date": "2026-11-27", "seconds": 3, "stats": stats, "score": 50.0,
              "survivors": ["miniagent.cli.x_main__mutmut_1"], "unexplained": ["miniagent.cli.x_main__mutmut_1"],
              "diffs": {}, "left_behind": [], "problem": None}
    assert mutants.report(result).splitlines()[-2:] == ["", "miniagent.cli.x_main__mutmut_1"]


def test_a_report_of_a_broken_check_says_so_first_and_names_no_leftover_when_there_was_none():
    stats = {"killed": 1, "survived": 0, "total": 4, "no_tests": 0}
    result = {"wing": "tasks", "date": "2026-11-27", "seconds": 3, "stats": stats, "score": 100.0, "survivors": [],
              "unexplained": [], "diffs": {}, "left_behind": [], "problem": "3 of 4 mutants were never tested: see x"}
    lines = mutants.report(result).splitlines()
    assert lines[0] == "tasks: NOT CHECKED: 3 of 4 mutants were never tested: see x"
    assert lines[1].startswith("tasks: mutation score 100.0 % (1 of 4 mutants that a test reaches killed; 0 survived;")
    assert len(lines) == 4 and not any("left behind" in line for line in lines)


@pytest.mark.parametrize("pythonpath, named", [
    ("/tmp/run-a/mutants/src:/tmp/run-a/mutants", True), ("/tmp/run-a", True), ("/elsewhere:/tmp/run-a/x", True),
    ("/tmp/run-a2/mutants/src:/tmp/run-a2/mutants", False), ("/tmp/run-", False), ("/tmp", False),
    ("", False), (":", False), ("/elsewhere", False)])
def test_a_process_is_the_runs_when_an_entry_of_its_pythonpath_is_the_sandbox_or_inside_it(pythonpath, named):
    assert mutants.names_sandbox(pythonpath.replace(":", os.pathsep), Path("/tmp/run-a")) is named


def test_the_files_a_wing_mutates_are_those_its_patterns_name(tmp_path):
    for name in ("src/miniagent/agent/loop.py", "src/miniagent/agent/x/deep.py", "src/miniagent/tools/server.py",
                 "src/miniagent/agent/notes.txt", "tasks.py", "tests/agent/test_loop.py", ".venv/src/miniagent/agent/x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    named = [p.relative_to(tmp_path).as_posix() for p in mutants.mutated_files(tmp_path, "agent")]
    assert named == ["src/miniagent/agent/loop.py", "src/miniagent/agent/x/deep.py"]
    assert [p.name for p in mutants.mutated_files(tmp_path, "tasks")] == ["tasks.py"]


# Every kind of decorated function the package has, each decorator saying when it was applied, and to what.
WRITTEN = '''
import contextlib
applied = []


def mark(tag):
    def decorate(function):
        applied.append((tag, function.__name__))
        function.marks = [tag, *getattr(function, "marks", [])]
        return function
    return decorate


@mark("outer")
@mark(
    "inner, on two lines",
)
def two(x):
    """Kept."""
    return x + 1


class Box:
    @staticmethod
    def kept():
        return "static"

    @property
    def size(self):
        return 3


@contextlib.contextmanager
def managed():
    yield "inside"


def outer():
    @mark("nested")
    async def inner():
        return 4
    return inner


@mark("last, no newline")
def last():
    five = 5
    return five'''


def test_a_decorated_function_is_written_out_as_itself_then_its_decorators_applied_nearest_first():
    written = undecorate(WRITTEN)
    assert decorated(written) == [] and [f.name for f in decorated(WRITTEN)] == ["two", "managed", "last", "size",
                                                                                 "inner"]
    assert "    @staticmethod\n    def kept():" in written  # mutmut mutates these as they are
    # the function's own lines, as they were (mutmut numbers its mutants the same), then its decorators
    assert 'def two(x):\n    """Kept."""\n    return x + 1\ntwo = mark("outer")(mark(\n    "inner, on two lines",\n)(two))\n' in written
    assert "    async def inner():\n        return 4\n    inner = mark(\"nested\")(inner)\n    return inner" in written
    assert written.endswith('\ndef last():\n    five = 5\n    return five\nlast = mark("last, no newline")(last)\n')
    before, after = {}, {}
    exec(compile(WRITTEN, "before", "exec"), before)
    exec(compile(written, "after", "exec"), after)
    for space in (before, after):
        assert space["two"](1) == 2 and space["two"].marks == ["outer", "inner, on two lines"]
        assert space["Box"]().size == 3 and space["Box"].kept() == "static"
        with space["managed"]() as inside:
            assert inside == "inside"
        assert space["outer"]().marks == ["nested"] and space["last"]() == 5
    assert before["applied"] == after["applied"] == [("inner, on two lines", "two"), ("outer", "two"),
                                                     ("last, no newline", "last"), ("nested", "inner")]


def test_a_decorator_that_names_its_own_function_is_refused_not_written_out_wrong():
    with pytest.raises(ValueError, match=r"line 7: a decorator of size\(\) names it; write it out by hand"):
        undecorate("class Box:\n    @property\n    def size(self):\n        return self._size\n\n"
                   "    @size.setter\n    def size(self, value):\n        self._size = value\n")


def test_every_file_a_wing_mutates_is_written_out_whole_and_still_compiles():
    root = Path(__file__).resolve().parents[3]
    files = {path for wing in mutants.WINGS for path in mutants.mutated_files(root, wing)}
    assert root / "tasks.py" in files and root / "src" / "miniagent" / "tools" / "lexicon.py" in files
    written = 0
    for path in sorted(files):
        source = path.read_text(encoding="utf-8")
        out = undecorate(source)
        assert decorated(out) == [], path
        compile(out, str(path), "exec")
        written += out != source
    assert written >= 10  # the tasks, the context managers, the cached lexicon, the properties
