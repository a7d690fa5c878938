"""The experiment: hypothesis -> method -> rollback, always in that order; and the tour of every break.

The learner's prediction is read, the variant runs from a throwaway copy of the source under the harness, the
copy is deleted whatever happened, and the observation is printed beside the prediction and appended to the
notes.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..catalogue import ROOT, Break, catalogue, find
from ..harness.charts import save_record
from ..harness.crash import short as crash_short
from ..harness.record import RunRecord, crash_note, deadline_note, machine_note
from ..harness.run import run_experiment
from ..learner import notebook, progress, scoring
from ..learner.fields import NO_STOP_REASON
from ..patching import agent_command, make_sandbox
from ...telemetry.settings import sandbox_env
from ..words import number, section, words
from .. import screen
from .exercises import notebook_lang, report_lang, state_readable

BASELINE = "baseline"
RUNS = ROOT / "runs"


PREDICT_TEXT = section("predict")


def predict(variant: str, learner: str, lang: str | None = None) -> None:
    brk = find(variant)
    state_readable(learner)
    lang = notebook_lang(learner, lang)
    path, created = notebook.add_prediction(ROOT, learner, brk.id, brk.title.get(lang) or brk.title["en"], lang)
    text = PREDICT_TEXT[lang]["added" if created else "exists"]
    screen.console.print(text.format(id=brk.id, path=path.relative_to(ROOT), alias=brk.alias, learner=learner),
                  markup=False, highlight=False)


def _resolve(variant: str) -> Break | None:
    return None if variant == BASELINE else find(variant, also=(BASELINE,))


def exp(variant: str, *, question: str | None = None, timeout: float | None = None, llm: str | None = None,
        learner: str | None = None, live: bool = True, as_json: bool = False, flags: list[str] | None = None,
        runs_dir: Path = RUNS, model_flags: list[str] | None = None, lang: str | None = None) -> RunRecord | None:
    """Run a break (or the baseline); ``model_flags`` (``--decode greedy``, ``--openai-base-url URL``...) go
    to the run after the break's own flags. ``lang``: the report's language, when no learner names it."""
    brk = _resolve(variant)
    variant_id = brk.id if brk else BASELINE
    # Hypothesis: a learner who names themselves predicts first.
    prediction = None
    if learner and brk is not None:
        state_readable(learner)  # a bad progress file stops the run before it starts, not after
        prediction = notebook.read_prediction(ROOT, learner, brk.id)
        if prediction is None:
            screen.console.print(notebook.how_to_predict(brk.id, learner, notebook_lang(learner)), markup=False,
                          highlight=False)
            return None
    question = question or (brk.input if brk else "What is the present perfect of would for you?")
    timeout = timeout or (brk.timeout_s if brk else 30.0)
    llm = llm or (brk.llm if brk else "llama")
    run_flags = (flags if flags is not None else (brk.flags if brk else [])) + outside_the_sandbox(model_flags or [])
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    record, json_path, svg_path = _run_in_sandbox(brk, question, llm, run_flags, timeout, live=live and not as_json,
                                                  quiet=as_json, runs_dir=runs_dir)
    if as_json:
        print(json.dumps({**record.to_dict(), "variant": variant_id, "llm": llm, "json_path": str(json_path),
                          "svg_path": str(svg_path)}))
    else:
        report(record, json_path, svg_path, brk, learner if prediction is not None else None,
               lang=lang or report_lang(learner))
    if prediction is not None and brk is not None and learner:
        _score(brk, learner, prediction, record, json_path, svg_path, stamp)
    return record


# Flags that name a file or folder of the learner's, from where they typed the command ('' turns the cache off).
FILE_FLAGS = ("--model", "--traces-file", "--cache-dir")


def outside_the_sandbox(flags: list[str]) -> list[str]:
    """``flags`` with each path named by one of :data:`FILE_FLAGS` made absolute: the run's working directory is
    the sandbox, where a relative path would point into the copy (and a traces file would go with it)."""
    out = list(flags)
    for i in range(len(out) - 1):
        if out[i] in FILE_FLAGS and out[i + 1]:
            out[i + 1] = str(Path(out[i + 1]).resolve())
    return out


def _run_in_sandbox(brk: Break | None, question: str, llm: str, run_flags: list[str], timeout: float, *,
                    live: bool, quiet: bool, runs_dir: Path) -> tuple[RunRecord, Path, Path]:
    """Run the variant from a throwaway copy of the source (deleted, always) and save its record and chart."""
    variant_id = brk.id if brk else BASELINE
    sandbox = make_sandbox(brk)
    try:
        if not quiet:
            needs = f", needs {escape(str(brk.needs))}" if brk and brk.needs else ""
            screen.console.print(f"[bold]{variant_id}[/] with {escape(llm)} on {escape(repr(question))}, timeout {timeout:g} s "
                          f"from the loop's start{needs} (source copy: {escape(str(sandbox))})")
        # The timeout counts from the loop's start, and a break's run goes on until it has reached the
        # broken code (its needs) or the hard cap: a busy machine slows the run, it must not skip the lesson.
        record = run_experiment(agent_command(question, sandbox / "trace.jsonl", llm=llm, flags=run_flags),
                                timeout=timeout, trace_path=sandbox / "trace.jsonl",
                                env={"PYTHONPATH": str(sandbox / "src"), **sandbox_env(ROOT)}, cwd=sandbox, live=live,
                                clock="loop", needs=brk.needs if brk else None,
                                hard_cap=brk.hard_cap_s if brk else None)
        if record.exit_code == 2 and record.loop_start_s is None:  # the agent refused its command line: no run
            said = next((line.strip() for line in reversed(record.stderr_tail) if line.strip()), "no reason given")
            raise ValueError(f"the run did not start: {re.sub(r'^miniagent( [a-z]+)?: ', '', said)}")
        if brk is not None and _own_setup(brk, question, llm, run_flags) and record.needs_met is not False:
            record.expect_failures = brk.expect.failures(record.to_dict())
        json_path, svg_path = save_record(record, runs_dir / variant_id, title=f"{variant_id} — {llm}")
        trace_copy = json_path.with_name(json_path.stem + "-trace.jsonl")
        if (sandbox / "trace.jsonl").is_file():  # keep the full trace beside the record
            shutil.copy(sandbox / "trace.jsonl", trace_copy)
            record.trace_path = str(trace_copy)
            json_path.write_text(json.dumps(record.to_dict(), indent=2), encoding="utf-8")
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    return record, json_path, svg_path


def _score(brk: Break, learner: str, prediction: dict, record: RunRecord, json_path: Path, svg_path: Path,
           stamp: str) -> None:
    """The prediction against the run: on screen, appended to the notebook, and counted in progress."""
    rows = scoring.compare(prediction, record.to_dict())
    lang = notebook_lang(learner)
    screen.console.print(scoring.render_comparison(rows, lang))
    path = notebook.append_observation(ROOT, learner, brk.id, record.to_dict(), rows, json_path, svg_path,
                                       when=stamp, lang=lang)
    screen.console.print(words(lang)["report"]["appended"].format(path=path.relative_to(ROOT)), markup=False,
                         highlight=False)
    scored = [r.hit for r in rows if r.hit is not None]
    if scored:
        progress.update(ROOT, learner, lambda state: _count_run(progress.break_state(state, brk.id), scored))


def _count_run(state: dict, scored: list[bool]) -> None:
    state.update(runs=(state.get("runs") or 0) + 1, hits=sum(scored), fields=len(scored))


def _own_setup(brk: Break, question: str, llm: str, flags: list[str]) -> bool:
    """The break runs as its break.toml says (its symptom is only promised for that)."""
    return question == brk.input and llm in (brk.llm, brk.ci_llm) and list(flags) == brk.flags


def verdict(brk: Break | None, record: RunRecord, learner: str | None = None,
            lang: str = "en") -> list[tuple[str, str]]:
    """(style, sentence) pairs after the table: the deadline, the machine, whether the break showed its symptom.

    A run that died of a signal gets the crash report alone: it says nothing about the break, and the
    machine's load is not its cause (see :mod:`miniagent.lab.harness.crash`)."""
    crashed = crash_note(record, lang)
    if crashed:
        return [("bold red", crashed[0]), *(("red", line) for line in crashed[1:])]
    out = []
    note = deadline_note(record, lang)
    if note:
        out.append(("dim", note))
    busy = machine_note(record, lang)
    if busy:
        out.append(("yellow", busy))
    if brk is None:
        return out
    t = words(lang)["verdict"]
    rerun = f"`invoke exp {brk.alias}" + (f" --learner {learner}`" if learner else "`")
    if record.needs_met is False:
        needs = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in brk.needs.items())
        got = ", ".join(f"{getattr(record, key)} {key.replace('_', ' ')}" for key in brk.needs)
        out.append(("bold yellow", t["not_exercised"].format(
            needs=needs, got=got, why=t["why_busy"] if record.machine_busy else t["why_ended"], rerun=rerun,
            when=t["when_busy"] if record.machine_busy else t["when_plain"])))
    elif record.expect_failures:
        busy_tail = t["symptom_missing_busy"].format(rerun=rerun) if record.machine_busy else ""
        out.append(("bold red", t["symptom_missing"].format(expected=brk.expect.describe(),
                                                           failures="; ".join(record.expect_failures), busy=busy_tail)))
    elif record.expect_failures == []:
        out.append(("green", t["symptom_shown"].format(expected=brk.expect.describe())))
    return out


def report(record: RunRecord, json_path: Path, svg_path: Path, brk: Break | None = None,
           learner: str | None = None, lang: str = "en") -> None:
    t = words(lang)["report"]
    table = Table(show_header=False, title=t["title"])
    clock = t["from_loop"].format(start=number(record.loop_start_s, lang, ".1f")) \
        if record.clock == "loop" and record.loop_start_s is not None else ""
    rows = [
        (t["outcome"], record.outcome),
        (t["stop_reason"], record.stop_reason or NO_STOP_REASON),  # written as the notebook writes it
        (t["wall"], t["wall_value"].format(wall=number(record.wall_s, lang, ".1f"), timeout=number(record.timeout, lang),
                                            clock=clock)),
        (t["cpu"], t["cpu_value"].format(mean=f"{record.cpu_mean:.0f}", max=f"{record.cpu_max:.0f}")),
        (t["tool_calls"], f"{record.tool_calls} {record.tool_calls_by_tool or ''}"),
        (t["identical_calls"], str(record.identical_calls)), (t["tool_errors"], str(record.tool_errors)),
        (t["turns"], str(record.turns)),
        (t["processes_left"], ", ".join(f"{p['pid']} {p['cmdline'][:60]}" for p in record.processes_left) or "0"),
        (t["others"], t["others_value"].format(mean=f"{record.other_cpu_mean:.0f}", max=f"{record.other_cpu_max:.0f}",
                                               cpus=record.cpus, before=number(record.load_avg_start, lang),
                                               after=number(record.load_avg_end, lang))
         + (t["busy_flag"] if record.machine_busy else "")),
    ]
    if record.kill_latency_s is not None:
        rows.append((t["killed"], t["killed_value"].format(latency=number(record.kill_latency_s, lang, "+.2f"))))
    for key, value in rows:
        table.add_row(key, Text(value))  # Text: an answer's "[stop_reason: ...]" is not markup
    screen.console.print(table)
    if record.answer:
        screen.console.print(f"[bold]{escape(t['answer'])}[/] {escape(record.answer)}", highlight=False)
    if record.scratchpad_tail:
        screen.console.print(f"[bold]{escape(t['scratchpad'])}[/]")
        for line in record.scratchpad_tail:
            screen.console.print(f"  {line}", markup=False, highlight=False)
    shown = json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path
    for style, sentence in verdict(brk, record, learner, lang):
        screen.console.print(Text(sentence, style=style))
    said = t["saved_with_trace"] if record.trace_path else t["saved"]
    trace = Path(record.trace_path).name if record.trace_path else ""
    screen.console.print(said.format(json=shown, trace=trace, svg=svg_path.name), markup=False, highlight=False)


def tour(learner: str | None = None, *, as_json: bool = False, llm: str | None = None) -> list[dict]:
    """Run every break (predictions first when a learner is named), then one summary table."""
    state_readable(learner)  # a bad progress file stops the tour before its first run, not after the last
    screen.console.quiet = as_json  # with --json, stdout carries the JSON and nothing else
    try:
        results = _tour_runs(learner, as_json, llm)
    finally:
        screen.console.quiet = False
    if as_json:
        print(json.dumps(results))
        return results
    table = Table(title="failure-mode tour")
    for column in ("break", "model", "predicted outcome", "observed", "hit/miss"):
        table.add_column(column)
    for r in results:
        rec = r["record"] or {}
        predicted = (r["predicted"] or {}).get("outcome") or "-"
        stop = rec.get("stop_reason") or NO_STOP_REASON
        observed = f"{rec.get('outcome')} / {stop} / cpu {rec.get('cpu_mean', 0):.0f} %"
        score = f"{r['hits']}/{r['fields']} fields" if r["fields"] else "no prediction"
        if rec.get("signal"):
            score = crash_short(rec["signal"]) + ": see lab 02"
        elif rec and not scoring.exercised(rec):
            score = "not exercised: run it again"
        elif rec.get("machine_busy"):
            score += " (busy machine)"
        table.add_row(*(Text(cell) for cell in (r["id"], r["llm"], str(predicted), observed, score)))
    screen.console.print(table)
    return results


def _tour_runs(learner: str | None, as_json: bool, llm: str | None) -> list[dict]:
    results, breaks, started = [], catalogue(), time.monotonic()
    for done, brk in enumerate(breaks):
        screen.console.rule(escape(f"{brk.id}: {brk.title['en']} · {screen.so_far(done, len(breaks), started)}"))
        prediction = notebook.read_prediction(ROOT, learner, brk.id) if learner else None
        if learner and prediction is None:
            screen.console.print(f"(no prediction for {brk.id} in your notes, or every value still `?`: "
                                 f"`invoke predict {brk.alias} --learner {learner}`, then fill it in, to be scored)")
        # The named learner's language, also for a break run unscored (else the remembered learner's would do).
        record = exp(brk.alias, learner=learner if prediction and not as_json else None, live=not as_json, llm=llm,
                     lang=report_lang(learner) if learner else None)
        rows = scoring.compare(prediction, record.to_dict()) if prediction and record else []
        hits = [r.hit for r in rows if r.hit is not None]
        results.append({"id": brk.id, "llm": llm or brk.llm, "real_model": (llm or brk.llm) == "llama",
                        "predicted": prediction, "record": record.to_dict() if record else None,
                        "hits": sum(hits), "fields": len(hits),
                        "exercised": scoring.exercised(record.to_dict()) if record else None})
    return results
