"""``invoke watch VARIANT``: re-run a break's guard tests every time you save a file under ``src/``.

One line per run, green or red at a glance, with the failing tests named; Ctrl-C ends it with exit status 0.
Run it directly as ``python -m miniagent.lab.commands.watch VARIANT [--root DIR] [--max-runs N]``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.text import Text

from ..catalogue import ALL, ROOT, BreakError, guard_tests
from ..words import LANGS, section

SAVES = {"created", "modified", "moved", "deleted", "closed"}  # watchdog event types ("closed": after a write)
DEBOUNCE_S = 0.3  # an editor's save is often several events; wait for them to settle
TEST_TIMEOUT_S = 60

TEXT = section("watch")


class _Changes:
    """Collects save events from watchdog's thread; the main thread waits for them to settle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None
        self._name = ""

    def saw(self, path: str) -> None:
        with self._lock:
            self._last, self._name = time.monotonic(), Path(path).name

    def settled(self, debounce: float) -> str | None:
        """The name of the last saved file once no event came for ``debounce`` seconds, else None."""
        with self._lock:
            if self._last is None or time.monotonic() - self._last < debounce:
                return None
            name, self._last = self._name, None
            return name


def saved_file(event) -> str | None:
    """The Python file a watchdog event saved, or None: only what changes a ``.py`` file is a save (opening or
    reading one, as pytest does, is not; nor is a directory's event or Python's own ``__pycache__``)."""
    if event.is_directory or event.event_type not in SAVES:
        return None
    path = str(getattr(event, "dest_path", "") or event.src_path)
    return None if "__pycache__" in path or not path.endswith(".py") else path


def run_tests(tests: list[str], root: Path) -> tuple[bool, str, list[str]]:
    """(green, pytest's summary line, failing test ids)."""
    # a child process: a broken edit (a syntax error, an endless loop the test timeout ends) cannot end the watcher
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout",
                             str(TEST_TIMEOUT_S), *tests], cwd=root, capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    summary = lines[-1].strip("= ") if lines else result.stderr.strip().splitlines()[-1:] or ["no output"]
    failing = [m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) (\S+)", result.stdout, re.M)]
    return result.returncode == 0, summary if isinstance(summary, str) else summary[0], failing


def watch(variant: str, root: Path = ROOT, *, lang: str = "en", max_runs: int | None = None,
          console: Console | None = None, on_result: Callable[[bool], None] | None = None) -> int:
    """Run the guard tests now and after every save under ``root/src``; 0 on Ctrl-C or after ``max_runs``."""
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    console = console or Console()
    t = TEXT[lang]
    tests = guard_tests(variant, root)
    src = root / "src"
    changes = _Changes()

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event) -> None:
            path = saved_file(event)
            if path:
                changes.saw(path)

    observer = Observer()
    observer.schedule(Handler(), str(src), recursive=True)
    observer.start()
    runs = 0
    try:
        console.print(t["start"].format(src=src, what=t["all"] if variant == ALL else variant), highlight=False)
        reason = t["first"]
        while True:
            if reason is not None:
                green, summary, failing = run_tests(tests, root)
                runs += 1
                stamp = datetime.now().strftime("%H:%M:%S")
                line = Text(f"{stamp}  ")
                line.append(f" {t['green'] if green else t['red']} ",
                            style="bold white on green" if green else "bold white on red")
                line.append(f"  {summary}  ({reason})")
                console.print(line)
                for test in failing:
                    console.print(Text(f"          {t['failing']}: {test}", style="red"))
                if on_result:
                    on_result(green)
                if max_runs is not None and runs >= max_runs:
                    return 0
            time.sleep(0.1)
            name = changes.settled(DEBOUNCE_S)
            reason = t["saved"].format(name=name) if name else None
    except KeyboardInterrupt:  # Ctrl-C ends a test run in progress too; then the file watcher is stopped
        console.print(t["stopped"])
        return 0
    finally:
        observer.stop()
        observer.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m miniagent.lab.commands.watch",
                                     description="Re-run a break's guard tests on every save under src/.")
    parser.add_argument("variant", help="a break (alias, id or number), or 'all'")
    parser.add_argument("--root", type=Path, default=ROOT, help="the lab's folder (default: this checkout)")
    parser.add_argument("--lang", choices=LANGS, default="en")
    parser.add_argument("--max-runs", type=int, default=None, help="stop after N test runs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a polite kill ends it like Ctrl-C
    try:
        return watch(args.variant, args.root.resolve(), lang=args.lang, max_runs=args.max_runs)
    except BreakError as err:
        print(f"miniagent: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
