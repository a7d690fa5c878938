"""The one terminal the lab's commands print to (rich): tests record it by replacing ``screen.console``."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from rich.console import Console

console = Console()

Step = Callable[..., None]  # step(done, now=""): how many are done, and what runs now


@contextlib.contextmanager
def progress_bar(label: str, total: int, *, shown: bool, on: Console | None = None) -> Iterator[Step]:
    """A bar while many things run one after another: what runs now, done / total, time so far, about how long is
    left. Drawn only when ``shown`` (a terminal, no ``--json``), on ``on`` (default: :data:`console`, whose other
    lines then scroll above it); otherwise ``step`` does nothing."""
    if not shown:
        yield lambda done, now="": None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=on or console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done, now="": bar.update(task, completed=done, description=f"{label} {now}".rstrip())


def so_far(done: int, total: int, started: float) -> str:
    """How far a long command is: "3/17, 0:42 so far, about 3:10 left" (``started``: its time.monotonic())."""
    elapsed = time.monotonic() - started
    left = f", about {_clock(elapsed / done * (total - done))} left" if 0 < done < total else ""
    return f"{done}/{total}, {_clock(elapsed)} so far{left}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"
