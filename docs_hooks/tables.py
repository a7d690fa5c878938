"""The docs' tables that follow the code: the guards (Home), the three layers and the stop reasons (theory 05), the
labs' map (Home).

Each row's words live in the lab's word tables (``[guards]``, ``[stop_reasons]``); the settings' defaults come
from ``TutorConfig``, the stop reasons from the loop's error classes, the labs from ``docs/labs/``. A guard, a
stop reason or a lab without its row fails ``tests/docs/test_docs.py``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import fields
from pathlib import Path

from miniagent.agent.config import TutorConfig
from miniagent.agent.errors import stop_reasons
from miniagent.lab.words import LANGS, words

OUT = Path("build") / "generated"


def _default(setting: str) -> str:
    value = {f.name: f.default for f in fields(TutorConfig)}[setting]
    return f"{value:g} s" if setting.endswith("_s") else str(value).lower() if isinstance(value, bool) else str(value)


def guards_table(lang: str) -> str:
    t = words(lang)["tables"]
    lines = [t["guards_head"], "|---|---|---|"]
    for row in words(lang)["guards"].values():
        shown = row.get("shown") or (_default(row["setting"]) if row.get("setting") else "")
        setting = f" (`{row['setting']}`, {shown})" if row.get("setting") else ""
        stop = f"`{row['stop']}`" if row.get("stop") else f"({row['instead']})"
        lines.append(f"| {row['name']}{setting} | {row['prevents']} | {stop} |")
    return "\n".join(lines) + "\n"


# The guards outside the loop's own counters (theory 05's layer 3): clocks and signals. Every other guard is layer 2.
OUTSIDE_THE_LOOP = ("WallClock", "ModelClock", "ToolTimeout", "CancelCheck")
DIAGRAM_WIDTH = 62


def layers_diagram(lang: str) -> str:
    """Theory 05's three nested layers, each listing its guards by their names in the guard table."""
    t, guards = words(lang)["tables"], words(lang)["guards"]
    unknown = set(OUTSIDE_THE_LOOP) - set(guards)
    if unknown:
        raise KeyError(f"OUTSIDE_THE_LOOP names {sorted(unknown)}, which [guards] has no row for")

    def names(layer: int) -> str:
        chosen = [row["name"] for key, row in guards.items() if (key in OUTSIDE_THE_LOOP) == (layer == 3)]
        chosen += [t["layer3_more"]] if layer == 3 else []
        return "; ".join(n[0].lower() + n[1:] if i else n for i, n in enumerate(chosen))

    def box(width: int, layer: int, inner: list[str]) -> list[str]:
        """A box ``width`` characters wide: its title, its guards wrapped, then the inner box indented."""
        edge = "+" + "-" * (width - 2) + "+"
        listed = textwrap.wrap(names(layer), width - 7, break_on_hyphens=False) if layer > 1 else []
        body = [f"| {t[f'layer{layer}']:<{width - 4}} |", *(f"|    {line:<{width - 6}}|" for line in listed)]
        return [edge, *body, *(f"|  {line}  |" for line in inner), edge]

    model = box(DIAGRAM_WIDTH - 12, 1, [])
    return "```text\n" + "\n".join(box(DIAGRAM_WIDTH, 3, box(DIAGRAM_WIDTH - 6, 2, model))) + "\n```\n"


def stop_reasons_table(lang: str) -> str:
    t = words(lang)["tables"]
    ended = words(lang)["stop_reasons"]
    missing = stop_reasons() - set(ended)
    if missing:  # the build fails rather than show a table that leaves a stop reason out
        raise KeyError(f"[stop_reasons] in the {lang} words has no row for {sorted(missing)}")
    lines = [t["stops_head"], "|---|---|"] + [f"| `{reason}` | {text} |" for reason, text in ended.items()]
    return "\n".join(lines) + "\n"


def labs_list(root: Path, lang: str) -> str:
    """Every lab page, by its own title, linked from the site's home page."""
    suffix = ".md" if lang == "en" else f".{lang}.md"
    lines = []
    for page in sorted((root / "docs" / "labs").glob("[0-9][0-9]-*.md")):
        if page.name.count(".") > 1:  # a translation: read below for its language
            continue
        source = page.with_name(page.name.removesuffix(".md") + suffix) if lang != "en" else page
        title = re.sub(r"^#\s*", "", source.read_text(encoding="utf-8").splitlines()[0]).strip()
        lines.append(f"- [{title}](labs/{page.name})")
    return "\n".join(lines) + "\n"


def write(root: Path) -> None:
    """Every table, in every language, under ``root / OUT``."""
    for lang in LANGS:
        for name, text in ((f"guards.{lang}.md", guards_table(lang)), (f"layers.{lang}.md", layers_diagram(lang)),
                           (f"stop-reasons.{lang}.md", stop_reasons_table(lang)), (f"labs.{lang}.md", labs_list(root, lang))):
            path = root / OUT / name
            if not path.is_file() or path.read_text(encoding="utf-8") != text:  # an unchanged file keeps its mtime
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")


def on_pre_build(config, **kwargs) -> None:  # the mkdocs hook (mkdocs.yml lists this file)
    write(Path(config["config_file_path"]).resolve().parent)
