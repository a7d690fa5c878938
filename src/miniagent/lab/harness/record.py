"""What one run left: the :class:`RunRecord`, its JSON file, and the sentences a learner reads about it.

The harness (:mod:`miniagent.lab.harness.run`) fills a record; this module owns its format: ``to_dict`` is
plain JSON, :func:`~miniagent.lab.harness.charts.save_record` writes it beside its chart, :func:`load_record` and :func:`records_from_results`
read it back. :func:`summary`, :func:`crash_note`, :func:`machine_note` and :func:`deadline_note` say what
happened in words.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ...agent.loop import calls_summary
from ...processes import machine_cores
from ..words import number, words
from . import crash

# CPU figures are in percent of one core: 100 = one core busy, 100 x CORES = all of them.
CORES = machine_cores()
# Other programs using this much CPU on average during a run (100 = one core)
# make it a run on a busy machine: timings and CPU figures are disturbed.
BUSY_OTHERS = 50.0


@dataclass
class RunRecord:
    """What happened in one run.  ``to_dict()`` is plain JSON."""

    command: list[str]
    timeout: float
    # answer | declined (out_of_grammar) | fallback (another stop_reason) | timeout (killed at the deadline) | crash |
    # interrupted (Ctrl-C)
    outcome: str = "crash"
    # The signal the agent died of when the harness did not send it ("SIGSEGV"): a crash, never a slow machine.
    signal: str | None = None
    stop_reason: str | None = None
    answer: str | None = None
    final_answer: str | None = None  # the model's answer in the final round after a limit ("" if none)
    exit_code: int | None = None
    wall_s: float = 0.0
    # When the loop started (first trace event), seconds after launch: Python
    # imports take ~1-2 s of full CPU before that on every run.
    loop_start_s: float | None = None
    # CPU % summed over the tree (100 = one core busy), over the loop only (imports excluded) ...
    cpu_mean: float = 0.0
    cpu_max: float = 0.0
    # ... and over the whole run, imports included.
    cpu_mean_total: float = 0.0
    # How many samples lie wholly inside the loop; 0 means the run never got
    # that far, and cpu_mean/cpu_max fall back to the whole run.
    cpu_loop_samples: int = 0
    rss_max_mb: float = 0.0
    # Turns the loop reached: a turn whose reply was still being continued when the run ended counts here,
    # while the loop's own stats count the turns it finished.
    turns: int = 0
    tool_calls: int = 0
    tool_calls_by_tool: dict[str, int] = field(default_factory=dict)
    identical_calls: int = 0
    tool_errors: int = 0
    last_action: str = ""
    # Deadline -> agent gone (only when killed at the timeout).
    kill_latency_s: float | None = None
    # Where the timeout is counted from: "launch" (the process starts) or "loop"
    # (the first trace event; imports and the model load come before it, and
    # take far longer on a busy machine).
    clock: str = "launch"
    # What the run must have shown before the timeout may end it, e.g. {"tool_calls": 1};
    # met or not at the end (None: nothing was asked).
    needs: dict[str, int] = field(default_factory=dict)
    needs_met: bool | None = None
    # When the kill fell due, seconds after launch; how long the harness waited
    # past the plain deadline for ``needs``; the outer cap nothing runs beyond.
    deadline_s: float | None = None
    waited_for_needs_s: float = 0.0
    hard_cap_s: float | None = None
    hard_capped: bool = False
    # The rest of the machine during the run: CPU used outside the run's tree
    # and the harness (100 = one core), the load average before and after, the
    # CPUs the run could use; ``machine_busy`` when the others' mean reached BUSY_OTHERS.
    other_cpu_mean: float = 0.0
    other_cpu_max: float = 0.0
    load_avg_start: float | None = None
    load_avg_end: float | None = None
    cpus: int = 0
    machine_busy: bool = False
    # What the caller expected to see and did not (a break's [check].expect); None: nothing was checked.
    expect_failures: list[str] | None = None
    # [{pid, cmdline}] still alive ``settle`` s after the agent was gone (then killed by the harness).
    processes_left: list[dict[str, Any]] = field(default_factory=list)
    # [{pid, cmdline, outlived_s}] outlived the agent but exited by themselves within ``settle`` s.
    outlived_agent: list[dict[str, Any]] = field(default_factory=list)
    cleanup_ok: bool = True  # nothing of the tree alive when the harness returned
    pids_seen: list[dict[str, Any]] = field(default_factory=list)  # [{pid, cmdline, create_time}]
    samples: list[list[float]] = field(default_factory=list)  # [t, cpu %, rss MB, n procs]
    scratchpad_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    # When the agent died of a signal: Python's faulthandler report from its stderr (the frames it died in).
    fatal_error: list[str] = field(default_factory=list)
    bad_trace_lines: int = 0
    trace_path: str = ""
    started_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def summary(record: RunRecord) -> str:
    """One line for a terminal or a log."""
    calls = calls_summary(record.tool_calls_by_tool)
    kill = f", killed {record.kill_latency_s:+.2f} s after the deadline" if record.kill_latency_s is not None else ""
    died = f" of {record.signal}" if record.signal else ""
    return (f"{record.outcome}{died} (stop_reason {record.stop_reason}) after {record.wall_s:.1f} s{kill}; "
            f"{record.turns} turns, {calls}; cpu mean {record.cpu_mean:.0f} % max {record.cpu_max:.0f} %; "
            f"rss max {record.rss_max_mb:.0f} MB; processes left: {len(record.processes_left)}; "
            f"other programs {record.other_cpu_mean:.0f} %{' (busy machine)' if record.machine_busy else ''}")


def crash_note(record: RunRecord, lang: str = "en") -> list[str]:
    """The crash report when the agent died of a signal (empty otherwise): see :mod:`miniagent.lab.harness.crash`."""
    if not record.signal:
        return []
    return crash.describe(record.signal, loop_started=record.loop_start_s is not None, turns=record.turns,
                          stderr_lines=record.fatal_error or record.stderr_tail, lang=lang)


def machine_note(record: RunRecord, lang: str = "en") -> str | None:
    """A plain sentence when the machine was busy during the run (None when it was not, or when it crashed:
    a crash is the agent's own, and a busy machine must not be offered as its cause)."""
    if not record.machine_busy or record.signal:
        return None
    t = words(lang)["machine"]
    load = t["load"].format(before=number(record.load_avg_start, lang), after=number(record.load_avg_end, lang)) \
        if record.load_avg_start is not None and record.load_avg_end is not None else ""
    return t["busy"].format(others=f"{record.other_cpu_mean:.0f}", cpus=record.cpus, load=load)


def deadline_note(record: RunRecord, lang: str = "en") -> str | None:
    """How the deadline was counted, when that is not the plain "timeout after launch"."""
    t = words(lang)["deadline"]
    parts = []
    if record.clock == "loop":
        if record.loop_start_s is None:
            parts.append(t["never_started"])
        else:
            parts.append(t["from_loop"].format(timeout=number(record.timeout, lang),
                                               start=number(record.loop_start_s, lang, ".1f")))
    if record.waited_for_needs_s:
        wanted = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in record.needs.items())
        parts.append(t["waited"].format(waited=number(record.waited_for_needs_s, lang, ".1f"), wanted=wanted))
    if record.hard_capped:
        parts.append(t["hard_cap"].format(cap=number(record.hard_cap_s, lang)))
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def records_from_results(data: dict[str, Any]) -> tuple[RunRecord, RunRecord]:
    """The two runs of a ``docs_results/<id>.json`` as records (for redrawing their charts)."""
    return tuple(RunRecord.from_dict({"command": [], "timeout": data.get("timeout_s", 0.0), **data[side]})
                 for side in ("broken", "fixed"))


def load_record(path: Path) -> RunRecord:
    return RunRecord.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
