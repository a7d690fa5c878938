"""The learner's files, on generated edits: `break`, `fix` and the notebook never lose a byte that is not theirs.

A generated learner edits a copy of ``src/``: a line inserted in a file the break touches, right next to the
break's lines, or far from them, or in another file; the line holds odd bytes (accents, emoji, tabs, a
carriage return, trailing spaces).  Then ``invoke break`` and ``invoke fix`` (``apply_to_tree``,
``revert_in_tree``) either refuse and change nothing, or change only the break's own lines.  The notebook
gets notes with odd bytes too, and may only ever grow at its end.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, note, settings
from hypothesis import strategies as st

from miniagent.lab.learner import notebook, paths, scoring
from miniagent.lab.catalogue import BreakError, catalogue
from miniagent.lab.patching import apply_to_tree, is_applied, revert_in_tree

ROOT = Path(__file__).resolve().parents[3]
BREAKS = catalogue(ROOT)
ODD = st.text(st.sampled_from(list("aé ñ\t€😀#\r\\`\u200b\ufeff")), min_size=1, max_size=12)


def touched(brk) -> list[tuple[str, list[int]]]:
    """(file, first line of each hunk in the intact file) for every file the break's patch changes."""
    out, current = [], None
    for line in brk.patch.read_text(encoding="utf-8").splitlines():
        if line.startswith("--- a/"):
            current = (line[6:], [])
            out.append(current)
        elif line.startswith("@@") and current is not None:
            current[1].append(int(re.match(r"@@ -(\d+)", line).group(1)))
    return out


@dataclass(frozen=True)
class Edit:
    where: str  # "next to" the break's lines, "far from" them in the same file, or "another file"
    offset: int  # lines from the hunk (next to) or from the file's end (far from)
    text: str

    def apply(self, tree: Path, brk) -> str:
        """Insert the line; returns the file it went into."""
        (path, hunks), *_ = touched(brk)
        if self.where == "another file":
            path = "src/miniagent/agent/guards.py" if "guards.py" not in path else "src/miniagent/agent/trace.py"
        file = tree / path
        lines = file.read_bytes().split(b"\n")
        at = {"next to": hunks[0] + 3 + self.offset, "far from": len(lines) - 1 - self.offset}.get(self.where, 1)
        lines.insert(max(0, min(at, len(lines))), ("# learner: " + self.text).encode("utf-8"))
        file.write_bytes(b"\n".join(lines))
        return path


edits = st.builds(Edit, where=st.sampled_from(("far from", "next to", "another file")), offset=st.integers(0, 4),
                  text=ODD)


def snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted((tree / "src").rglob("*.py"))}


@settings(max_examples=30)
@given(brk=st.sampled_from(BREAKS), before=st.lists(edits, max_size=2), during=st.lists(edits, max_size=2))
def test_break_and_fix_keep_every_byte_the_learner_wrote(brk, before, during, tmp_path_factory):
    """`break` then `fix` keep every byte the learner wrote, before the break or while it was applied.

    (es) `break` y después `fix` conservan cada byte que escribió quien aprende, antes de la rotura o con ella aplicada.
    """
    note("counterexample-json: " + json.dumps({
        "en": f"A learner who edits {len(before)} line(s) before `invoke break {brk.alias}` and {len(during)} "
              f"while it is applied: " + "; ".join(f"a line {e.where} the break's lines: {e.text!r}"
                                                   for e in before + during),
        "es": f"Alguien que edita {len(before)} línea(s) antes de `invoke break {brk.alias}` y {len(during)} "
              f"con la rotura aplicada: " + "; ".join(f"una línea ({e.where}): {e.text!r}" for e in before + during)},
        ensure_ascii=False))
    tree = tmp_path_factory.mktemp("learner")
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    patched = {path for path, _ in touched(brk)}
    edited = {edit.apply(tree, brk) for edit in before}
    mine = snapshot(tree)
    try:
        apply_to_tree(brk, tree)
    except BreakError:
        assert snapshot(tree) == mine, "break refused, but changed files"
        assert edited & patched, "break refused a tree whose patched files the learner had not touched"
        return
    assert is_applied(brk, tree)
    broken = snapshot(tree)
    changed = {path for path in mine if mine[path] != broken[path]}
    assert changed <= {path for path, _ in touched(brk)}, "break changed files its patch does not touch"
    edited |= {edit.apply(tree, brk) for edit in during}
    broken_and_mine = snapshot(tree)
    try:
        revert_in_tree(brk, tree)
    except BreakError:
        assert snapshot(tree) == broken_and_mine, "fix refused, but changed files"
        assert edited & patched, "fix refused a tree whose patched files the learner had not touched"
        return
    after = snapshot(tree)
    if not during:
        assert after == mine, "fix did not give back exactly the learner's tree"
    for path in after:  # every line the learner added is still there, wherever it was put
        for edit in before + during:
            line = ("# learner: " + edit.text).encode("utf-8")
            if line in broken_and_mine[path]:
                assert after[path].count(line) >= broken_and_mine[path].count(line), f"{path} lost {line!r}"


NOTES = st.lists(st.one_of(ODD, st.sampled_from(("## 00-no-cap — mine", "```", "# Heading", "outcome: answer",
                                                   "", "\r", "### Observed"))), max_size=8)


@settings(max_examples=30)
@given(notes=NOTES, crlf=st.booleans(), variant=st.sampled_from([b.id for b in BREAKS]))
def test_the_notebook_only_ever_grows_at_its_end(notes, crlf, variant, tmp_path_factory):
    """Predicting and observing only ever add bytes at the end of the learner's notebook.

    (es) Predecir y observar solo añaden bytes al final del cuaderno de quien aprende.
    """
    note("counterexample-json: " + json.dumps({
        "en": f"A notebook holding the lines {notes!r} ({'CRLF' if crlf else 'LF'} line ends), then "
              f"`invoke predict` and `invoke exp` for {variant}.",
        "es": f"Un cuaderno con las líneas {notes!r} (finales de línea {'CRLF' if crlf else 'LF'}), y después "
              f"`invoke predict` e `invoke exp` para {variant}."}, ensure_ascii=False))
    root = tmp_path_factory.mktemp("notes")
    path = paths.notebook_path(root, "bea")
    path.parent.mkdir(parents=True)
    original = ("\r\n" if crlf else "\n").join(notes).encode("utf-8")
    path.write_bytes(original)
    notebook.add_prediction(root, "bea", variant, "a break")
    grown = path.read_bytes()
    assert grown.startswith(original)
    observed = {"outcome": "timeout", "stop_reason": None, "wall_s": 3.0, "cpu_mean": 50.0, "tool_calls": 2,
                "processes_left": []}
    try:
        prediction = notebook.read_prediction(root, "bea", variant)
    except notebook.PredictionError:
        prediction = None  # the learner's own text made the block unreadable: it is reported, never rewritten
    rows = scoring.compare(prediction, observed) if prediction else None
    notebook.append_observation(root, "bea", variant, observed, rows, None, None, "now")
    assert path.read_bytes().startswith(grown)
