"""The one terminal the lab's commands print to (rich): tests record it by replacing ``screen.console``."""

from __future__ import annotations

import time

from rich.console import Console

console = Console()


def so_far(done: int, total: int, started: float) -> str:
    """How far a long command is: "3/17, 0:42 so far, about 3:10 left" (``started``: its time.monotonic())."""
    elapsed = time.monotonic() - started
    left = f", about {_clock(elapsed / done * (total - done))} left" if 0 < done < total else ""
    return f"{done}/{total}, {_clock(elapsed)} so far{left}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"
