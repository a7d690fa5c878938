"""Lab tasks: `invoke --list` shows them all.

Every task is a thin front for a module of `miniagent`, so what a learner runs here is exactly what the tests
exercise; what the tasks share (running a command and reporting its end, refusals, flags) is
`miniagent.lab.task_kit`.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path

from miniagent.lab import task_kit as kit
from miniagent.lab.task_kit import task

ROOT = Path(__file__).resolve().parent
PY = shlex.quote(sys.executable)


def refusing(body):
    """One refusal path for every task: a learner-facing error becomes one line and exit status 2, and a
    ``--learner`` named on a refused command is not remembered."""
    @functools.wraps(body)
    def task_body(*args, **kwargs):
        from miniagent.lab.learner.progress import remembered_unless_refused

        try:
            with remembered_unless_refused(ROOT):
                return body(*args, **kwargs)
        except kit.errors() as err:
            kit.refuse(err)

    return task_body


@task(auto_shortflags=False, help={
    "question": "the grammar question, e.g. 'What is the past simple of go for she?'",
    "max_turns": "turn cap (default 6)",
    "max_tool_calls": "tool-call cap (default 4)",
    "wall_clock_s": "time budget of the run in seconds (default 20)",
    "tool_timeout_s": "per-call MCP timeout in seconds (default 2)",
    **kit.MODEL_HELP,
    "trace": "write JSON-lines events to FILE ('-' for stdout)",
    "json": "print the outcome as JSON",
})
@kit.with_model_options
def ask(c, question, max_turns=None, max_tool_calls=None, wall_clock_s=None, tool_timeout_s=None, trace=None,
        json=False, options=None):
    """Ask the grammar tutor one question (real local model + real MCP server)."""
    flags = kit.flags(max_turns=max_turns, max_tool_calls=max_tool_calls, wall_clock_s=wall_clock_s,
                      tool_timeout_s=tool_timeout_s, json=json, **options)
    with kit.agent_trace(trace) as (trace_file, trace_flag):
        kit.run(c, f"{PY} -m miniagent ask {shlex.quote(question)} {flags} {kit.flags(trace=trace_flag)}",
                trace=trace_file, who="agent")


@task(name="eval", auto_shortflags=False, help={
    "set": "JSON-lines eval set (default labs/01-tutor-end-to-end/eval.jsonl)",
    "limit": "only the first N items",
    "wall_clock_s": "time budget of each run in seconds (default 20)",
    **kit.MODEL_HELP,
    "json": "print one JSON object (accuracy, n, items...)",
})
@kit.with_model_options
def eval_(c, set=None, limit=None, wall_clock_s=None, json=False, options=None):  # noqa: A002
    """Score the tutor on an eval set: per-item table, accuracy, stop reasons, latency p50/p95."""
    flags = kit.flags(set=set, limit=limit, wall_clock_s=wall_clock_s, json=json, **options)
    with kit.agent_trace(None) as (trace_file, trace_flag):
        kit.run(c, f"{PY} -m miniagent eval {flags} {kit.flags(trace=trace_flag)}", trace=trace_file, who="agent")


@task(help={"k": "only tests matching this expression",
            "quick": "skip the real-model tests, the slow ones (marked slow: each half a minute or more) and the docs "
                     "in a browser"})
def test(c, k=None, quick=False):
    """Run the test suite (real model and real MCP server included): in parallel, then the timing tests alone."""
    selection = f"-k {shlex.quote(k)} " if k else ""
    also = " and not real_model and not slow and not browser" if quick else ""
    parallel = f"-n {kit.WORKERS} -m {shlex.quote('not serial' + also)}"
    codes = [kit.status(c, f"{PY} -m pytest -q {parallel} {selection}".strip(), who="tests")]
    if codes[0] in kit.GO_ON:  # a crash or an interrupted run ends the suite here
        codes.append(kit.status(c, f"{PY} -m pytest -q -p no:xdist -m {shlex.quote('serial' + also)} "
                                   f"{selection}".strip(), who="tests"))
    code = kit.suite_status(codes)
    if code:
        sys.exit(code)


@task(help={"json": "print the figures as JSON",
            "only": "one figure only: a, b (KV reuse), c (start -> answer/fallback), d, e or f (MCP server start-up)",
            "amx": "(c): llama.cpp's AMX path, comma-separated settings to compare, e.g. on,off (default auto)",
            "load": "(c): idle or busy (one core kept busy by another program); default both",
            "runs": "(c): processes per figure, the median is shown (default 5)",
            "save": "(c): also write docs_results/bench-NAME.json and its tables for the docs"})
@refusing
def bench(c, json=False, only=None, amx=None, load=None, runs=None, save=None):
    """Print the speed figures (turn latency vs decode, KV reuse, start -> answer/fallback, eval time...)."""
    loads = {"idle": "idle", "busy": "'one core busy'"}
    asked = [x.strip() for x in (load or "").split(",") if x.strip()]
    if any(x not in loads for x in asked):  # before minutes of measuring: bench's own names are not the flag's
        kit.refuse(f"--load takes idle or busy (or both, comma-separated), got {load!r}")
    if runs is not None and kit.number("--runs", runs, int) < 1:
        kit.refuse(f"--runs takes 1 or more, got {runs!r}")
    kit.check_save_name(save)
    flags = [kit.flags(json=json, only=only, runs=runs, save=save)]
    flags += [f"--amx {shlex.quote(a.strip())}" for a in (amx or "").split(",") if a.strip()]
    flags += [f"--load {loads[x]}" for x in asked]
    kit.run(c, f"{PY} -m miniagent.lab.maintainers.bench {' '.join(flags)}", who="bench")


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

    exercises.list_breaks()


LEARNER_HELP = "your name, your folder under learners/ (remembered: needed once)"
LANG_HELP = "en | es (default: the language of your notebook)"


def _who(learner, required=False):
    """The learner named here, else the one who ran a command last (None, or a refusal if required)."""
    from miniagent.lab.learner.progress import resolve_learner

    return resolve_learner(ROOT, learner, required=required)


@task(name="break", positional=["variant"], help={
    "variant": "a break: alias (no-cap), id (00-no-cap) or number (00)", "learner": LEARNER_HELP})
@refusing
def break_(c, variant, learner=None):
    """Apply a break to your working tree (refuses, changing nothing, if your edits conflict)."""
    from miniagent.lab.commands import exercises

    exercises.break_tree(variant, _who(learner))


@task(positional=["variant"], help={"variant": "the break to revert", "learner": LEARNER_HELP})
@refusing
def fix(c, variant, learner=None):
    """Revert a break exactly (refuses if you edited the same lines since)."""
    from miniagent.lab.commands import exercises

    exercises.fix_tree(variant, _who(learner))


@task(positional=["variant"], help={"variant": "a break (alias, id or number), or 'all' for every guard test",
                                    "dry_run": "only list the guard tests, without running them",
                                    "verbose": "also print pytest's own output", "learner": LEARNER_HELP})
@refusing
def check(c, variant, dry_run=False, learner=None, verbose=False):
    """Run a break's guard tests against your own source: green means your fix holds."""
    from miniagent.lab.commands import exercises

    code = exercises.check(variant, dry_run=dry_run, learner=_who(learner), verbose=verbose)
    sys.exit(code)


@task(positional=["variant"], help={"variant": "the break you are fixing", "learner": LEARNER_HELP,
                                    "lang": LANG_HELP})
@refusing
def hint(c, variant, learner=None, lang=None):
    """The next hint for a break: 1, then 2, then 3 (remembered in your progress)."""
    from miniagent.lab.commands import exercises

    exercises.hint(variant, _who(learner, required=True), lang)


@task(help={"learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def progress(c, learner=None, lang=None):
    """Every break with your state (predicted, run, broken, fixed, hints) and what to do next."""
    from miniagent.lab.commands import exercises

    exercises.progress_report(_who(learner, required=True), lang)


@task(name="next", help={"learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def next_(c, learner=None, lang=None):
    """The next break to work on, with the commands for it."""
    from miniagent.lab.commands import exercises

    exercises.next_break(_who(learner, required=True), lang)


@task(positional=["variant"], help={"variant": "the break whose guard tests to run (or 'all')",
                                    "learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def watch(c, variant, learner=None, lang=None):
    """Re-run a break's guard tests every time you save a file under src/ (Ctrl-C to stop)."""
    from miniagent.lab.commands import exercises

    code = exercises.watch_tree(variant, _who(learner), lang)
    sys.exit(code)


@task(positional=["variant"], help={"variant": "the break to put back to its intact source",
                                    "learner": LEARNER_HELP, "lang": LANG_HELP})
@refusing
def reset(c, variant, learner=None, lang=None):
    """Back to the intact source for this break only (your other edits stay; replaced lines are saved)."""
    from miniagent.lab.commands import exercises

    exercises.reset_tree(variant, _who(learner), lang)


@task(positional=["variant"], help={
    "variant": "the break to predict", "learner": LEARNER_HELP,
    "lang": "en | es: your notebook's language, chosen once (the first time; default en)"})
@refusing
def predict(c, variant, learner=None, lang=None):
    """Add a prediction section for a break to learners/NAME/notebook.md (never overwrites)."""
    from miniagent.lab.commands import experiment

    experiment.predict(variant, _who(learner, required=True), lang)


@task(auto_shortflags=False, help={
    "variant": "a break alias/id, or 'baseline' for the intact loop",
    "input": "the question (default: the break's own input)",
    "timeout": "seconds before the harness kills the run (default: the break's)",
    **kit.MODEL_HELP,
    "llm": "model: llama | scripted:<behaviour> | openai (default: the break's)",
    "learner": "compare with your prediction and append the observation to your notes",
    "json": "print the run record as JSON",
})
@kit.with_model_options
@refusing
def exp(c, variant, input=None, timeout=None, learner=None, json=False, options=None):  # noqa: A002
    """Run a variant from a sandbox copy under the harness: live panel, kill at timeout, report."""
    from miniagent.lab.commands import experiment

    llm = options.pop("llm")
    seconds = kit.number("--timeout", timeout, float) if timeout is not None else None
    if seconds is not None and seconds <= 0:
        raise ValueError(f"--timeout takes a number of seconds above 0, got {timeout!r}")
    record = experiment.exp(variant, question=input, timeout=seconds, llm=llm,
                            learner=learner, as_json=json, model_flags=shlex.split(kit.flags(**options)))
    if record is None or record.signal:  # no prediction yet (it said how to write one), or a crash (reported)
        sys.exit(1)


@task(help={"learner": "score your predictions", "json": "print all records as JSON",
            "llm": "run every break with this model instead of its own"})
@refusing
def tour(c, learner=None, json=False, llm=None):
    """The failure-mode tour: run every break, then a summary table (predicted vs observed)."""
    from miniagent.lab.commands import experiment

    results = experiment.tour(learner, as_json=json, llm=llm)
    if any((r["record"] or {}).get("signal") for r in results):
        sys.exit(1)  # a run crashed: the table says which


@task(name="check-breaks", help={"real": "use each break's own model instead of the fast CI model",
                                 "only": "check one break",
                                 "under_load": "keep one core busy with another process during the whole check",
                                 "lines": "also: a fix that leaves out any one removed line or term stays red"})
@refusing
def check_breaks(c, real=False, only=None, under_load=False, lines=False):
    """Maintainer check: each break applies, is caught by its tests, shows its symptom, reverts exactly."""
    from miniagent.lab.maintainers import checks

    sys.exit(checks.check_breaks(use_ci_models=not real, only=only, under_load=under_load, lines=lines))


@task(name="docs-results", help={"only": "one break only"})
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
    """Headless Chromium reads the built site in Spanish (home, break 00, a hint, the results), searches,
    and follows the language switcher on every page; saves a screenshot of each step."""
    kit.run(c, f"{PY} -m pytest -q tests/docs/test_docs_browser.py")
    print("screenshots: build/docs-check/*.png")


# --- maintainers: the property tests' counterexamples, mutation testing -------------------------------------
@task(help={"only": "one break only"})
@refusing
def counterexamples(c, only=None):
    """Run each break against its property tests; write hypothesis's smallest failing world to docs_results/."""
    from miniagent.lab.maintainers import counterexamples as ce

    ce.write(ROOT / "docs_results", only=only)


@task(help={"max_children": "mutants tested in parallel (default 2)",
            "wing": "the wings to mutate, comma-separated: agent, models, tools, lab, cli, tasks (default: all)"})
def mutants(c, max_children=2, wing=None):
    """Mutation testing of the whole package, wing by wing, with each wing's tests (mutmut; slow: not in CI)."""
    from miniagent.lab.maintainers import mutants as mm

    wings = [w.strip() for w in str(wing).split(",")] if wing is not None else list(mm.WINGS)  # "": no wing
    unknown = [repr(w) if not w else w for w in wings if w not in mm.WINGS]
    if unknown:
        kit.refuse(f"no wing named {', '.join(unknown)}: the wings are {', '.join(mm.WINGS)}")
    unexplained = broken = 0
    for name in wings:
        result = mm.run(max_children=int(max_children), wing=name)
        print(mm.report(result), flush=True)
        unexplained += len(result["unexplained"])
        broken += result["problem"] is not None
    # 2: the check itself failed (a wing tested nothing); 1: survivors nobody explained
    sys.exit(2 if broken else 1 if unexplained else 0)


@task(name="class-load", help={
    "learners": "class sizes to measure, comma-separated (default 1,4,8,16)",
    "server": "the server to start here and reap after: miniagent (the lab's class server, default), "
              "llama-cpp-python, or local (no server: each learner runs the local backend, the baseline)",
    "base_url": "an OpenAI-compatible server that is already up (instead of --server)",
    "questions_each": "questions per learner (default: the public set split among the learners, each question once)",
    "wall_clock_s": "each run's wall clock (default 20)",
    "model_wall_clock_s": "the model calls' own budget per run (default 0: counted in the wall clock)",
    "set": "eval set (default labs/01-tutor-end-to-end/eval.jsonl)",
    "model": "GGUF the server loads (and the learners' tokenizer)",
    "save": "also write docs_results/class-load-NAME.json and its tables (.md, .es.md) for the docs",
    "json": "print the report as JSON",
    "grounding": "argument grounding in the learners' runs (default on; --no-grounding: the loop without it)",
})
@refusing
def class_load(c, learners="1,4,8,16", server="miniagent", base_url=None, questions_each=None, wall_clock_s=None,  # noqa: A002
               model_wall_clock_s=None, set=None, model=None, save=None, json=False, grounding=True):
    """A class on one model server: N learners run the eval at once; throughput, turn latency, guard stops."""
    from miniagent.lab.maintainers.class_load_command import class_load_command

    class_load_command(learners=learners, server=server, base_url=base_url, questions_each=questions_each,
                       wall_clock_s=wall_clock_s, model_wall_clock_s=model_wall_clock_s, eval_set=set, model=model,
                       save=save, as_json=json, grounding=grounding)
