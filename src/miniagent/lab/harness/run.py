"""The experiment harness: run the agent under a time limit, watch it, kill it, check what it left behind.

``run_experiment(command, timeout=..., trace_path=...)`` does five things:

1. starts the agent in its **own process group** (``start_new_session``), so
   the harness can signal the agent and everything still in its group at once,
   and a Ctrl-C in the terminal reaches the harness only;
2. **follows the trace** file while the run goes on (turns, tool calls, the
   last action), tolerating a half-written last line;
3. **samples CPU and memory of the whole process tree** every ~0.2 s with
   psutil: the agent *and* its descendants, including the MCP server, which
   lives in a process group of its own (``cpu_mean`` leaves out the ~1-2 s
   of imports before the loop starts, or an idle hang would look busy);
4. at the deadline, **kills**: SIGTERM to the agent's group (the agent's
   handler unwinds and closes its server), SIGKILL after ``grace`` seconds if
   anything is left.  The deadline is ``timeout`` after launch, or with
   ``clock="loop"`` after the first trace event, and never before the trace
   shows the run's ``needs`` (e.g. one tool call), up to a hard cap: on a busy
   machine the imports and the model load slow down, and a deadline counted
   from launch could end a run before the loop did anything;
5. **looks for survivors**, after a kill or a normal exit: every process ever
   seen in the tree that is still alive ``settle`` s after the agent is gone
   (an orphaned, re-parented server counts), records them in
   ``processes_left``, then kills them so the lab leaves nothing behind.

Every sample also records the CPU the *other* programs of the machine used
(:class:`~miniagent.lab.harness.process_tree.MachineLoad`), so the record can say
when the run competed for the CPU (``machine_busy``, :func:`machine_note`).

The result is a :class:`RunRecord`; :func:`save_record` writes it as JSON
next to an SVG chart of CPU over time (:func:`write_svg`).  Sampling,
signalling and killing the tree live in :mod:`miniagent.lab.harness.process_tree`.

Run it by hand::

    python -m miniagent.lab.harness --timeout 5 -- python -m miniagent ask "..." --llm scripted:wanderer
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from . import crash
from .crash import signal_name
from .process_tree import MachineLoad, TreeSampler, _cmdline, _find_survivors, _kill_all, _sigint_ignored, \
    _stop_agent, load_average, usable_cpus

# How often the harness wakes up: bounds how late the kill can be after the deadline.
TICK = 0.05
SPARK = "▁▂▃▄▅▆▇█"
CORES = os.cpu_count() or 1
# Once the agent is gone, how long the other processes we saw may take to exit
# by themselves before they count as left behind.  A healthy MCP server exits
# a few ms after its parent dies (stdin EOF), or once it has finished starting
# if the agent died during start-up (~1 s); a wedged one never does.
SETTLE = 1.0
# Other programs using this much CPU on average during a run (100 = one core)
# make it a run on a busy machine: timings and CPU figures are disturbed.
BUSY_OTHERS = 50.0
# With clock="loop" or needs, nothing runs longer than this unless the caller says otherwise.
HARD_CAP_MIN = 60.0
TAIL_EVENTS = 8
ACTION_TEXT_MAX = 4096  # characters of one turn's action kept (a whole action is a few hundred)
STDERR_LINES = 20


# --------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------


@dataclass
class RunRecord:
    """What happened in one run.  ``to_dict()`` is plain JSON."""

    command: list[str]
    timeout: float
    # answer | fallback (another stop_reason) | timeout (killed at the deadline) | crash | interrupted (Ctrl-C)
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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# --------------------------------------------------------------------------
# Following the trace
# --------------------------------------------------------------------------


class TraceFollower:
    """Reads the new complete lines of a JSON-lines file each time :meth:`poll` is called.

    The agent may be in the middle of writing a line (or be killed there), so
    bytes after the last newline stay in a buffer until the newline arrives.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh: Any = None
        self._partial = b""
        self.bad_lines = 0

    def poll(self) -> list[dict[str, Any]]:
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open to tail it
            except FileNotFoundError:
                return []  # not created yet
        data = self._partial + self._fh.read()
        *lines, self._partial = data.split(b"\n")
        return [e for e in map(self._parse, lines) if e is not None]

    def finish(self) -> list[dict[str, Any]]:
        """Last read after the writer is gone; a final line without newline still counts if it parses."""
        events = self.poll()
        rest, self._partial = self._partial, b""
        if rest.strip():
            event = self._parse(rest)
            if event is not None:
                events.append(event)
        self.close()
        return events

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError:  # a line torn by a kill, or not ours
            self.bad_lines += 1
            return None
        return event if isinstance(event, dict) else None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def describe(event: dict[str, Any], width: int = 90) -> str:
    """One short human line per trace event, for the scratchpad tail."""
    kind = event.get("event", "?")
    if kind == "model_action":
        where = "final round" if event.get("final") else f"turn {event.get('turn')}"
        text = f"{where} action {event.get('text', '')}"
    elif kind == "tool_call":
        args = ", ".join(f"{k}={v}" for k, v in (event.get("args") or {}).items())
        text = f"call {event.get('tool')}({args})" + (" [forced]" if event.get("forced") else "")
    elif kind == "tool_result":
        text = f"tool {event.get('tool')} -> {event.get('result')}"
    elif kind == "tool_error":
        text = f"tool {event.get('tool')} !! {event.get('error')}"
    elif kind == "guard":
        text = f"guard {event.get('name')}"
    elif kind == "stop":
        text = f"stop {event.get('stop_reason')}: {event.get('answer')}"
    elif kind == "run_start":
        text = f"run_start {event.get('llm', '')}"
    else:
        text = kind
    text = " ".join(str(text).split())  # one line: answers and errors may hold newlines
    return text if len(text) <= width else text[: width - 1] + "…"


class Progress:
    """Counters kept from the trace events as they arrive (the same ones the panel and the record show)."""

    # The guards that refuse a call the model asked for: the refused call leaves no tool_call event.
    REFUSING = ("max_tool_calls", "call_budget")

    def __init__(self) -> None:
        self.turns = 0
        self.tool_calls: Counter[str] = Counter()
        self.identical_calls = 0
        self.tool_errors = 0
        self.last_action = ""
        self.stop: dict[str, Any] | None = None
        self.first_event_at: float | None = None  # harness clock
        self.tail: deque[str] = deque(maxlen=TAIL_EVENTS)
        self._calls_seen: set[str] = set()
        self._turn_text = ""  # the current turn's action, its continued pieces joined

    def count(self, key: str) -> int:
        """turns, tool_calls or tool_errors so far (what a break's ``needs`` are written in)."""
        return {"turns": self.turns, "tool_calls": sum(self.tool_calls.values()),
                "tool_errors": self.tool_errors}[key]

    def add(self, event: dict[str, Any], now: float) -> None:
        if self.first_event_at is None:
            self.first_event_at = now
        kind = event.get("event")
        if kind == "model_action":
            if not event.get("final"):  # the final-answer round after a limit is not one more turn
                turn = int(event.get("turn") or 0)
                if turn != self.turns:
                    self._turn_text = ""
                if len(self._turn_text) < ACTION_TEXT_MAX:  # a reply continued without end is no action anyway
                    self._turn_text += str(event.get("text", ""))
                self.turns = max(self.turns, turn)
            self.last_action = str(event.get("text", ""))
        elif kind == "tool_call":
            self.tool_calls[str(event.get("tool"))] += 1
            # A repeat is counted whether or not a dedup guard stops it (break 03 removes that guard).
            if not event.get("forced"):
                self._repeat(_call_key(event.get("tool"), event.get("args")))
        elif kind == "tool_error":
            self.tool_errors += 1
        elif kind == "guard" and event.get("name") == "dedup":
            self.identical_calls += 1  # a repeat the guard answered from memory
        elif kind == "guard" and event.get("name") in self.REFUSING:
            self._refused()
        elif kind == "stop":
            self.stop = event
        self.tail.append(describe(event))

    def _repeat(self, key: str) -> None:
        self.identical_calls += key in self._calls_seen
        self._calls_seen.add(key)

    def _refused(self) -> None:
        """The call a cap refused is the turn's action, read as the loop reads it: a repeat counts as one."""
        from ...agent.actions import InvalidAction, parse_action

        try:
            action = parse_action(self._turn_text, first_turn=self.turns == 1, may_answer=True)
        except InvalidAction:
            return
        if action.kind == "tool":
            self.identical_calls += _call_key(action.tool, action.args) in self._calls_seen


def _call_key(tool: Any, args: Any) -> str:
    return json.dumps([tool, args], sort_keys=True)


# --------------------------------------------------------------------------
# The live panel
# --------------------------------------------------------------------------


def sparkline(values: list[float], top: float = 100.0 * CORES) -> str:
    """Unicode blocks, 0 .. ``top``."""
    out = []
    for v in values:
        level = 0 if top <= 0 else round(min(max(v, 0.0), top) / top * (len(SPARK) - 1))
        out.append(SPARK[level])
    return "".join(out)


def render_panel(*, elapsed: float, timeout: float, progress: Progress, samples: list[list[float]],
                 status: str = "running", counted: float | None = None, clock: str = "") -> Any:
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True, min_width=11)
    grid.add_column(no_wrap=True, overflow="ellipsis")  # one line per row, whatever the terminal width
    counted = elapsed if counted is None else counted
    bar = Table.grid(padding=(0, 1))
    bar.add_row(f"{counted:5.1f} / {timeout:.1f} s", ProgressBar(total=timeout, completed=min(counted, timeout),
                                                                 width=30))
    grid.add_row("time", bar)
    if clock:
        grid.add_row("", Text(f"{clock} · {elapsed:.1f} s since launch"))
    calls = sum(progress.tool_calls.values())
    grid.add_row("loop", f"turn {progress.turns} · tool calls {calls} · identical {progress.identical_calls}"
                         f" · tool errors {progress.tool_errors}")
    grid.add_row("last action", Text(progress.last_action or "-"))  # model text: never read as markup
    cpu_now = samples[-1][1] if samples else 0.0
    rss_now = samples[-1][2] if samples else 0.0
    procs = int(samples[-1][3]) if samples else 0
    grid.add_row("cpu", f"{sparkline([s[1] for s in samples[-30:]])} {cpu_now:4.0f} % · rss {rss_now:.0f} MB"
                        f" · processes {procs}")
    grid.add_row("", f"(tree total; 100 % = one core busy, {100 * CORES} % = all {CORES})")
    if samples and len(samples[-1]) > 4:
        others = [s[4] for s in samples[-30:]]
        busy = sum(others) / len(others) >= BUSY_OTHERS
        grid.add_row("other work", Text(f"{sparkline(others)} {others[-1]:4.0f} % used by other programs"
                                        + (" · busy machine: figures disturbed" if busy else ""),
                                        style="yellow" if busy else ""))
    return Panel(grid, title=f"miniagent run: {status}", border_style="red" if status != "running" else "blue")


class _LiveView:
    """rich.live around the run, or nothing at all (tests, pipes)."""

    def __init__(self, enabled: bool, force: bool) -> None:
        self.live = None
        if enabled and (force or sys.stdout.isatty()):
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(force_terminal=force or None), refresh_per_second=4,
                             redirect_stdout=False, redirect_stderr=False)

    def __enter__(self) -> "_LiveView":
        if self.live is not None:
            self.live.start()
        return self

    def update(self, **state: Any) -> None:
        if self.live is not None:
            self.live.update(render_panel(**state))  # rich redraws it at its own 4/s pace

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.stop()


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------


def _is_miniagent(command: list[str]) -> bool:
    return any(arg == "miniagent" or arg.endswith("/miniagent") for arg in command)


def _with_trace_flags(command: list[str], trace_path: Path) -> list[str]:
    """A miniagent command without ``--trace``/``--json`` gets them, so the harness can follow it."""
    if not _is_miniagent(command):
        return list(command)
    extra = []
    if "--trace" not in command:
        extra += ["--trace", str(trace_path)]
    elif Path(command[command.index("--trace") + 1]) != trace_path:
        raise ValueError(f"the command's --trace must be trace_path ({trace_path}): the harness follows that file")
    if "ask" in command and "--json" not in command:
        extra.append("--json")
    return [*command, *extra]


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.strip():
            try:
                data = json.loads(line)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


NEEDS_KEYS = ("turns", "tool_calls", "tool_errors")


class _Deadline:
    """When the run may be killed: ``timeout`` after the clock starts, once ``needs`` are met, never after the cap.

    ``clock="launch"`` starts counting when the process starts; ``"loop"`` at
    the first trace event, so the imports and the model load (1-2 s idle,
    much more on a busy machine) do not eat into the time the loop gets.
    ``needs`` (e.g. ``{"tool_calls": 1}``) keeps the run going past that
    deadline until the trace shows that much of the loop; ``hard_cap``
    (seconds after launch) ends it whatever happened.
    """

    def __init__(self, started: float, timeout: float, clock: str, needs: dict[str, int],
                 hard_cap: float | None) -> None:
        if clock not in ("launch", "loop"):
            raise ValueError(f"clock must be 'launch' or 'loop', not {clock!r}")
        unknown = set(needs) - set(NEEDS_KEYS)
        if unknown:
            raise ValueError(f"needs: unknown counter(s) {sorted(unknown)}; use {', '.join(NEEDS_KEYS)}")
        self.started, self.timeout, self.clock, self.needs = started, timeout, clock, dict(needs)
        if hard_cap is None and (clock == "loop" or needs):
            hard_cap = max(HARD_CAP_MIN, 3 * timeout)
        self.hard_cap = hard_cap
        self.base: float | None = started + timeout if clock == "launch" else None
        self.due: float | None = None  # when the kill fell due
        self.hard_capped = False
        self._met_at: float | None = None

    def met(self, progress: Progress) -> bool:
        return all(progress.count(key) >= n for key, n in self.needs.items())

    def plain(self, progress: Progress) -> float | None:
        """The deadline before any waiting for needs (None: the loop has not started yet)."""
        if self.base is None and self.clock == "loop" and progress.first_event_at is not None:
            self.base = self.started + progress.first_event_at + self.timeout
        return self.base

    def next_wake(self, progress: Progress) -> float:
        """The earliest moment the kill can fall due (for the sleep between ticks)."""
        times = [t for t in (self.plain(progress),) if t is not None]
        if self.hard_cap is not None:
            times.append(self.started + self.hard_cap)
        return min(times) if times else float("inf")

    def reached(self, now: float, progress: Progress) -> bool:
        if self.hard_cap is not None and now >= self.started + self.hard_cap:
            self.due, self.hard_capped = self.started + self.hard_cap, True
            return True
        base = self.plain(progress)
        if base is not None and now >= base and self.met(progress):
            self.due = max(base, now if self._met_at is None else self._met_at)
            return True
        return False

    def observe(self, now: float, progress: Progress) -> None:
        """Called after each batch of trace events: remembers when the needs were first met."""
        if self._met_at is None and self.met(progress):
            self._met_at = now

    def counted(self, now: float, progress: Progress) -> float:
        """Seconds on the timeout's clock so far."""
        base = self.plain(progress)
        return 0.0 if base is None else max(0.0, now - (base - self.timeout))

    def status(self, now: float, progress: Progress) -> str:
        """One line for the live panel."""
        if self.clock == "loop" and self.plain(progress) is None:
            return "waiting for the loop to start (imports, model load): the timeout has not started"
        missing = [f"{key} {progress.count(key)}/{n}" for key, n in self.needs.items() if progress.count(key) < n]
        base = self.plain(progress)
        if missing and base is not None and now >= base:
            return "timeout reached, but the break has not been exercised yet: waiting for " + ", ".join(missing)
        clock = "counted from the loop's start" if self.clock == "loop" else "counted from launch"
        return clock + (f"; needs {', '.join(missing)}" if missing else "")


def run_experiment(
    command: list[str],
    *,
    timeout: float,
    trace_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    live: bool = True,
    sample_interval: float = 0.2,
    grace: float = 0.3,
    settle: float = SETTLE,
    force_live: bool = False,
    clock: str = "launch",
    needs: dict[str, int] | None = None,
    hard_cap: float | None = None,
) -> RunRecord:
    """Run ``command`` for ``timeout`` seconds (see ``clock`` and ``needs``); return what happened.

    ``env`` adds to (and overrides) the harness's own environment.  The trace
    file is removed first: the agent appends, and old events would mix in.
    A miniagent command without ``--trace``/``--json`` gets them appended.
    ``grace``: SIGTERM -> SIGKILL.  ``settle``: once the agent is gone, how
    long the rest of the tree may take to exit by itself before it counts as
    left behind (``processes_left``) and is killed.
    ``clock``: "launch" counts the timeout from the start of the process,
    "loop" from the first trace event (a run that never gets there is ended
    by the hard cap).  ``needs``: counters of the trace (turns, tool_calls,
    tool_errors) the run must reach before the timeout may end it.
    ``hard_cap``: seconds after launch nothing runs beyond (default: the
    timeout itself, or max(60, 3 x timeout) with clock="loop" or needs).
    Ctrl-C during the run kills the tree like a timeout and returns a record
    whose outcome is ``"interrupted"``; the caller decides whether to stop.
    """
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    trace_path.unlink(missing_ok=True)
    command = _with_trace_flags(command, trace_path)
    record = RunRecord(command=command, timeout=timeout, trace_path=str(trace_path),
                       started_at=datetime.now().isoformat(timespec="seconds"), clock=clock,
                       needs=dict(needs or {}), cpus=usable_cpus(), load_avg_start=load_average())
    follower, progress = TraceFollower(trace_path), Progress()
    samples: list[list[float]] = []
    interrupted = timed_out = False
    killed_at: float | None = None
    exited_at: float | None = None

    # Temporary files, not pipes: nobody has to drain them, and an orphan that
    # inherited them cannot make the harness wait for an EOF.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, _LiveView(live, force_live) as view:
        machine = MachineLoad()
        started = time.monotonic()
        deadline = _Deadline(started, timeout, clock, record.needs, hard_cap)
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env={**os.environ, **env} if env else None, cwd=cwd,
                                start_new_session=True)  # own group: one killpg reaches it all
        sampler = TreeSampler(proc.pid)
        next_sample = started + sample_interval
        try:
            try:
                while proc.poll() is None:
                    now = time.monotonic()
                    for event in follower.poll():
                        progress.add(event, now - started)
                    deadline.observe(now, progress)
                    if deadline.reached(now, progress):
                        timed_out = True
                        break
                    if now >= next_sample:
                        cpu, rss, count = sampler.sample()
                        others = machine.sample(cpu)
                        samples.append([round(now - started, 3), round(cpu, 1), round(rss, 1), count,
                                        round(others, 1)])
                        next_sample += sample_interval
                    view.update(elapsed=now - started, timeout=timeout, progress=progress, samples=samples,
                                counted=deadline.counted(now, progress), clock=deadline.status(now, progress))
                    # sleep to whichever comes first: the next tick or the deadline
                    time.sleep(max(0.0, min(TICK, deadline.next_wake(progress) - time.monotonic())))
                else:
                    exited_at = time.monotonic()  # ended by itself
            except KeyboardInterrupt:
                interrupted = True
        finally:
            # The same path for timeout, Ctrl-C and any harness error: nothing may outlive the run.
            with _sigint_ignored():
                if proc.poll() is None:
                    sampler.discover()  # a child born since the last sample must be known before the kill
                    killed_at = _stop_agent(proc, grace)
                elif exited_at is None:  # it ended by itself just as the deadline (or Ctrl-C) came
                    exited_at, timed_out = time.monotonic(), False
                survivors, record.outlived_agent = _find_survivors(sampler, settle,
                                                                   since=killed_at or exited_at or time.monotonic())
                # The survivor's command line now (it may have exec'd since it was first seen), else as seen
                record.processes_left = [{"pid": p.pid, "cmdline": _live_cmdline(p)
                                          or sampler.seen.get(p.pid, {}).get("cmdline", "?")} for p in survivors]
                record.cleanup_ok = _kill_all(survivors) if survivors else True
        ended = time.monotonic()
        for event in follower.finish():
            progress.add(event, ended - started)
        out.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        status = "interrupted" if interrupted else "killed at the timeout" if timed_out else "finished"
        view.update(elapsed=ended - started, timeout=timeout, progress=progress, samples=samples, status=status,
                    counted=deadline.counted(ended, progress), clock=deadline.status(ended, progress))

    record.exit_code = proc.returncode
    record.wall_s = round((killed_at or exited_at or ended) - started, 3)
    if timed_out and killed_at is not None and deadline.due is not None:
        record.kill_latency_s = round(killed_at - deadline.due, 3)
        record.deadline_s = round(deadline.due - started, 3)
        plain = deadline.plain(progress)
        if plain is not None and deadline.due > plain:
            record.waited_for_needs_s = round(deadline.due - plain, 3)
    record.hard_cap_s = deadline.hard_cap
    record.hard_capped = timed_out and deadline.hard_capped
    record.needs_met = deadline.met(progress) if record.needs else None
    record.stderr_tail = stderr.splitlines()[-STDERR_LINES:]
    record.fatal_error = crash.fatal_error(stderr.splitlines())
    record.bad_trace_lines = follower.bad_lines
    record.pids_seen = list(sampler.seen.values())
    record.load_avg_end = load_average()
    _fill_from_trace(record, progress)
    _fill_cpu(record, samples, progress.first_event_at)
    _fill_outcome(record, progress, _last_json_line(stdout), timed_out=timed_out, interrupted=interrupted)
    return record


def _live_cmdline(proc: Any) -> str | None:
    cmdline = _cmdline(proc)
    return None if cmdline == "?" else cmdline


def _fill_from_trace(record: RunRecord, progress: Progress) -> None:
    record.turns = progress.turns
    record.tool_calls = sum(progress.tool_calls.values())
    record.tool_calls_by_tool = dict(progress.tool_calls)
    record.identical_calls = progress.identical_calls
    record.tool_errors = progress.tool_errors
    record.last_action = progress.last_action
    record.scratchpad_tail = list(progress.tail)
    record.loop_start_s = None if progress.first_event_at is None else round(progress.first_event_at, 3)


def _fill_cpu(record: RunRecord, samples: list[list[float]], loop_start: float | None) -> None:
    record.samples = samples
    if not samples:
        return
    cpus = [s[1] for s in samples]
    # A sample covers the time since the previous one; keep those that lie
    # wholly inside the loop, so the imports' CPU does not make an idle hang look busy.
    loop = [cur[1] for prev, cur in zip(samples, samples[1:]) if loop_start is not None and prev[0] >= loop_start]
    window = loop or cpus
    record.cpu_loop_samples = len(loop)
    record.cpu_mean = round(sum(window) / len(window), 1)
    record.cpu_max = round(max(window), 1)
    record.cpu_mean_total = round(sum(cpus) / len(cpus), 1)
    record.rss_max_mb = round(max(s[2] for s in samples), 1)
    others = [s[4] for s in samples if len(s) > 4]
    if others:
        record.other_cpu_mean = round(sum(others) / len(others), 1)
        record.other_cpu_max = round(max(others), 1)
        record.machine_busy = record.other_cpu_mean >= BUSY_OTHERS


def _fill_outcome(record: RunRecord, progress: Progress, printed: dict[str, Any] | None, *,
                  timed_out: bool, interrupted: bool) -> None:
    stop = progress.stop or {}
    record.stop_reason = (printed or {}).get("stop_reason") or stop.get("stop_reason")
    record.answer = (printed or {}).get("answer", stop.get("answer"))
    record.final_answer = (printed or {}).get("final_answer", stop.get("final_answer"))
    if interrupted:
        record.outcome = "interrupted"
    elif timed_out:
        record.outcome = "timeout"  # even if a stop event came: the process did not end in time
    elif signal_name(record.exit_code):  # died of a signal the harness did not send, whatever it said before
        record.signal = signal_name(record.exit_code)
        record.outcome = "crash"
    elif record.stop_reason == "answered":
        record.outcome = "answer"
    elif record.stop_reason:
        record.outcome = "fallback"
    else:
        record.outcome = "crash"  # ended without telling how


def summary(record: RunRecord) -> str:
    """One line for a terminal or a log."""
    calls = ", ".join(f"{t} x{n}" for t, n in sorted(record.tool_calls_by_tool.items())) or "no tool calls"
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


def machine_note(record: RunRecord) -> str | None:
    """A plain sentence when the machine was busy during the run (None when it was not, or when it crashed:
    a crash is the agent's own, and a busy machine must not be offered as its cause)."""
    if not record.machine_busy or record.signal:
        return None
    load = f", load average {record.load_avg_start:g} -> {record.load_avg_end:g}" \
        if record.load_avg_start is not None and record.load_avg_end is not None else ""
    return (f"The machine was busy: other programs used {record.other_cpu_mean:.0f} % CPU on average during this "
            f"run (100 % = one core; {record.cpus} usable CPUs{load}).  The run competed with them for the CPU, "
            "so its wall time, its CPU figures and how far the loop got are disturbed.")


def deadline_note(record: RunRecord) -> str | None:
    """How the deadline was counted, when that is not the plain "timeout after launch"."""
    parts = []
    if record.clock == "loop":
        if record.loop_start_s is None:
            parts.append("the loop never started, so its timeout never began")
        else:
            parts.append(f"the {record.timeout:g} s timeout counted from the loop's start, "
                         f"{record.loop_start_s:.1f} s after launch (imports and model load before it)")
    if record.waited_for_needs_s:
        wanted = ", ".join(f"{n} {key.replace('_', ' ')}" for key, n in record.needs.items())
        parts.append(f"the run went on {record.waited_for_needs_s:.1f} s past its timeout until it had shown "
                     f"{wanted}")
    if record.hard_capped:
        parts.append(f"it was ended by the hard cap of {record.hard_cap_s:g} s after launch")
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


# --------------------------------------------------------------------------
# Saving: JSON and a hand-written SVG chart
# --------------------------------------------------------------------------

# One panel is as wide as the docs' text column (about 690 px), so the browser draws it at about its
# own size and the labels stay readable (14 px and up).  Two runs are stacked, one above the other,
# on the same scales, never side by side.
PANEL_W, PANEL_H = 720, 300
MARGIN = {"left": 66, "right": 16, "top": 58, "bottom": 50}
FONT_PX = {"text": 14, "title": 17, "sub": 14, "note": 14}

CHART_TEXT = {
    "en": {"sub": "outcome {outcome} · stop reason {stop} · mean CPU {cpu} % · tool calls {calls} · processes left {left}",
           "x": "seconds since launch", "y": "CPU % of the process tree", "core": "one core",
           "start": "loop starts", "timeout": "timeout: killed", "interrupted": "Ctrl-C: killed",
           "others": "grey: other programs (mean {cpu} %)", "none": "none", "decimal": "."},
    "es": {"sub": "resultado {outcome} · motivo {stop} · CPU media {cpu} % · llamadas {calls} · "
                  "procesos vivos {left}",
           "x": "segundos desde el arranque", "y": "% de CPU del árbol de procesos", "core": "un núcleo",
           "start": "empieza el bucle", "timeout": "tiempo límite: lo mata el arnés", "interrupted": "Ctrl-C: se detiene",
           "others": "gris: otros programas (media {cpu} %)", "none": "ninguno", "decimal": ","},
}


def _nice_step(span: float, max_ticks: int = 8) -> float:
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600):
        if span / step <= max_ticks:
            return step
    return span / max_ticks


def _x_end(record: RunRecord) -> float:
    last = record.samples[-1][0] if record.samples else 0.0
    return max(record.wall_s, last, 0.5)


def _y_top(records: list[RunRecord]) -> float:
    peak = max([s[1] for r in records for s in r.samples] + [0.0])
    return max(100.0 * CORES, 200.0, math.ceil(peak / 50) * 50)


def _num(value: float, lang: str) -> str:
    return f"{value:g}".replace(".", CHART_TEXT[lang]["decimal"])


def _chart(record: RunRecord, *, y0: float, x_max: float, y_max: float, title: str, lang: str = "en") -> list[str]:
    """The SVG elements of one chart, placed at vertical offset ``y0``."""
    t = CHART_TEXT[lang]
    left, top = MARGIN["left"], y0 + MARGIN["top"]
    w = PANEL_W - MARGIN["left"] - MARGIN["right"]
    h = PANEL_H - MARGIN["top"] - MARGIN["bottom"]
    bottom = top + h

    def px(sec: float) -> float:
        return left + sec / x_max * w

    def py(cpu: float) -> float:
        return bottom - min(cpu, y_max) / y_max * h

    out = [f'<text x="{left}" y="{y0 + 22}" class="title">{escape(title)}</text>']
    sub = t["sub"].format(outcome=record.outcome, stop=record.stop_reason or t["none"], cpu=f"{record.cpu_mean:.0f}",
                          calls=record.tool_calls, left=len(record.processes_left))
    out.append(f'<text x="{left}" y="{y0 + 42}" class="sub">{escape(sub)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" class="frame"/>')
    step_y = 100 if y_max > 250 else 50
    for cpu in range(0, int(y_max) + 1, step_y):  # horizontal grid and y labels
        y = py(cpu)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{y + 5:.1f}" class="ylabel">{cpu}</text>')
    step = _nice_step(x_max)
    sec = 0.0
    while sec <= x_max + 1e-9:  # x ticks
        x = px(sec)
        out.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}" class="axis"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 20}" class="xlabel">{_num(round(sec, 6), lang)}</text>')
        sec += step
    out.append(f'<text x="{left + w / 2}" y="{bottom + 40}" class="xlabel">{escape(t["x"])}</text>')
    out.append(f'<text x="16" y="{top + h / 2}" class="xlabel" '
               f'transform="rotate(-90 16 {top + h / 2})">{escape(t["y"])}</text>')
    one_core = py(100)
    out.append(f'<line x1="{left}" y1="{one_core:.1f}" x2="{left + w}" y2="{one_core:.1f}" class="core"/>')
    out.append(f'<text x="{left + w - 4}" y="{one_core - 5:.1f}" class="note end">{escape(t["core"])}</text>')
    if record.loop_start_s is not None and record.loop_start_s <= x_max:
        x = px(record.loop_start_s)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="start"/>')
        out.append(f'<text x="{x + 4:.1f}" y="{top + 16}" class="note">{escape(t["start"])}</text>')
    if record.outcome in ("timeout", "interrupted"):
        at = record.wall_s
        if record.outcome == "timeout":
            at = record.deadline_s if record.deadline_s is not None else record.timeout
        x = px(min(at, x_max))
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" class="kill"/>')
        out.append(f'<text x="{x - 4:.1f}" y="{top + 34}" class="note end kill-text">'
                   f'{escape(t[record.outcome])}</text>')
    if any(len(s) > 4 and s[4] is not None for s in record.samples):  # CPU used by other programs meanwhile
        others = " ".join(f"{px(s[0]):.1f},{py(s[4]):.1f}" for s in record.samples if len(s) > 4 and s[4] is not None)
        out.append(f'<polyline points="{others}" class="others"/>')
        out.append(f'<text x="{left + 6}" y="{bottom - 8}" class="note">'
                   f'{escape(t["others"].format(cpu=f"{record.other_cpu_mean:.0f}"))}</text>')
    points = " ".join(f"{px(s[0]):.1f},{py(s[1]):.1f}" for s in record.samples)
    out.append(f'<polyline points="{points}" class="cpu"/>')
    return out


_STYLE = f"""<style>
  text {{ font-family: sans-serif; font-size: {FONT_PX["text"]}px; fill: #222; }}
  .title {{ font-size: {FONT_PX["title"]}px; font-weight: bold; }}
  .sub {{ font-size: {FONT_PX["sub"]}px; fill: #444; }}
  .ylabel {{ text-anchor: end; }} .xlabel {{ text-anchor: middle; }}
  .note {{ font-size: {FONT_PX["note"]}px; fill: #444; }} .end {{ text-anchor: end; }} .kill-text {{ fill: #c0392b; }}
  .frame {{ fill: white; stroke: #999; }} .grid {{ stroke: #e4e4e4; }} .axis {{ stroke: #999; }}
  .core {{ stroke: #888; stroke-dasharray: 6 4; }}
  .start {{ stroke: #aaa; stroke-dasharray: 2 3; }}
  .kill {{ stroke: #c0392b; stroke-width: 2; }}
  .others {{ fill: none; stroke: #bbb; stroke-width: 1.5; }}
  .cpu {{ fill: none; stroke: #1f6fb2; stroke-width: 2.2; stroke-linejoin: round; }}
</style>"""


def _svg(height: int, parts: list[str], lang: str = "en") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{PANEL_W}" height="{height}" '
            f'viewBox="0 0 {PANEL_W} {height}" lang="{lang}">\n{_STYLE}\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(parts) + "\n</svg>\n")


def write_svg(record: RunRecord, path: Path, title: str | None = None, lang: str = "en") -> Path:
    """A self-contained SVG line chart of the tree's CPU % over time."""
    title = title or f"miniagent run {record.started_at}"
    path = Path(path)
    path.write_text(_svg(PANEL_H, _chart(record, y0=0, x_max=_x_end(record), y_max=_y_top([record]), title=title,
                                         lang=lang), lang), encoding="utf-8")
    return path


def write_svg_pair(broken: RunRecord, fixed: RunRecord, path: Path,
                   titles: tuple[str, str] = ("broken", "fixed"), lang: str = "en") -> Path:
    """Two charts, one above the other, on the same scales, so the eye compares like with like."""
    x_max = max(_x_end(broken), _x_end(fixed))
    y_max = _y_top([broken, fixed])
    parts = _chart(broken, y0=0, x_max=x_max, y_max=y_max, title=titles[0], lang=lang)
    parts += _chart(fixed, y0=PANEL_H, x_max=x_max, y_max=y_max, title=titles[1], lang=lang)
    path = Path(path)
    path.write_text(_svg(2 * PANEL_H, parts, lang), encoding="utf-8")
    return path


PAIR_TITLES = {"en": ("{id}: the break applied", "the intact loop (fixed)"),
               "es": ("{id}: con la avería", "el bucle intacto (arreglado)")}


def write_docs_charts(broken: RunRecord, fixed: RunRecord, break_id: str, assets_dir: Path) -> list[Path]:
    """The docs' chart of one break in each language: ``<id>.svg`` (English) and ``<id>.es.svg`` (Spanish),
    which the docs' i18n plugin serves to the page of the same language."""
    out = []
    for lang, name in (("en", f"{break_id}.svg"), ("es", f"{break_id}.es.svg")):
        titles = tuple(title.format(id=break_id) for title in PAIR_TITLES[lang])
        out.append(write_svg_pair(broken, fixed, Path(assets_dir) / name, titles=titles, lang=lang))
    return out


def records_from_results(data: dict[str, Any]) -> tuple[RunRecord, RunRecord]:
    """The two runs of a ``docs_results/<id>.json`` as records (for redrawing their charts)."""
    return tuple(RunRecord.from_dict({"command": [], "timeout": data.get("timeout_s", 0.0), **data[side]})
                 for side in ("broken", "fixed"))


def save_record(record: RunRecord, directory: Path, title: str | None = None) -> tuple[Path, Path]:
    """``<directory>/<timestamp>-<outcome>.json`` and ``.svg``; never overwrites an earlier run."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = (record.started_at or datetime.now().isoformat(timespec="seconds")).replace(":", "").replace("-", "")
    stem, n = f"{stamp}-{record.outcome}", 1
    while (directory / f"{stem}.json").exists():
        n += 1
        stem = f"{stamp}-{record.outcome}-{n}"
    json_path = directory / f"{stem}.json"
    json_path.write_text(json.dumps(record.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return json_path, write_svg(record, directory / f"{stem}.svg", title=title)


def load_record(path: Path) -> RunRecord:
    return RunRecord.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


# --------------------------------------------------------------------------
# python -m miniagent.lab.harness
# --------------------------------------------------------------------------


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
    clock = args.clock or ("loop" if _is_miniagent(command) else "launch")  # others write no trace
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
    return 0 if record.outcome in ("answer", "fallback") else 1

