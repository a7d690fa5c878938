"""Scoring a prediction: each field against what the run did, within a tolerance, and the comparison shown.

``observed`` is always the harness's run record (``cpu_mean``, a list of
``processes_left``, ``needs_met``, ``signal``...): :func:`observed_values`
maps it onto the prediction's field names first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from ..words import checked as checked_lang
from ..words import section
from .fields import FIELDS, fmt

TEXT = section("notebook")


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
        rule = f"±{fmt(band)} s ({fmt(max(lo, 0))}–{fmt(hi)} s)"
    elif field == "cpu_percent":
        lo, hi = p - 25, p + 25
        rule = f"±25 points ({fmt(max(lo, 0))}–{fmt(hi)} %)"
    else:  # tool_calls: a factor of 2 or ±2, whichever is wider
        lo, hi = min(p / 2, p - 2), max(p * 2, p + 2)
        rule = f"×2 or ±2 ({fmt(max(lo, 0))}–{fmt(hi)})"
    if o is None:
        return None, rule
    o = float(o)
    return lo - _EPS <= o <= hi + _EPS, rule


def exercised(observed: dict[str, Any]) -> bool:
    """False when the run never got as far as the break needs (``needs_met`` False in the record), or crashed."""
    return observed.get("needs_met") is not False and not observed.get("signal")


# What other programs change when they take the CPU: a run's times. The outcome, the stop reason and the
# processes left are the run's own, and so is its count of tool calls, unless the harness's timeout cut it short
# (a busy loop, slowed down, makes fewer calls before the timeout).
TIMINGS = ("wall_s", "cpu_percent")


def disturbed(field: str, observed: dict[str, Any]) -> bool:
    """Whether a busy machine made this observed figure another program's as much as the run's."""
    if not observed.get("machine_busy"):
        return False
    return field in TIMINGS or (field == "tool_calls" and observed.get("outcome") == "timeout")


def compare(prediction: dict[str, Any], observed: dict[str, Any]) -> list[Row]:
    """One :class:`Row` per prediction field, in the order of :data:`FIELDS`.

    ``observed`` is the harness record (``cpu_mean``, a list ``processes_left``);
    it is mapped onto the prediction's field names first.  A run that never
    exercised the break (``needs_met`` False) scores nothing: every row is
    "not exercised", because such a run says nothing about the prediction. On a busy machine the figures other
    programs disturbed (:func:`disturbed`) are shown and marked "disturbed", not scored.
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
        elif disturbed(field, observed) and p is not None:
            rows.append(Row(field, p, o, None, rule, note="disturbed"))
        else:
            rows.append(Row(field, p, o, hit, rule))
    return rows


def hit_word(hit: bool | None, predicted: Any, note: str | None = None, lang: str = "en") -> str:
    t = TEXT[lang]
    if note:
        return {"not exercised": t["not_exercised"], "crashed": t["crashed_row"],
                "disturbed": t["disturbed_row"]}.get(note, note)
    if hit is None:
        return t["not_predicted"] if predicted is None else t["not_observed"]
    return t["hit"] if hit else t["miss"]


def tolerance_text(rule: str, lang: str) -> str:
    if lang == "es":
        return rule.replace(" or ", " o ").replace("exact", "exacto").replace("points", "puntos")
    return rule


def render_comparison(rows: list[Row], lang: str = "en") -> Table:
    """The comparison as a rich table: hits green, misses red, fields not predicted dim."""
    lang = checked_lang(lang)
    t = TEXT[lang]
    table = Table(title=t["table_title"], title_justify="left")
    for i, column in enumerate(t["table_cols"]):
        table.add_column(column, justify="right" if i in (1, 2) else "left", style="dim" if i == 4 else None)
    for r in rows:
        word = hit_word(r.hit, r.predicted, r.note, lang)
        tolerance = Text(tolerance_text(r.tolerance, lang))
        # Text, not str: values come from the learner and the run (an answer may hold "[...]")
        cells = [Text(r.field), Text(fmt(r.predicted)), Text(fmt(r.observed))]
        if r.note:
            table.add_row(*cells, Text(word, style="bold yellow"), tolerance)
        elif r.hit is None:
            table.add_row(*cells, Text(word), tolerance, style="dim")
        else:
            colour = "green" if r.hit else "red"
            table.add_row(*cells, Text(word, style=f"bold {colour}"), tolerance)
    return table
