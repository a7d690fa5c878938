"""The lab's words, one table per language: ``en.toml`` and ``es.toml`` beside this file.

Every report a learner reads in their language (the notebook's blocks, progress, hints, the watcher,
a crash, a chart, an experiment's verdict) and every sentence the docs generate take their words from
here, grouped by report: ``words("es")["hints"]["last"]``.  Both files have the same keys and each key
the same ``{placeholders}`` (``tests/lab/test_words.py``), so a report cannot exist in one language only.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

LANGS = ("en", "es")


def checked(lang: str | None) -> str:
    """``lang``, English when None; a language the lab does not have is an error that names the choices."""
    if lang is None:
        return "en"
    if lang not in LANGS:
        raise ValueError(f"the language must be one of {', '.join(LANGS)}, not {lang!r}")
    return lang


@cache
def words(lang: str) -> dict[str, Any]:
    """The whole table of one language."""
    return tomllib.loads(resources.files(__name__).joinpath(f"{checked(lang)}.toml").read_text(encoding="utf-8"))


def section(name: str) -> dict[str, dict[str, Any]]:
    """One report's words in every language: ``{"en": {...}, "es": {...}}``."""
    return {lang: words(lang)[name] for lang in LANGS}


def number(value: float | None, lang: str, fmt: str = "g") -> str:
    """A figure as the language writes it (``fmt`` as for :func:`format`): 2.5 in English, 2,5 in Spanish; "?"
    for a figure nobody could read (a load average where the system has none)."""
    return "?" if value is None else format(value, fmt).replace(".", words(lang)["decimal"])
