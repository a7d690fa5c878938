"""The predictions notebook: write down what a break will do, then compare with what it did.

One Markdown file per learner, ``learners/NAME/notebook.md``, in English or Spanish.  ``invoke predict`` appends
an empty prediction (:func:`add_prediction`); the learner fills it in; ``invoke exp`` reads it back
(:func:`read_prediction`) and appends what the run did (:func:`append_observation`).  The file is the learner's:
this module only ever appends.  Why: docs/maintainers.md.
"""


from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import words as lab_words
from ..catalogue import alias_of
from ..words import checked as checked_lang
from .fields import FIELDS, NO_STOP_REASON, NOT_PREDICTED, NUMERIC_FIELDS, OUTCOMES, fmt
from .paths import NOTEBOOK_FILE, TEMPLATE_LEARNER, migrate, notebook_path
from .scoring import Row, exercised, hit_word, observed_values, tolerance_text

TEXT = lab_words.section("notebook")
# Used when the repository's template notebook is not there (e.g. in tests).
DEFAULT_HEADER = {lang: lab_words.words(lang)["notebook_header"]["text"] for lang in lab_words.LANGS}


class PredictionError(ValueError):
    """A prediction block the learner wrote cannot be read; the message names the line."""

    def __init__(self, path: Path, lineno: int | None, line: str | None, problem: str):
        self.path, self.lineno, self.line, self.problem = path, lineno, line, problem
        where = f"{path}:{lineno}" if lineno is not None else str(path)
        shown = f' "{line.strip()}"' if line is not None else ""
        super().__init__(f"{where}:{shown} {problem}")


def _same_variant(heading_id: str, variant_id: str) -> bool:
    # Accept the alias on either side, so "no-cap" finds "## 00-no-cap — ...".
    return heading_id == variant_id or alias_of(heading_id) == alias_of(variant_id)


# Reading the Markdown structure (headings outside code fences)

_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_H2_RE = re.compile(r"^ {0,3}##(?!#)\s+(.*?)\s*$")
_H1_OR_H2_RE = re.compile(r"^ {0,3}#{1,2}(?!#)(\s|$)")


@dataclass(frozen=True)
class _Section:
    variant_id: str  # the first word of the heading, e.g. "00-no-cap"
    start: int       # index of the heading line
    end: int         # index one past its last line


def _lines(text: str) -> list[str]:
    # The text comes from read_text(), which already turned "\r\n" into "\n",
    # so CRLF files parse the same and line numbers match the learner's editor.
    return text.split("\n")


def _sections(lines: list[str]) -> list[_Section]:
    """Every ``## <id> ...`` section, in file order.  A ``#`` inside a code fence is not a heading."""
    heads: list[tuple[int, str | None]] = []  # (line index, variant id or None for a '#' heading)
    fence: str | None = None
    for i, line in enumerate(lines):
        m = _FENCE_RE.match(line)
        if m:
            marker = m.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
            continue
        if fence is not None:
            continue
        h2 = _H2_RE.match(line)
        if h2:
            words = h2.group(1).split()
            heads.append((i, words[0].rstrip(":") if words else ""))
        elif _H1_OR_H2_RE.match(line):
            heads.append((i, None))  # a level-1 heading also ends a section
    sections = []
    for n, (i, vid) in enumerate(heads):
        if vid is None:
            continue
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        sections.append(_Section(vid, i, end))
    return sections


def _find_section(lines: list[str], variant_id: str) -> _Section | None:
    # If a learner pasted the same section twice, the first one counts.
    for s in _sections(lines):
        if _same_variant(s.variant_id, variant_id):
            return s
    return None


def _read_text(path: Path) -> str:
    # utf-8-sig: an editor that adds a byte-order mark must not break parsing.
    return path.read_text(encoding="utf-8-sig")


# Appending (the only way this module writes)

def _append(path: Path, new_text: str) -> None:
    """Append ``new_text`` after a blank line, in the file's own line-ending style.

    Only the last two bytes are looked at, to decide how many newlines are
    needed so the new heading starts on a line of its own.  Append mode
    ("ab") means the bytes already in the file are never written again.
    """
    old = path.read_bytes() if path.exists() else b""
    newline = "\r\n" if b"\r\n" in old else "\n"
    nl = newline.encode()
    if not old:
        sep = b""
    elif old.endswith(nl + nl):
        sep = b""
    elif old.endswith(nl):
        sep = nl
    else:
        sep = nl + nl  # the last line has no newline yet: end it, then a blank line
    body = new_text.replace("\n", newline).encode("utf-8")
    with path.open("ab") as f:
        f.write(sep + body)


def _ensure_notebook(root: Path, learner: str, lang: str | None = None) -> Path:
    """Create the learner's folder and notebook (in ``lang``) if missing; never touch an existing one."""
    migrate(root, learner)
    path = notebook_path(root, learner)
    if path.exists():
        return path
    lang = checked_lang(lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    template = root / "learners" / TEMPLATE_LEARNER / ("notebook.md" if lang == "en" else f"notebook.{lang}.md")
    header = template.read_text(encoding="utf-8") if template.exists() else DEFAULT_HEADER[lang]
    # "x" (exclusive create): if two commands race, the second fails instead of overwriting.
    with path.open("x", encoding="utf-8", newline="") as f:
        f.write(header)
    return path


# 1. add_prediction

def prediction_block(values: dict[str, Any] | None = None, fence: str = "prediction", lang: str = "en") -> str:
    """The fenced ``key: value  # comment`` block; missing values are written as ``?``."""
    values = values or {}
    out = [f"```{fence}"]
    comments = TEXT[checked_lang(lang)]["comments"]
    for key in FIELDS:
        comment, value = comments[key], values.get(key)
        shown = "?" if value is None else fmt(value)
        # Comments line up in one column, so the block reads like a form.
        out.append(f"{key}: {shown}".ljust(19) + f" # {comment}")
    out.append("```")
    return "\n".join(out) + "\n"


def add_prediction(root: str | os.PathLike, learner: str, variant_id: str, title: str,
                   lang: str | None = None) -> tuple[Path, bool]:
    """Append an empty prediction section for ``variant_id``, in ``lang`` (English by default).

    Returns ``(path, created)``.  If the notebook already has a section for
    this variant, nothing is written and ``created`` is False: the learner's
    prediction lives there and is edited there, never replaced.
    """
    root = Path(root)
    lang = checked_lang(lang)
    t = TEXT[lang]
    path = _ensure_notebook(root, learner, lang)
    if _find_section(_lines(_read_text(path)), variant_id) is not None:
        return path, False
    heading = f"## {variant_id} — {title}" if title else f"## {variant_id}"
    section = (
        f"{heading}\n"
        "\n"
        f"{t['intro']}\n"
        "\n"
        f"{prediction_block(lang=lang)}"
        "\n"
        f"{t['why']}\n"
        "\n"
    )
    _append(path, section)
    return path, True


# 2. read_prediction

_NUMBER_RE = re.compile(r"^[~≈]?\s*(\d+(?:\.\d+)?)\s*(s|%)?$")


def _parse_value(key: str, raw: str, path: Path, lineno: int, line: str) -> Any:
    value = raw.strip()
    if value in NOT_PREDICTED:
        return None
    if key == "outcome":
        outcome = value.lower()
        if outcome not in OUTCOMES:
            raise PredictionError(path, lineno, line,
                                  f"outcome must be one of {' | '.join(OUTCOMES)} (or ?), not {value!r}")
        return outcome
    m = _NUMBER_RE.match(value)
    if not m:
        hint = " (use a dot for decimals)" if re.fullmatch(r"\d+,\d+", value) else ""
        raise PredictionError(path, lineno, line,
                              f"{key} must be a number that is 0 or more (or ?), not {value!r}{hint}")
    return float(m.group(1))


def read_prediction(root: str | os.PathLike, learner: str, variant_id: str) -> dict[str, Any] | None:
    """The learner's prediction for ``variant_id``, or None if there is nothing to compare yet.

    Returns a dict with every key of :data:`FIELDS`; a field still ``?`` (or
    empty) is None.  Numbers come back as floats, the outcome lower-cased.
    Returns None when there is no notebook, no section for the variant, or
    every field is still ``?``.  Raises :class:`PredictionError` (naming the
    line) when the block cannot be read: a bad value, an unknown or repeated
    key, a missing or unclosed block.
    """
    migrate(root, learner)
    path = notebook_path(root, learner)
    if not path.exists():
        return None
    lines = _lines(_read_text(path))
    section = _find_section(lines, variant_id)
    if section is None:
        return None

    # Find the ```prediction fence inside the section.
    opening = None
    for i in range(section.start, section.end):
        m = _FENCE_RE.match(lines[i])
        if m and m.group(2).lower() == "prediction":
            opening = i
            break
    if opening is None:
        raise PredictionError(path, section.start + 1, lines[section.start],
                              "this section has no ```prediction block; "
                              "copy one from learners/_template or add a new section")

    fence = _FENCE_RE.match(lines[opening]).group(1)
    values: dict[str, Any] = {key: None for key in FIELDS}
    seen: set[str] = set()
    for i in range(opening + 1, len(lines)):
        line, lineno = lines[i], i + 1
        m = _FENCE_RE.match(line)
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            break  # end of the block
        content = line.split("#", 1)[0].strip()  # a '#' starts a comment
        if not content:
            continue
        if ":" not in content:
            raise PredictionError(path, lineno, line, "expected 'key: value'")
        key, raw = content.split(":", 1)
        key = key.strip().lower()
        if key not in FIELDS:
            raise PredictionError(path, lineno, line,
                                  f"unknown key {key!r}; the keys are {', '.join(FIELDS)}")
        if key in seen:
            raise PredictionError(path, lineno, line, f"{key} is given twice")
        seen.add(key)
        values[key] = _parse_value(key, raw, path, lineno, line)
    else:
        raise PredictionError(path, opening + 1, lines[opening],
                              "this ```prediction block is never closed with ```")

    if all(v is None for v in values.values()):
        return None
    return values


# 3. append_observation

def _link(target: str | os.PathLike | None, root: Path, notebook: Path) -> str | None:
    if target is None:
        return None
    target = Path(target)
    if not target.is_absolute():
        target = root / target  # relative paths are taken from the lab root, like the notebook
    rel = os.path.relpath(target.resolve(), notebook.parent.resolve())
    return Path(rel).as_posix()


def _observed_record(observed: dict[str, Any], t: dict[str, Any]) -> list[str]:
    """The ```observed block: one ``key: value`` line per field, so that it stays machine-readable."""
    seen = observed_values(observed)
    record = ["```observed"]
    for key in ("outcome", "stop_reason", *NUMERIC_FIELDS):
        value = seen.get(key)
        if key == "stop_reason" and not value:
            value = NO_STOP_REASON
        # One line per key, even if a stop reason spans lines (the block must stay parseable).
        record.append(f"{key}: {' '.join(fmt(value).split())}")
    if observed.get("machine_busy"):
        record.append(t["busy_line"].format(cpu=fmt(observed.get("other_cpu_mean"))))
    if observed.get("signal"):
        record.append(f"crashed: {observed['signal']}")
    elif not exercised(observed):
        record.append("exercised: no")
    record.append("```")
    return record


def _why_not_scored(observed: dict[str, Any], t: dict[str, Any], alias: str, learner: str) -> list[str]:
    """The paragraph that says a run was disturbed, or why it scored nothing; empty for a clean run."""
    if observed.get("signal"):
        when = t["after"].format(turns=observed.get("turns") or 0) if observed.get("loop_start_s") is not None \
            else t["before"]
        return [t["crashed"].format(sig=observed["signal"], when=when), ""]
    if not exercised(observed):
        needs = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in (observed.get("needs") or {}).items())
        return [t["unexercised"].format(needs=needs or t["more_loop"],
                                        rerun=f"invoke exp {alias} --learner {learner}"), ""]
    if observed.get("machine_busy"):
        return [t["busy"], ""]
    return []


def _comparison(rows: list[Row] | None, t: dict[str, Any], alias: str, lang: str, busy: bool = False) -> list[str]:
    """The prediction against the run as a Markdown table, and the question a miss asks (on a busy machine, with
    the offer of a rerun: the miss may be the machine's)."""
    if not rows:
        return [t["no_prediction"], ""]
    parts = [t["cols"], "|---|---|---|---|---|"]
    for r in rows:
        parts.append(f"| {r.field} | {fmt(r.predicted)} | {fmt(r.observed)} "
                     f"| {hit_word(r.hit, r.predicted, r.note, lang)} | {tolerance_text(r.tolerance, lang)} |")
    parts.append("")
    misses = [r for r in rows if r.hit is False]
    scored = [r for r in rows if r.hit is not None]
    if misses:
        parts += [t["surprised"].format(n=len(misses), total=len(scored), alias=alias), ""]
        if busy:
            parts += [t["busy_rerun"].format(alias=alias), ""]
    return parts


def append_observation(root: str | os.PathLike, learner: str, variant_id: str, observed: dict[str, Any],
                       rows: list[Row] | None, json_path: str | os.PathLike | None,
                       svg_path: str | os.PathLike | None, when: str, lang: str | None = None) -> Path:
    """Append an observed block for one run at the end of the file: the record, the comparison, links.

    The heading names the break (``### Observed — 00-no-cap (when)``): the block lands under whatever
    section came last, and the learner's text is never moved.  No stop reason is written ``none`` (``?``
    means "not predicted"); a scored run with misses asks what surprised the learner and points to hint 1.
    """
    root = Path(root)
    lang = checked_lang(lang)
    t = TEXT[lang]
    path = _ensure_notebook(root, learner, lang)
    alias = alias_of(variant_id)
    parts = [t["observed"].format(id=variant_id, when=when), "", *_observed_record(observed, t), ""]
    parts += _why_not_scored(observed, t, alias, learner)
    parts += _comparison(rows, t, alias, lang, busy=bool(observed.get("machine_busy")))
    links = []
    for label, target in ((t["record"], json_path), (t["chart"], svg_path)):
        rel = _link(target, root, path)
        if rel:
            links.append(f"- {label}: [{Path(rel).name}]({rel})")
    if links:
        parts += [*links, ""]
    _append(path, "\n".join(parts))
    return path


def how_to_predict(variant_id: str, learner: str, lang: str = "en") -> str:
    """What to print when a learner runs a break without a prediction."""
    notes = (Path("learners") / learner / NOTEBOOK_FILE).as_posix()
    return TEXT[checked_lang(lang)]["how_to"].format(id=variant_id, alias=alias_of(variant_id), learner=learner,
                                                     notes=notes)
