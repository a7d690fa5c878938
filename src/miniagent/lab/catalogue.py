"""The break catalogue and its one generic runner.

A break is data: ``breaks/<NN-name>/break.patch`` (a unified diff against
``src/miniagent/``) and ``break.toml`` (what it removes, how to run it, what
a learner should observe, the hidden cause, three hints).  Nothing here
knows any particular break: adding one needs no code change.

Every experiment has the shape hypothesis -> method -> rollback: the
learner's prediction is read first, the patch is applied to a throwaway
copy of the source and run under the harness, and the copy is removed
whatever happens (the learner's own tree is never touched by ``exp``).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LANGS = ("en", "es")


class BreakError(RuntimeError):
    """A clear, learner-facing refusal (unknown variant, conflicting edits...)."""


# A busy loop takes what the CPU gives it: on a machine other programs keep busy, "busy" means most of what they left.
BUSY_SHARE = 0.8


def left_for_run(record: dict) -> float:
    """CPU % the other programs left to the run (100 = one core), from the record."""
    cpus = record.get("cpus") or 1
    return max(0.0, 100.0 * cpus - float(record.get("other_cpu_mean") or 0.0))


def busy_cpu_floor(cpu_mean_min: float, record: dict) -> float:
    """``cpu_mean_min``, or on a busy machine BUSY_SHARE of what the others left if that is lower.

    An idle hang stays near 0 % however busy the machine is, so the check
    still tells a busy loop from an idle one; it no longer asks a run for CPU
    that other programs were holding.
    """
    if not record.get("machine_busy"):
        return cpu_mean_min
    return min(cpu_mean_min, BUSY_SHARE * min(100.0, left_for_run(record)))


@dataclass
class Expect:
    """What the maintainer check asserts the harness observes (a subset of the symptom)."""

    outcome: str | None = None
    stop_reason: str | None = None
    cpu_mean_min: float | None = None
    cpu_mean_max: float | None = None
    tool_calls_min: int | None = None
    tool_calls_max: int | None = None
    identical_calls_min: int | None = None
    turns_min: int | None = None
    processes_left_min: int | None = None
    answer_empty: bool | None = None
    final_answer_given: bool | None = None
    wall_s_min: float | None = None

    def describe(self) -> str:
        """What is checked, in one line: "outcome timeout, processes_left >= 1"."""
        shown = []
        for name, value in vars(self).items():
            if value is None:
                continue
            key, _, bound = name.rpartition("_") if name.endswith(("_min", "_max")) else (name, "", "")
            shown.append(f"{key} {'>=' if bound == 'min' else '<=' if bound == 'max' else '='} {value}"
                         if bound else f"{name} {value}")
        return ", ".join(shown)

    def failures(self, record: dict) -> list[str]:
        out = []

        def need(ok: bool, what: str) -> None:
            if not ok:
                out.append(what)

        if self.outcome is not None:
            need(record["outcome"] == self.outcome, f"outcome {record['outcome']!r} != {self.outcome!r}")
        if self.stop_reason is not None:
            need(record.get("stop_reason") == self.stop_reason,
                 f"stop_reason {record.get('stop_reason')!r} != {self.stop_reason!r}")
        if self.cpu_mean_min is not None:
            floor = busy_cpu_floor(self.cpu_mean_min, record)
            shown = f"{floor:.0f} (of the {left_for_run(record):.0f} % other programs left)" \
                if floor < self.cpu_mean_min else f"{self.cpu_mean_min}"
            need(record["cpu_mean"] >= floor, f"cpu_mean {record['cpu_mean']:.0f} < {shown}")
        if self.cpu_mean_max is not None:
            need(record["cpu_mean"] <= self.cpu_mean_max, f"cpu_mean {record['cpu_mean']:.0f} > {self.cpu_mean_max}")
        if self.tool_calls_min is not None:
            need(record["tool_calls"] >= self.tool_calls_min, f"tool_calls {record['tool_calls']} < {self.tool_calls_min}")
        if self.tool_calls_max is not None:
            need(record["tool_calls"] <= self.tool_calls_max, f"tool_calls {record['tool_calls']} > {self.tool_calls_max}")
        if self.identical_calls_min is not None:
            need(record["identical_calls"] >= self.identical_calls_min,
                 f"identical_calls {record['identical_calls']} < {self.identical_calls_min}")
        if self.turns_min is not None:
            need(record["turns"] >= self.turns_min, f"turns {record['turns']} < {self.turns_min}")
        if self.processes_left_min is not None:
            need(len(record["processes_left"]) >= self.processes_left_min,
                 f"processes_left {len(record['processes_left'])} < {self.processes_left_min}")
        if self.answer_empty is not None:
            need((not (record.get("answer") or "").strip()) == self.answer_empty,
                 f"answer empty is {not (record.get('answer') or '').strip()}, expected {self.answer_empty}")
        if self.final_answer_given is not None:
            given = bool((record.get("final_answer") or "").strip())
            need(given == self.final_answer_given, f"final answer given is {given}, expected {self.final_answer_given}")
        if self.wall_s_min is not None:
            need(record["wall_s"] >= self.wall_s_min, f"wall_s {record['wall_s']:.1f} < {self.wall_s_min}")
        return out


@dataclass
class Break:
    id: str
    title: dict[str, str]      # {"en": ..., "es": ...}: every text a learner reads comes in both languages
    removes: dict[str, str]
    input: str
    timeout_s: float
    llm: str  # the model that reproduces it: "llama" or a named scripted stand-in
    real_model: bool  # False: the real model did not reproduce it (see stand_in_why)
    stand_in_why: dict[str, str]  # {} for the real model
    flags: list[str]
    ci_llm: str  # the model check-breaks uses (a stand-in keeps CI fast)
    # How much of the loop a run must show before its timeout may end it ({"tool_calls": 1}):
    # less than that and the run never reached the broken code (see harness.run_experiment).
    needs: dict[str, int]
    hard_cap_s: float | None  # nothing runs longer (seconds after launch); None: the harness's default
    tests: list[str]
    symptom: dict[str, dict[str, str]]  # outcome / cpu / trace -> {"en": ..., "es": ...}
    expect: Expect
    hidden_cause: dict[str, str]
    hints: dict[str, list[str]]
    folder: Path
    docs: dict = field(default_factory=dict)

    @property
    def alias(self) -> str:
        return self.id.split("-", 1)[1]

    @property
    def patch(self) -> Path:
        return self.folder / "break.patch"

    @classmethod
    def load(cls, folder: Path) -> "Break":
        data = tomllib.loads((folder / "break.toml").read_text(encoding="utf-8"))
        if data["id"] != folder.name:
            raise BreakError(f"{folder}: id {data['id']!r} does not match the folder name")
        run, symptom = data["run"], data["symptom"]

        def both(value, where: str) -> dict[str, str]:
            if not (isinstance(value, dict) and all(isinstance(value.get(lang), str) and value[lang].strip()
                                                    for lang in LANGS)):
                raise BreakError(f"{folder / 'break.toml'}: {where} needs an 'en' and an 'es' text")
            return {lang: value[lang] for lang in LANGS}

        return cls(
            id=data["id"], title=both(data["title"], "title"), removes=both(data["removes"], "removes"),
            input=run["input"], timeout_s=float(run["timeout_s"]), llm=run["llm"], real_model=run["llm"] == "llama",
            stand_in_why=both(run["stand_in_why"], "run.stand_in_why") if "stand_in_why" in run else {},
            flags=list(run.get("flags", [])),
            ci_llm=run.get("ci_llm", run["llm"]), needs={k: int(v) for k, v in run.get("needs", {}).items()},
            hard_cap_s=float(run["hard_cap_s"]) if "hard_cap_s" in run else None, tests=list(data["check"]["tests"]),
            symptom={key: both(text, f"symptom.{key}") for key, text in symptom.items()},
            expect=Expect(**data["check"].get("expect", {})), hidden_cause=both(data["hidden_cause"], "hidden_cause"),
            hints=data["hints"], folder=folder, docs=data.get("docs", {}),
        )


def catalogue(root: Path = ROOT) -> list[Break]:
    return [Break.load(p) for p in sorted((root / "breaks").iterdir()) if (p / "break.toml").is_file()]


def find(name: str, root: Path = ROOT) -> Break:
    """A break by id ("00-no-cap"), alias ("no-cap") or number ("00")."""
    breaks = catalogue(root)
    for brk in breaks:
        if name in (brk.id, brk.alias, brk.id.split("-", 1)[0]):
            return brk
    names = ", ".join(b.alias for b in breaks)
    raise BreakError(f"unknown variant {name!r}; choose one of: baseline, {names}")


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
    check = _git_apply(root, brk.patch, "--reverse", "--check")
    if check.returncode != 0:
        raise BreakError(
            f"{brk.id} is not applied as it was (not applied at all, or you edited those lines: "
            f"nothing was changed).\n{check.stderr.strip()}")
    _git_apply(root, brk.patch, "--reverse").check_returncode()


def patched_files(brk: Break) -> list[str]:
    """The paths (relative to the repository root) the break's patch changes."""
    out = []
    for line in brk.patch.read_text(encoding="utf-8").splitlines():
        if line.startswith("+++ b/"):
            out.append(line[len("+++ b/"):])
    return out


@dataclass
class ResetResult:
    how: str  # "intact" (nothing to do), "reverted" (the patch was there as it was), "merged" (your lines replaced)
    files: list[str] = field(default_factory=list)   # files changed
    backup: Path | None = None                      # where the files were saved before they changed


def reset_in_tree(brk: Break, root: Path = ROOT, backups: Path | None = None) -> ResetResult:
    """Back to the intact source for this break only, whatever you did to its lines; other edits stay.

    - Already intact for this break: nothing changes.
    - The break is applied as it was: exactly ``invoke fix`` (the patch reversed).
    - You edited the broken lines (a fix in progress): for each file the patch touches, a three-way
      merge puts the intact lines back and keeps every other change you made to that file
      (``git merge-file``: base = the broken file, yours = the file now, theirs = the intact file,
      conflicts resolved to the intact side).  The intact and broken files come from the last commit
      (``git show HEAD:path``) with the patch applied or reversed.  Each changed file is first copied
      to ``backups/`` so nothing you wrote is lost, and the result is checked: if the break's lines
      are still not intact, every file is put back as it was and the reset is refused.
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


def source_digest(src: Path) -> dict[str, str]:
    return {str(p.relative_to(src)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(src.rglob("*.py"))}
