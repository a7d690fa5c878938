"""Score the tutor on an eval set: JSON lines of {"question": ..., "accept": [...]} (or "decline": ..., below).

An answer must be exactly one accepted form, subject included, but for case, quotes, spacing, a final full stop
or a lead-in ending in a colon.  A ``decline`` item is right when the run ends ``out_of_grammar`` naming that
word, and giving the no of its ``decline_kind`` where one is set.  Sets: docs/maintainers.md.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..agent.errors import OutOfGrammar
from ..agent.loop import Outcome
from ..agent.trace import Trace
from ..settings import Settings

DEFAULT_SET = Path("labs/01-tutor-end-to-end/eval.jsonl")
_FORMAT = ('{"question": "...", "accept": ["she went", ...]} or {"question": "...", "decline": "<the word>"} '
           '(a no that names no word: {"question": "...", "decline_kind": "nothing"})')
DECLINE_KINDS = OutOfGrammar.KINDS  # kind of no -> whether it names a word


@dataclass
class EvalItem:
    question: str
    accept: list[str]
    label: dict = field(default_factory=dict)  # (verb, tense, person) ``accept`` was generated from; never scored
    decline: str = ""  # the word a "no" must name; then ``accept`` is empty
    decline_kind: str = ""  # the kind of no expected (DECLINE_KINDS); "" for an answer, or any kind naming ``decline``

    @property
    def declines(self) -> bool:
        return bool(self.decline or self.decline_kind)


class EvalSetError(ValueError):
    pass


def _item(row: object) -> EvalItem:
    if not isinstance(row, dict):
        raise EvalSetError("a line must be a JSON object")
    if "expected" in row and "accept" not in row:
        raise EvalSetError('"expected" is the old format: list whole answers, subject included, under "accept"')
    question, accept = row.get("question"), row.get("accept")
    if not isinstance(question, str) or not question.strip():
        raise EvalSetError('"question" must be a non-empty string')
    if "decline" in row or "decline_kind" in row:
        return _declined(question, row)
    if not isinstance(accept, list) or not accept or not all(isinstance(a, str) for a in accept):
        raise EvalSetError('"accept" must be a non-empty list of strings')
    for form in accept:
        if len(_normalise(form).split()) < 2:
            raise EvalSetError(f'accepted answer {form!r} has no subject: write it whole, e.g. "she went"')
    label = row.get("label", {})
    if not isinstance(label, dict):
        raise EvalSetError('"label" must be an object {"verb": ..., "tense": ..., "person": ...}')
    extra = set(row) - {"question", "accept", "label", "decline"}
    if extra:
        raise EvalSetError(f"unknown keys {sorted(extra)}")
    return EvalItem(question, list(accept), label)


def _declined(question: str, row: dict) -> EvalItem:
    decline, kind = row.get("decline", ""), row.get("decline_kind", "")
    if not set(row) <= {"question", "decline", "decline_kind"} or not isinstance(decline, str) \
            or not isinstance(kind, str):
        raise EvalSetError('a declined item is {"question": ..., "decline": "<the word its no names>"}, with '
                           f'"decline_kind" (one of {sorted(DECLINE_KINDS)}) if its kind matters, no more')
    if kind and kind not in DECLINE_KINDS:
        raise EvalSetError(f'"decline_kind" {kind!r} is no kind of no; the kinds: {sorted(DECLINE_KINDS)}')
    names_a_word = DECLINE_KINDS.get(kind, True)
    if bool(decline.strip()) != names_a_word:
        raise EvalSetError('"decline" must name the word the no names' if names_a_word else
                           f'a no of kind {kind!r} names no word: leave "decline" out')
    return EvalItem(question, [], decline=decline.strip(), decline_kind=kind)


def load_eval_set(path: str | Path) -> list[EvalItem]:
    path = Path(path)
    if not path.is_file():
        raise EvalSetError(f"eval set not found: {path}")
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(_item(json.loads(line)))
        except json.JSONDecodeError as err:
            raise EvalSetError(f"{path}:{number}: not JSON ({err.msg}); each line is {_FORMAT}") from None
        except EvalSetError as err:
            raise EvalSetError(f"{path}:{number}: {err}; each line is {_FORMAT}") from None
    if not items:
        raise EvalSetError(f"{path}: no items")
    return items


_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb"


def _normalise(text: str) -> str:
    """Lower case, one space between words, no quotes around words, no final full stop or '!'."""
    words = []
    for word in text.lower().split():
        word = word.strip(_QUOTES)
        if word:
            words.append(word)
    return " ".join(words).rstrip(" .!").strip(_QUOTES + " ")


def is_correct(answer: str, accept: list[str]) -> bool:
    """Exactly one accepted answer, subject included; an optional lead-in ending in ':' is skipped."""
    said = _normalise(answer)  # strict, the way a user reads the answer
    if ":" in said:
        said = _normalise(said.rsplit(":", 1)[1])
    return said in {_normalise(form) for form in accept}


def is_right(item: EvalItem, outcome: Outcome) -> bool:
    """An answer item: answered with an accepted form. A declined one: out_of_grammar, naming the word, of the
    kind the item asks for."""
    if item.declines:
        return (outcome.stop_reason == OutOfGrammar.stop_reason
                and (not item.decline or f"'{item.decline.lower()}'" in outcome.answer.lower())
                and outcome.declined == (item.decline_kind or outcome.declined))
    # only an answer counts: a fallback, even one holding the final round's answer, is not one
    return outcome.stop_reason == "answered" and is_correct(outcome.answer, item.accept)


def accepted_forms(verb: str, tense: str, person: str) -> list[str]:
    """Every right answer for (verb, tense, person), from the project's conjugation engine.

    ``person`` is a pronoun ("she", "you (plural)") or a label ("3rd singular");
    a label accepts each pronoun it covers: he, she and it for the 3rd singular.
    """
    from ..tools.conjugation import PRONOUNS, conjugate, normalize_person, subject_for
    from ..tools.subjects import person_of_subject

    if person_of_subject(person):  # "the cat": the subject as written
        return [f"{subject_for(person)} {conjugate(verb, tense, person)}"]
    if person in PRONOUNS:
        pronouns = [person]
    else:
        wanted = normalize_person(person)
        pronouns = [p for p, label in PRONOUNS.items() if label == wanted]
    forms: list[str] = []
    for pronoun in pronouns:
        form = f"{subject_for(pronoun)} {conjugate(verb, tense, pronoun)}"
        if form not in forms:
            forms.append(form)
    return forms


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def run_eval(items: list[EvalItem], settings: Settings, trace: Trace | None = None,
             on_item: Callable[[int, int], None] | None = None) -> dict:
    """Ask every item in one session; ``trace`` (optional) receives every run's events, one run after another;
    ``on_item(done, total)`` is told after each question (a progress bar)."""
    from ..processes import OtherPrograms, own_tree_seconds
    from .harness.record import BUSY_OTHERS
    from .session import TutorSession

    logging.getLogger("miniagent").setLevel(logging.WARNING)  # the table says it all, not 30 log lines
    others, own = OtherPrograms(), own_tree_seconds()
    started = time.monotonic()
    results = []
    with TutorSession(settings, trace) as session:
        ready = time.monotonic() - started
        for item in items:
            outcome = session.ask(item.question)
            results.append({
                "question": item.question,
                "accept": item.accept,
                "decline": item.decline,
                "decline_kind": item.decline_kind,
                "answer": outcome.answer,
                "declined": outcome.declined,
                "correct": is_right(item, outcome),
                "stop_reason": outcome.stop_reason,
                "turns": outcome.stats.turns,
                "tool_calls": dict(outcome.stats.tool_calls),
                "seconds": outcome.stats.seconds,
            })
            if on_item is not None:
                on_item(len(results), len(items))
    latencies = [r["seconds"] for r in results]
    elsewhere = others.cores(ours_s=own_tree_seconds() - own)  # what other programs took meanwhile (1.0 = a core)
    others_pct = None if elsewhere is None else round(100 * elsewhere)
    correct = sum(r["correct"] for r in results)
    declines = [r for r in results if r["decline"] or r["decline_kind"]]
    return {
        "n": len(results),
        "correct": correct,
        "accuracy": round(correct / len(results), 4),
        "answer_items": len(results) - len(declines),
        "answered_right": correct - sum(r["correct"] for r in declines),
        "decline_items": len(declines),
        "declined_right": sum(r["correct"] for r in declines),
        # a question outside the grammar answered with a form: the one answer a learner must never get
        "made_up_answers": sum(r["stop_reason"] == "answered" for r in declines),
        "stop_reasons": dict(Counter(r["stop_reason"] for r in results)),
        "latency_p50_s": round(percentile(latencies, 0.5), 3),
        "latency_p95_s": round(percentile(latencies, 0.95), 3),
        "startup_s": round(ready, 3),
        "total_s": round(time.monotonic() - started, 3),
        # On a busy machine the times are the other programs' as much as the tutor's (the answers are not).
        "others_cpu_pct": others_pct, "machine_busy": others_pct is not None and others_pct >= BUSY_OTHERS,
        "llm": settings.model.llm,
        "items": results,
    }


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"eval ({report['llm']})", show_lines=False)
    for column in ("#", "question", "accepted", "answer", "ok", "stop", "s"):
        table.add_column(column, overflow="fold")
    for i, r in enumerate(report["items"], 1):
        wanted = " / ".join(r["accept"]) or (f"no, naming '{r['decline']}'" if r.get("decline") else
                                             f"no: {r.get('decline_kind')}")
        table.add_row(str(i), r["question"], wanted, r["answer"].splitlines()[0] if r["answer"] else "",
                      "[green]yes[/]" if r["correct"] else "[red]no[/]", r["stop_reason"], f"{r['seconds']:.2f}")
    console.print(table)
    console.print(f"accuracy: {report['correct']}/{report['n']} = {report['accuracy']:.1%}")
    if report.get("decline_items"):  # a report of an older run has none
        console.print(f"answered right: {report['answered_right']}/{report['answer_items']}; declined right: "
                      f"{report['declined_right']}/{report['decline_items']}; made-up forms stated as answers: "
                      f"{report['made_up_answers']}")
    console.print(f"stop reasons: {report['stop_reasons']}")
    console.print(f"latency p50 {report['latency_p50_s']:.2f} s, p95 {report['latency_p95_s']:.2f} s; "
                  f"start-up {report['startup_s']:.2f} s; total {report['total_s']:.1f} s")
    if report.get("machine_busy"):
        console.print(f"[yellow]The machine was busy: other programs used {report['others_cpu_pct']} % of a core on "
                      "average meanwhile, so these times are disturbed (the answers are not). Run it again on a "
                      "quieter machine to compare times with the docs.[/]")


def run_eval_cli(args, settings: Settings) -> int:
    try:
        items = load_eval_set(args.eval_set or DEFAULT_SET)
    except EvalSetError as err:
        print(f"miniagent eval: {err}", file=sys.stderr)
        return 2
    if args.limit:
        items = items[: args.limit]
    trace = Trace.to_path(args.trace) if args.trace else None
    try:
        from rich.console import Console

        from .screen import progress_bar

        shown = not args.json and sys.stderr.isatty()
        with progress_bar("eval", len(items), shown=shown, on=Console(stderr=True)) as step:  # stdout: the report
            report = run_eval(items, settings, trace, (lambda done, total: step(done)) if shown else None)
    finally:
        if trace is not None:
            trace.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print_report(report)
    return 0
