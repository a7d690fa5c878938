"""MkDocs hook: search in the language being read. mkdocs-static-i18n builds one index for both languages; after
the build it is split, the English entries at the root and each other language's under its folder, and each of
that language's pages is pointed at its own index. Registered in ``mkdocs.yml`` under ``hooks:``.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from miniagent.lab.words import LANGS

log = logging.getLogger("mkdocs.hooks.search_index")

SECOND_LANGS = tuple(lang for lang in LANGS if lang != "en")
_BASE_RE = re.compile(r'("base": ")([^"]*)(")')


def on_post_page(output: str, page: Any, config: Any, **kwargs: Any) -> str:
    dest = page.file.dest_uri
    lang = next((lang for lang in SECOND_LANGS if dest.startswith(f"{lang}/")), None)
    if lang is None or '<script id="__config"' not in output:
        return output
    import posixpath

    here = posixpath.dirname(dest) or "."
    base = posixpath.relpath(lang, here)
    head, sep, rest = output.partition('<script id="__config" type="application/json">')
    return head + sep + _BASE_RE.sub(lambda m: m.group(1) + base + m.group(3), rest, count=1)


def split_search_index(site_dir: Path) -> dict[str, int]:
    """One search index per language; returns the number of entries each got."""
    index_path = site_dir / "search" / "search_index.json"
    if not index_path.is_file():
        return {}
    index = json.loads(index_path.read_text(encoding="utf-8"))
    docs = index.get("docs", [])
    counts = {}
    for lang in SECOND_LANGS:
        mine = [{**d, "location": d["location"][len(lang) + 1:]} for d in docs if d["location"].startswith(f"{lang}/")]
        if not mine:
            continue
        out = site_dir / lang / "search" / "search_index.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**index, "config": {**index["config"], "lang": [lang]}, "docs": mine},
                                  ensure_ascii=False), encoding="utf-8")
        counts[lang] = len(mine)
    english = [d for d in docs if not any(d["location"].startswith(f"{lang}/") for lang in SECOND_LANGS)]
    if len(english) != len(docs):
        index_path.write_text(json.dumps({**index, "config": {**index["config"], "lang": ["en"]}, "docs": english},
                                         ensure_ascii=False), encoding="utf-8")
    counts["en"] = len(english)
    return counts


try:
    from mkdocs.plugins import event_priority
except ImportError:  # the generator also runs without mkdocs (python docs_hooks/generate.py)
    def event_priority(priority: float):  # type: ignore[no-redef]
        return lambda f: f


@event_priority(-100)  # after the search plugin (and the i18n plugin) have written the combined index
def on_post_build(config: Any, **kwargs: Any) -> None:
    counts = split_search_index(Path(config["site_dir"]))
    if counts:
        log.debug("generate: search index split per language: %s", counts)
