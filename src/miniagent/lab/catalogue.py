"""The break catalogue: the one reader of ``breaks/*/break.toml``.

A break is data: ``breaks/<NN-name>/break.patch`` (a unified diff against
``src/miniagent/``) and ``break.toml`` (what it removes, how to run it, what
a learner should observe, the hidden cause, three hints).  Nothing here
knows any particular break: adding one needs no code change.  Applying a
break's patch is :mod:`miniagent.lab.patching`'s job.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .words import LANGS

ROOT = Path(__file__).resolve().parents[3]


# A break's id is its number and its alias: "00-no-cap". Learners type either, or the whole id.
_ID_RE = re.compile(r"^(\d+)-(.+)$")


def alias_of(break_id: str) -> str:
    """``00-no-cap`` -> ``no-cap``: the short name learners type (an id without a number is its own alias)."""
    m = _ID_RE.match(break_id)
    return m.group(2) if m else break_id


def number_of(break_id: str) -> str:
    """``00-no-cap`` -> ``00`` (empty for an id without a number)."""
    m = _ID_RE.match(break_id)
    return m.group(1) if m else ""


class BreakError(RuntimeError):
    """A clear, learner-facing refusal (unknown variant, conflicting edits...)."""


# A busy loop takes what the CPU gives it, and on a machine other programs keep busy that is not all they left:
# it also waits for its MCP server, which waits for a core too (measured: 44.7 % of the 57 % left, with other
# programs at 143 % of 2 cores). Half of what they left still stands far above an idle hang's 0-3 %.
BUSY_SHARE = 0.5
# Below this floor (% of one core) a busy loop can no longer be told from an idle hang: the run was disturbed.
JUDGEABLE_FLOOR = 10.0


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


def cpu_disturbed(cpu_mean_min: float, record: dict) -> str | None:
    """Why a CPU floor cannot be judged on this record (other programs left too little), or None."""
    floor = busy_cpu_floor(cpu_mean_min, record)
    if floor >= min(cpu_mean_min, JUDGEABLE_FLOOR):
        return None
    return (f"cpu_mean not judged: other programs left the run {left_for_run(record):.0f} % of a core, too little "
            f"to tell a busy loop from an idle one; run it again on a quieter machine")


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
    # The answer is not this one, the right answer to the break's question (break 15: a wrong person or tense).
    answer_not: str | None = None

    def describe(self) -> str:
        """What is checked, in one line: "outcome timeout, processes_left >= 1"."""
        shown = []
        for name, value in vars(self).items():
            if value is None:
                continue
            if name.endswith("_min"):
                shown.append(f"{name[:-4]} >= {value}")
            elif name.endswith("_max"):
                shown.append(f"{name[:-4]} <= {value}")
            else:
                shown.append(f"{name} {value}")
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
        if self.cpu_mean_min is not None and (disturbed := cpu_disturbed(self.cpu_mean_min, record)):
            out.append(disturbed)
        elif self.cpu_mean_min is not None:
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
        if self.answer_not is not None:
            said = " ".join((record.get("answer") or "").lower().strip().rstrip(".").split())
            need(said != self.answer_not.lower(), f"the answer is {self.answer_not!r}, the right one")
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
    # The stand-in's timeout (default: timeout_s): a stand-in shows in a few seconds what the real model needs
    # longer for; each break that sets it says why its figure still outlasts the intact loop.
    ci_timeout_s: float
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
    # Pieces of the patch a fix may leave out and stay right ({"piece": label, "why": {"en", "es"}}): see
    # lab/maintainers/partial_fixes.py, which names the pieces.
    cosmetic: list[dict] = field(default_factory=list)

    @property
    def alias(self) -> str:
        return alias_of(self.id)

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

        def hints(value) -> dict[str, list[str]]:
            if not (isinstance(value, dict) and all(isinstance(value.get(lang), list) and value[lang]
                                                    and all(isinstance(h, str) and h.strip() for h in value[lang])
                                                    for lang in LANGS)):
                raise BreakError(f"{folder / 'break.toml'}: hints needs a list of texts in 'en' and in 'es'")
            return {lang: list(value[lang]) for lang in LANGS}

        return cls(
            id=data["id"], title=both(data["title"], "title"), removes=both(data["removes"], "removes"),
            input=run["input"], timeout_s=float(run["timeout_s"]), llm=run["llm"], real_model=run["llm"] == "llama",
            stand_in_why=both(run["stand_in_why"], "run.stand_in_why") if "stand_in_why" in run else {},
            flags=list(run.get("flags", [])),
            ci_llm=run.get("ci_llm", run["llm"]), ci_timeout_s=float(run.get("ci_timeout_s", run["timeout_s"])),
            needs={k: int(v) for k, v in run.get("needs", {}).items()},
            hard_cap_s=float(run["hard_cap_s"]) if "hard_cap_s" in run else None, tests=list(data["check"]["tests"]),
            symptom={key: both(text, f"symptom.{key}") for key, text in symptom.items()},
            expect=Expect(**data["check"].get("expect", {})), hidden_cause=both(data["hidden_cause"], "hidden_cause"),
            hints=hints(data["hints"]), folder=folder, docs=data.get("docs", {}),
            cosmetic=[{"piece": c["piece"], "why": both(c.get("why"), "check.cosmetic.why")}
                      for c in data["check"].get("cosmetic", [])],
        )


def catalogue(root: Path = ROOT) -> list[Break]:
    return [Break.load(p) for p in sorted((root / "breaks").iterdir()) if (p / "break.toml").is_file()]


def find(name: str, root: Path = ROOT, *, also: tuple[str, ...] = ()) -> Break:
    """A break by id ("00-no-cap"), alias ("no-cap") or number ("00"). ``also``: the other names the caller
    takes, listed first when the name is none of them (``exp`` runs the intact loop as "baseline")."""
    breaks = catalogue(root)
    for brk in breaks:
        if name in (brk.id, brk.alias, number_of(brk.id)):
            return brk
    names = ", ".join([*also, *(b.alias for b in breaks)])
    # invoke reads `invoke exp --help` as the variant "--help": its help is `invoke --help exp`
    flag = " (a task's own help: invoke --help TASK, e.g. invoke --help exp)" if name.startswith("-") else ""
    raise BreakError(f"unknown variant {name!r}; choose one of: {names}{flag}")


# `invoke check all` / `invoke watch all`: every guard test, not one break's
ALL = "all"
GUARD_TESTS = ["tests/agent/test_guards.py", "tests/agent/test_config.py", "tests/test_no_orphans.py"]


def guard_tests(variant: str, root: Path = ROOT) -> list[str]:
    """The guard tests of one break, or every guard test for ``all``."""
    return list(GUARD_TESTS) if variant == ALL else find(variant, root).tests
