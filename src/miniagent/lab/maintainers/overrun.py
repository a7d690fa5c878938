"""``invoke bench --only g``: how far past its wall clock a run on the local model ends when the clock runs out in
the middle of a long decode.

Each run asks a padded question of about 460 tokens, new to the cache, so its first decode is long on every CPU;
the overrun is the run's whole time, measured around the call, less ``wall_clock_s``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

WALL_CLOCKS = (0.2, 0.4, 1.0)
DECODES = ("scored", "greedy")
QUESTION = "What is the past simple of go for she?"
PADDING = " Please answer it carefully."


def long_question(run: int) -> str:
    """A question of about 460 tokens whose first words differ run by run: nothing of it is in the cache yet."""
    return f"Question {run}: {QUESTION}" + PADDING * 90


def overruns(runs: int = 20, wall_clocks=WALL_CLOCKS, decodes=DECODES) -> list[dict]:
    """One row per decoding mode and wall clock: the overrun's median and maximum over ``runs`` runs, in ms."""
    from ...settings import load_config
    from ..session import TutorSession

    rows = []
    for decode in decodes:
        settings = load_config({"decode": decode, "max_input_chars": len(long_question(10 ** 6))}, env={})
        with TutorSession(settings) as session:
            for wall_clock_s in wall_clocks:
                session.settings.tutor = dataclasses.replace(settings.tutor, wall_clock_s=wall_clock_s)
                over, stops = [], set()
                for run in range(runs):
                    question = long_question(len(rows) * runs + run)
                    started = time.monotonic()
                    outcome = session.ask(question)
                    over.append(time.monotonic() - started - wall_clock_s)
                    stops.add(outcome.stop_reason)
                rows.append({"decode": decode, "wall_clock_s": wall_clock_s, "runs": runs,
                             "overrun_p50_ms": round(1000 * statistics.median(over), 1),
                             "overrun_max_ms": round(1000 * max(over), 1), "stop_reasons": sorted(stops)})
    return rows


def print_overruns(console, rows: list[dict]) -> None:
    from rich.table import Table

    table = Table(title=f"(g) a run's end past its wall clock, run out inside a long decode ({rows[0]['runs']} runs)")
    for col in ("decode", "wall_clock_s", "overrun p50 ms", "overrun max ms", "stop reasons"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["decode"], f"{r['wall_clock_s']:g}", f"{r['overrun_p50_ms']:.1f}",
                      f"{r['overrun_max_ms']:.1f}", ", ".join(r["stop_reasons"]))
    console.print(table)
