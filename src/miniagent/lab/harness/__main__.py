"""``python -m miniagent.lab.harness --timeout S -- COMMAND``: run a command under the harness and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .deadline import NEEDS_KEYS, unknown_counters
from .charts import save_record
from .record import crash_note, deadline_note, machine_note, summary
from .run import is_miniagent, run_experiment


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m miniagent.lab.harness`` (the docs' commands are checked against it)."""
    parser = argparse.ArgumentParser(prog="python -m miniagent.lab.harness",
                                     description="Run a command under the harness: time limit, tree CPU, kill, "
                                                 "leftovers.")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--trace", default="runs/trace.jsonl", help="trace file (default runs/trace.jsonl)")
    parser.add_argument("--out", default=None, help="directory for the JSON record and SVG chart")
    parser.add_argument("--no-live", action="store_true")
    parser.add_argument("--clock", choices=("loop", "launch"), default=None,
                        help="count the timeout from the loop's start (default for miniagent commands) or from launch")
    parser.add_argument("--needs", action="append", default=[], metavar="COUNTER=N",
                        help="e.g. tool_calls=1: the timeout may not end the run before the trace shows that much "
                             f"({', '.join(NEEDS_KEYS)}); repeatable")
    parser.add_argument("--hard-cap", type=float, default=None,
                        help="seconds after launch nothing runs beyond (default max(60, 3 x timeout) with "
                             "--clock loop or --needs)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- python -m miniagent ask ...")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    try:
        needs = {key: int(n) for key, _, n in (item.partition("=") for item in args.needs)}
    except ValueError:
        parser.error("--needs takes COUNTER=N, e.g. tool_calls=1")
    unknown = unknown_counters(needs)
    if unknown:  # refused here, with the command line's words, not as a traceback from the run
        parser.error(f"--needs: unknown counter(s) {', '.join(unknown)}; use {', '.join(NEEDS_KEYS)}")
    clock = args.clock or ("loop" if is_miniagent(command) else "launch")  # others write no trace
    record = run_experiment(command, timeout=args.timeout, trace_path=Path(args.trace), live=not args.no_live,
                            clock=clock, needs=needs, hard_cap=args.hard_cap)
    print(summary(record))
    for line in crash_note(record):
        print(line)
    for note in (deadline_note(record), machine_note(record)):
        if note:
            print(note)
    for line in record.scratchpad_tail:
        print("   ", line)
    if args.out:
        json_path, svg_path = save_record(record, Path(args.out))
        print(f"saved {json_path} and {svg_path}")
    return 0 if record.outcome in ("answer", "declined", "fallback") else 1


if __name__ == "__main__":
    sys.exit(main())
