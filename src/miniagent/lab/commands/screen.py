"""The one terminal the lab's commands print to (rich): tests record it by replacing ``screen.console``."""

from __future__ import annotations

from rich.console import Console

console = Console()
