"""The predictions notebook: write down what a break will do, then compare with what it did.

Each learner has one Markdown file, ``learners/NAME/notebook.md``, in English or
in Spanish (chosen once, when it is created: ``invoke predict ... --lang es``).
``invoke predict`` appends an empty prediction section for a break; the learner
fills it in by hand; ``invoke exp`` runs the broken agent, reads the prediction
back, and appends an observed block, which names its break, at the end of the file.
Notebooks kept at the lab's first layout (``learners/NAME/phase-32/notes/breaks.md``)
are moved to the new place byte for byte (:func:`migrate`).

The file belongs to the learner, so this module follows one rule everywhere:
**it only ever appends**.  It never rewrites, reorders or "fixes" what is
already there; every write opens the file in append mode, so the old bytes
cannot change even if this code has a bug in how it builds the new text.

The API:

- :func:`add_prediction`    -- append an empty prediction section for a break
- :func:`read_prediction`   -- parse the learner's filled-in prediction block
- :func:`compare`           -- prediction vs observed record, one :class:`Row` per field
- :func:`append_observation` -- append an "Observed" block (record, table, links)
- :func:`render_comparison` -- the same comparison as a rich table for the terminal
- :func:`how_to_predict`    -- what to tell a learner who has not predicted yet
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

# --------------------------------------------------------------------------
# The shape of a prediction
# --------------------------------------------------------------------------

# The outcome words are the harness's own (harness._fill_outcome), in both languages:
# answer (stop reason "answered"), fallback (any other stop reason), timeout (killed at the
# harness's time limit), crash (the process ended without reporting any stop reason).
OUTCOMES = ("answer", "fallback", "timeout", "crash")

# The keys of a prediction block, in the order of the block, the observed block and the comparison.
# They are identifiers, the same in both languages; the comments beside them follow the notebook's language.
FIELDS: dict[str, str] = {
    "outcome": "answer | fallback | timeout | crash",
    "wall_s": "seconds until it ends or is killed",
    "cpu_percent": "mean CPU of the process tree, 100 = one core",
    "tool_calls": "MCP tool calls made",
    "processes_left": "processes still alive after the run",
}
NUMERIC_FIELDS = ("wall_s", "cpu_percent", "tool_calls", "processes_left")

# A value the learner has not filled in yet ("?" means "not predicted", nothing else).
NOT_PREDICTED = ("", "?")
# What an observed block writes when the run reported no stop reason.
NO_STOP_REASON = "none"

LANGS = ("en", "es")
NOTEBOOK_FILE = "notebook.md"
OLD_RELPATH = Path("phase-32") / "notes" / "breaks.md"  # the lab's first layout (see migrate)
TEMPLATE_LEARNER = "_template"

TEXT: dict[str, dict[str, Any]] = {
    "en": {
        "comments": FIELDS,
        "intro": "Before you run it: replace each `?` with your guess (leave `?` if you have none).",
        "why": "### Why I think so",
        "observed": "### Observed — {id} ({when})",
        "cols": "| | predicted | observed | hit/miss | tolerance |",
        "hit": "hit", "miss": "miss", "not_predicted": "not predicted", "not_observed": "not observed",
        "not_exercised": "not exercised", "crashed_row": "crashed",
        "crashed": "This run crashed: the agent died of {sig} {when}. A crash says nothing about the break, so "
                   "nothing was scored, and running it again on a quieter machine will not help: see \"When the "
                   "model crashes\" in lab 02.",
        "before": "before its loop started", "after": "after {turns} turn(s)",
        "no_prediction": "No prediction was written before this run.",
        "busy_line": "machine: busy (other programs {cpu} % CPU)",
        "busy": "The machine was busy during this run: wall time and CPU figures are disturbed.",
        "unexercised": "This run never exercised the break (it needs {needs} before its timeout may end it), so it "
                       "says nothing about the prediction and nothing was scored. Run it again: `{rerun}`.",
        "more_loop": "more of the loop",
        "surprised": "**What surprised you?** {n} of your {total} predictions missed. Before you read on, write "
                     "here what you expected, what happened instead, and what in the loop could explain the gap. "
                     "Stuck? `invoke hint {alias}` gives hint 1 (then 2, then 3).",
        "record": "run record", "chart": "chart",
        "table_title": "Your prediction vs what happened",
        "table_cols": ("field", "predicted", "observed", "result", "tolerance"),
        "how_to": ("You have no prediction for {id} yet. Predict first: the lesson is the gap\n"
                   "between what you expect and what happens.\n"
                   "  1. invoke predict {alias} --learner {learner}\n"
                   "  2. open {notes} and replace each ? in the prediction block with your guess\n"
                   "     (and write a line under 'Why I think so')\n"
                   "  3. run the experiment again: invoke exp {alias} --learner {learner}"),
    },
    "es": {
        "comments": {
            "outcome": "answer | fallback | timeout | crash",
            "wall_s": "segundos hasta que acaba o lo matan",
            "cpu_percent": "CPU media del árbol de procesos, 100 = un núcleo",
            "tool_calls": "llamadas a herramientas MCP",
            "processes_left": "procesos que siguen vivos al acabar",
        },
        "intro": "Antes de ejecutarla: cambia cada `?` por lo que esperas (deja `?` si no tienes ni idea).",
        "why": "### Por qué lo creo",
        "observed": "### Observado — {id} ({when})",
        "cols": "| | predicho | observado | acierto/fallo | tolerancia |",
        "hit": "acierto", "miss": "fallo", "not_predicted": "sin predecir", "not_observed": "sin observar",
        "not_exercised": "no ejercitada", "crashed_row": "se rompió",
        "crashed": "Esta ejecución se rompió: el agente murió por {sig} {when}. Un fallo así no dice nada de la "
                   "avería, así que no se ha puntuado nada, y repetirla con la máquina más tranquila no servirá de "
                   "nada: mira «Cuando el modelo se rompe» en el lab 02.",
        "before": "antes de que empezara su bucle", "after": "tras {turns} turno(s)",
        "no_prediction": "No había ninguna predicción escrita antes de esta ejecución.",
        "busy_line": "machine: busy (other programs {cpu} % CPU)",
        "busy": "La máquina estaba ocupada durante esta ejecución: el tiempo y las cifras de CPU están alterados.",
        "unexercised": "Esta ejecución no llegó a ejercitar la avería (necesita {needs} antes de que el tiempo límite "
                       "pueda cortarla), así que no dice nada de la predicción y no se ha puntuado. Vuelve a "
                       "ejecutarla: `{rerun}`.",
        "more_loop": "recorrer más bucle",
        "surprised": "**¿Qué te ha sorprendido?** Han fallado {n} de tus {total} predicciones. Antes de seguir "
                     "leyendo, escribe aquí qué esperabas, qué pasó en su lugar y qué parte del bucle podría "
                     "explicar la diferencia. ¿Atascado? `invoke hint {alias}` te da la pista 1 (y luego la 2 y la 3).",
        "record": "registro de la ejecución", "chart": "gráfica",
        "table_title": "Tu predicción frente a lo que pasó",
        "table_cols": ("campo", "predicho", "observado", "resultado", "tolerancia"),
        "how_to": ("Todavía no tienes una predicción para {id}. Predice primero: la lección está en la\n"
                   "distancia entre lo que esperas y lo que pasa.\n"
                   "  1. invoke predict {alias} --learner {learner}\n"
                   "  2. abre {notes} y cambia cada ? del bloque de predicción por lo que esperas\n"
                   "     (y escribe una línea bajo «Por qué lo creo»)\n"
                   "  3. vuelve a lanzar el experimento: invoke exp {alias} --learner {learner}"),
    },
}

# Used when the repository's template notebook is not there (e.g. in tests).
_DEFAULT_HEADER = {
    "en": ("# My predictions for the breaks\n"
           "\n"
           "Predict first, then run: `invoke predict ID --learner NAME` adds a section at\n"
           "the end of this file; replace each `?`, say why, then run `invoke exp`. Every\n"
           "run appends an observed block at the end, naming its break. These notes are\n"
           "yours: the lab only ever appends to this file.\n"),
    "es": ("# Mis predicciones para las averías\n"
           "\n"
           "Primero predice, después ejecuta: `invoke predict ID --learner NOMBRE` añade una\n"
           "sección al final de este fichero; cambia cada `?`, explica por qué y lanza\n"
           "`invoke exp`. Cada ejecución añade al final un bloque observado con el nombre de\n"
           "su avería. Estas notas son tuyas: el laboratorio solo añade texto al final.\n"),
}


def _lang(lang: str | None) -> str:
    if lang is None:
        return "en"
    if lang not in LANGS:
        raise ValueError(f"the notebook's language must be one of {', '.join(LANGS)}, not {lang!r}")
    return lang


class PredictionError(ValueError):
    """A prediction block the learner wrote cannot be read; the message names the line."""

    def __init__(self, path: Path, lineno: int | None, line: str | None, problem: str):
        self.path, self.lineno, self.line, self.problem = path, lineno, line, problem
        where = f"{path}:{lineno}" if lineno is not None else str(path)
        shown = f' "{line.strip()}"' if line is not None else ""
        super().__init__(f"{where}:{shown} {problem}")


# --------------------------------------------------------------------------
# Paths and names
# --------------------------------------------------------------------------

_LEARNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def learner_folder(root: str | os.PathLike = ".", learner: str = "") -> Path:
    """``ROOT/learners/NAME``: everything of one learner.

    The name becomes a folder, so it must be a plain name: no slashes, no
    ``..``, and not starting with ``_`` (``_template`` is the lab's, not a
    learner's, and appending predictions to it would spoil every new notebook).
    """
    if not _LEARNER_RE.match(learner or "") or ".." in learner:
        raise ValueError(
            f"learner name {learner!r} is not usable as a folder name: "
            "use letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return Path(root) / "learners" / learner


def notebook_path(root: str | os.PathLike = ".", learner: str = "") -> Path:
    """``ROOT/learners/NAME/notebook.md``."""
    return learner_folder(root, learner) / NOTEBOOK_FILE


class MigrationError(ValueError):
    """Both the old and the new notebook exist: the lab will not choose between them."""


def migrate(root: str | os.PathLike, learner: str) -> Path | None:
    """Move a notebook from the first layout (``phase-32/notes/breaks.md``) to ``notebook.md``.

    The file is renamed, not copied and rewritten, so every byte stays as it was (line endings,
    a byte-order mark, a missing final newline).  Folders left empty are removed; anything else the
    learner kept there stays.  If both files exist, nothing moves and MigrationError says so.
    Returns the old path when it moved something, else None.
    """
    folder = learner_folder(root, learner)
    old, new = folder / OLD_RELPATH, folder / NOTEBOOK_FILE
    if not old.is_file():
        return None
    if new.exists():
        raise MigrationError(
            f"{new} and {old} both exist: the lab will not choose between your notebooks. Keep the one "
            f"you use as {new.name} (copy anything you want from the other), then remove or rename {old}.")
    os.rename(old, new)
    for empty in (old.parent, old.parent.parent):
        try:
            empty.rmdir()  # only if empty
        except OSError:
            break
    return old


def alias_of(variant_id: str) -> str:
    """``00-no-cap`` -> ``no-cap``: the short name learners type."""
    return re.sub(r"^\d+-", "", variant_id)


def _same_variant(heading_id: str, variant_id: str) -> bool:
    # Accept the alias on either side, so "no-cap" finds "## 00-no-cap — ...".
    return heading_id == variant_id or alias_of(heading_id) == alias_of(variant_id)


# --------------------------------------------------------------------------
# Reading the Markdown structure (headings outside code fences)
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Appending (the only way this module writes)
# --------------------------------------------------------------------------

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
    lang = _lang(lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    template = root / "learners" / TEMPLATE_LEARNER / ("notebook.md" if lang == "en" else f"notebook.{lang}.md")
    header = template.read_text(encoding="utf-8") if template.exists() else _DEFAULT_HEADER[lang]
    # "x" (exclusive create): if two commands race, the second fails instead of overwriting.
    with path.open("x", encoding="utf-8", newline="") as f:
        f.write(header)
    return path


# --------------------------------------------------------------------------
# 1. add_prediction
# --------------------------------------------------------------------------

def prediction_block(values: dict[str, Any] | None = None, fence: str = "prediction", lang: str = "en") -> str:
    """The fenced ``key: value  # comment`` block; missing values are written as ``?``."""
    values = values or {}
    out = [f"```{fence}"]
    for key, comment in TEXT[_lang(lang)]["comments"].items():
        value = values.get(key)
        shown = "?" if value is None else _fmt(value)
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
    lang = _lang(lang)
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


# --------------------------------------------------------------------------
# 2. read_prediction
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# 3. compare
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One line of the comparison.  ``hit`` is None when the field was not predicted (or not observed)."""

    field: str
    predicted: Any
    observed: Any
    hit: bool | None
    tolerance: str
    # Why the row is not scored, when that is not simply "not predicted": "not exercised".
    note: str | None = None


# A tiny slack so that an edge case such as 15.000000001 vs 15 still counts as on the edge.
_EPS = 1e-9


def observed_values(observed: dict[str, Any]) -> dict[str, Any]:
    """The harness record under the prediction's field names (plus stop_reason)."""
    left = observed.get("processes_left")
    return {
        "outcome": observed.get("outcome"),
        "stop_reason": observed.get("stop_reason"),
        "wall_s": observed.get("wall_s"),
        "cpu_percent": observed.get("cpu_mean"),
        # The harness lists the survivors; the learner predicts how many.
        "processes_left": len(left) if isinstance(left, (list, tuple)) else left,
        "tool_calls": observed.get("tool_calls"),
    }


def _judge(field: str, p: Any, o: Any) -> tuple[bool | None, str]:
    """(hit, tolerance text) for one field.  Why these tolerances: a prediction
    is about the *kind* of behaviour (stops quickly? spins a core? loops
    hundreds of times?), not the exact number, so numbers get generous bands."""
    if field == "outcome":
        rule = "exact"
        if p is None or o is None:
            return None, rule
        return str(p).lower() == str(o).lower(), rule
    if field == "processes_left":
        rule = "exact"
        if p is None or o is None:
            return None, rule
        return float(p) == float(o), rule
    if p is None:
        rule = {"wall_s": "±50 % or ±3 s", "cpu_percent": "±25 points",
                "tool_calls": "×2 or ±2"}[field]
        return None, rule
    p = float(p)
    if field == "wall_s":
        band = max(0.5 * abs(p), 3.0)
        lo, hi = p - band, p + band
        rule = f"±{_fmt(band)} s ({_fmt(max(lo, 0))}–{_fmt(hi)} s)"
    elif field == "cpu_percent":
        lo, hi = p - 25, p + 25
        rule = f"±25 points ({_fmt(max(lo, 0))}–{_fmt(hi)} %)"
    else:  # tool_calls: a factor of 2 or ±2, whichever is wider
        lo, hi = min(p / 2, p - 2), max(p * 2, p + 2)
        rule = f"×2 or ±2 ({_fmt(max(lo, 0))}–{_fmt(hi)})"
    if o is None:
        return None, rule
    o = float(o)
    return lo - _EPS <= o <= hi + _EPS, rule


def exercised(observed: dict[str, Any]) -> bool:
    """False when the run never got as far as the break needs (``needs_met`` False in the record), or crashed."""
    return observed.get("needs_met") is not False and not observed.get("signal")


def compare(prediction: dict[str, Any], observed: dict[str, Any]) -> list[Row]:
    """One :class:`Row` per prediction field, in the order of :data:`FIELDS`.

    ``observed`` is the harness record (``cpu_mean``, a list ``processes_left``);
    it is mapped onto the prediction's field names first.  A run that never
    exercised the break (``needs_met`` False) scores nothing: every row is
    "not exercised", because such a run says nothing about the prediction.
    """
    prediction = prediction or {}
    seen = observed_values(observed)
    scored = exercised(observed)
    rows = []
    for field in FIELDS:
        p, o = prediction.get(field), seen.get(field)
        hit, rule = _judge(field, p, o)
        if not scored and p is not None:
            rows.append(Row(field, p, o, None, rule, note="crashed" if observed.get("signal") else "not exercised"))
        else:
            rows.append(Row(field, p, o, hit, rule))
    return rows


# --------------------------------------------------------------------------
# 4. append_observation
# --------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    """Numbers for people: 30.0 -> 30, 98.666 -> 98.7; None -> ?."""
    if value is None:
        return "?"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        rounded = round(float(value), 1)
        return str(int(rounded)) if rounded == int(rounded) else f"{rounded:.1f}"
    return str(value)


def _hit_word(hit: bool | None, predicted: Any, note: str | None = None, lang: str = "en") -> str:
    t = TEXT[lang]
    if note:
        return {"not exercised": t["not_exercised"], "crashed": t["crashed_row"]}.get(note, note)
    if hit is None:
        return t["not_predicted"] if predicted is None else t["not_observed"]
    return t["hit"] if hit else t["miss"]


def _tolerance(rule: str, lang: str) -> str:
    if lang == "es":
        return rule.replace(" or ", " o ").replace("exact", "exacto").replace("points", "puntos")
    return rule


def _link(target: str | os.PathLike | None, root: Path, notebook: Path) -> str | None:
    if target is None:
        return None
    target = Path(target)
    if not target.is_absolute():
        target = root / target  # relative paths are taken from the lab root, like the notebook
    rel = os.path.relpath(target.resolve(), notebook.parent.resolve())
    return Path(rel).as_posix()


def append_observation(root: str | os.PathLike, learner: str, variant_id: str, observed: dict[str, Any],
                       rows: list[Row] | None, json_path: str | os.PathLike | None,
                       svg_path: str | os.PathLike | None, when: str, lang: str | None = None) -> Path:
    """Append an observed block for one run at the end of the file: the record, the comparison, links.

    The heading always names the break (``### Observed — 00-no-cap (when)``), since
    the block lands at the end of the file, under whatever section came last, and
    moving text around in the learner's file is not allowed.  A run that reported
    no stop reason is written ``stop_reason: none`` (``?`` means "not predicted").
    After a scored run with misses, the block asks what surprised the learner and
    points to the first hint.
    """
    root = Path(root)
    lang = _lang(lang)
    t = TEXT[lang]
    path = _ensure_notebook(root, learner, lang)
    heading = t["observed"].format(id=variant_id, when=when)

    seen = observed_values(observed)
    record = ["```observed"]
    for key in ("outcome", "stop_reason", *NUMERIC_FIELDS):
        value = seen.get(key)
        if key == "stop_reason" and not value:
            value = NO_STOP_REASON
        # One line per key, even if a stop reason spans lines (the block must stay parseable).
        record.append(f"{key}: {' '.join(_fmt(value).split())}")
    if observed.get("machine_busy"):
        record.append(t["busy_line"].format(cpu=_fmt(observed.get("other_cpu_mean"))))
    if observed.get("signal"):
        record.append(f"crashed: {observed['signal']}")
    elif not exercised(observed):
        record.append("exercised: no")
    record.append("```")

    parts = [heading, "", *record, ""]
    alias = alias_of(variant_id)
    if observed.get("signal"):
        when = t["after"].format(turns=observed.get("turns") or 0) if observed.get("loop_start_s") is not None \
            else t["before"]
        parts += [t["crashed"].format(sig=observed["signal"], when=when), ""]
    elif not exercised(observed):
        needs = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in (observed.get("needs") or {}).items())
        parts += [t["unexercised"].format(needs=needs or t["more_loop"],
                                          rerun=f"invoke exp {alias} --learner {learner}"), ""]
    elif observed.get("machine_busy"):
        parts += [t["busy"], ""]
    if rows:
        parts += [t["cols"], "|---|---|---|---|---|"]
        for r in rows:
            parts.append(f"| {r.field} | {_fmt(r.predicted)} | {_fmt(r.observed)} "
                         f"| {_hit_word(r.hit, r.predicted, r.note, lang)} | {_tolerance(r.tolerance, lang)} |")
        parts.append("")
        misses = [r for r in rows if r.hit is False]
        scored = [r for r in rows if r.hit is not None]
        if misses:
            parts += [t["surprised"].format(n=len(misses), total=len(scored), alias=alias), ""]
    else:
        parts += [t["no_prediction"], ""]

    links = []
    for label, target in ((t["record"], json_path), (t["chart"], svg_path)):
        rel = _link(target, root, path)
        if rel:
            links.append(f"- {label}: [{Path(rel).name}]({rel})")
    if links:
        parts += [*links, ""]

    _append(path, "\n".join(parts))
    return path


# --------------------------------------------------------------------------
# 5. Terminal output
# --------------------------------------------------------------------------

def render_comparison(rows: list[Row], lang: str = "en") -> Table:
    """The comparison as a rich table: hits green, misses red, fields not predicted dim."""
    t = TEXT[_lang(lang)]
    table = Table(title=t["table_title"], title_justify="left")
    for i, column in enumerate(t["table_cols"]):
        table.add_column(column, justify="right" if i in (1, 2) else "left", style="dim" if i == 4 else None)
    for r in rows:
        word = _hit_word(r.hit, r.predicted, r.note, lang)
        tolerance = Text(_tolerance(r.tolerance, lang))
        # Text, not str: values come from the learner and the run (an answer may hold "[...]")
        cells = [Text(r.field), Text(_fmt(r.predicted)), Text(_fmt(r.observed))]
        if r.note:
            table.add_row(*cells, Text(word, style="bold yellow"), tolerance)
        elif r.hit is None:
            table.add_row(*cells, Text(word), tolerance, style="dim")
        else:
            colour = "green" if r.hit else "red"
            table.add_row(*cells, Text(word, style=f"bold {colour}"), tolerance)
    return table


def how_to_predict(variant_id: str, learner: str, lang: str = "en") -> str:
    """What to print when a learner runs a break without a prediction."""
    notes = (Path("learners") / learner / NOTEBOOK_FILE).as_posix()
    return TEXT[_lang(lang)]["how_to"].format(id=variant_id, alias=alias_of(variant_id), learner=learner,
                                              notes=notes)
