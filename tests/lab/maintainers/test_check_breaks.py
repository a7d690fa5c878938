"""``invoke check-breaks`` and ``invoke docs-results`` (lab/maintainers/checks.py) with stand-ins for the slow
parts: pytest's runs answer with the exit status a test gives them, the harness hands back a record the test
makes, and the runs of docs-results are records too. What is real: the catalogue, the copies, ``git apply`` of
the break's patch and its revert. The real check runs every break (tests/lab/commands/test_breaks.py, marked slow)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import printed, repo_copy, screen_console

from miniagent.agent.config import TutorConfig
from miniagent.lab.catalogue import catalogue, find
from miniagent.lab.maintainers import checks, counterexamples
from miniagent.lab.harness.record import RunRecord

NO_CAP = find("no-cap")


@pytest.fixture
def tree(tmp_path):
    """A copy of the repository's code, tests and breaks: the check copies it again for each break."""
    return repo_copy(tmp_path / "repo")


def shown(**fields) -> RunRecord:
    """A run of break 00 that shows its symptom: killed at the timeout, busy, past the cap."""
    made = dict(command=["x"], timeout=15.0, outcome="timeout", needs={"tool_calls": 5}, needs_met=True,
                cpu_mean=90.0, tool_calls=40, tool_calls_by_tool={"conjugate": 40}, wall_s=15.2, cpus=2)
    return RunRecord(**{**made, **fields})


class StandIns:
    """pytest's runs and the harness, recorded; ``codes`` gives each pytest run's exit status by what it runs."""

    def __init__(self, monkeypatch, *, intact=0, guards=1, properties=1, record=None, out="", during_run=None):
        self.codes = {"intact": intact, "guards": guards, "properties": properties}
        self.out, self.record, self.during_run = out, record or shown(), during_run
        self.pytest_runs: list[tuple[str, Path, list[str], int, tuple]] = []
        self.harness_runs: list[dict] = []
        self.sources_seen: list[bool] = []
        monkeypatch.setattr(checks, "_pytest", self.pytest)
        monkeypatch.setattr(checks, "run_experiment", self.harness)

    def pytest(self, work, tests, timeout_s, *extra):
        what = "intact" if extra == ("-rfE",) else "guards" if timeout_s == 40 else "properties"
        self.pytest_runs.append((what, work, list(tests), timeout_s, extra))
        if what != "intact":  # the break is applied while its tests run against the copy
            self.sources_seen.append("TurnCap(" in (work / "src" / "miniagent" / "agent" / "loop.py").read_text())
        return subprocess.CompletedProcess([], self.codes[what], stdout=self.out, stderr="")

    def harness(self, command, **how):
        self.harness_runs.append({"command": command, **how})
        if self.during_run:
            self.during_run()
        return self.record


def test_a_break_caught_by_both_test_runs_and_showing_its_symptom_passes(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    stand_ins = StandIns(monkeypatch)
    before = {p: p.read_bytes() for p in (tree / "src").rglob("*.py")}
    assert checks.check_breaks(only="no-cap", root=tree) == 0
    (intact, guards, properties) = stand_ins.pytest_runs
    assert intact[0] == "intact" and intact[2] == list(NO_CAP.tests) and intact[3:] == (120, ("-rfE",))
    assert guards[0] == "guards" and guards[2] == list(NO_CAP.tests) and guards[3:] == (40, ("-x",))
    assert properties[2] == counterexamples.property_tests(NO_CAP) and properties[3:] == (120, ("-x",))
    work = guards[1]
    assert work != tree and not work.exists() and properties[1] == work, "one copy per break, removed afterwards"
    assert work.name.startswith("miniagent-check-00-no-cap-") and intact[1].name.startswith("miniagent-check-intact-")
    assert stand_ins.sources_seen == [False, False], "the tests ran against the broken copy (no turn cap left)"
    [run] = stand_ins.harness_runs
    assert run["command"] == checks.agent_command(NO_CAP.input, work / "trace.jsonl", llm=NO_CAP.ci_llm,
                                                      flags=NO_CAP.flags)
    assert NO_CAP.ci_timeout_s < NO_CAP.timeout_s, "the stand-in's own timeout"
    assert run == {**run, "timeout": NO_CAP.ci_timeout_s, "trace_path": work / "trace.jsonl", "cwd": work,
                   "env": {"PYTHONPATH": str(work / "src")}, "live": False, "clock": "loop", "needs": NO_CAP.needs,
                   "hard_cap": NO_CAP.hard_cap_s}
    assert {p: p.read_bytes() for p in (tree / "src").rglob("*.py")} == before
    lines = printed(console)
    assert lines == [f"00-no-cap: ok ({checks.summary(stand_ins.record)})",
                     "every break is caught and reverts cleanly"]


def test_without_the_ci_models_the_break_runs_on_its_own_model(monkeypatch, tree):
    screen_console(monkeypatch, colours=False)
    stand_ins = StandIns(monkeypatch)
    assert checks.check_breaks(use_ci_models=False, only="no-cap", root=tree) == 0
    assert stand_ins.harness_runs[0]["command"][stand_ins.harness_runs[0]["command"].index("--llm") + 1] == NO_CAP.llm
    assert stand_ins.harness_runs[0]["timeout"] == NO_CAP.timeout_s


@pytest.mark.parametrize("codes, problem", [
    ({"guards": 0}, "the guard tests pass with the break applied: the break is not caught"),
    ({"properties": 0}, "the property tests pass with the break applied: the break is not caught"),
    ({"guards": 4}, "the check is broken: the guard tests exited 4 (a usage error, e.g. a test id that does not "
                    "exist): said"),
    ({"properties": 5}, "the check is broken: the property tests exited 5 (no test was collected): said"),
    ({"guards": 0, "properties": 0}, "the guard tests pass with the break applied: the break is not caught; "
                                     "the property tests pass with the break applied: the break is not caught"),
])
def test_a_break_its_tests_do_not_catch_fails_the_check_and_says_which_run(monkeypatch, tree, codes, problem):
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, out="said\n", **codes)
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    lines = printed(console)
    assert lines[0].startswith(f"00-no-cap: FAIL {problem} (") and lines[-1] == f"{problem.count(';') + 1} problem(s)"


@pytest.mark.parametrize("record, problem", [
    (shown(outcome="crash", signal="SIGSEGV", exit_code=-11, loop_start_s=None),
     "the agent died of SIGSEGV"),
    (shown(outcome="answer", needs_met=False, tool_calls=1), "not exercised: needs {'tool_calls': 5}, the run ended "
                                                             "before (answer"),
    (shown(cpu_mean=10.0), "symptom: cpu_mean 10 < 50"),
    (shown(processes_left=[{"pid": 7, "cmdline": "server"}]), "left processes behind: [{'pid': 7, 'cmdline': "
                                                               "'server'}]"),
    (shown(cleanup_ok=False), "the harness could not clean up the process tree"),
])
def test_a_run_that_does_not_show_the_symptom_fails_the_check_and_says_how(monkeypatch, tree, record, problem):
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, record=record)
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    assert problem in printed(console)[0] and printed(console)[-1] == "1 problem(s)"


def test_under_load_the_record_must_say_the_machine_was_busy(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, record=shown(machine_busy=False, other_cpu_mean=12.0))
    assert checks.check_breaks(only="no-cap", root=tree, under_load=True) == 1
    lines = printed(console)
    assert lines[0].startswith("under load: pid ") and lines[0].endswith(" keeps one core busy during the check")
    assert "the record does not say the machine was busy (other programs 12 %)" in lines[1]
    StandIns(monkeypatch, record=shown(machine_busy=True, other_cpu_mean=100.0))
    assert checks.check_breaks(only="no-cap", root=tree, under_load=True) == 0


def test_a_patch_that_no_longer_applies_is_reported_and_nothing_runs(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    loop = tree / "src" / "miniagent" / "agent" / "loop.py"
    loop.write_text(loop.read_text().replace("TurnCap(config.max_turns)", "TurnCap(config.turn_limit)"))
    stand_ins = StandIns(monkeypatch)
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    assert printed(console)[0].startswith("00-no-cap: FAIL patch does not apply: error: patch failed: ")
    assert [run[0] for run in stand_ins.pytest_runs] == ["intact"] and stand_ins.harness_runs == []


def test_a_check_that_changes_the_checkout_s_source_fails(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, during_run=lambda: (tree / "src" / "miniagent" / "stray.py").write_text("x = 1\n"))
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    assert printed(console)[-1] == "1 problem(s)" and printed(console)[0].startswith("00-no-cap: ok (")


def test_a_named_test_missing_or_failing_on_the_intact_source_is_that_break_s_problem(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    guard, prop = NO_CAP.tests[0], counterexamples.property_tests(NO_CAP)[0]
    out = (f"ERROR: not found: {tree}/{guard}\n(no match in any of [<Module test_guards.py>])\n"
           f"FAILED {prop} - assert 0\n")
    stand_ins = StandIns(monkeypatch, intact=1, out=out)
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    assert printed(console)[0] == (f"00-no-cap: FAIL its test {guard} does not exist (pytest: not found); "
                                   f"its test {prop} fails on the intact source")
    assert [run[0] for run in stand_ins.pytest_runs] == ["intact"], "the break itself is not checked then"


def test_an_intact_run_that_fails_without_naming_a_test_is_the_check_s_problem_for_every_break(monkeypatch, tree):
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, intact=3, out="INTERNALERROR> boom\n")
    assert checks.check_breaks(only="no-cap", root=tree) == 1
    assert printed(console)[0] == ("00-no-cap: FAIL the check is broken: the named tests on the intact source exited "
                                   "3 (pytest's internal error): INTERNALERROR> boom")


def test_pytest_runs_in_the_copy_with_its_source_first_and_no_learner_settings(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(checks.subprocess, "run", lambda argv, **how: calls.append((argv, how)))
    monkeypatch.setenv("MINIAGENT_LLM", "scripted")
    checks._pytest(tmp_path, ["tests/a.py::t"], 40, "-x")
    [(argv, how)] = calls
    assert argv[1:] == ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "40", "-x", "tests/a.py::t"]
    assert how["cwd"] == tmp_path and how["capture_output"] and how["text"]
    assert how["env"]["PYTHONPATH"] == str(tmp_path / "src") and "MINIAGENT_LLM" not in how["env"]


def test_a_broken_check_quotes_the_last_three_lines_pytest_said():
    out = "one\ntwo\n\nthree\nfour\nfive\n"
    assert checks.judge_pytest(subprocess.CompletedProcess([], 137, stdout=out, stderr=""), "the guard tests") == (
        "the check is broken: the guard tests exited 137 (not an exit status of pytest): three | four | five")


# --- docs-results -----------------------------------------------------------------------------------------------
def test_docs_results_keeps_both_runs_of_a_break_and_draws_its_chart(monkeypatch, tmp_path):
    console = screen_console(monkeypatch, colours=False)
    brk = find("silent-cap")  # not the first: the breaks before it are passed over, not the end of the loop
    runs, drawn = [], []
    broken = shown(started_at="2026-11-27T10:15:42", samples=[[0.2, 90.0, 80.0, 2]], stderr_tail=["not kept"],
                   final_answer="Él fue")
    fixed = shown(outcome="fallback", stop_reason="turn_cap", started_at="2026-11-27T10:16:00")

    def exp(name, **how):
        runs.append((name, how))
        return broken if name == brk.alias else fixed

    monkeypatch.setattr(checks, "exp", exp)
    monkeypatch.setattr(checks, "_draw_charts", lambda data, assets: drawn.append((data, assets)))
    monkeypatch.setattr(checks, "_write_eval_results", lambda folder: pytest.fail("one break: no eval"))
    results, assets = tmp_path / "docs" / "results", tmp_path / "docs" / "assets" / "results"  # made, parents too
    checks.docs_results(results, assets, only="silent-cap")
    assert runs == [(brk.alias, {"live": False}),
                    (checks.BASELINE, {"question": brk.input, "timeout": brk.timeout_s, "llm": brk.llm,
                                           "flags": brk.flags, "live": False})]
    text = (results / f"{brk.id}.json").read_text(encoding="utf-8")
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, ensure_ascii=False) + "\n" and '"Él fue"' in text  # a diff reads it
    assert data == {**data, "id": brk.id, "llm": brk.llm, "real_model": brk.real_model,
                    "measured_at": "2026-11-27T10:15", "cores": checks.machine_cores(),
                    "timeout_s": brk.timeout_s, "input": brk.input, "flags": list(brk.flags)}
    assert set(data["broken"]) == set(checks.RESULT_KEYS) and data["broken"]["samples"] == [[0.2, 90.0, 80.0, 2]]
    assert data["fixed"]["stop_reason"] == "turn_cap" and "stderr_tail" not in data["broken"]
    assert drawn == [(data, assets)] and assets.is_dir()
    assert [line.strip("─ ") for line in printed(console)] == [brk.id]  # the rule that heads its runs
    checks.docs_results(results, assets, only="silent-cap")  # measured again: the same folders, kept
    assert len(drawn) == 2 and (results / f"{brk.id}.json").read_text(encoding="utf-8") == text


def test_docs_results_for_every_break_also_measures_the_eval(monkeypatch, tmp_path):
    screen_console(monkeypatch, colours=False)
    ran, evals = [], []
    monkeypatch.setattr(checks, "exp", lambda name, **how: ran.append(name) or shown())
    monkeypatch.setattr(checks, "_draw_charts", lambda data, assets: None)
    monkeypatch.setattr(checks, "_write_eval_results", evals.append)
    checks.docs_results(tmp_path / "results", tmp_path / "assets")
    assert len(ran) == 2 * len(checks.catalogue()) and evals == [tmp_path / "results"]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == sorted(
        f"{brk.id}.json" for brk in checks.catalogue())


def test_docs_charts_redraws_each_break_measured_with_its_samples_and_nothing_else(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(checks, "_draw_charts", lambda data, assets: drawn.append(data["id"]) or [data["id"]])
    for name, data in (("00-a.json", {"id": "a", "broken": {"samples": []}}), ("01-b.json", {"id": "b", "broken": {}}),
                       ("02-c.json", {"id": "c"}), ("eval-x.json", {"id": "x", "broken": {"samples": []}})):
        (tmp_path / name).write_text(json.dumps(data), encoding="utf-8")
    assert checks.docs_charts(tmp_path, tmp_path / "assets") == ["a"] and drawn == ["a"]


def test_the_eval_table_is_every_set_scored_strictly_with_and_without_grounding(monkeypatch, tmp_path):
    from miniagent.lab import evaluation
    from miniagent.models.llama_params import choose_amx, cpu_model_name

    console = screen_console(monkeypatch, colours=False)
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "1")  # the maintainer's shell: the figures are the defaults' own
    asked = []

    def run_eval(items, config):
        assert config.tutor.max_turns == TutorConfig().max_turns and items
        asked.append((len(items), config.model.decode, config.tutor.ground_arguments))
        declines = 2 if items[0].decline else 0  # the out-of-grammar sets open with a question to decline
        return {"correct": 3, "n": 4, "accuracy": 0.75, "stop_reasons": {"answered": 4}, "latency_p50_s": 0.5,
                "latency_p95_s": 1.25, "total_s": 2.0, "wrong": ["¿él fue?"], "decline_items": declines,
                "declined_right": declines // 2, "made_up_answers": declines // 2}

    monkeypatch.setattr(evaluation, "run_eval", run_eval)
    checks._write_eval_results(tmp_path)
    assert [a[1:] for a in asked] == [("scored", False), ("scored", True), ("greedy", False), ("greedy", True),
                                     ("scored", False),
                                     ("scored", True), ("scored", False), ("scored", True), ("scored", False),
                                     ("scored", True), ("scored", True), ("scored", True)]
    table = (tmp_path / "eval.md").read_text(encoding="utf-8").splitlines()
    assert re.fullmatch(r"Measured by `invoke docs-results` · medido con `invoke docs-results`: "
                        r"\d{4}-\d\d-\d\d \d\d:\d\d, (\d+) cores, .+, Gemma 3 270M \(Q4_K_M\)\.", table[0])
    machine = f"{checks.machine_cores()} cores, {cpu_model_name()} ({choose_amx().describe()})"
    assert table[0].endswith(f", {machine}, Gemma 3 270M (Q4_K_M).") and table[1] == ""
    assert table[2:4] == ["| set · conjunto | decoding · decodificación | grounding · anclaje | strict accuracy · "
                          "acierto estricto | declined right · rechazos correctos | made-up answers · formas inventadas "
                          "| stop reasons · motivos | p50 s | p95 s | total s |",
                          "|---|---|---|---|---|---|---|---|---|---|"]
    held_out = "old held-out · antiguo reservado"
    sets = [("eval", "public · público", "scored", "off"), ("eval", "public · público", "scored", "on"),
            ("eval", "public · público", "greedy", "off"), ("eval", "public · público", "greedy", "on"),
            ("heldout", held_out, "scored", "off"),
            ("heldout", held_out, "scored", "on"), ("fresh", "fresh · nuevo", "scored", "off"),
            ("fresh", "fresh · nuevo", "scored", "on"), ("unseen", "unseen · inédito", "scored", "off"),
            ("unseen", "unseen · inédito", "scored", "on"),
            ("outside", "outside the grammar, public · fuera de la gramática, público", "scored", "on"),
            ("outside-unseen", "outside the grammar, unseen · fuera de la gramática, inédito", "scored", "on")]
    declined = {"outside": "1/2 | 1", "outside-unseen": "1/2 | 1"}  # the sets of questions outside the grammar
    assert table[4:] == [f"| `{name}.jsonl` ({label}) | `{decode}` | {grounding} | 3/4 = 75.0% | "
                         f"{declined.get(name, '– | 0')} | {{'answered': 4}} | 0.50 | 1.25 | 2.0 |"
                         for name, label, decode, grounding in sets]
    assert printed(console) == [f"eval {name}.jsonl {decode}, grounding {grounding}"
                                for name, _, decode, grounding in sets]
    text = (tmp_path / "eval-unseen-scored-grounding-on.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), ensure_ascii=False, indent=1) + "\n" and "¿él fue?" in text
    assert json.loads(text)["accuracy"] == 0.75 and len(list(tmp_path.glob("eval-*.json"))) == 12


def test_the_whole_catalogue_says_how_far_the_check_is(monkeypatch, tree):
    """Seventeen breaks take minutes: each line says how many are done, the time so far and about how long is left."""
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch)
    checks.check_breaks(root=tree)  # every break gets break 00's record: most of them FAIL here, no matter
    lines = printed(console)[:-1]
    total = len(catalogue(tree))
    assert len(lines) == total == 17
    for done, line in enumerate(lines, 1):
        left = r", about \d+:\d\d left" if done < total else ""
        assert re.search(rf" · {done}/{total}, \d+:\d\d so far{left}$", line), line


@pytest.mark.parametrize("record, problem", [
    (shown(cpu_mean=1.0), "symptom: "),  # a missing symptom
    (shown(processes_left=[{"pid": 4242, "name": "python"}]), "left processes behind: "),
])
def test_with_lines_a_breaks_own_problems_are_kept_beside_its_pieces(monkeypatch, tree, record, problem):
    """Issue 63: check-breaks --lines (what CI runs) checks the pieces too, and still reports the break's own
    problem: the pieces' list is added to it, not put in its place."""
    console = screen_console(monkeypatch, colours=False)
    StandIns(monkeypatch, record=record)
    monkeypatch.setattr(checks, "check_pieces", lambda brk, root: ["a piece passes its guard tests"])
    assert checks.check_breaks(only="no-cap", root=tree, lines=True) == 1
    said = printed(console)[0]
    assert said.startswith("00-no-cap: FAIL ") and problem in said and "a piece passes its guard tests" in said
    assert printed(console)[-1] == "2 problem(s)"
