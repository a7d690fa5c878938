"""``invoke mutants``: mutation testing of the agent package, a maintainer's check (too slow for CI).

mutmut (3.x) changes ``src/miniagent/agent/`` one small edit at a time (a ``<`` for a ``<=``, a constant,
a dropped call) and runs the fast tests that ``[tool.mutmut]`` in pyproject.toml names against each
mutant.  A mutant the tests still pass with has *survived*: either a test is missing, or the change makes
no difference anyone could see (``tests/mutants-explained.md`` lists those, with the reason).

It runs in a throwaway copy of ``src/``, ``tests/`` and ``pyproject.toml`` (mutmut writes a ``mutants/``
folder where it runs), so the repository is left as it was.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from .breaks import ROOT

EXPLAINED = Path("tests") / "mutants-explained.md"
LOG = Path(tempfile.gettempdir()) / "miniagent-mutants.log"


def explained(root: Path = ROOT) -> list[str]:
    """The mutant names (or fnmatch patterns, ``*`` for any number) tests/mutants-explained.md lists.

    Each one starts a list item: ``- `miniagent.agent.loop.xǁGrammarTutorǁfinish__mutmut_3`: why it lives``."""
    path = root / EXPLAINED
    if not path.is_file():
        return []
    return re.findall(r"^- `(miniagent\.agent\.[^`]+)`", path.read_text(encoding="utf-8"), re.M)


def is_explained(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def run(root: Path = ROOT, max_children: int = 2) -> dict:
    """Run mutmut in a sandbox; returns the figures, the survivors and the diff of each."""
    work = Path(tempfile.mkdtemp(prefix="miniagent-mutants-"))
    started = time.monotonic()
    try:
        shutil.copytree(root / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copytree(root / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(root / "pyproject.toml", work / "pyproject.toml")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
        env["HYPOTHESIS_PROFILE"] = "mutants"  # tests/conftest.py: 30 examples per property, derandomized
        mutmut = [sys.executable, "-m", "mutmut"]
        with open(LOG, "w", encoding="utf-8") as log:  # mutmut's own progress and errors, kept after the run
            subprocess.run([*mutmut, "run", "--max-children", str(max_children)], cwd=work, env=env, stdout=log,
                           stderr=subprocess.STDOUT)
        subprocess.run([*mutmut, "export-cicd-stats"], cwd=work, env=env, capture_output=True)
        stats = json.loads((work / "mutants" / "mutmut-cicd-stats.json").read_text(encoding="utf-8"))
        listed = subprocess.run([*mutmut, "results"], cwd=work, env=env, capture_output=True, text=True).stdout
        survivors = [name for name, status in re.findall(r"^\s*(\S+): (.+?)\s*$", listed, re.M)
                     if status in ("survived", "no tests")]
        diffs = {name: subprocess.run([*mutmut, "show", name], cwd=work, env=env, capture_output=True,
                                      text=True).stdout for name in survivors}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tested = stats["total"] - stats.get("skipped", 0)
    score = 100.0 * (stats["killed"] + stats.get("timeout", 0)) / tested if tested else 0.0
    return {"date": f"{datetime.now():%Y-%m-%d}", "seconds": round(time.monotonic() - started), "stats": stats,
            "score": round(score, 1), "survivors": survivors, "diffs": diffs,
            "unexplained": [name for name in survivors if not is_explained(name, explained(root))]}


def report(result: dict) -> str:
    s = result["stats"]
    unchecked = s["total"] - s["killed"] - s["survived"] - s["no_tests"] - s.get("timeout", 0) - s.get("skipped", 0)
    lines = [f"mutation score {result['score']:.1f} % ({s['killed'] + s.get('timeout', 0)} of "
             f"{s['total'] - s.get('skipped', 0)} mutants killed; {s['survived']} survived, {s['no_tests']} "
             f"reached by no test) on {result['date']}, in {result['seconds']} s",
             f"mutmut's figures: {json.dumps(s)}; its log: {LOG}"
             + (f" ({unchecked} mutants were not tested: see the log)" if unchecked else ""),
             f"survivors not explained in {EXPLAINED}: {len(result['unexplained'])}"]
    for name in result["survivors"]:
        mark = "" if name in result["unexplained"] else " (explained)"
        lines.append(f"\n{name}{mark}\n{result['diffs'].get(name, '').strip()}")
    return "\n".join(lines)
