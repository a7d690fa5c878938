"""A run's CPU over time as an SVG chart: one run, or a break's two runs stacked on the same scales (EN/ES);
and :func:`save_record`, a run's JSON record beside its chart.

Drawn with matplotlib's object API (a ``Figure`` of its own, no pyplot state, so two charts drawn at once
never share an axis) into SVG whose text stays text (searchable, translatable, readable by a test) and
whose bytes depend only on the record: no date, fixed ids, every sample kept (no path simplification)."""

from __future__ import annotations

import io
import math
from datetime import datetime
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MultipleLocator

from ..words import LANGS, number, section, words
from .record import CORES, RunRecord

# One panel is as wide as the docs' text column (about 690 CSS px: 7.2 in at the browser's 96 px per inch), so
# the page draws it at about its own size; text is set in points (an SVG point is 4/3 of a CSS px), and
# 10.5 pt reads as 14 px.  Two runs are stacked, one above the other, on the same scales, never side by side.
PANEL_IN = (7.2, 3.4)
FONT_PT = {"text": 10.5, "title": 12.5, "sub": 10, "ticks": 10}
COLOURS = {"cpu": "#1f6fb2", "others": "#bbbbbb", "core": "#888888", "start": "#aaaaaa", "kill": "#c0392b",
           "grid": "#e4e4e4", "frame": "#999999", "muted": "#444444"}
NOTE_BOX = {"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1}  # a note stays readable over a line
STYLE = {
    "svg.fonttype": "none",      # text as <text>, not glyph outlines
    "svg.hashsalt": "miniagent",  # the same ids on every run
    "path.simplify": False,      # every CPU sample is drawn, none merged away
    "text.parse_math": False,    # a title with two $ signs is a title, not TeX
    "font.family": "sans-serif",
    "font.size": FONT_PT["text"],
    "xtick.labelsize": FONT_PT["ticks"],
    "ytick.labelsize": FONT_PT["ticks"],
    "axes.edgecolor": COLOURS["frame"],
    "text.color": "#222222",
}

CHART_TEXT = section("chart")
PAIR_TITLES = {lang: words(lang)["chart_pair"]["titles"] for lang in LANGS}


def _nice_step(span: float, max_ticks: int = 8) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= max_ticks:
            return step
    return span / max_ticks


def _x_end(record: RunRecord) -> float:
    last = record.samples[-1][0] if record.samples else 0.0
    return max(record.wall_s, last, 0.5)


def _y_top(records: list[RunRecord]) -> float:
    peak = max([s[1] for r in records for s in r.samples] + [0.0])
    return max(100.0 * CORES, 200.0, math.ceil(peak / 50) * 50)


def _kill_at(record: RunRecord) -> float | None:
    """When the harness ended the run (the deadline, for a timeout), or None when the run ended by itself."""
    if record.outcome == "timeout":
        return record.deadline_s if record.deadline_s is not None else record.timeout
    if record.outcome == "interrupted":
        return record.wall_s
    return None


def _draw(ax, record: RunRecord, *, x_max: float, y_max: float, title: str, lang: str, gid: str) -> None:
    """One run on one axis; ``gid`` names its lines in the SVG (``<gid>cpu``, ``<gid>others``, ...)."""
    t = CHART_TEXT[lang]
    sub = t["sub"].format(outcome=record.outcome, stop=record.stop_reason or t["none"], cpu=f"{record.cpu_mean:.0f}",
                          calls=record.tool_calls, left=len(record.processes_left))
    # the title and its line of figures start at the figure's left edge: the figures need the whole width
    left = ax.get_figure().transFigure
    ax.annotate(title, (0.012, 1.2), xycoords=(left, ax.transAxes), fontsize=FONT_PT["title"], fontweight="bold")
    ax.annotate(sub, (0.012, 1.07), xycoords=(left, ax.transAxes), fontsize=FONT_PT["sub"], color=COLOURS["muted"])
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, y_max)
    ax.xaxis.set_major_locator(MultipleLocator(_nice_step(x_max)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda sec, _: number(round(sec, 6), lang)))
    ax.yaxis.set_major_locator(MultipleLocator(100 if y_max > 250 else 50))
    ax.grid(axis="y", color=COLOURS["grid"])
    ax.set_axisbelow(True)
    ax.set_xlabel(t["x"])
    ax.set_ylabel(t["y"], fontsize=FONT_PT["sub"])
    ax.axhline(100, color=COLOURS["core"], linestyle=(0, (6, 4)), linewidth=1, gid=f"{gid}core")
    ax.text(0.995 * x_max, 100, t["core"], ha="right", va="bottom", color=COLOURS["muted"], bbox=NOTE_BOX)
    if record.loop_start_s is not None and record.loop_start_s <= x_max:
        ax.axvline(record.loop_start_s, color=COLOURS["start"], linestyle=(0, (2, 3)), gid=f"{gid}start")
        ax.text(record.loop_start_s, y_max, " " + t["start"], va="top", color=COLOURS["muted"], bbox=NOTE_BOX)
    kill = _kill_at(record)
    if kill is not None:
        ax.axvline(min(kill, x_max), color=COLOURS["kill"], linewidth=2, gid=f"{gid}kill")
        ax.text(min(kill, x_max), 0.88 * y_max, t[record.outcome] + " ", ha="right", color=COLOURS["kill"], bbox=NOTE_BOX)
    others = [(s[0], s[4]) for s in record.samples if len(s) > 4 and s[4] is not None]
    if others:  # the CPU other programs used meanwhile
        ax.plot(*zip(*others), color=COLOURS["others"], linewidth=1.5, gid=f"{gid}others")
        ax.text(0.01, 0.03, t["others"].format(cpu=f"{record.other_cpu_mean:.0f}"), transform=ax.transAxes,
                color=COLOURS["muted"], bbox=NOTE_BOX)
    if record.samples:
        ax.plot([s[0] for s in record.samples], [s[1] for s in record.samples], color=COLOURS["cpu"],
                linewidth=2.2, solid_joinstyle="round", gid=f"{gid}cpu")


def _write(path: Path, runs: list[tuple[RunRecord, str, str]], lang: str) -> Path:
    """Draw each (record, title, gid prefix) in its own panel, one above the other, on the same scales."""
    records = [record for record, _, _ in runs]
    x_max = max(_x_end(record) for record in records)
    y_max = _y_top(records)
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=(PANEL_IN[0], PANEL_IN[1] * len(runs)))
        FigureCanvasSVG(figure)
        axes = figure.subplots(len(runs), 1, squeeze=False)[:, 0]
        figure.subplots_adjust(left=0.1, right=0.98, top=1 - 0.7 / (PANEL_IN[1] * len(runs)),
                               bottom=0.52 / (PANEL_IN[1] * len(runs)), hspace=0.6)
        for ax, (record, title, gid) in zip(axes, runs):
            _draw(ax, record, x_max=x_max, y_max=y_max, title=title, lang=lang, gid=gid)
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None, "Language": lang})
    path = Path(path)
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def write_svg(record: RunRecord, path: Path, title: str | None = None, lang: str = "en") -> Path:
    """A self-contained SVG line chart of the tree's CPU % over time."""
    return _write(path, [(record, title or f"miniagent run {record.started_at}", "")], lang)


def write_svg_pair(broken: RunRecord, fixed: RunRecord, path: Path,
                   titles: tuple[str, str] = ("broken", "fixed"), lang: str = "en") -> Path:
    """Two charts, one above the other, on the same scales, so the eye compares like with like."""
    return _write(path, [(broken, titles[0], "broken-"), (fixed, titles[1], "fixed-")], lang)


def write_docs_charts(broken: RunRecord, fixed: RunRecord, break_id: str, assets_dir: Path) -> list[Path]:
    """The docs' chart of one break in each language: ``<id>.svg`` (English) and ``<id>.es.svg`` (Spanish),
    which the docs' i18n plugin serves to the page of the same language."""
    out = []
    for lang, name in (("en", f"{break_id}.svg"), ("es", f"{break_id}.es.svg")):
        titles = tuple(title.format(id=break_id) for title in PAIR_TITLES[lang])
        out.append(write_svg_pair(broken, fixed, Path(assets_dir) / name, titles=titles, lang=lang))
    return out


def save_record(record: RunRecord, directory: Path, title: str | None = None) -> tuple[Path, Path]:
    """``<directory>/<timestamp>-<outcome>.json`` and ``.svg``; never overwrites an earlier run."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = (record.started_at or datetime.now().isoformat(timespec="seconds")).replace(":", "").replace("-", "")
    stem, n = f"{stamp}-{record.outcome}", 1
    while (directory / f"{stem}.json").exists():
        n += 1
        stem = f"{stamp}-{record.outcome}-{n}"
    json_path = directory / f"{stem}.json"
    json_path.write_text(record.to_json(), encoding="utf-8")
    return json_path, write_svg(record, directory / f"{stem}.svg", title=title)
