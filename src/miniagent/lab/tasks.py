"""What the lab's invoke tasks do: list, break, fix, check, predict, exp, tour, check-breaks.

An experiment is hypothesis -> method -> rollback, always in that order:
the learner's prediction is read, the variant runs from a throwaway copy of
the source under the harness, the copy is deleted whatever happened, and
the observation is printed beside the prediction and appended to the notes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import notebook
from .breaks import ROOT, Break, BreakError, agent_command, apply_to_tree, catalogue, find, is_applied, \
    make_sandbox, revert_in_tree, source_digest
from .harness import RunRecord, deadline_note, machine_note, run_experiment, save_record, summary

console = Console()
BASELINE = "baseline"
RUNS = ROOT / "runs"


def list_breaks() -> None:
    console.print("[bold]The break catalogue[/]: `invoke exp --variant ALIAS` runs one, `invoke break ALIAS` applies it")
    for brk in catalogue():
        model = "real model" if brk.real_model else f"stand-in {brk.llm}"
        applied = " [red](applied in your src/)[/]" if is_applied(brk) else ""
        console.print(f"  [bold]{brk.id:<20}[/] {escape(brk.title['en'])} [dim]({escape(model)})[/]{applied}",
                      highlight=False)


def break_tree(variant: str) -> None:
    brk = find(variant)
    apply_to_tree(brk)
    console.print(f"[bold red]{brk.id}[/] applied to src/: {escape(brk.removes)}.\n"
                  f"Study the diff with `git diff src/`, run `invoke check {brk.alias}` to see the guard tests "
                  f"fail, fix it yourself, or `invoke fix {brk.alias}` to revert exactly.")


def fix_tree(variant: str) -> None:
    brk = find(variant)
    revert_in_tree(brk)
    console.print(f"[bold green]{brk.id}[/] reverted: src/ is as before the break.")


def check(variant: str | None) -> int:
    """Run the guard tests of one break (or all guard tests) against the learner's own source."""
    tests = find(variant).tests if variant else ["tests/test_guards.py", "tests/test_config.py",
                                                 "tests/test_no_orphans.py"]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "--timeout", "60", *tests], cwd=ROOT).returncode


def predict(variant: str, learner: str) -> None:
    brk = find(variant)
    path, created = notebook.add_prediction(ROOT, learner, brk.id, brk.title["en"])
    if created:
        console.print(f"Added a prediction section for {brk.id} to {path.relative_to(ROOT)}.\n"
                      f"Fill in the values, say why, then run `invoke exp --variant {brk.alias} --learner {learner}`.")
    else:
        console.print(f"You already have a prediction section for {brk.id} in {path.relative_to(ROOT)}; edit it there.")


def _resolve(variant: str) -> Break | None:
    return None if variant == BASELINE else find(variant)


def exp(variant: str, *, question: str | None = None, timeout: float | None = None, llm: str | None = None,
        learner: str | None = None, live: bool = True, as_json: bool = False, flags: list[str] | None = None,
        runs_dir: Path = RUNS, model_flags: list[str] | None = None) -> RunRecord | None:
    """Run a break (or the baseline); ``model_flags`` (``--decode greedy``, ``--openai-base-url URL``...) go
    to the run after the break's own flags."""
    brk = _resolve(variant)
    variant_id = brk.id if brk else BASELINE
    # Hypothesis: a learner who names themselves predicts first.
    prediction = None
    if learner and brk is not None:
        prediction = notebook.read_prediction(ROOT, learner, brk.id)
        if prediction is None:
            console.print(notebook.how_to_predict(brk.id, learner), markup=False, highlight=False)
            return None
    question = question or (brk.input if brk else "What is the present perfect of would for you?")
    timeout = timeout or (brk.timeout_s if brk else 30.0)
    llm = llm or (brk.llm if brk else "llama")
    run_flags = (flags if flags is not None else (brk.flags if brk else [])) + list(model_flags or [])
    # Method: run the variant from a throwaway copy; rollback: delete the copy, always.
    sandbox = make_sandbox(brk)
    try:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        if not as_json:
            needs = f", needs {escape(str(brk.needs))}" if brk and brk.needs else ""
            console.print(f"[bold]{variant_id}[/] with {escape(llm)} on {escape(repr(question))}, timeout {timeout:g} s "
                          f"from the loop's start{needs} (source copy: {escape(str(sandbox))})")
        # The timeout counts from the loop's start, and a break's run goes on until it has reached the
        # broken code (its needs) or the hard cap: a busy machine slows the run, it must not skip the lesson.
        record = run_experiment(agent_command(question, sandbox / "trace.jsonl", llm=llm, flags=run_flags),
                                timeout=timeout, trace_path=sandbox / "trace.jsonl",
                                env={"PYTHONPATH": str(sandbox / "src")}, cwd=sandbox, live=live and not as_json,
                                clock="loop", needs=brk.needs if brk else None,
                                hard_cap=brk.hard_cap_s if brk else None)
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
    if as_json:
        print(json.dumps({**record.to_dict(), "variant": variant_id, "llm": llm, "json_path": str(json_path),
                          "svg_path": str(svg_path)}))
    else:
        report(record, json_path, svg_path, brk, learner if prediction is not None else None)
    if prediction is not None and brk is not None and learner:
        rows = notebook.compare(prediction, record.to_dict())
        console.print(notebook.render_comparison(rows))
        path = notebook.append_observation(ROOT, learner, brk.id, record.to_dict(), rows, json_path, svg_path,
                                           when=stamp)
        console.print(f"Observation appended to {path.relative_to(ROOT)}.")
    return record


def _own_setup(brk: Break, question: str, llm: str, flags: list[str]) -> bool:
    """The break runs as its break.toml says (its symptom is only promised for that)."""
    return question == brk.input and llm in (brk.llm, brk.ci_llm) and list(flags) == brk.flags


def verdict(brk: Break | None, record: RunRecord, learner: str | None = None) -> list[tuple[str, str]]:
    """(style, sentence) pairs after the table: the deadline, the machine, whether the break showed its symptom."""
    out = []
    note = deadline_note(record)
    if note:
        out.append(("dim", note))
    busy = machine_note(record)
    if busy:
        out.append(("yellow", busy))
    if brk is None:
        return out
    rerun = f"`invoke exp --variant {brk.alias}" + (f" --learner {learner}`" if learner else "`")
    if record.needs_met is False:
        needs = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in brk.needs.items())
        got = ", ".join(f"{getattr(record, key)} {key.replace('_', ' ')}" for key in brk.needs)
        why = "the machine was busy" if record.machine_busy else "the run ended first"
        out.append(("bold yellow", f"NOT EXERCISED: this run never reached the broken code. The break needs "
                                   f"{needs} before its timeout may end it; this run had {got} ({why}). "
                                   f"It says nothing about the break, and nothing was scored. Run it again: "
                                   f"{rerun}" + (", when the machine is quieter." if record.machine_busy else ".")))
    elif record.expect_failures:
        out.append(("bold red", f"The break's symptom did not show ({brk.expect.describe()}): "
                                f"{'; '.join(record.expect_failures)}."
                                + (" The machine was busy, which may be the reason: run it again when it is "
                                   f"quieter ({rerun})." if record.machine_busy else "")))
    elif record.expect_failures == []:
        out.append(("green", f"The break's symptom showed: {brk.expect.describe()}."))
    return out


def report(record: RunRecord, json_path: Path, svg_path: Path, brk: Break | None = None,
           learner: str | None = None) -> None:
    table = Table(show_header=False, title="observed")
    rows = [
        ("outcome", record.outcome), ("stop reason", str(record.stop_reason)),
        ("wall", f"{record.wall_s:.1f} s (timeout {record.timeout:g} s"
                 + (f" from the loop's start at {record.loop_start_s:.1f} s)" if record.clock == "loop"
                    and record.loop_start_s is not None else ")")),
        ("CPU mean / max", f"{record.cpu_mean:.0f} % / {record.cpu_max:.0f} % (100 % = one core)"),
        ("tool calls", f"{record.tool_calls} {record.tool_calls_by_tool or ''}"),
        ("identical calls", str(record.identical_calls)), ("tool errors", str(record.tool_errors)),
        ("turns", str(record.turns)),
        ("processes left", ", ".join(f"{p['pid']} {p['cmdline'][:60]}" for p in record.processes_left) or "0"),
        ("other programs", f"{record.other_cpu_mean:.0f} % CPU mean, {record.other_cpu_max:.0f} % max"
                           f" ({record.cpus} usable CPUs, load average {record.load_avg_start} -> "
                           f"{record.load_avg_end})" + (": BUSY MACHINE" if record.machine_busy else "")),
    ]
    if record.kill_latency_s is not None:
        rows.append(("killed", f"{record.kill_latency_s:+.2f} s after the deadline"))
    for key, value in rows:
        table.add_row(key, Text(value))  # Text: an answer's "[stop_reason: ...]" is not markup
    console.print(table)
    if record.answer:
        console.print(f"[bold]answer:[/] {escape(record.answer)}", highlight=False)
    if record.scratchpad_tail:
        console.print("[bold]last lines of the scratchpad:[/]")
        for line in record.scratchpad_tail:
            console.print(f"  {line}", markup=False, highlight=False)
    shown = json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path
    for style, sentence in verdict(brk, record, learner):
        console.print(Text(sentence, style=style))
    console.print(f"saved: {shown} and {svg_path.name}", markup=False, highlight=False)


def tour(learner: str | None = None, *, as_json: bool = False, llm: str | None = None) -> list[dict]:
    """Run every break (predictions first when a learner is named), then one summary table."""
    console.quiet = as_json  # with --json, stdout carries the JSON and nothing else
    try:
        results = _tour_runs(learner, as_json, llm)
    finally:
        console.quiet = False
    if as_json:
        print(json.dumps(results))
        return results
    table = Table(title="failure-mode tour")
    for column in ("break", "model", "predicted outcome", "observed", "hit/miss"):
        table.add_column(column)
    for r in results:
        rec = r["record"] or {}
        predicted = (r["predicted"] or {}).get("outcome") or "-"
        observed = f"{rec.get('outcome')} / {rec.get('stop_reason')} / cpu {rec.get('cpu_mean', 0):.0f} %"
        score = f"{r['hits']}/{r['fields']} fields" if r["fields"] else "no prediction"
        if rec and not notebook.exercised(rec):
            score = "not exercised: run it again"
        elif rec.get("machine_busy"):
            score += " (busy machine)"
        table.add_row(*(Text(cell) for cell in (r["id"], r["llm"], str(predicted), observed, score)))
    console.print(table)
    return results


def _tour_runs(learner: str | None, as_json: bool, llm: str | None) -> list[dict]:
    results = []
    for brk in catalogue():
        console.rule(escape(f"{brk.id}: {brk.title['en']}"))
        prediction = notebook.read_prediction(ROOT, learner, brk.id) if learner else None
        if learner and prediction is None:
            console.print(f"(no prediction for {brk.id} in your notes: `invoke predict --variant {brk.alias} "
                          f"--learner {learner}` first to be scored)")
        record = exp(brk.alias, learner=learner if prediction and not as_json else None, live=not as_json, llm=llm)
        rows = notebook.compare(prediction, record.to_dict()) if prediction and record else []
        hits = [r.hit for r in rows if r.hit is not None]
        results.append({"id": brk.id, "llm": llm or brk.llm, "real_model": (llm or brk.llm) == "llama",
                        "predicted": prediction, "record": record.to_dict() if record else None,
                        "hits": sum(hits), "fields": len(hits),
                        "exercised": notebook.exercised(record.to_dict()) if record else None})
    return results


def check_breaks(*, use_ci_models: bool = True, only: str | None = None, under_load: bool = False) -> int:
    """Maintainer check: every break applies, is caught by its guard tests, shows its symptom, reverts exactly.

    ``under_load``: another process keeps one core busy for the whole check (started here, always
    reaped here), and each run must still show its symptom, and its record must say the machine was busy.
    """
    failures: list[str] = []
    original = source_digest(ROOT / "src")
    selected = [find(only)] if only else catalogue()  # an unknown name is refused, never "all ok"
    with (busy_core() if under_load else contextlib.nullcontext()):
        for brk in selected:
            problems, record = _check_one(brk, use_ci_models, under_load)
            status = "[green]ok[/]" if not problems else "[red]FAIL[/] " + escape("; ".join(problems))
            shown = f" [dim]({escape(summary(record))})[/]" if record is not None else ""
            console.print(f"{brk.id}: {status}{shown}")
            failures += [f"{brk.id}: {p}" for p in problems]
    if source_digest(ROOT / "src") != original:
        failures.append("the check changed src/")
    console.print(f"{len(failures)} problem(s)" if failures else "every break is caught and reverts cleanly")
    return 1 if failures else 0


@contextlib.contextmanager
def busy_core() -> Iterator[subprocess.Popen]:
    """Another program spinning on one core for as long as the block runs; killed and reaped afterwards."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    console.print(f"[yellow]under load[/]: pid {spinner.pid} keeps one core busy during the check")
    try:
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def _check_one(brk: Break, use_ci_models: bool, under_load: bool = False) -> tuple[list[str], RunRecord | None]:
    problems = []
    record = None
    work = Path(tempfile.mkdtemp(prefix=f"miniagent-check-{brk.id}-"))
    try:
        shutil.copytree(ROOT / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")  # markers and test paths
        before = source_digest(work / "src")
        # 1. the patch applies to the current source
        applied = subprocess.run(["git", "apply", str(brk.patch)], cwd=work, capture_output=True, text=True)
        if applied.returncode != 0:
            return [f"patch does not apply: {applied.stderr.strip()}"], None
        # 2. its guard tests catch it (they must fail against the broken copy)
        env = {"PYTHONPATH": str(work / "src")}
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "--timeout", "40", "-p", "no:cacheprovider",
                                *brk.tests], cwd=work, capture_output=True, text=True, env={**_env(), **env})
        if tests.returncode == 0:
            problems.append("the guard tests pass with the break applied: the break is not caught")
        # 3. the harness observes the declared symptom
        record = run_experiment(agent_command(brk.input, work / "trace.jsonl",
                                              llm=brk.ci_llm if use_ci_models else brk.llm, flags=brk.flags),
                                timeout=brk.timeout_s, trace_path=work / "trace.jsonl", env=env, cwd=work,
                                live=False, clock="loop", needs=brk.needs, hard_cap=brk.hard_cap_s)
        if record.needs_met is False:
            problems.append(f"not exercised: needs {brk.needs}, the run ended before ({summary(record)})")
        else:
            problems += [f"symptom: {p}" for p in brk.expect.failures(record.to_dict())]
        if under_load and not record.machine_busy:
            problems.append(f"the record does not say the machine was busy (other programs "
                            f"{record.other_cpu_mean:.0f} %)")
        if record.processes_left and not brk.expect.processes_left_min:
            problems.append(f"left processes behind: {record.processes_left}")
        if not record.cleanup_ok:
            problems.append("the harness could not clean up the process tree")
        # 4. the revert restores every file byte for byte
        reverted = subprocess.run(["git", "apply", "--reverse", str(brk.patch)], cwd=work, capture_output=True,
                                  text=True)
        if reverted.returncode != 0 or source_digest(work / "src") != before:
            problems.append("the revert does not restore the source byte for byte")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return problems, record


def docs_results(results_dir: Path, assets_dir: Path, only: str | None = None) -> None:
    """Run each break and its fixed twin (same model, input and flags) and write what the docs include.

    ``<results_dir>/<id>.md``: a table of the two runs' measured figures and the CPU chart
    ``<assets_dir>/<id>.svg`` (broken and fixed side by side).  Nothing here is typed by hand.
    """
    from .harness import write_svg_pair

    results_dir.mkdir(parents=True, exist_ok=True)
    assets_dir.mkdir(parents=True, exist_ok=True)
    for brk in catalogue():
        if only and brk.id != find(only).id:
            continue
        console.rule(brk.id)
        broken = exp(brk.alias, live=False)
        fixed = exp(BASELINE, question=brk.input, timeout=brk.timeout_s, llm=brk.llm, flags=brk.flags, live=False)
        svg = write_svg_pair(broken, fixed, assets_dir / f"{brk.id}.svg",
                             titles=(f"{brk.id} (broken)", "intact loop (fixed)"))
        image = os.path.relpath(svg, ROOT / "docs" / "breaks").replace(os.sep, "/")  # relative to the break page
        (results_dir / f"{brk.id}.md").write_text(_results_table(brk, broken, fixed, image), encoding="utf-8")
        keep = ("outcome", "stop_reason", "wall_s", "cpu_mean", "tool_calls", "processes_left", "started_at")
        (results_dir / f"{brk.id}.json").write_text(json.dumps(
            {"id": brk.id, "llm": brk.llm, "real_model": brk.real_model,
             "broken": {k: v for k, v in broken.to_dict().items() if k in keep},
             "fixed": {k: v for k, v in fixed.to_dict().items() if k in keep}}, indent=2), encoding="utf-8")
    _write_summary(results_dir)
    if only is None:
        _write_eval_results(results_dir)


def _write_summary(results_dir: Path) -> None:
    """The tour's table for lab 03, from every break's latest measured pair."""
    lines = ["| break · rotura | model · modelo | broken · roto | fixed · arreglado | CPU % broken / fixed | "
             "processes left · procesos vivos |", "|---|---|---|---|---|---|"]
    for path in sorted(results_dir.glob("[0-9][0-9]-*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        b, f = r["broken"], r["fixed"]
        model = r["llm"] if r["real_model"] else f"{r['llm']} (stand-in · sustituto)"
        lines.append(f"| [{r['id']}](../breaks/{r['id']}.md) | `{model}` | {b['outcome']} ({b['stop_reason'] or '—'}) | "
                     f"{f['outcome']} ({f['stop_reason'] or '—'}) | {b['cpu_mean']:.0f} / {f['cpu_mean']:.0f} | "
                     f"{len(b['processes_left'])} / {len(f['processes_left'])} |")
    (results_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _write_eval_results(results_dir: Path) -> None:
    """Lab 01's figures, strictly scored: calibrated scoring on every set, plain greedy decoding on the public one.

    ``fresh.jsonl`` was written before the prompt and the calibration were tuned
    for issue 7 and is measured only here, never used to choose a setting.
    """
    from ..agent.config import load_config
    from .evaluation import load_eval_set, run_eval

    lines = ["| set · conjunto | decoding · decodificación | strict accuracy · acierto estricto | "
             "stop reasons · motivos | p50 s | p95 s | total s |", "|---|---|---|---|---|---|---|"]
    runs = [("eval.jsonl", "public · público", "scored"), ("eval.jsonl", "public · público", "greedy"),
            ("heldout.jsonl", "old held-out · antiguo reservado", "scored"),
            ("fresh.jsonl", "fresh · nuevo", "scored")]
    for name, label, decode in runs:
        items = load_eval_set(ROOT / "labs" / "01-tutor-end-to-end" / name)
        console.print(f"eval {name} {decode}")
        r = run_eval(items, load_config(env={}, cli={"decode": decode}))
        lines.append(f"| `{name}` ({label}) | `{decode}` | {r['correct']}/{r['n']} = {r['accuracy']:.1%} | "
                     f"{r['stop_reasons']} | {r['latency_p50_s']:.2f} | {r['latency_p95_s']:.2f} | "
                     f"{r['total_s']:.1f} |")
        (results_dir / f"eval-{name.removesuffix('.jsonl')}-{decode}.json").write_text(
            json.dumps(r, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [f"Measured by `invoke docs-results` · medido con `invoke docs-results`: {stamp}, {os_cores()} cores, "
             "Gemma 3 270M (Q4_K_M).", ""] + lines
    (results_dir / "eval.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _results_table(brk: Break, broken: RunRecord, fixed: RunRecord, image: str) -> str:
    def cells(r: RunRecord) -> list[str]:
        calls = ", ".join(f"{t} ×{n}" for t, n in sorted(r.tool_calls_by_tool.items())) or "0"
        killed = f" (killed {r.kill_latency_s:+.2f} s)" if r.kill_latency_s is not None else ""
        return [r.outcome, str(r.stop_reason or "—"), f"{r.wall_s:.1f}{killed}", f"{r.cpu_mean:.0f}",
                f"{r.cpu_max:.0f}", f"{r.rss_max_mb:.0f}", calls, str(r.identical_calls), str(r.tool_errors),
                str(r.turns), str(len(r.processes_left))]

    labels = ["outcome · resultado", "stop_reason", "wall s · segundos", "CPU mean % · media", "CPU max % · máx.",
              "RSS max MB", "tool calls · llamadas", "identical calls · idénticas", "tool errors · errores",
              "turns · turnos", "processes left · procesos vivos"]
    model = brk.llm if brk.real_model else f"{brk.llm} (stand-in · sustituto)"
    lines = [f"Measured by `invoke docs-results` · medido con `invoke docs-results`: {broken.started_at[:16]}, "
             f"{os_cores()} cores, model · modelo `{model}`, timeout {brk.timeout_s:g} s, "
             f"input · entrada: “{brk.input}” {' '.join(brk.flags)}".rstrip()
             + f"; other programs · otros programas: {broken.other_cpu_mean:.0f} / {fixed.other_cpu_mean:.0f} % CPU"
             + (" (busy machine · máquina ocupada)" if broken.machine_busy or fixed.machine_busy else ""), "",
             "| | broken · roto | fixed · arreglado |", "|---|---|---|"]
    lines += [f"| {label} | {b} | {f} |" for label, b, f in zip(labels, cells(broken), cells(fixed))]
    lines += ["", f"![CPU over time, broken vs fixed · CPU en el tiempo, roto frente a arreglado]({image})", ""]
    return "\n".join(lines)


def os_cores() -> int:
    return os.cpu_count() or 0


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}


__all__ = ["BreakError", "list_breaks", "break_tree", "fix_tree", "check", "predict", "exp", "tour", "check_breaks"]
