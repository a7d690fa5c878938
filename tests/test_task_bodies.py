"""What each task hands on: the exact command it runs, or the lab function it calls, with every flag it was given.

A task is a thin front (tasks.py says so): its whole job is to pass each flag on, unchanged, and to end with the
status of what it ran. These tests read that for every task, flags given and flags left out.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import types
from pathlib import Path

import pytest
from helpers import exit_status, repo_tasks
from invoke import Context

from miniagent.lab import task_kit as kit
from miniagent.lab.learner import progress

ROOT = Path(__file__).resolve().parents[1]
tasks = repo_tasks()
PY = shlex.quote(sys.executable)


class Lab:
    """Stands in for the lab's command modules (``part``): records each call to a lab command, answers what the
    test chose."""

    def __init__(self, answers: dict | None = None) -> None:
        self.calls: list[tuple] = []
        self.answers = answers or {}

    def __call__(self, part: str):
        lab = self

        class Part:
            def __getattr__(self, name):
                def call(*args, **kwargs):
                    lab.calls.append((part, name, args, kwargs))
                    return lab.answers.get(name)
                return call

        return Part()


class Commands(Context):
    """Runs nothing: records each command and "exits" with 0."""

    def __init__(self) -> None:
        super().__init__()
        self.commands: list[str] = []  # a list: invoke's Context keeps a copy of what is set on it

    def run(self, command, **kwargs):
        self.commands.append(command)
        return types.SimpleNamespace(exited=0, stderr="")

    def _run(self, runner, command, **kwargs):  # kit.status's way in, with its own runner
        return self.run(command, **kwargs)


@pytest.fixture
def lab(monkeypatch, tmp_path):
    """A lab that records its calls, in a checkout where ada is the learner remembered: each module a task
    imports its command from is a stand-in, where the task's import finds it."""
    from miniagent.lab import commands, maintainers

    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    progress.remember_learner(tmp_path, "ada")
    stand_in = Lab()
    for package, module, part in ((commands, "exercises", "exercises"), (commands, "experiment", "experiment"),
                                  (maintainers, "checks", "maintainer")):
        monkeypatch.setattr(package, module, stand_in(part), raising=False)
    return stand_in


# (the task called as a learner would, the lab call it must make: part, function, args, kwargs)
LEARNER_TASKS = {
    "break": (lambda c: tasks.break_(c, "no-cap", learner="bob"), ("exercises", "break_tree", ("no-cap", "bob"), {})),
    "fix": (lambda c: tasks.fix(c, "no-cap", learner="bob"), ("exercises", "fix_tree", ("no-cap", "bob"), {})),
    "check": (lambda c: tasks.check(c, "no-cap", learner="bob"),
              ("exercises", "check", ("no-cap",), {"dry_run": False, "learner": "bob", "verbose": False})),
    "check --dry-run": (lambda c: tasks.check(c, "all", dry_run=True),
                        ("exercises", "check", ("all",), {"dry_run": True, "learner": "ada", "verbose": False})),
    "check --verbose": (lambda c: tasks.check(c, "no-cap", verbose=True),
                        ("exercises", "check", ("no-cap",), {"dry_run": False, "learner": "ada", "verbose": True})),
    "hint": (lambda c: tasks.hint(c, "no-cap", learner="bob", lang="es"),
             ("exercises", "hint", ("no-cap", "bob", "es"), {})),
    "progress": (lambda c: tasks.progress(c, lang="es"), ("exercises", "progress_report", ("ada", "es"), {})),
    "next": (lambda c: tasks.next_(c, learner="bob", lang="es"), ("exercises", "next_break", ("bob", "es"), {})),
    "watch": (lambda c: tasks.watch(c, "no-cap", lang="es"), ("exercises", "watch_tree", ("no-cap", "ada", "es"), {})),
    "reset": (lambda c: tasks.reset(c, "no-cap", lang="es"), ("exercises", "reset_tree", ("no-cap", "ada", "es"), {})),
    "predict": (lambda c: tasks.predict(c, "no-cap", lang="es"),
                ("experiment", "predict", ("no-cap", "ada", "es"), {})),
    "tour": (lambda c: tasks.tour(c, learner="bob", json=True, llm="scripted:oracle"),
             ("experiment", "tour", ("bob",), {"as_json": True, "llm": "scripted:oracle"})),
    "tour, nothing given": (lambda c: tasks.tour(c), ("experiment", "tour", (None,), {"as_json": False, "llm": None})),
    "check-breaks": (lambda c: tasks.check_breaks(c, real=True, only="no-cap", under_load=True, lines=True),
                     ("maintainer", "check_breaks", (), {"use_ci_models": False, "only": "no-cap",
                                                         "under_load": True, "lines": True})),
    "check-breaks, nothing given": (lambda c: tasks.check_breaks(c),
                                    ("maintainer", "check_breaks", (), {"use_ci_models": True, "only": None,
                                                                        "under_load": False, "lines": False})),
}


@pytest.mark.parametrize("name", sorted(LEARNER_TASKS))
def test_each_learner_and_maintainer_task_hands_every_flag_to_its_lab_command(name, lab, tmp_path):
    call, expected = LEARNER_TASKS[name]
    lab.answers = {"tour": [{"record": None}, {"record": {"signal": None}}]}
    assert exit_status(lambda: call(Context())) == 0
    assert lab.calls == [expected]


@pytest.mark.parametrize("name", ["hint", "progress", "next", "predict"])
def test_a_task_that_needs_a_learner_refuses_to_run_without_one(name, lab, tmp_path, capsys):
    (tmp_path / progress.CURRENT_LEARNER).unlink()
    call = {"hint": lambda c: tasks.hint(c, "no-cap"), "progress": lambda c: tasks.progress(c),
            "next": lambda c: tasks.next_(c), "predict": lambda c: tasks.predict(c, "no-cap")}[name]
    assert exit_status(lambda: call(Context())) == 2
    assert "who are you?" in capsys.readouterr().err and lab.calls == []


@pytest.mark.parametrize("name, call, function", [
    ("break", lambda c: tasks.break_(c, "no-cap"), "break_tree"), ("fix", lambda c: tasks.fix(c, "no-cap"), "fix_tree"),
    ("check", lambda c: tasks.check(c, "no-cap"), "check"),
    ("watch", lambda c: tasks.watch(c, "no-cap"), "watch_tree"), ("reset", lambda c: tasks.reset(c, "no-cap"), "reset_tree"),
])
def test_a_task_that_works_on_the_tree_runs_without_a_learner_and_says_none_and_no_language(name, call, function, lab,
                                                                                             tmp_path):
    (tmp_path / progress.CURRENT_LEARNER).unlink()
    assert exit_status(lambda: call(Context())) == 0
    [(_, called, args, kwargs)] = lab.calls
    assert called == function and None in (*args, kwargs.get("learner"))
    assert args[-1] is None or kwargs.get("learner", "x") is None  # no language given: None, the learner's own


@pytest.mark.parametrize("name, call, function", [
    ("check", lambda c: tasks.check(c, "no-cap"), "check"), ("watch", lambda c: tasks.watch(c, "no-cap"), "watch_tree"),
    ("check-breaks", lambda c: tasks.check_breaks(c), "check_breaks")])
@pytest.mark.parametrize("status", [1, 4])
def test_a_task_that_runs_tests_exits_with_their_status(name, call, function, status, lab):
    lab.answers = {function: status}
    assert exit_status(lambda: call(Context())) == status


@pytest.mark.parametrize("signals, status", [([None, None], 0), ([None, 9], 1), ([11], 1)])
def test_the_tour_exits_1_when_a_run_crashed(signals, status, lab):
    lab.answers = {"tour": [{"record": None}, *({"record": {"signal": s, "outcome": "x"}} for s in signals)]}
    assert exit_status(lambda: tasks.tour(Context())) == status


def test_exp_hands_on_every_flag_and_exits_1_without_a_record_or_after_a_crash(lab):
    given = dict(input="What is the past simple of go for she?", timeout="4.5", learner="bob", json=True,
                 llm="scripted:oracle", max_action_tokens="30", decode="greedy")
    lab.answers = {"exp": types.SimpleNamespace(signal=None)}
    assert exit_status(lambda: tasks.exp(Context(), "no-cap", **given)) == 0
    assert lab.calls == [("experiment", "exp", ("no-cap",), {
        "question": given["input"], "timeout": 4.5, "llm": "scripted:oracle", "learner": "bob", "as_json": True,
        "model_flags": ["--decode", "greedy", "--max-action-tokens", "30"]})]
    lab.calls.clear()
    assert exit_status(lambda: tasks.exp(Context(), "no-cap")) == 0
    assert lab.calls == [("experiment", "exp", ("no-cap",), {"question": None, "timeout": None, "llm": None,
                                                             "learner": None, "as_json": False, "model_flags": []})]
    for record in (None, types.SimpleNamespace(signal=signal.SIGSEGV)):
        lab.answers = {"exp": record}
        assert exit_status(lambda: tasks.exp(Context(), "no-cap")) == 1


def test_exp_takes_any_timeout_above_zero(lab):
    """The least it takes (0 and below are refused: tests/test_tasks.py)."""
    lab.answers = {"exp": types.SimpleNamespace(signal=None)}
    assert exit_status(lambda: tasks.exp(Context(), "no-cap", timeout="0.001")) == 0
    assert [call[3]["timeout"] for call in lab.calls] == [0.001]


def test_the_docs_tasks_write_where_the_docs_read(lab, tmp_path, monkeypatch, capsys):
    assert exit_status(lambda: tasks.docs_results(Context(), only="no-cap")) == 0
    lab.answers = {"docs_charts": [tmp_path / "docs" / "assets" / "results" / "a.svg"]}
    assert exit_status(lambda: tasks.docs_charts(Context())) == 0
    results, charts = tmp_path / "docs_results", tmp_path / "docs" / "assets" / "results"
    assert lab.calls == [("maintainer", "docs_results", (results, charts), {"only": "no-cap"}),
                         ("maintainer", "docs_charts", (results, charts), {})]
    assert capsys.readouterr().out == "docs/assets/results/a.svg\n"
    from miniagent.lab.maintainers import counterexamples

    written = []
    monkeypatch.setattr(counterexamples, "write", lambda folder, only: written.append((folder, only)))
    assert exit_status(lambda: tasks.counterexamples(Context(), only="no-cap")) == 0
    assert written == [(results, "no-cap")]


def trace_flag(command: str) -> str | None:
    words = shlex.split(command)
    return words[words.index("--trace") + 1] if "--trace" in words else None


def test_ask_runs_the_agent_with_every_flag_it_was_given_and_its_trace(monkeypatch, tmp_path):
    monkeypatch.setattr(kit, "ROOT", tmp_path)  # a learner's --trace lies in the checkout
    read = []
    monkeypatch.setattr(kit, "status", lambda c, command, *, who, trace=None: read.append((command, who, trace))
                        or 0)
    c = Commands()
    tasks.ask(c, "What is it's past?", max_turns="3", max_tool_calls="2", wall_clock_s="9", tool_timeout_s="1.5",
              json=True, trace="mine.jsonl", llm="scripted:oracle")
    tasks.ask(c, "q", trace="-")
    tasks.ask(c, "q")
    assert [(command.split(" --trace")[0], who) for command, who, _ in read] == [
        (f"{PY} -m miniagent ask 'What is it'\"'\"'s past?' --max-turns 3 --max-tool-calls 2 --wall-clock-s 9 "
         "--tool-timeout-s 1.5 --json --llm scripted:oracle", "agent"),
        (f"{PY} -m miniagent ask q ", "agent"), (f"{PY} -m miniagent ask q ", "agent")]
    (first, _, mine), (second, _, stdout), (third, _, scratch) = read
    assert trace_flag(first) == "mine.jsonl" and mine == tmp_path / "mine.jsonl"
    assert trace_flag(second) == "-" and stdout is None  # the trace goes to the terminal: nothing to read after
    assert trace_flag(third) == str(scratch) and scratch.name == "trace.jsonl"
    assert scratch.parent.name.startswith("miniagent-trace-") and not scratch.parent.exists(), "scratch removed"


def test_a_scratch_trace_the_command_removed_itself_is_no_error(monkeypatch):
    import shutil

    monkeypatch.setattr(kit, "status", lambda c, command, *, who, trace=None: shutil.rmtree(trace.parent) or 0)
    assert exit_status(lambda: tasks.eval_(Commands())) == 0


def test_eval_runs_the_agent_with_every_flag_it_was_given_and_a_scratch_trace(monkeypatch):
    read = []
    monkeypatch.setattr(kit, "status", lambda c, command, *, who, trace=None: read.append((command, who, trace))
                        or 0)
    tasks.eval_(Commands(), set="mine.jsonl", limit="3", wall_clock_s="9", json=True, decode="greedy")
    tasks.eval_(Commands())
    (first, who, scratch), (second, _, _) = read
    assert first.startswith(f"{PY} -m miniagent eval --set mine.jsonl --limit 3 --wall-clock-s 9 --json "
                            "--decode greedy --trace ") and who == "agent"
    assert trace_flag(first) == str(scratch) and scratch.name == "trace.jsonl" and not scratch.parent.exists()
    assert second.startswith(f"{PY} -m miniagent eval  --trace ")


def test_the_suite_and_the_docs_tasks_run_their_commands(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(kit, "status", lambda c, command, *, who, trace=None: ran.append((command, who)) or 0)
    tasks.test(Commands(), k="guards and not slow")
    tasks.test(Commands())
    tasks.docs(Commands())
    tasks.docs_build(Commands())
    tasks.docs_check(Commands())
    assert ran == [
        (f"{PY} -m pytest -q -n {kit.WORKERS} --dist load -m 'not serial' -k 'guards and not slow'", "tests"),
        (f"{PY} -m pytest -q -p no:xdist -m serial -k 'guards and not slow'", "tests"),
        (f"{PY} -m pytest -q -n {kit.WORKERS} --dist load -m 'not serial'", "tests"),
        (f"{PY} -m pytest -q -p no:xdist -m serial", "tests"),
        (f"{PY} -m mkdocs serve", "process"), (f"{PY} -m mkdocs build --strict --site-dir site", "process"),
        (f"{PY} -m pytest -q tests/docs/test_docs_browser.py", "process")]
    assert capsys.readouterr().out == "screenshots: build/docs-check/*.png\n"


def test_bench_hands_on_every_flag(monkeypatch):
    ran = []
    monkeypatch.setattr(kit, "status", lambda c, command, *, who, trace=None: ran.append((command, who)) or 0)
    tasks.bench(Commands(), json=True, only="c", amx="on, off,", load="busy,idle", runs="1", save="mine")
    tasks.bench(Commands())
    assert ran == [(f"{PY} -m miniagent.lab.maintainers.bench --json --only c --runs 1 --save mine --amx on --amx off "
                    "--load 'one core busy' --load idle", "bench"),
                   (f"{PY} -m miniagent.lab.maintainers.bench ", "bench")]


def test_mutants_runs_each_wing_asked_for_and_exits_with_what_the_runs_found(monkeypatch, capsys):
    from miniagent.lab.maintainers import mutants as mm

    class Terminal:
        """Our stdout: a wing's report must be out (flushed) before the next wing's minutes of work start."""

        def __init__(self):
            self.shown, self.pending = [], ""

        def write(self, text):
            self.pending += text

        def flush(self):
            self.shown.append(self.pending)
            self.pending = ""

    terminal = Terminal()
    runs, results = [], iter([{"unexplained": ["x", "y"], "problem": None, "w": "a"},
                              {"unexplained": [], "problem": None, "w": "b"},
                              {"unexplained": [], "problem": None, "w": "c"}])
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(mm, "run", lambda **how: runs.append((how, "".join(terminal.shown))) or next(results))
    monkeypatch.setattr(mm, "report", lambda result: f"report of {result['w']}")
    assert exit_status(lambda: tasks.mutants(Context(), max_children="3", wing="agent, tools,cli")) == 1
    assert runs == [({"max_children": 3, "wing": "agent"}, ""), ({"max_children": 3, "wing": "tools"}, "report of a\n"),
                    ({"max_children": 3, "wing": "cli"}, "report of a\nreport of b\n")]
    monkeypatch.undo()
    monkeypatch.setattr(mm, "report", lambda result: f"report of {result['w']}")
    results = iter([{"unexplained": [], "problem": "it tested nothing", "w": "a"},
                    {"unexplained": ["x"], "problem": None, "w": "b"}, {"unexplained": [], "problem": None, "w": "c"}])
    monkeypatch.setattr(mm, "run", lambda **how: next(results))
    assert exit_status(lambda: tasks.mutants(Context(), wing="agent,tools,cli")) == 2  # the check was broken
    capsys.readouterr()
    runs.clear()
    monkeypatch.setattr(mm, "run", lambda **how: runs.append(how) or {"unexplained": [], "problem": None, "w": "d"})
    assert exit_status(lambda: tasks.mutants(Context())) == 0
    assert runs == [{"max_children": 2, "wing": wing} for wing in mm.WINGS]
    assert exit_status(lambda: tasks.mutants(Context(), wing="agent,,nosuch")) == 2
    assert "no wing named '', nosuch: the wings are " + ", ".join(mm.WINGS) in capsys.readouterr().err


def test_the_task_wrappers_applied_now_hand_on_the_call_and_the_refusal(monkeypatch, tmp_path, capsys):
    """refusing and with_model_options run when tasks.py is imported; applied here, mutmut can see them."""
    monkeypatch.setattr(tasks, "ROOT", tmp_path)
    seen = []

    def body(c, variant, extra=None, options=None):
        seen.append((c, variant, extra, options))
        if variant == "bad":
            raise ValueError("a refusal")
        return "done"

    refusing = tasks.refusing(body)
    assert refusing.__name__ == "body" and refusing("c", "ok", extra=1) == "done"
    assert exit_status(lambda: refusing("c", "bad")) == 2
    assert capsys.readouterr().err == "miniagent: a refusal\n"
    modelled = kit.with_model_options(body)
    assert modelled.__name__ == "body" and not hasattr(modelled, "__wrapped__")
    assert list(modelled.__signature__.parameters) == ["c", "variant", "extra", *kit.MODEL_HELP]
    assert all(modelled.__signature__.parameters[name].default is None for name in kit.MODEL_HELP)
    assert modelled("c", "ok", extra=2, llm="scripted:oracle", decode="greedy") == "done"
    assert seen[0] == ("c", "ok", 1, None) and seen[1][0] == "c" and seen[2][:3] == ("c", "ok", 2)
    assert seen[2][3] == {**dict.fromkeys(kit.MODEL_HELP), "llm": "scripted:oracle", "decode": "greedy"}


def test_class_load_hands_every_flag_to_the_class_and_prints_and_saves_its_report(monkeypatch, tmp_path, capsys):
    from miniagent.lab.maintainers import classload

    from miniagent.lab.maintainers import class_load_command

    monkeypatch.setattr(class_load_command, "ROOT", tmp_path)  # where --save writes
    model, eval_set = tmp_path / "m.gguf", tmp_path / "set.jsonl"
    model.write_bytes(b"GGUF")
    eval_set.write_text((ROOT / "labs" / "01-tutor-end-to-end" / "eval.jsonl").read_text().splitlines()[0] + "\n")
    given, saved = {}, []

    def class_load(sizes, **kw):
        given.update(kw, sizes=sizes)
        kw["on_level"]({"learners": 1})
        return {"levels": ["one"]}

    import rich.console

    class Terminal(rich.console.Console):  # what a learner sees: colours, where the task asked for none
        def __init__(self, **kw):
            super().__init__(force_terminal=True, color_system="standard", width=200, **kw)

    monkeypatch.setattr(rich.console, "Console", Terminal)
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "0")  # a learner's own setting: not the class's flags, not checked here
    monkeypatch.setattr(classload, "class_load", class_load)
    monkeypatch.setattr(classload, "level_line", lambda level: f"level {level['learners']} ended in 2.5 s")
    monkeypatch.setattr(classload, "markdown", lambda report: f"table of {report['levels'][0]} [bold]as is[/]")
    monkeypatch.setattr(classload, "save", lambda report, folder, name: saved.append((report, folder, name))
                        or [folder / f"class-load-{name}.json"])
    assert exit_status(lambda: tasks.class_load(
        Context(), learners="1,4", server="llama-cpp-python", questions_each="2", wall_clock_s="9",
        model_wall_clock_s="3", set=str(eval_set), model=str(model), save="2026", grounding=False)) == 0
    assert given == {"sizes": [1, 4], "server": "llama-cpp-python", "base_url": None, "eval_set": eval_set,
                     "questions_each": 2, "model_path": str(model), "on_level": given["on_level"],
                     "shown": False,  # no terminal here: no progress bar
                     "settings": {"wall_clock_s": 9.0, "model_wall_clock_s": 3.0, "model": str(model),
                                  "ground_arguments": False}}
    assert saved == [({"levels": ["one"]}, tmp_path / "docs_results", "2026")]
    assert capsys.readouterr().out == ("level 1 ended in 2.5 s\ntable of one [bold]as is[/]\n"
                                          "saved: docs_results/class-load-2026.json\n")  # no colour anywhere
    given.clear()
    assert exit_status(lambda: tasks.class_load(Context(), base_url="http://127.0.0.1:8000/v1", json=True)) == 0
    assert given["sizes"] == [1, 4, 8, 16] and given["base_url"] == "http://127.0.0.1:8000/v1"
    assert given["eval_set"] == classload.DEFAULT_SET and given["questions_each"] is None
    assert given["settings"] == {} and given["model_path"] is None
    assert capsys.readouterr().out == json.dumps({"levels": ["one"]}) + "\n"  # JSON alone: the console is quiet


def test_class_load_takes_one_question_each(monkeypatch):
    """The least it takes (0 is refused: tests/test_tasks.py)."""
    from miniagent.lab.maintainers import classload

    given = {}
    monkeypatch.setattr(classload, "class_load", lambda sizes, **kw: given.update(kw) or {"levels": []})
    monkeypatch.setattr(classload, "markdown", lambda report: "")
    assert exit_status(lambda: tasks.class_load(Context(), learners="1", questions_each="1")) == 0
    assert given["questions_each"] == 1
