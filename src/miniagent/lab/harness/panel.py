"""The live panel a learner watches during a run (rich), and the sparkline it draws CPU with."""

from __future__ import annotations

import sys
from typing import Any

from .follow import Progress
from .record import BUSY_OTHERS, CORES

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], top: float | None = None) -> str:
    """Unicode blocks, 0 .. ``top`` (default: every core busy)."""
    top = 100.0 * CORES if top is None else top
    out = []
    for v in values:
        level = 0 if top <= 0 else round(min(max(v, 0.0), top) / top * (len(SPARK) - 1))
        out.append(SPARK[level])
    return "".join(out)


def render_panel(*, elapsed: float, timeout: float, progress: Progress, samples: list[list[float]],
                 status: str = "running", counted: float | None = None, clock: str = "") -> Any:
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True, min_width=11)
    grid.add_column(no_wrap=True, overflow="ellipsis")  # one line per row, whatever the terminal width
    counted = elapsed if counted is None else counted
    bar = Table.grid(padding=(0, 1))
    bar.add_row(f"{counted:5.1f} / {timeout:.1f} s", ProgressBar(total=timeout, completed=min(counted, timeout),
                                                                 width=30))
    grid.add_row("time", bar)
    if clock:
        grid.add_row("", Text(f"{clock} · {elapsed:.1f} s since launch"))
    calls = sum(progress.tool_calls.values())
    grid.add_row("loop", f"turn {progress.turns} · tool calls {calls} · identical {progress.identical_calls}"
                         f" · tool errors {progress.tool_errors}")
    grid.add_row("last action", Text(progress.last_action or "-"))  # model text: never read as markup
    cpu_now = samples[-1][1] if samples else 0.0
    rss_now = samples[-1][2] if samples else 0.0
    procs = int(samples[-1][3]) if samples else 0
    grid.add_row("cpu", f"{sparkline([s[1] for s in samples[-30:]])} {cpu_now:4.0f} % · rss {rss_now:.0f} MB"
                        f" · processes {procs}")
    grid.add_row("", f"(tree total; 100 % = one core busy, {100 * CORES} % = all {CORES})")
    if samples and len(samples[-1]) > 4:
        others = [s[4] for s in samples[-30:]]
        busy = sum(others) / len(others) >= BUSY_OTHERS
        grid.add_row("other work", Text(f"{sparkline(others)} {others[-1]:4.0f} % used by other programs"
                                        + (" · busy machine: figures disturbed" if busy else ""),
                                        style="yellow" if busy else ""))
    return Panel(grid, title=f"miniagent run: {status}", border_style="red" if status != "running" else "blue")


class LiveView:
    """rich.live around the run, or nothing at all (tests, pipes)."""

    def __init__(self, enabled: bool, force: bool) -> None:
        self.live = None
        if enabled and (force or sys.stdout.isatty()):
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(force_terminal=force or None), refresh_per_second=4,
                             redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> "LiveView":
        if self.live is not None:
            self.live.start()
        return self

    def update(self, **state: Any) -> None:
        if self.live is not None:
            self.live.update(render_panel(**state))  # rich redraws it at its own 4/s pace

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.stop()
