"""``invoke mutants``: mutation testing of the whole package, wing by wing (a maintainer's check, too slow for CI).

mutmut makes one small change at a time and runs the tests of :data:`WINGS` that reach it.  A mutant they still
pass with has survived: a test must kill it, or ``tests/mutants-explained.md`` explain it.  It runs in a
throwaway copy of the repository.  More: docs/maintainers.md.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from ..catalogue import ROOT
from ..patching import digest
from .undecorated import undecorate

EXPLAINED = Path("tests") / "mutants-explained.md"


def log_path(wing: str) -> Path:
    """mutmut's own progress and errors for one wing, kept after the run (one file per wing: a run of several
    wings keeps each one's)."""
    return Path(tempfile.gettempdir()) / f"miniagent-mutants-{wing}.log"


# Each wing: what mutmut mutates, and the tests that hold it to account (mutmut runs, of these, the ones that
# reach the mutated function). Tests that need the real model are left to the end-to-end runs, except the
# models' own.
WINGS: dict[str, tuple[list[str], list[str]]] = {
    "agent": (["src/miniagent/agent/*"],
              ["agent/test_guards", "agent/test_config", "agent/test_properties", "agent/test_properties_record",
               "agent/test_properties_actions", "agent/test_properties_config", "agent/test_grounding", "agent/test_scope",
               "agent/test_properties_scope",
               "agent/test_properties_grounding", "agent/test_loop_details", "lab/harness/test_properties_counts",
               "test_settings_reach"]),
    "models": (["src/miniagent/models/*"],
               ["models/test_amx", "models/test_llama_runtime", "models/test_deadline_flag", "models/test_system_info",
                "models/test_llama_backend", "models/test_model_threads", "models/test_model_failures", "models/test_openai_backend",
                "models/test_shared_server", "models/test_model_file", "models/test_prompt", "models/test_scripted",
                "models/test_model_parts", "models/test_make_backend", "models/test_scored_decoder",
                "models/test_server_client_runtime", "test_settings_reach"]),
    # a class's model server (the lab's own, llama-cpp-python's launcher) and how the lab starts one
    "serving": (["src/miniagent/serving/*"],
                ["serving/test_slots", "serving/test_class_server", "serving/test_class_server_main",
                 "serving/test_start", "models/test_amx", "test_settings_reach"]),
    "tools": (["src/miniagent/tools/*"],
              ["tools/test_conjugation", "tools/test_verb_forms", "tools/test_mcp_surface", "tools/test_mcp_server",
               "tools/test_mcp_client_messages", "tools/test_properties_client", "tools/test_mcp_client_outcomes",
               "tools/test_conjugation_edges", "tools/test_subjects", "test_settings_reach"]),
    "lab": (["src/miniagent/lab/*"],
            ["lab/harness/test_harness", "lab/learner/test_notebook", "lab/commands/test_exercise_loop",
             "lab/commands/test_experiment", "lab/commands/test_exercise_commands",
             "lab/commands/test_watch_command", "lab/test_session", "lab/harness/test_charts",
             "lab/test_eval_report", "lab/test_evaluation", "lab/maintainers/test_classload", "lab/harness/test_crash",
             "lab/harness/test_properties_counts", "lab/learner/test_properties_edits",
             "lab/harness/test_properties_harness", "lab/commands/test_lab_output", "lab/commands/test_breaks",
             "lab/maintainers/test_counterexamples", "lab/test_words", "lab/test_expect", "lab/learner/test_scoring",
             "lab/learner/test_notebook_notes", "lab/test_reset", "lab/harness/test_panel",
             "lab/harness/test_record", "lab/harness/test_deadline", "lab/harness/test_process_tree",
             "lab/harness/test_harness_watch", "lab/harness/test_harness_cli", "serving/test_start",
             "lab/maintainers/test_mutation_run", "lab/maintainers/test_check_breaks", "lab/maintainers/test_partial_fixes",
             "lab/maintainers/test_class_load_driver", "lab/maintainers/test_bench", "test_tasks", "test_task_bodies",
             "test_settings_reach", "lab/commands/test_traces"]),
    # the spans made from the trace events, the SDK's set-up in both processes, when runs are traced
    "telemetry": (["src/miniagent/telemetry/*"],
                  ["telemetry/test_settings", "telemetry/test_spans", "telemetry/test_export", "telemetry/test_orphan",
                   "test_settings_reach", "lab/commands/test_traces"]),
    # the package's top level: the command line, the process module, every wing's settings read together
    "cli": (["src/miniagent/cli.py", "src/miniagent/processes.py", "src/miniagent/settings.py",
             "src/miniagent/__main__.py", "src/miniagent/__init__.py"],
            ["test_cli", "test_processes", "test_cpu_measure", "lab/harness/test_crash", "agent/test_config",
             "agent/test_properties_config", "tools/test_mcp_server", "test_tasks", "test_settings_reach"]),
    "tasks": (["tasks.py"], ["test_tasks", "test_task_bodies", "docs/test_docs_commands"]),
}
# The test files no wing runs, each with why. Every other test file must be named by a wing (tests/test_tasks.py
# checks it): a new test file left out of every wing would kill no mutant, and its wing's score would say so only
# as survivors nobody can explain.
NO_WING = {
    "docs/test_docs": "the docs site: its pages and generated fragments, no package code",
    "docs/test_docs_browser": "the built site in a browser",
    "test_layout": "the source's shape (imports, lengths, docstrings), not its behaviour",
    "test_tutor_e2e": "the real model and server end to end, in subprocesses mutmut does not reach",
    "test_no_orphans": "signals to agents started as subprocesses, which mutmut does not reach",
    "test_learners_present": "other test files run in a pytest subprocess, with a learner in the checkout",
    "docs/test_learner_path": "a page's commands run in bash on a fresh clone, which mutmut does not reach",
}
# What the tests read besides the code: mutmut copies these into its own copy too (``also_copy``), where the
# tests run and where the package's ROOT is.
ALSO_COPY = ("breaks", "labs", "docs", "docs_hooks", "docs_results", "learners", "mkdocs.yml", "README.md", ".ci")
# Set for mutmut, and so for every process its tests start, whatever PYTHONPATH the lab gives them: how
# reap_leftovers finds an experiment's agent that a killed test left running (its own copy's src/ names no run).
RUN_MARK = "MUTATION_RUN"
# Left out of every run, by their markers: the slow tests (every break's tour, thirty killed runs: the others hold
# the same code) and the timing ones (two mutants at once on 2 cores would fail them). By marker, not by name: a
# `-k "not maintainer_check"` here once left out, without a word, every test of a new file whose name held it.
DESELECT_MARKERS = "not slow and not timing"


def explained(root: Path = ROOT) -> list[str]:
    """The mutant names (or fnmatch patterns, ``*`` for any number) tests/mutants-explained.md lists.

    Each one starts a list item: ``- `miniagent.agent.loop.xǁGrammarTutorǁfinish__mutmut_3`: why it lives``."""
    path = root / EXPLAINED
    if not path.is_file():
        return []
    return re.findall(r"^- `((?:miniagent|tasks)\.[^`]+)`", path.read_text(encoding="utf-8"), re.M)


def is_explained(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def mutmut_config(wing: str) -> str:
    """The ``[tool.mutmut]`` table for one wing's run."""
    paths, tests = WINGS[wing]
    return "\n".join([
        "[tool.mutmut]",
        'source_paths = ["src", "tasks.py"]',
        f"only_mutate = {json.dumps(paths)}",
        f"also_copy = {json.dumps(list(ALSO_COPY))}",
        f"pytest_add_cli_args_test_selection = {json.dumps([f'tests/{t}.py' for t in tests])}",
        # pytest-timeout stays on (the suite's own bound per test, pyproject's `timeout`): mutmut bounds each
        # mutant's run, but not its first runs of the tests (to check them, then to see which reach what), which
        # one hanging test would otherwise hold for good.
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-m", "{DESELECT_MARKERS}"]',
        # Each mutant's tests run in a process forked from a server that ran no test: forked from mutmut's own
        # process, which ran the suite once to time it, the tests that evaluate the real model hang on
        # llama.cpp's threads (they do not survive a fork), and every such mutant counts as a timeout, that is
        # as killed.  Found on serving/slots.py: 32 "timeouts" of the first 35 mutants, 0 with a fork server.
        'process_isolation = "forkserver"',
    ]) + "\n"


def _sandbox(root: Path, wing: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f"miniagent-mutants-{wing}-"))
    shutil.copytree(root / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(root / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("tasks.py", *ALSO_COPY):
        source = root / name
        if source.is_dir():
            shutil.copytree(source, work / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.is_file():
            shutil.copy(source, work / name)
    project = (root / "pyproject.toml").read_text(encoding="utf-8")
    project = re.sub(r"\n\[tool\.mutmut\]\n(?:(?!\n\[).)*", "\n", project, flags=re.S)
    (work / "pyproject.toml").write_text(project.rstrip() + "\n\n" + mutmut_config(wing), encoding="utf-8")
    for path in mutated_files(work, wing):  # mutmut skips decorated functions: undecorated.py says why
        path.write_text(undecorate(path.read_text(encoding="utf-8")), encoding="utf-8")
    return work


def mutated_files(work: Path, wing: str) -> list[Path]:
    """The Python files of ``work`` that the wing's mutmut run mutates (``only_mutate``): the package's, or
    ``tasks.py`` (``source_paths``; a checkout's virtual environment is never walked)."""
    patterns = WINGS[wing][0]
    return [path for path in sorted([*work.glob("*.py"), *(work / "src").rglob("*.py")])
            if any(fnmatch.fnmatch(path.relative_to(work).as_posix(), pattern) for pattern in patterns)]


def run(root: Path = ROOT, max_children: int = 2, wing: str = "agent") -> dict:
    """Run mutmut on one wing in a sandbox; returns the figures, the survivors and the diff of each."""
    if wing not in WINGS:
        raise ValueError(f"wing must be one of {', '.join(WINGS)}, not {wing!r}")
    work = _sandbox(root, wing)
    started = time.monotonic()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
        env["HYPOTHESIS_PROFILE"] = "mutants"  # tests/conftest.py: 30 examples per property, derandomized
        env["PYTHONPATH"] = import_path(work)
        env[RUN_MARK] = str(work)
        before = checkout_digest(root)
        mutmut = [sys.executable, "-m", "mutmut"]
        with open(log_path(wing), "w", encoding="utf-8") as log:
            ran = subprocess.run([*mutmut, "run", "--max-children", str(max_children)], cwd=work, env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
        subprocess.run([*mutmut, "export-cicd-stats"], cwd=work, env=env, capture_output=True)
        stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8"))
        listed = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                                text=True).stdout
        statuses = dict(re.findall(r"^\s*(\S+): (.+?)\s*$", listed, re.M))
        survivors = [name for name, status in statuses.items() if status == "survived"]
        untested = [name for name, status in statuses.items() if status == "no tests"]
        diffs = {name: subprocess.run([*mutmut, "show", name], cwd=work, env=env, capture_output=True,
                                      text=True).stdout for name in survivors}
    finally:
        left_behind = reap_leftovers(work)
        shutil.rmtree(work, ignore_errors=True)
    touched = changed(before, checkout_digest(root))
    tested = stats["total"] - stats.get("skipped", 0) - stats.get("no_tests", 0)
    score = 100.0 * (stats["killed"] + stats.get("timeout", 0)) / tested if tested else 0.0
    return {"wing": wing, "date": f"{datetime.now():%Y-%m-%d}", "seconds": round(time.monotonic() - started),
            "stats": stats, "score": round(score, 1), "survivors": survivors, "untested": untested, "diffs": diffs,
            "unexplained": [name for name in survivors if not is_explained(name, explained(root))],
            "left_behind": left_behind,
            "problem": check_problem(ran.returncode, stats, touched, log_path(wing))}


def reap_leftovers(work: Path) -> list[str]:
    """Kill what the run's tests left running, and say what it was: every process whose PYTHONPATH names the
    sandbox or whose :data:`RUN_MARK` is this run, and all they started."""
    import psutil

    # mutmut SIGKILLs a test past its timeout, so the test cannot stop what it started (a wedged MCP server)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            env = proc.environ()
            if proc.pid != os.getpid() and (names_sandbox(env.get("PYTHONPATH", ""), work)
                                            or env.get(RUN_MARK) == str(work)):
                found.append(proc)
        except psutil.Error:  # gone meanwhile, or not ours to read
            continue
    for proc in list(found):  # what those started is theirs: an agent's MCP server gets a few safe variables only
        with contextlib.suppress(psutil.Error):
            found += [child for child in proc.children(recursive=True) if child not in found]
    names = [_named(proc) for proc in found]
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(found, timeout=2)
    return names


def _named(proc) -> str:
    import psutil

    with contextlib.suppress(psutil.Error):
        return " ".join(proc.cmdline()) or f"pid {proc.pid}"
    return f"pid {proc.pid}"


def names_sandbox(pythonpath: str, work: Path) -> bool:
    """Whether an entry of ``pythonpath`` is the sandbox or inside it: by path, not by text (another run's sandbox
    may be named like this one with more after it)."""
    return any(entry and (Path(entry) == work or work in Path(entry).parents) for entry in pythonpath.split(os.pathsep))


def import_path(work: Path) -> str:
    """PYTHONPATH for mutmut and every process its tests start: mutmut's copy first, so that a test's
    subprocess (the agent, the MCP server) imports the copy and runs the same mutant."""
    entries = [work / "mutants" / "src", work / "mutants"]
    # Made first: an entry missing when an interpreter starts is skipped for good (sys.path_importer_cache); on
    # the cli wing mutmut then imported the checkout's src/, and a test's learner task applied a break to it.
    for entry in entries:
        entry.mkdir(parents=True, exist_ok=True)
    return os.pathsep.join(map(str, entries))


def checkout_digest(root: Path) -> dict[str, str]:
    """What a mutation run must leave alone: the checkout's package, its tasks.py and the learners' files."""
    return digest(root, [*(root / "src").rglob("*.py"), root / "tasks.py", *(root / "learners").rglob("*")])


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def unchecked(stats: dict) -> int:
    """Mutants mutmut generated but never ran a test against (its run stopped, or never started).

    A "suspicious" mutant was run (its tests took far longer than usual, yet within the timeout): not counted
    here, and not counted as killed either."""
    return (stats["total"] - stats["killed"] - stats["survived"] - stats["no_tests"] - stats.get("timeout", 0)
            - stats.get("skipped", 0) - stats.get("suspicious", 0))


def check_problem(returncode: int, stats: dict, touched: list[str] = (),
                  log: Path | str = "mutmut's log") -> str | None:
    """Why this run proves nothing, or None: a run that tested nothing must not read as a clean one, and a run
    that reached the checkout's own files tested the wrong code (and changed them: ``touched``)."""
    if touched:
        return (f"the run changed the checkout's own files, not mutmut's copy: {', '.join(touched[:5])}"
                f"{' ...' if len(touched) > 5 else ''} (see `git status`)")
    if returncode != 0:
        return f"mutmut exited with status {returncode}: see {log}"
    if stats["total"] == 0:
        return "mutmut generated no mutants: check the wing's paths"
    if unchecked(stats):
        return f"{unchecked(stats)} of {stats['total']} mutants were never tested: see {log}"
    return None


def report(result: dict) -> str:
    s = result["stats"]
    lines = [f"{result['wing']}: NOT CHECKED: {result['problem']}"] if result.get("problem") else []
    lines += [f"{result['wing']}: mutation score {result['score']:.1f} % ({s['killed'] + s.get('timeout', 0)} of "
             f"{s['total'] - s.get('skipped', 0) - s['no_tests']} mutants that a test reaches killed; "
             f"{s['survived']} survived; {s['no_tests']} reached by no test in the test process) on "
             f"{result['date']}, in {result['seconds']} s",
             f"mutmut's figures: {json.dumps(s)}; its log: {log_path(result['wing'])}",
             f"survivors not explained in {EXPLAINED}: {len(result['unexplained'])}"]
    if result.get("left_behind"):
        lines.append(f"processes the run's tests left behind (killed at its end): {len(result['left_behind'])}, "
                     f"e.g. {result['left_behind'][0]}")
    for name in result["survivors"]:
        mark = "" if name in result["unexplained"] else " (explained)"
        lines.append(f"\n{name}{mark}\n{result['diffs'].get(name, '').strip()}")
    return "\n".join(lines)


def run_wings(max_children: int = 2, wing: str | None = None) -> int:
    """``invoke mutants``: each wing named (comma-separated; None: all) run and reported in turn. The exit status:
    2 where the check itself failed (a wing tested nothing), 1 for survivors nobody explained, else 0."""
    from ..task_kit import refuse

    wings = [w.strip() for w in str(wing).split(",")] if wing is not None else list(WINGS)  # "": no wing
    unknown = [repr(w) if not w else w for w in wings if w not in WINGS]
    if unknown:
        refuse(f"no wing named {', '.join(unknown)}: the wings are {', '.join(WINGS)}")
    unexplained = broken = 0
    for name in wings:
        result = run(max_children=max_children, wing=name)
        print(report(result), flush=True)
        unexplained += len(result["unexplained"])
        broken += result["problem"] is not None
    return 2 if broken else 1 if unexplained else 0
