"""The experiment harness: run the agent under a time limit, watch it, kill it, check what it left behind.

:func:`run_experiment` starts a command in its own process group, follows its trace, samples its process tree,
kills the group at the deadline and then whatever outlived it, and returns a ``RunRecord``.  Why:
docs/maintainers.md.  By hand::

    python -m miniagent.lab.harness --timeout 5 -- python -m miniagent ask "..." --llm scripted:wanderer
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from . import crash
from .crash import signal_name
from .deadline import Deadline
from .follow import Progress, TraceFollower
from .panel import LiveView
from ...agent.errors import OutOfGrammar
from ...processes import load_average, stop_group, usable_cores
from .process_tree import MachineLoad, TreeSampler, cmdline, find_survivors, kill_all, sigint_ignored
from .record import BUSY_OTHERS, RunRecord

# How often the harness wakes up: bounds how late the kill can be after the deadline.
TICK = 0.05
# Once the agent is gone, how long the other processes we saw may take to exit
# by themselves before they count as left behind.  A healthy MCP server exits
# a few ms after its parent dies (stdin EOF), or once it has finished starting
# if the agent died during start-up (~1 s); a wedged one never does.
SETTLE = 1.0
STDERR_LINES = 20


def is_miniagent(command: list[str]) -> bool:
    return any(arg == "miniagent" or arg.endswith("/miniagent") for arg in command)


def _with_trace_flags(command: list[str], trace_path: Path) -> list[str]:
    """A miniagent command without ``--trace``/``--json`` gets them, so the harness can follow it."""
    if not is_miniagent(command):
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


def run_experiment(
    command: list[str],
    *,
    timeout: float,
    trace_path: Path,
    env: dict[str, str] | None = None,  # adds to (and overrides) the harness's own environment
    cwd: Path | None = None,
    live: bool = True,
    sample_interval: float = 0.2,
    grace: float = 0.3,  # seconds from SIGTERM to SIGKILL
    settle: float = SETTLE,  # how long the tree may outlive the agent before it is left behind, and killed
    force_live: bool = False,
    clock: str = "launch",
    needs: dict[str, int] | None = None,
    hard_cap: float | None = None,
) -> RunRecord:
    """Run ``command`` for ``timeout`` seconds and return what happened.

    ``clock``, ``needs`` and ``hard_cap`` decide when the run may be ended (:class:`.deadline.Deadline`).  A
    miniagent command without ``--trace``/``--json`` gets them.  Ctrl-C kills the tree like a timeout and
    returns a record whose outcome is ``"interrupted"``; the caller decides whether to stop.  The steps, and
    why: docs/maintainers.md.
    """
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    trace_path.unlink(missing_ok=True)  # the agent appends: old events would mix in
    command = _with_trace_flags(command, trace_path)
    record = RunRecord(command=command, timeout=timeout, trace_path=str(trace_path),
                       started_at=datetime.now().isoformat(timespec="seconds"), clock=clock,
                       needs=dict(needs or {}), cpus=usable_cores(), load_avg_start=load_average())
    # Temporary files, not pipes: nobody has to drain them, and an orphan that
    # inherited them cannot make the harness wait for an EOF.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, LiveView(live, force_live) as view:
        run = _Run(TraceFollower(trace_path), view, timeout, sample_interval)
        run.deadline = Deadline(run.started, timeout, clock, record.needs, hard_cap)
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env={**os.environ, **env} if env else None, cwd=cwd,
                                start_new_session=True)  # own group: one killpg reaches it all
        run.sampler = TreeSampler(proc.pid)
        try:
            run.watch(proc)
        finally:  # the same path for timeout, Ctrl-C and any harness error: nothing may outlive the run
            run.stop(proc, record, grace, settle)
        run.collect()
        stdout, stderr = _read(out), _read(err)

    record.exit_code = proc.returncode
    run.fill(record, stdout, stderr)
    return record


def _read(file: Any) -> str:
    file.seek(0)
    return file.read().decode("utf-8", "replace")


class _Run:
    """One run as the harness lives it: watch (trace, samples, panel) until it ends or falls due, stop, collect."""

    def __init__(self, follower: TraceFollower, view: LiveView, timeout: float, sample_interval: float) -> None:
        self.follower, self.view, self.timeout, self.sample_interval = follower, view, timeout, sample_interval
        self.progress = Progress()
        self.samples: list[list[float]] = []
        self.machine = MachineLoad()  # the other programs' CPU, counted from here
        self.started = time.monotonic()
        self.deadline: Deadline
        self.sampler: TreeSampler
        self.interrupted = self.timed_out = False
        self.killed_at: float | None = None
        self.exited_at: float | None = None
        self.ended = self.started

    def watch(self, proc: subprocess.Popen) -> None:
        """Until the agent exits, its deadline is reached or Ctrl-C: read the trace, sample, redraw, sleep."""
        next_sample = self.started + self.sample_interval
        try:
            while proc.poll() is None:
                now = time.monotonic()
                for event in self.follower.poll():
                    self.progress.add(event, now - self.started)
                self.deadline.observe(now, self.progress)
                if self.deadline.reached(now, self.progress):
                    self.timed_out = True
                    return
                if now >= next_sample:
                    self._sample(now)
                    next_sample += self.sample_interval
                self._show(now)
                # sleep to whichever comes first: the next tick or the deadline
                time.sleep(max(0.0, min(TICK, self.deadline.next_wake(self.progress) - time.monotonic())))
            self.exited_at = time.monotonic()  # ended by itself
        except KeyboardInterrupt:
            self.interrupted = True

    def _sample(self, now: float) -> None:
        cpu, rss, count = self.sampler.sample()
        others = self.machine.sample(cpu)
        self.samples.append([round(now - self.started, 3), round(cpu, 1), round(rss, 1), count, round(others, 1)])

    def _show(self, now: float, status: str = "running") -> None:
        self.view.update(elapsed=now - self.started, timeout=self.timeout, progress=self.progress,
                         samples=self.samples, status=status, counted=self.deadline.counted(now, self.progress),
                         clock=self.deadline.status(now, self.progress))

    def stop(self, proc: subprocess.Popen, record: RunRecord, grace: float, settle: float) -> None:
        """Kill the agent's group if it still runs, then find, record and kill whatever of its tree outlived it."""
        with sigint_ignored():
            if proc.poll() is None:
                self.sampler.discover()  # a child born since the last sample must be known before the kill
                self.killed_at = stop_group(proc, grace)
            elif self.exited_at is None:  # it ended by itself just as the deadline (or Ctrl-C) came
                self.exited_at, self.timed_out = time.monotonic(), False
            survivors, record.outlived_agent = find_survivors(
                self.sampler, settle, since=self.killed_at or self.exited_at or time.monotonic())
            # The survivor's command line now (it may have exec'd since it was first seen), else as seen
            record.processes_left = [{"pid": p.pid, "cmdline": _live_cmdline(p)
                                      or self.sampler.seen.get(p.pid, {}).get("cmdline", "?")} for p in survivors]
            record.cleanup_ok = kill_all(survivors) if survivors else True

    def collect(self) -> None:
        """The trace's last events, once the writer is gone; the panel's last frame."""
        self.ended = time.monotonic()
        for event in self.follower.finish():
            self.progress.add(event, self.ended - self.started)
        self._show(self.ended, "interrupted" if self.interrupted else
                   "killed at the timeout" if self.timed_out else "finished")

    def fill(self, record: RunRecord, stdout: str, stderr: str) -> None:
        """Everything the record says, from what the run left: times, trace, CPU, output, outcome."""
        self._fill_times(record)
        record.stderr_tail = stderr.splitlines()[-STDERR_LINES:]
        record.fatal_error = crash.fatal_error(stderr.splitlines())
        record.bad_trace_lines = self.follower.bad_lines
        record.pids_seen = list(self.sampler.seen.values())
        record.load_avg_end = load_average()
        _fill_from_trace(record, self.progress)
        _fill_cpu(record, self.samples, self.progress.first_event_at)
        _fill_outcome(record, self.progress, _last_json_line(stdout), timed_out=self.timed_out,
                      interrupted=self.interrupted)

    def _fill_times(self, record: RunRecord) -> None:
        record.wall_s = round((self.killed_at or self.exited_at or self.ended) - self.started, 3)
        due = self.deadline.due
        if self.timed_out and self.killed_at is not None and due is not None:
            record.kill_latency_s = round(self.killed_at - due, 3)
            record.deadline_s = round(due - self.started, 3)
            plain = self.deadline.plain(self.progress)
            if plain is not None and due > plain:
                record.waited_for_needs_s = round(due - plain, 3)
        record.hard_cap_s = self.deadline.hard_cap
        record.hard_capped = self.timed_out and self.deadline.hard_capped
        record.needs_met = self.deadline.met(self.progress) if record.needs else None


def _live_cmdline(proc: Any) -> str | None:
    line = cmdline(proc)
    return None if line == "?" else line


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
    elif record.stop_reason == OutOfGrammar.stop_reason:  # an honest "no": outside the grammar
        record.outcome = "declined"
    elif record.stop_reason:
        record.outcome = "fallback"
    else:
        record.outcome = "crash"  # ended without telling how
