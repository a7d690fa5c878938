"""Breaks applied to source trees: the learner's own (``invoke break`` / ``fix`` / ``reset``) and throwaway copies.

Every experiment has the shape hypothesis -> method -> rollback: the
learner's prediction is read first, the patch is applied to a throwaway
copy of the source and run under the harness, and the copy is removed
whatever happens (the learner's own tree is never touched by ``exp``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .catalogue import ROOT, Break, BreakError, catalogue


# --- patches in the learner's tree (invoke break / fix) ---------------------------------
def _git_apply(cwd: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", *extra, str(patch)], cwd=cwd, capture_output=True, text=True)


def is_applied(brk: Break, root: Path = ROOT) -> bool:
    return _git_apply(root, brk.patch, "--reverse", "--check").returncode == 0


def apply_to_tree(brk: Break, root: Path = ROOT) -> None:
    """Apply the break to the learner's source, refusing (and changing nothing) on any conflict."""
    if is_applied(brk, root):
        raise BreakError(f"{brk.id} is already applied; `invoke fix {brk.alias}` reverts it")
    check = _git_apply(root, brk.patch, "--check")
    if check.returncode != 0:
        raise BreakError(
            f"{brk.id} does not apply cleanly to your source, so nothing was changed "
            f"(your edits are safe).\n{check.stderr.strip()}\n"
            "Commit or stash your own changes to those lines, or `invoke fix` another break first.")
    _git_apply(root, brk.patch).check_returncode()


def revert_in_tree(brk: Break, root: Path = ROOT) -> None:
    """Undo exactly the break's patch; refuse when the learner has changed those lines since."""
    if not is_applied(brk, root):  # one line, no git output: what happened and what to do
        if _git_apply(root, brk.patch, "--check").returncode == 0:
            raise BreakError(f"{brk.id} is not applied to your src/: there is nothing to fix, and nothing was changed")
        raise BreakError(f"{brk.id}'s lines in src/ are no longer as the break left them, so nothing was changed; "
                         f"`invoke reset {brk.alias}` puts them back to intact and saves your version first")
    _git_apply(root, brk.patch, "--reverse").check_returncode()


def patched_files(brk: Break) -> list[str]:
    """The paths (relative to the repository root) the break's patch changes."""
    return list(dict.fromkeys(hunk.file for hunk in hunks(brk.patch)))


@dataclass
class ResetResult:
    how: str  # "intact" (nothing to do), "reverted" (the patch was there as it was), "merged" (your lines replaced)
    files: list[str] = field(default_factory=list)   # files changed
    backup: Path | None = None                      # where the files were saved before they changed


def reset_in_tree(brk: Break, root: Path = ROOT, backups: Path | None = None) -> ResetResult:
    """Back to the intact source for this break only, whatever you did to its lines; other edits stay.

    Intact: nothing changes.  Applied as it was: ``invoke fix``.  Its lines edited: a three-way merge puts
    the intact lines back, after a copy to ``backups/``; if they are still not intact, every file is put back
    and the reset refused.  Why: docs/maintainers.md.
    """
    if _git_apply(root, brk.patch, "--check").returncode == 0:
        return ResetResult("intact")
    if is_applied(brk, root):
        revert_in_tree(brk, root)
        return ResetResult("reverted", patched_files(brk))
    files = patched_files(brk)
    intact, broken = _reference_versions(brk, root, files)
    merged: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="miniagent-reset-") as tmp:
        for rel in files:
            current = (root / rel).read_bytes() if (root / rel).exists() else b""
            paths = []
            for name, data in (("current", current), ("base", broken[rel]), ("other", intact[rel])):
                path = Path(tmp) / name
                path.write_bytes(data)
                paths.append(str(path))
            # base: the broken file; yours: the file now; theirs: the intact file, which wins every conflict
            result = subprocess.run(["git", "merge-file", "-p", "--theirs", *paths], capture_output=True)
            if result.returncode < 0 or result.returncode > 127:
                raise BreakError(f"git merge-file failed on {rel}: {result.stderr.decode(errors='replace')}")
            merged[rel] = result.stdout
    changed = [rel for rel in files if (root / rel).read_bytes() != merged[rel]]
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    backup = (backups or root / ".miniagent" / "backups") / f"{stamp}-reset-{brk.alias}"
    originals = {}
    for rel in changed:
        originals[rel] = (root / rel).read_bytes()
        (backup / rel).parent.mkdir(parents=True, exist_ok=True)
        (backup / rel).write_bytes(originals[rel])
    for rel in changed:
        (root / rel).write_bytes(merged[rel])
    if _git_apply(root, brk.patch, "--check").returncode != 0:  # the break's lines must now be intact
        for rel, data in originals.items():
            (root / rel).write_bytes(data)
        raise BreakError(f"could not bring {brk.id}'s lines back to intact; every file is as it was "
                         f"(copies in {backup}).")
    return ResetResult("merged", changed, backup if changed else None)


def _reference_versions(brk: Break, root: Path, files: list[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(intact, broken) contents of the patched files, from the last commit with the patch applied or reversed."""
    ref: dict[str, bytes] = {}
    for rel in files:
        shown = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True)
        if shown.returncode != 0:
            raise BreakError(f"cannot reset {brk.id}: {rel} is not in the last commit of a git checkout "
                             f"({shown.stderr.decode(errors='replace').strip()}); nothing was changed.")
        ref[rel] = shown.stdout
    with tempfile.TemporaryDirectory(prefix="miniagent-ref-") as tmp:
        work = Path(tmp)
        for rel, data in ref.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        if _git_apply(work, brk.patch, "--check").returncode == 0:  # the commit is intact for this break
            _git_apply(work, brk.patch).check_returncode()
            return ref, {rel: (work / rel).read_bytes() for rel in files}
        if _git_apply(work, brk.patch, "--reverse", "--check").returncode == 0:  # the break was committed
            _git_apply(work, brk.patch, "--reverse").check_returncode()
            return {rel: (work / rel).read_bytes() for rel in files}, ref
    raise BreakError(f"cannot reset {brk.id}: the last commit has neither the intact nor the broken lines of "
                     "this break; nothing was changed.")


# --- sandboxes (invoke exp / check-breaks) -------------------------------------------------
def make_sandbox(brk: Break | None, root: Path = ROOT) -> Path:
    """A throwaway copy of ``src/`` with the break applied (None: the intact baseline).

    The copy starts intact even when the learner has a break applied to their own ``src/``: a run of one
    break (or of the baseline) must never carry another one along."""
    sandbox = Path(tempfile.mkdtemp(prefix=f"miniagent-{brk.id if brk else 'baseline'}-"))
    shutil.copytree(root / "src", sandbox / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    try:
        for other in catalogue(root):
            if is_applied(other, root):
                undone = _git_apply(sandbox, other.patch, "--reverse")
                if undone.returncode != 0:
                    raise BreakError(f"{other.id} is applied to your src/ and could not be undone in the copy:\n"
                                     f"{undone.stderr.strip()}")
        if brk is not None:
            result = _git_apply(sandbox, brk.patch)
            if result.returncode != 0:
                raise BreakError(f"{brk.id} does not apply to the current source:\n{result.stderr.strip()}")
    except BaseException:
        shutil.rmtree(sandbox, ignore_errors=True)
        raise
    return sandbox


def agent_command(question: str, trace: Path, *, llm: str, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "miniagent", "ask", question, "--trace", str(trace), "--json",
            "--llm", llm, *flags]


def digest(base: Path, files) -> dict[str, str]:
    """{path relative to ``base``: sha256} of each of ``files`` that is a file."""
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files) if p.is_file()}


def source_digest(src: Path) -> dict[str, str]:
    return digest(src, src.rglob("*.py"))


# --- a patch read hunk by hunk (the maintainer check's partial fixes) ------------------------------------
@dataclass(frozen=True)
class Hunk:
    """One hunk of a unified diff: where it starts in the intact file and its lines, each tagged ' ', '-' or '+'."""

    file: str
    old_start: int
    lines: tuple[tuple[str, str], ...]

    @property
    def removed(self) -> list[int]:
        """The intact file's line numbers (from 1) that this hunk removes."""
        out, n = [], self.old_start
        for tag, _ in self.lines:
            if tag == "-":
                out.append(n)
            if tag != "+":
                n += 1
        return out

    def apply_to(self, text: str) -> str:
        """``text`` (the intact file) with this hunk alone applied."""
        lines = text.splitlines(keepends=True)
        old = [t + "\n" for tag, t in self.lines if tag != "+"]
        new = [t + "\n" for tag, t in self.lines if tag != "-"]
        start = self.old_start - 1
        if lines[start:start + len(old)] != old:
            raise BreakError(f"{self.file}:{self.old_start}: the hunk does not match the intact source")
        return "".join(lines[:start] + new + lines[start + len(old):])


def hunks(patch: Path) -> list[Hunk]:
    """Every hunk of a unified diff, in order."""
    out: list[Hunk] = []
    file, start, body = "", 0, []
    for line in patch.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            file = line[len("+++ b/"):]
        elif line.startswith("@@"):
            if body:
                out.append(Hunk(file, start, tuple(body)))
            start, body = int(line.split()[1].lstrip("-").split(",")[0]), []
        elif line[:1] in (" ", "-", "+") and not line.startswith(("--- ", "+++ ")) and start:
            body.append((line[:1], line[1:]))
        elif line.startswith("diff --git") and body:
            out.append(Hunk(file, start, tuple(body)))
            start, body = 0, []
    if body:
        out.append(Hunk(file, start, tuple(body)))
    return out


# --- a patch reversed: the fix a docs page shows (docs_hooks/generate.py writes it as fix.patch) -------------
_HUNK_RE = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")


def _swap_path_lines(old: str, new: str) -> tuple[str, str]:
    """``--- a/x`` / ``+++ b/y`` -> ``--- a/y`` / ``+++ b/x`` (``/dev/null`` moves with its side)."""
    old_path, new_path = old[4:], new[4:]

    def strip(path: str) -> str:
        return path[2:] if path[:2] in ("a/", "b/") else path

    def side(path: str, prefix: str) -> str:
        return path if path.startswith("/dev/null") else prefix + strip(path)

    return "--- " + side(new_path, "a/"), "+++ " + side(old_path, "b/")


def reverse_patch(text: str) -> str:
    """The unified diff that undoes ``text``.

    File lines swap, hunk ranges swap, ``-`` and ``+`` swap; context lines
    stay.  Within each run of changed lines the removals are put first, as
    diff tools print them (the old and new texts of the hunk are unchanged
    by that reordering, so the patch applies the same).
    """
    lines = text.splitlines()
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        out.extend([line for line in block if line.startswith("-")] + [line for line in block if line.startswith("+")])
        block.clear()

    in_hunk = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            flush()
            in_hunk = False
            out.append(line)
        elif not in_hunk and line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            out.extend(_swap_path_lines(line, lines[i + 1]))
            i += 1
        elif not in_hunk and (m := _INDEX_RE.match(line)):
            out.append(f"index {m.group(2)}..{m.group(1)}{m.group(3)}")
        elif not in_hunk and line.startswith(("new file mode", "deleted file mode")):
            out.append(line.replace("new file", "deleted file", 1) if line.startswith("new")
                       else line.replace("deleted file", "new file", 1))
        elif m := _HUNK_RE.match(line):
            flush()
            in_hunk = True
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
        elif in_hunk and line.startswith("-"):
            block.append("+" + line[1:])
        elif in_hunk and line.startswith("+"):
            block.append("-" + line[1:])
        else:  # context (" ..."), "\ No newline at end of file", or a header line
            flush()
            out.append(line)
        i += 1
    flush()
    return "\n".join(out) + "\n"
