"""A run's CPU over time as an SVG chart: one run, or a break's two runs stacked on the same scales (EN/ES);
and :func:`save_record`, a run's JSON record beside its chart."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from xml.sax.saxutils import escape

from ..words import LANGS, section, words
from .record import CORES, RunRecord


# One panel is as wide as the docs' text column (about 690 px), so the browser draws it at about its
# own size and the labels stay readable (14 px and up).  Two runs are stacked, one above the other,
# on the same scales, never side by side.
PANEL_W, PANEL_H = 720, 300
MARGIN = {"left": 66, "right": 16, "top": 58, "bottom": 50}
FONT_PX = {"text": 14, "title": 17, "sub": 14, "note": 14}

CHART_TEXT = section("chart")


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


def _num(value: float, lang: str) -> str:
    return f"{value:g}".replace(".", CHART_TEXT[lang]["decimal"])


def _chart(record: RunRecord, *, y0: float, x_max: float, y_max: float, title: str, lang: str = "en") -> list[str]:
    """The SVG elements of one chart, placed at vertical offset ``y0``."""
    t = CHART_TEXT[lang]
    left, top = MARGIN["left"], y0 + MARGIN["top"]
    w = PANEL_W - MARGIN["left"] - MARGIN["right"]
    h = PANEL_H - MARGIN["top"] - MARGIN["bottom"]
    bottom = top + h

    def px(sec: float) -> float:
        return left + sec / x_max * w

    def py(cpu: float) -> float:
        return bottom - min(cpu, y_max) / y_max * h

    out = [f'<text x="{left}" y="{y0 + 22}" class="title">{escape(title)}</text>']
    sub = t["sub"].format(outcome=record.outcome, stop=record.stop_reason or t["none"], cpu=f"{record.cpu_mean:.0f}",
                          calls=record.tool_calls, left=len(record.processes_left))
    out.append(f'<text x="{left}" y="{y0 + 42}" class="sub">{escape(sub)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" class="frame"/>')
    step_y = 100 if y_max > 250 else 50
    for cpu in range(0, int(y_max) + 1, step_y):  # horizontal grid and y labels
        y = py(cpu)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 5:.1f}" class="ylabel">{cpu}</text>')
    step = _nice_step(x_max)
    sec = 0.0
    while sec <= x_max + 1e-9:  # x ticks
        x = px(sec)
        out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 20}" class="xlabel">{_num(round(sec, 6), lang)}</text>')
        sec += step
    out.append(f'<text x="{left + w / 2}" y="{bottom + 40}" class="xlabel">{escape(t["x"])}</text>')
    out.append(f'<text x="16" y="{top + h / 2}" class="xlabel" '
               f'transform="rotate(-90 16 {top + h / 2})">{escape(t["y"])}</text>')
    one_core = py(100)
    out.append(f'<line x1="{left}" y1="{one_core:.1f}" x2="{left + w}" y2="{one_core:.1f}" class="core"/>')
    out.append(f'<text x="{left + w - 4}" y="{one_core - 5:.1f}" class="note end">{escape(t["core"])}</text>')
    if record.loop_start_s is not None and record.loop_start_s <= x_max:
        x = px(record.loop_start_s)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="start"/>')
        out.append(f'<text x="{x + 4:.1f}" y="{top + 16}" class="note">{escape(t["start"])}</text>')
    if record.outcome in ("timeout", "interrupted"):
        at = record.wall_s
        if record.outcome == "timeout":
            at = record.deadline_s if record.deadline_s is not None else record.timeout
        x = px(min(at, x_max))
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="kill"/>')
        out.append(f'<text x="{x - 4:.1f}" y="{top + 34}" class="note end kill-text">'
                   f'{escape(t[record.outcome])}</text>')
    if any(len(s) > 4 and s[4] is not None for s in record.samples):  # CPU used by other programs meanwhile
        others = " ".join(f"{px(s[0]):.1f},{py(s[4]):.1f}" for s in record.samples if len(s) > 4 and s[4] is not None)
        out.append(f'<polyline points="{others}" class="others"/>')
        out.append(f'<text x="{left + 6}" y="{bottom - 8}" class="note">'
                   f'{escape(t["others"].format(cpu=f"{record.other_cpu_mean:.0f}"))}</text>')
    points = " ".join(f"{px(s[0]):.1f},{py(s[1]):.1f}" for s in record.samples)
    out.append(f'<polyline points="{points}" class="cpu"/>')
    return out


_STYLE = f"""<style>
  text {{ font-family: sans-serif; font-size: {FONT_PX["text"]}px; fill: #222; }}
  .title {{ font-size: {FONT_PX["title"]}px; font-weight: bold; }}
  .sub {{ font-size: {FONT_PX["sub"]}px; fill: #444; }}
  .ylabel {{ text-anchor: end; }} .xlabel {{ text-anchor: middle; }}
  .note {{ font-size: {FONT_PX["note"]}px; fill: #444; }} .end {{ text-anchor: end; }} .kill-text {{ fill: #c0392b; }}
  .frame {{ fill: white; stroke: #999; }} .grid {{ stroke: #e4e4e4; }} .axis {{ stroke: #999; }}
  .core {{ stroke: #888; stroke-dasharray: 6 4; }}
  .start {{ stroke: #aaa; stroke-dasharray: 2 3; }}
  .kill {{ stroke: #c0392b; stroke-width: 2; }}
  .others {{ fill: none; stroke: #bbb; stroke-width: 1.5; }}
  .cpu {{ fill: none; stroke: #1f6fb2; stroke-width: 2.2; stroke-linejoin: round; }}
</style>"""


def _svg(height: int, parts: list[str], lang: str = "en") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{PANEL_W}" height="{height}" '
            f'viewBox="0 0 {PANEL_W} {height}" lang="{lang}">\n{_STYLE}\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(parts) + "\n</svg>\n")


def write_svg(record: RunRecord, path: Path, title: str | None = None, lang: str = "en") -> Path:
    """A self-contained SVG line chart of the tree's CPU % over time."""
    title = title or f"miniagent run {record.started_at}"
    path = Path(path)
    path.write_text(_svg(PANEL_H, _chart(record, y0=0, x_max=_x_end(record), y_max=_y_top([record]), title=title,
                                         lang=lang), lang), encoding="utf-8")
    return path


def write_svg_pair(broken: RunRecord, fixed: RunRecord, path: Path,
                   titles: tuple[str, str] = ("broken", "fixed"), lang: str = "en") -> Path:
    """Two charts, one above the other, on the same scales, so the eye compares like with like."""
    x_max = max(_x_end(broken), _x_end(fixed))
    y_max = _y_top([broken, fixed])
    parts = _chart(broken, y0=0, x_max=x_max, y_max=y_max, title=titles[0], lang=lang)
    parts += _chart(fixed, y0=PANEL_H, x_max=x_max, y_max=y_max, title=titles[1], lang=lang)
    path = Path(path)
    path.write_text(_svg(2 * PANEL_H, parts, lang), encoding="utf-8")
    return path


PAIR_TITLES = {lang: words(lang)["chart_pair"]["titles"] for lang in LANGS}


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
