"""What the lab remembers about a learner: language, hints seen, breaks broken and fixed, runs scored.

One small JSON file beside the notebook, ``learners/NAME/progress.json``, holds only what the lab counts and
cannot read back from elsewhere.  It survives every command, and a file it cannot read is never overwritten.
The last learner named is remembered in ``.miniagent/learner``.  Why: docs/maintainers.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from ..words import LANGS, section
from .paths import learner_folder, notebook_path

STATE_FILE = "progress.json"
VERSION = 1
CURRENT_LEARNER = Path(".miniagent") / "learner"

# The per-break counters and their types (None allowed for the timestamps).
_BREAK_FIELDS: dict[str, type] = {
    "hints": int,          # hints shown so far (0-3)
    "runs": int,           # scored runs (`invoke exp ... --learner`)
    "hits": int,           # hits of the last scored run
    "fields": int,         # fields scored in the last scored run
    "broken_at": str,      # when you last applied it to your src/ (`invoke break`); None once reverted
    "fixed_at": str,       # when its guard tests last went green after you broke it (`invoke check`, `watch`)
    "reverted_at": str,    # when you last reverted it with `invoke fix` or `invoke reset`
}


class StateError(RuntimeError):
    """The state file cannot be used; the message says which file and why, and that nothing was written."""


def now() -> str:
    return datetime.now().isoformat(timespec="seconds")


def learner_dir(root: Path, learner: str) -> Path:

    return learner_folder(root, learner)


def state_path(root: Path, learner: str) -> Path:
    return learner_dir(root, learner) / STATE_FILE


def _refuse(path: Path, problem: str) -> StateError:
    return StateError(f"{path}: {problem}. The lab has not changed it and will not write to it: fix it by hand, "
                      f"or move it away to start the count again (your notebook is not affected).")


def _validate(path: Path, data: Any) -> dict:
    if not isinstance(data, dict):
        raise _refuse(path, "expected a JSON object")
    version = data.get("version")
    if version != VERSION:
        raise _refuse(path, f"version {version!r}, this lab reads version {VERSION}")
    lang = data.get("lang")
    if lang is not None and lang not in LANGS:
        raise _refuse(path, f"lang must be one of {', '.join(LANGS)}, not {lang!r}")
    breaks = data.get("breaks", {})
    if not isinstance(breaks, dict):
        raise _refuse(path, "breaks must be an object")
    for break_id, state in breaks.items():
        if not isinstance(state, dict):
            raise _refuse(path, f"breaks.{break_id} must be an object")
        for key, value in state.items():
            kind = _BREAK_FIELDS.get(key)
            if kind is None:
                raise _refuse(path, f"breaks.{break_id}.{key} is not a field the lab knows "
                                    f"({', '.join(_BREAK_FIELDS)})")
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise _refuse(path, f"breaks.{break_id}.{key} must be {kind.__name__}, not {value!r}")
    return {"version": VERSION, "lang": lang, "breaks": breaks}


def load(root: Path, learner: str) -> dict:
    """The learner's state; a fresh one if there is no file yet.  Raises StateError on a bad file."""
    path = state_path(root, learner)
    if not path.exists():
        return {"version": VERSION, "lang": None, "breaks": {}}
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _refuse(path, f"cannot be read ({err})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise _refuse(path, f"line {err.lineno}, column {err.colno}: {err.msg}") from None
    return _validate(path, data)


def update(root: Path, learner: str, change: Callable[[dict], Any]) -> Any:
    """Read the state, apply ``change`` to it, write it back atomically; returns what ``change`` returned.

    A bad file raises StateError before anything is written.
    """
    state = load(root, learner)  # read again before every write: two commands never undo each other's counts
    result = change(state)
    path = state_path(root, learner)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(state, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    # a temporary file, then a rename: an interrupted write leaves the old file whole
    fd, tmp = tempfile.mkstemp(prefix=".progress-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return result


def break_state(state: dict, break_id: str) -> dict:
    return state["breaks"].setdefault(break_id, {})


# --------------------------------------------------------------------------
# Who is the learner, and in which language
# --------------------------------------------------------------------------

def remember_learner(root: Path, learner: str) -> None:
    path = root / CURRENT_LEARNER  # machine-local and git-ignored: --learner is needed once, not on every command
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(learner + "\n", encoding="utf-8")


@contextlib.contextmanager
def remembered_unless_refused(root: Path) -> Iterator[None]:
    """Around a command: a learner named on it is remembered only if the command goes through. When it is
    refused (a break that does not exist, say), the learner remembered before, or none, is put back."""
    path = root / CURRENT_LEARNER
    before = path.read_bytes() if path.is_file() else None
    try:
        yield
    except Exception:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(before)
        raise


def resolve_learner(root: Path, learner: str | None, *, required: bool = True) -> str | None:
    """The learner named on the command line (remembered for next time), else the one remembered."""

    if learner is not None:  # named, even as "": a usable name, or ValueError (never "not given")
        learner_folder(root, learner)
        remember_learner(root, learner)
        return learner
    path = root / CURRENT_LEARNER
    if path.is_file():
        remembered = path.read_text(encoding="utf-8").strip()
        if remembered:
            try:
                learner_folder(root, remembered)
            except ValueError as err:  # written by hand, or by an older lab: say how to get out of it
                raise ValueError(f"the remembered {err}; name yourself with --learner NAME") from None
            return remembered
    if required:
        raise ValueError("who are you? Name yourself once with --learner NAME (your folder under learners/); "
                         "the lab remembers it for the next commands")
    return None


def learner_lang(root: Path, learner: str, given: str | None = None) -> str:
    """``given`` if any, else the language the learner chose, else English.

    The first ``--lang`` a learner gives any command is their choice, remembered (the notebook is
    then written in it too); a later, different one only changes that one command."""
    stored = load(root, learner).get("lang")
    if given:
        if given not in LANGS:
            raise ValueError(f"--lang must be one of {', '.join(LANGS)}, not {given!r}")
        if not stored:
            update(root, learner, lambda state: state.update(lang=given))
        return given
    return stored or "en"


# --------------------------------------------------------------------------
# The state of every break, and what to do next
# --------------------------------------------------------------------------

PREDICT, RUN, BREAK, FIX, DONE = "predict", "run", "break", "fix", "done"


@dataclass
class Row:
    break_id: str
    alias: str
    title: str
    predicted: bool | None  # None: the prediction block cannot be read
    prediction_problem: str | None
    runs: int
    hits: int | None
    fields: int | None
    applied: bool            # applied in src/ right now
    broken: bool             # broken by you at some point
    fixed: bool              # fixed by you and verified by its guard tests
    hints: int
    hints_total: int
    stage: str = field(default=PREDICT)


def rows(root: Path, learner: str, lang: str = "en") -> list[Row]:
    from . import notebook
    from ..catalogue import catalogue
    from ..patching import is_applied

    state = load(root, learner)
    out = []
    for brk in catalogue(root):
        s = state["breaks"].get(brk.id, {})
        problem = None
        try:
            predicted: bool | None = notebook.read_prediction(root, learner, brk.id) is not None
        except notebook.PredictionError as err:
            predicted, problem = None, str(err)
        applied = is_applied(brk, root)
        fixed = bool(s.get("fixed_at")) and not applied
        row = Row(brk.id, brk.alias, brk.title.get(lang) or brk.title["en"], predicted, problem,
                  s.get("runs") or 0, s.get("hits"), s.get("fields"), applied,
                  bool(s.get("broken_at") or s.get("fixed_at")), fixed, s.get("hints") or 0,
                  len(brk.hints.get(lang) or brk.hints["en"]))
        if fixed:
            row.stage = DONE
        elif applied:
            row.stage = FIX
        elif not predicted:
            row.stage = PREDICT
        elif not row.runs:
            row.stage = RUN
        else:
            row.stage = BREAK
        out.append(row)
    return out


def next_row(all_rows: list[Row]) -> Row | None:
    """A break applied in src/ comes first (finish what you started); then the first one not done."""
    for row in all_rows:
        if row.stage == FIX:
            return row
    return next((row for row in all_rows if row.stage != DONE), None)


TEXT = section("progress")


def next_steps(root: Path, learner: str, row: Row | None, lang: str) -> list[str]:
    """The sentence and commands for the next break (or the congratulation when all are done)."""

    t = TEXT[lang]
    if row is None:
        return [t["done_all"]]
    notes = notebook_path(root, learner).relative_to(root).as_posix()
    lines = [t["next"].format(id=row.break_id, title=row.title)]
    if row.prediction_problem:
        lines.append(t["problem"].format(id=row.break_id, problem=row.prediction_problem))
    lines += ["  " + cmd.format(alias=row.alias, learner=learner, notebook=notes) for cmd in t[row.stage]]
    return lines
