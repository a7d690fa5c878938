"""``invoke bench``'s flags checked and handed on: a flag refused by name before minutes of measuring."""

from __future__ import annotations

import shlex

from ..task_kit import check_save_name, flags, number, refuse
from .bench import LOADS as BENCH_LOADS

LOADS = dict(zip(("idle", "busy"), BENCH_LOADS))  # the flag's names for bench's own


def bench_flags(json: bool = False, only: str | None = None, amx: str | None = None, load: str | None = None,
                runs=None, save: str | None = None) -> str:
    """The command line of ``python -m miniagent.lab.maintainers.bench`` for the task's flags (comma-separated
    ``amx`` and ``load`` become repeated flags); a refusal (exit 2) for a flag bench would take minutes to
    reject."""
    asked = [x.strip() for x in (load or "").split(",") if x.strip()]
    if any(x not in LOADS for x in asked):
        refuse(f"--load takes idle or busy (or both, comma-separated), got {load!r}")
    if runs is not None and number("--runs", runs, int) < 1:
        refuse(f"--runs takes 1 or more, got {runs!r}")
    check_save_name(save)
    parts = [flags(json=json, only=only, runs=runs, save=save)]
    parts += [f"--amx {shlex.quote(a.strip())}" for a in (amx or "").split(",") if a.strip()]
    parts += [f"--load {shlex.quote(LOADS[x])}" for x in asked]
    return " ".join(parts)
