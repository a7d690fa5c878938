"""Fill each eval item's "accept" list from its "label" with the project's conjugation engine.

    python labs/01-tutor-end-to-end/label.py labs/01-tutor-end-to-end/*.jsonl          # rewrite
    python labs/01-tutor-end-to-end/label.py --check labs/01-tutor-end-to-end/*.jsonl  # verify only

A label is {"verb": ..., "tense": ..., "person": ...}: the reading of the
question a person writes by hand; the forms themselves are never typed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from miniagent.lab.evaluation import accepted_forms


def relabel(path: Path) -> tuple[str, int]:
    """The file's new text and how many items changed."""
    lines, changed = [], 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "decline" in row:  # outside the grammar: nothing to generate
            lines.append(json.dumps(row, ensure_ascii=False))
            continue
        label = row.get("label")
        if not label:
            raise SystemExit(f"{path}:{number}: no label")
        accept = accepted_forms(label["verb"], label["tense"], label["person"])
        changed += row.get("accept") != accept
        lines.append(json.dumps({"question": row["question"], "label": label, "accept": accept}, ensure_ascii=False))
    return "\n".join(lines) + "\n", changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only report items whose accept list is stale")
    args = parser.parse_args()
    stale = 0
    for path in args.files:
        text, changed = relabel(path)
        stale += changed
        if changed and not args.check:
            path.write_text(text, encoding="utf-8")
        print(f"{path}: {changed} item(s) {'stale' if args.check else 'relabelled'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
