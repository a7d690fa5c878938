"""The exercise loop a learner works in: the catalogue, break and fix, hints, progress, next, reset, watch, check.

What a learner did is kept in their ``progress.json`` (:mod:`miniagent.lab.learner.progress`); a state file the
lab cannot read stops every command before it changes anything.
"""

from __future__ import annotations

import subprocess
import sys

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..catalogue import ALL, ROOT, Break, find, catalogue, guard_tests
from ..learner import paths, progress
from ..patching import apply_to_tree, is_applied, reset_in_tree, revert_in_tree
from ..words import section
from .. import screen

EXERCISES = section("exercises")


def list_breaks(lang: str = "en") -> None:
    t = EXERCISES[lang]
    screen.console.print(t["catalogue"])
    for brk in catalogue():
        model = t["real_model"] if brk.real_model else t["stand_in"].format(llm=brk.llm)
        applied = f" [red]({t['applied_mark']})[/]" if is_applied(brk) else ""
        screen.console.print(f"  [bold]{brk.id:<20}[/] {escape(brk.title[lang])} [dim]({escape(model)})[/]{applied}",
                             highlight=False)


def break_tree(variant: str, learner: str | None = None) -> None:
    brk = find(variant)
    state_readable(learner)
    apply_to_tree(brk)
    _mark(learner, brk, broken_at=progress.now())
    lang = report_lang(learner)
    t = EXERCISES[lang]
    # Not "study the diff": the repair is an exercise, and the hints lead the way (issue 65)
    screen.console.print(t["applied"].format(id=brk.id, removes=escape(brk.removes[lang])) + "\n"
                         + escape(t["next"].format(alias=brk.alias)), highlight=False)


def fix_tree(variant: str, learner: str | None = None) -> None:
    brk = find(variant)
    state_readable(learner)
    revert_in_tree(brk)
    _mark(learner, brk, broken_at=None, reverted_at=progress.now())
    screen.console.print(EXERCISES[report_lang(learner)]["fixed"].format(id=brk.id), highlight=False)


def state_readable(learner: str | None) -> None:
    """Before anything else: move a notebook kept at the first layout, and refuse when the learner's
    state file is bad (it is never overwritten)."""
    if learner:
        moved = paths.migrate(ROOT, learner)
        if moved is not None:
            screen.console.print(EXERCISES[report_lang(learner)]["moved"].format(
                old=moved.relative_to(ROOT), new=paths.notebook_path(ROOT, learner).relative_to(ROOT)),
                markup=False, highlight=False)
        progress.load(ROOT, learner)


def notebook_lang(learner: str, given: str | None = None) -> str:
    """The notebook's language: the learner's, chosen once (the first --lang given), English until then."""
    stored = progress.load(ROOT, learner).get("lang")
    lang = progress.learner_lang(ROOT, learner, given)  # refuses a bad --lang; remembers a first one
    if stored and lang != stored:
        said = EXERCISES.get(stored, EXERCISES["en"])["stays"].format(stored=stored, learner=learner)
        screen.console.print(said, markup=False, highlight=False)
    return stored or lang


def report_lang(learner: str | None = None) -> str:
    """The language of a report: the named (else the remembered) learner's choice, English when there is none.

    A report is written after the run: a progress file that cannot be read makes it English, never a traceback."""
    try:
        who = learner or progress.resolve_learner(ROOT, None, required=False)
        return progress.learner_lang(ROOT, who) if who else "en"
    except (ValueError, progress.StateError):
        return "en"


def _mark(learner: str | None, brk: Break, **values) -> None:
    if learner:
        progress.update(ROOT, learner, lambda state: progress.break_state(state, brk.id).update(values))


def _verified(learner: str | None, brk: Break) -> bool:
    """After green guard tests: if you broke this break and it is no longer applied, it is fixed by you."""
    if not learner or is_applied(brk) or not progress.load(ROOT, learner)["breaks"].get(brk.id, {}).get("broken_at"):
        return False
    _mark(learner, brk, fixed_at=progress.now(), broken_at=None)
    return True


TEXT = section("hints")
CHECK = section("check")


def _verdict(output: str, tests: list[str], code: int, lang: str, variant: str) -> None:
    """What a learner reads first: one line per failing guard test, what it found, and how to see more."""
    from ..maintainers.counterexamples import parse, titles

    t = CHECK[lang]
    if code == 0:
        screen.console.print(t["green"].format(n=len(tests)), style="green", highlight=False)
        return
    names: dict[str, dict[str, str]] = {}
    for path in dict.fromkeys(test.split("::")[0] for test in tests):
        names.update(titles(ROOT / path))
    failures = parse(output)
    for name, (world, error) in failures.items():
        title = names.get(name, {}).get(lang) or name
        if title == name:  # no docstring: the test's name, read as words
            title = name.removeprefix("test_").replace("_", " ").capitalize()
        screen.console.print(f"✗ {title}", style="bold red", markup=False, highlight=False)
        for line in (world or {}).get(lang, "").splitlines():
            screen.console.print(f"    {line}", markup=False, highlight=False)
        if error:
            screen.console.print(f"    {t['saw']} {error}", markup=False, highlight=False)
    screen.console.print(t["red"].format(failed=len(failures), n=len(tests), variant=variant), highlight=False)


def hint(variant: str, learner: str, lang: str | None = None) -> int:
    """Show the next hint (1, then 2, then 3) and remember it; returns its number."""
    brk = find(variant)
    lang = progress.learner_lang(ROOT, learner, lang)
    t = TEXT[lang]
    hints = brk.hints.get(lang) or brk.hints["en"]

    def take(state: dict) -> tuple[int, bool]:
        b = progress.break_state(state, brk.id)
        seen = b.get("hints") or 0
        b["hints"] = min(seen + 1, len(hints))
        return b["hints"], seen >= len(hints)

    n, all_seen = progress.update(ROOT, learner, take)
    if all_seen:
        screen.console.print(t["all_seen"].format(total=len(hints), id=brk.id), style="bold", highlight=False)
        for i, text in enumerate(hints, 1):
            screen.console.print(f"  {i}. {text}", markup=False, highlight=False)
        return n
    screen.console.print(t["hint"].format(n=n, total=len(hints), id=brk.id), style="bold", highlight=False)
    screen.console.print(f"  {hints[n - 1]}", markup=False, highlight=False)
    again = brk.alias if lang == progress.learner_lang(ROOT, learner) else f"{brk.alias} --lang {lang}"
    screen.console.print(t["more"].format(alias=again, next=n + 1) if n < len(hints) else t["last"],
                  style="dim", markup=False, highlight=False)
    return n


def progress_report(learner: str, lang: str | None = None) -> list[progress.Row]:
    """Every break with its state, then what to do next."""
    lang = progress.learner_lang(ROOT, learner, lang)
    t = progress.TEXT[lang]
    rows = progress.rows(ROOT, learner, lang)
    table = Table(title=t["title"].format(learner=learner), title_justify="left")
    for i, column in enumerate(t["cols"]):
        table.add_column(column, no_wrap=i == 0)
    for r in rows:
        predicted = t["unreadable"] if r.predicted is None else t["yes"] if r.predicted else t["no"]
        runs = f"{r.runs} ({r.hits}/{r.fields})" if r.runs and r.fields else str(r.runs) if r.runs else t["no"]
        broken = t["now"] if r.applied else t["yes"] if r.broken else t["no"]
        cells = [r.break_id, predicted, runs, broken, t["yes"] if r.fixed else t["no"], f"{r.hints}/{r.hints_total}"]
        table.add_row(*(Text(c) for c in cells), style="green" if r.fixed else "red" if r.applied else None)
    screen.console.print(table)
    screen.console.print(t["legend"], style="dim", markup=False, highlight=False)
    for line in progress.next_steps(ROOT, learner, progress.next_row(rows), lang):
        screen.console.print(line, markup=False, highlight=False)
    return rows


def next_break(learner: str, lang: str | None = None) -> progress.Row | None:
    """The break to work on now, and the commands for it."""
    lang = progress.learner_lang(ROOT, learner, lang)
    row = progress.next_row(progress.rows(ROOT, learner, lang))
    for line in progress.next_steps(ROOT, learner, row, lang):
        screen.console.print(line, markup=False, highlight=False)
    return row


def reset_tree(variant: str, learner: str | None = None, lang: str | None = None) -> None:
    """Back to the intact source for one break only; anything replaced is saved first."""
    brk = find(variant)
    state_readable(learner)
    lang = progress.learner_lang(ROOT, learner, lang) if learner else (lang or "en")
    t = TEXT[lang]
    result = reset_in_tree(brk)
    if result.how != "intact":
        _mark(learner, brk, broken_at=None, reverted_at=progress.now())
    screen.console.print(t[result.how].format(id=brk.id, files=", ".join(result.files)), markup=False, highlight=False)
    if result.backup:
        screen.console.print(t["backup"].format(backup=result.backup), markup=False, highlight=False)


def watch_tree(variant: str, learner: str | None = None, lang: str | None = None, max_runs: int | None = None) -> int:
    """``invoke watch``: the guard tests on every save; green after you broke it marks it fixed."""
    from .watch import watch

    brk = None if variant == ALL else find(variant)
    state_readable(learner)
    lang = progress.learner_lang(ROOT, learner, lang) if learner else (lang or "en")

    def on_result(green: bool) -> None:
        if green and brk is not None and _verified(learner, brk):
            screen.console.print(TEXT[lang]["verified"].format(id=brk.id), style="bold green", highlight=False)

    return watch(variant, ROOT, lang=lang, max_runs=max_runs, console=screen.console, on_result=on_result)


def check(variant: str, *, dry_run: bool = False, learner: str | None = None, verbose: bool = False) -> int:
    """Run the guard tests of one break (or all of them) against the learner's own source.

    ``dry_run``: only collect them (pytest --collect-only), which proves they exist, and list them.
    Red: a verdict line per failing test, in the learner's language, and the smallest counterexample in words;
    pytest's own output only with ``verbose``. Green after the learner broke this break (and it is no longer
    applied): fixed and verified by them.
    """
    tests = guard_tests(variant)
    state_readable(learner)
    if dry_run:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                               *tests], cwd=ROOT).returncode
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short",
                          "--timeout", "60", *tests], cwd=ROOT, capture_output=True, text=True)
    code = run.returncode
    if verbose or code not in (0, 1):  # 2-5: the check itself is broken, and pytest says how
        said = run.stdout + run.stderr
        print(said, end="" if said.endswith("\n") else "\n")
    if code in (0, 1):
        _verdict(run.stdout, tests, code, progress.learner_lang(ROOT, learner) if learner else "en", variant)
    if code == 0 and variant != ALL:
        brk = find(variant)
        if _verified(learner, brk):
            lang = progress.learner_lang(ROOT, learner)
            screen.console.print(TEXT[lang]["verified"].format(id=brk.id), style="bold green", highlight=False)
    return code
