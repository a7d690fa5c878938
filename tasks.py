"""Lab tasks (`invoke --list`): each a thin front for a module of `miniagent`, so what a learner runs here is what
the tests exercise; what they share, and what `--help` says of each flag, is in `miniagent.lab.task_kit`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from miniagent.lab import task_kit as kit
from miniagent.lab.task_kit import task

ROOT = Path(__file__).resolve().parent
PY = shlex.quote(sys.executable)
# ROOT is read when a task runs (the tests point it elsewhere)
refusing, _who = kit.refusing_in(lambda: ROOT), kit.learner_in(lambda: ROOT)


@task(auto_shortflags=False, help=kit.help_for("ask"))
@kit.with_model_options
def ask(c, question, max_turns=None, max_tool_calls=None, wall_clock_s=None, tool_timeout_s=None, trace=None,
        json=False, options=None):
    """Ask the grammar tutor one question (real local model + real MCP server)."""
    flags = kit.flags(max_turns=max_turns, max_tool_calls=max_tool_calls, wall_clock_s=wall_clock_s,
                      tool_timeout_s=tool_timeout_s, json=json, **options)
    with kit.agent_trace(trace) as (trace_file, trace_flag):
        kit.run(c, f"{PY} -m miniagent ask {shlex.quote(question)} {flags} {kit.flags(trace=trace_flag)}",
                trace=trace_file, who="agent")


@task(name="eval", auto_shortflags=False, help=kit.help_for("eval"))
@kit.with_model_options
def eval_(c, set=None, limit=None, wall_clock_s=None, json=False, options=None):  # noqa: A002
    """Score the tutor on an eval set: per-item table, accuracy, stop reasons, latency p50/p95."""
    flags = kit.flags(set=set, limit=limit, wall_clock_s=wall_clock_s, json=json, **options)
    with kit.agent_trace(None) as (trace_file, trace_flag):
        kit.run(c, f"{PY} -m miniagent eval {flags} {kit.flags(trace=trace_flag)}", trace=trace_file, who="agent")


@task(help=kit.help_for("test"))
def test(c, k=None, quick=False):
    """Run the test suite (real model and real MCP server included): in parallel, then the timing tests alone."""
    kit.run_suite(c, f"{PY} -m pytest -q", k=k, quick=quick)


@task(help=kit.help_for("bench"))
@refusing
def bench(c, json=False, only=None, amx=None, load=None, runs=None, save=None):
    """Print the speed figures (turn latency vs decode, KV reuse, start -> answer/fallback, eval time...)."""
    from miniagent.lab.maintainers.bench_command import bench_flags

    kit.run(c, f"{PY} -m miniagent.lab.maintainers.bench {bench_flags(json, only, amx, load, runs, save)}", who="bench")


@task
def docs(c):
    """Serve the bilingual docs site on http://127.0.0.1:8000."""
    kit.run(c, f"{PY} -m mkdocs serve")


@task(name="docs-build")
def docs_build(c):
    """Build the docs site strictly (any warning fails), as CI does."""
    kit.run(c, f"{PY} -m mkdocs build --strict --site-dir site")


# --- breaks, experiments, predictions -----------------------------------------------------------
@task
def breaks(c):
    """List the break catalogue with a one-line description each."""
    from miniagent.lab.commands import exercises

    exercises.list_breaks(exercises.report_lang(_who(None)))


@task(name="break", positional=["variant"], help=kit.help_for("break"))
@refusing
def break_(c, variant, learner=None):
    """Apply a break to your working tree (refuses, changing nothing, if your edits conflict)."""
    from miniagent.lab.commands import exercises

    exercises.break_tree(variant, _who(learner))


@task(positional=["variant"], help=kit.help_for("fix"))
@refusing
def fix(c, variant, learner=None):
    """Revert a break exactly (refuses if you edited the same lines since)."""
    from miniagent.lab.commands import exercises

    exercises.fix_tree(variant, _who(learner))


@task(positional=["variant"], help=kit.help_for("check"))
@refusing
def check(c, variant, dry_run=False, learner=None, verbose=False):
    """Run a break's guard tests against your own source: green means your fix holds."""
    from miniagent.lab.commands import exercises

    code = exercises.check(variant, dry_run=dry_run, learner=_who(learner), verbose=verbose)
    sys.exit(code)


@task(positional=["variant"], help=kit.help_for("hint"))
@refusing
def hint(c, variant, learner=None, lang=None):
    """The next hint for a break: 1, then 2, then 3 (remembered in your progress)."""
    from miniagent.lab.commands import exercises

    exercises.hint(variant, _who(learner, required=True), lang)


@task(help=kit.help_for("progress"))
@refusing
def progress(c, learner=None, lang=None):
    """Every break with your state (predicted, run, broken, fixed, hints) and what to do next."""
    from miniagent.lab.commands import exercises

    exercises.progress_report(_who(learner, required=True), lang)


@task(name="next", help=kit.help_for("next"))
@refusing
def next_(c, learner=None, lang=None):
    """The next break to work on, with the commands for it."""
    from miniagent.lab.commands import exercises

    exercises.next_break(_who(learner, required=True), lang)


@task(positional=["variant"], help=kit.help_for("watch"))
@refusing
def watch(c, variant, learner=None, lang=None):
    """Re-run a break's guard tests every time you save a file under src/ (Ctrl-C to stop)."""
    from miniagent.lab.commands import exercises

    code = exercises.watch_tree(variant, _who(learner), lang)
    sys.exit(code)


@task(help=kit.help_for("traces"))
def traces(c, host="127.0.0.1", port=6006):
    """Start a trace viewer (Arize Phoenix) and send every run of the lab to it until Ctrl-C."""
    kit.run(c, f"{PY} -m miniagent.lab.commands.traces {kit.flags(host=host, port=port)}", who="viewer")


@task(positional=["variant"], help=kit.help_for("reset"))
@refusing
def reset(c, variant, learner=None, lang=None):
    """Back to the intact source for this break only (your other edits stay; replaced lines are saved)."""
    from miniagent.lab.commands import exercises

    exercises.reset_tree(variant, _who(learner), lang)


@task(positional=["variant"], help=kit.help_for("predict"))
@refusing
def predict(c, variant, learner=None, lang=None):
    """Add a prediction section for a break to learners/NAME/notebook.md (never overwrites)."""
    from miniagent.lab.commands import experiment

    experiment.predict(variant, _who(learner, required=True), lang)


@task(auto_shortflags=False, help=kit.help_for("exp"))
@kit.with_model_options
@refusing
def exp(c, variant, input=None, timeout=None, learner=None, json=False, options=None):  # noqa: A002
    """Run a variant from a sandbox copy under the harness: live panel, kill at timeout, report."""
    from miniagent.lab.commands import experiment

    llm = options.pop("llm")
    seconds = kit.number("--timeout", timeout, float, above=0) if timeout is not None else None
    record = experiment.exp(variant, question=input, timeout=seconds, llm=llm,
                            learner=learner, as_json=json, model_flags=shlex.split(kit.flags(**options)))
    if record is None or record.signal:  # no prediction yet (it said how to write one), or a crash (reported)
        sys.exit(1)


@task(help=kit.help_for("tour"))
@refusing
def tour(c, learner=None, json=False, llm=None):
    """The failure-mode tour: run every break, then a summary table (predicted vs observed)."""
    from miniagent.lab.commands import experiment

    results = experiment.tour(learner, as_json=json, llm=llm)
    if any((r["record"] or {}).get("signal") for r in results):
        sys.exit(1)  # a run crashed: the table says which


@task(name="check-breaks", help=kit.help_for("check-breaks"))
@refusing
def check_breaks(c, real=False, only=None, under_load=False, lines=False):
    """Maintainer check: each break applies, is caught by its tests, shows its symptom, reverts exactly."""
    from miniagent.lab.maintainers import checks

    sys.exit(checks.check_breaks(use_ci_models=not real, only=only, under_load=under_load, lines=lines))


@task(name="docs-results", help=kit.help_for("docs-results"))
@refusing
def docs_results(c, only=None):
    """Run every break and its fixed twin for real; write the docs' results tables and CPU charts."""
    from miniagent.lab.maintainers import checks

    checks.docs_results(ROOT / "docs_results", ROOT / "docs" / "assets" / "results", only=only)


@task(name="docs-charts")
def docs_charts(c):
    """Redraw the docs' CPU charts (English and Spanish) from the measured JSON in docs_results/; runs nothing."""
    from miniagent.lab.maintainers import checks

    for path in checks.docs_charts(ROOT / "docs_results", ROOT / "docs" / "assets" / "results"):
        print(path.relative_to(ROOT))


@task(name="docs-check")
def docs_check(c):
    """Headless Chromium reads the built site in Spanish, searches and switches languages; a screenshot a step."""
    kit.run(c, f"{PY} -m pytest -q tests/docs/test_docs_browser.py")
    print("screenshots: build/docs-check/*.png")


# --- maintainers: the property tests' counterexamples, mutation testing -------------------------------------
@task(help=kit.help_for("counterexamples"))
@refusing
def counterexamples(c, only=None):
    """Run each break against its property tests; write hypothesis's smallest failing world to docs_results/."""
    from miniagent.lab.maintainers import counterexamples as ce

    ce.write(ROOT / "docs_results", only=only)


@task(help=kit.help_for("mutants"))
def mutants(c, max_children=2, wing=None):
    """Mutation testing of the whole package, wing by wing, with each wing's tests (mutmut; slow: not in CI)."""
    from miniagent.lab.maintainers import mutants as mm

    sys.exit(mm.run_wings(max_children=int(max_children), wing=wing))


@task(name="class-load", help=kit.help_for("class-load"))
@refusing
def class_load(c, learners="1,4,8,16", server="miniagent", base_url=None, questions_each=None, wall_clock_s=None,  # noqa: A002
               model_wall_clock_s=None, set=None, model=None, save=None, json=False, grounding=True):
    """A class on one model server: N learners run the eval at once; throughput, turn latency, guard stops."""
    from miniagent.lab.maintainers.class_load_command import class_load_command

    class_load_command(learners=learners, server=server, base_url=base_url, questions_each=questions_each,
                       wall_clock_s=wall_clock_s, model_wall_clock_s=model_wall_clock_s, eval_set=set, model=model,
                       save=save, as_json=json, grounding=grounding)
