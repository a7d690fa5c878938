"""The smallest world that breaks each guard: hypothesis's shrunk counterexample, per break, for the docs.

:func:`find` runs a break's property tests against a sandbox with the break applied and reads back each failing
property's shrunk world; :func:`write` turns it into ``docs_results/<id>-counterexample.md`` and ``.es.md``,
which the break pages include.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..catalogue import ROOT, Break
from ..patching import make_sandbox
from ..words import section
from .. import screen

# The property tests print their world in words (a hypothesis note): nothing here knows a break or a property.
NOTE = re.compile(r"counterexample-json: (\{.*\})\s*$")
SECTION = re.compile(r"^_+ (test_\w+)(?:\[.*\])? _+$")
PROPERTY_FILES = re.compile(r"tests/(?:\w+/)*test_properties\w*\.py")


@dataclass
class Counterexample:
    test: str  # tests/agent/test_properties.py::test_x
    title: dict[str, str]  # what the property states, {"en": ..., "es": ...}
    world: dict[str, str] | None  # the shrunk world in words, {"en": ..., "es": ...}; None: no note was printed
    error: str = ""  # the assertion that failed (last line of its message)


def property_tests(brk: Break) -> list[str]:
    return [t for t in brk.tests if PROPERTY_FILES.match(t.split("::")[0])]


def titles(test_file: Path) -> dict[str, dict[str, str]]:
    """Each test's docstring: its first line in English, the paragraph starting "(es)" in Spanish (all its lines)."""
    out = {}
    for node in ast.parse(test_file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            doc = ast.get_docstring(node) or node.name
            paragraphs = [" ".join(line.strip() for line in block.splitlines()) for block in doc.split("\n\n")]
            first = doc.splitlines()[0].strip()
            out[node.name] = {"en": first, "es": next((p[4:].strip() for p in paragraphs if p.startswith("(es)")), first)}
    return out


def parse(output: str) -> dict[str, tuple[dict | None, str]]:
    """{test name: (world in words, last error line)} for each failure section of pytest's output."""
    found: dict[str, tuple[dict | None, str]] = {}
    current = None
    for line in output.splitlines():
        header = SECTION.match(line.strip())
        if header:
            current = header.group(1)
            found[current] = (None, "")
            continue
        if current is None:
            continue
        note = NOTE.search(line)
        world, error = found[current]
        if note:
            world = json.loads(note.group(1))
        elif line.startswith("E   ") and not error:  # the first line of the failure: the exception or assert
            error = line[4:].strip()
        found[current] = (world, error)
    return found


def find(brk: Break, root: Path = ROOT) -> list[Counterexample]:
    """Run the break's property tests against it, in a sandbox; one counterexample per failing property."""
    tests = property_tests(brk)
    if not tests:
        return []
    sandbox = make_sandbox(brk, root)
    try:
        shutil.copytree(root / "tests", sandbox / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(root / "pyproject.toml", sandbox / "pyproject.toml")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
        env.update(PYTHONPATH=str(sandbox / "src"), HYPOTHESIS_PROFILE="counterexamples")  # shrunk, not hand-written
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short",
                                 "--timeout", "600", *tests], cwd=sandbox, capture_output=True, text=True, env=env)
        failures = parse(result.stdout)
        names = {}
        for test in tests:
            names.update(titles(sandbox / test.split("::")[0]))
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    out = []
    for test in tests:
        name = test.split("::")[-1]
        if name in failures:
            world, error = failures[name]
            out.append(Counterexample(test, names.get(name, {"en": name, "es": name}), world, error))
    return out


TEXT = section("counterexamples")


def render(found: list[Counterexample], lang: str, stamp: str) -> str:
    t = TEXT[lang]
    lines = [t["intro"].format(stamp=stamp), ""]
    if not found:
        return "\n".join(lines + [t["none"], ""])
    for ce in found:
        lines += [t["fails"].format(title=ce.title[lang], test=ce.test.split("::")[-1]), ""]
        if ce.world is None:
            lines += [t["no_world"], ""]
        else:
            for line in ce.world[lang].splitlines():
                numbered = re.match(r"(\d+)\. (.*)", line)
                lines.append(f"    {numbered.group(1)}. {numbered.group(2)}" if numbered else f"- {line}")
            lines.append("")
        if ce.error:
            lines += [t["error"].format(error=ce.error.replace("`", "'")), ""]
    return "\n".join(lines)


def write(results_dir: Path, only: str | None = None, root: Path = ROOT) -> list[Path]:
    """Find and write every break's counterexample pages; returns the files written."""
    from ..catalogue import catalogue, find as find_break

    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    selected = [find_break(only, root)] if only is not None else catalogue(root)
    with screen.progress_bar("counterexamples", len(selected), shown=screen.console.is_terminal) as step:
        for done, brk in enumerate(selected):
            step(done, now=brk.id)
            started = time.monotonic()
            found = find(brk, root)
            stamp = f"{datetime.now():%Y-%m-%d}, {time.monotonic() - started:.0f} s"
            for lang, suffix in (("en", ".md"), ("es", ".es.md")):
                path = results_dir / f"{brk.id}-counterexample{suffix}"
                path.write_text(render(found, lang, stamp), encoding="utf-8")
                written.append(path)
            shown = "; ".join(f"{c.test.split('::')[-1]}" for c in found) or "no property fails"
            screen.console.print(f"{brk.id}: {shown}", markup=False, highlight=False)
    return written
