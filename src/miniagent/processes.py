"""Processes, threads, signals and CPU: what the tool client, the model backends and the harness share.

A leaf module: it imports nothing else of miniagent, so every wing may use it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any, Awaitable, Callable, Iterator

# How often a waiting main thread wakes to run Python's signal handlers (see wait_result).
SIGNAL_CHECK_S = 0.05


def wait_result(future: concurrent.futures.Future, timeout: float | None) -> Any:
    """``future.result(timeout)``, woken every :data:`SIGNAL_CHECK_S` so that Ctrl-C and SIGTERM interrupt it
    at once, whichever thread the kernel handed the signal to."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        # Short waits: a main thread blocked in a lock wakes only for a signal sent to it, and the kernel may
        # hand the signal to another thread (the MCP client's, llama.cpp's); the handler runs once it wakes.
        left = SIGNAL_CHECK_S if deadline is None else min(SIGNAL_CHECK_S, deadline - time.monotonic())
        try:
            return future.result(timeout=max(0.0, left))
        except concurrent.futures.TimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise


# --------------------------------------------------------------------------
# Process groups: the MCP server and the agent each lead one (start_new_session), so that one signal reaches
# everything they started. psutil is imported where it is needed: a run that starts no process never loads it.
# --------------------------------------------------------------------------


def alive(proc: Any) -> bool:
    """Running and not a zombie (a killed child stays a zombie until reaped; None is not alive)."""
    import psutil

    if proc is None:
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when it no longer exists (signal 0 asks just that)."""
    if pgid == os.getpgrp():  # never our own group: that would signal us (and the shell's job)
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, not ours to signal
        return True


def signal_leader(proc: Any, sig: int) -> None:
    """Signal ``proc``'s whole group when it leads one, else ``proc`` alone; a process already gone is no error."""
    import psutil

    try:
        if not proc.is_running():  # also guards against pid reuse (create-time check)
            return
        if os.getpgid(proc.pid) == proc.pid:
            signal_group(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, psutil.Error):
        pass


def stop_process(proc: Any, *, grace: float, poll: float = 0.01) -> None:
    """SIGTERM (to its group, see :func:`signal_leader`), wait up to ``grace``, then SIGKILL. Never reaps."""
    if not alive(proc):
        return
    signal_leader(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(proc) and time.monotonic() < deadline:
        time.sleep(poll)
    if alive(proc):
        signal_leader(proc, signal.SIGKILL)


def stop_group(popen: subprocess.Popen, grace: float) -> float:
    """Stop the whole process group ``popen`` leads (started with ``start_new_session``): SIGTERM to all of it,
    then SIGKILL after ``grace`` s if anything of it is left. Returns the moment it was gone.

    The whole group is waited for: a child that ignores SIGTERM outlives a leader that obeys it. The leader is
    reaped within 2 s of the SIGKILL (only a process stuck in the kernel outlasts that)."""
    pgid = popen.pid
    signal_group(pgid, signal.SIGTERM)
    until = time.monotonic() + grace
    while time.monotonic() < until:
        # poll() reaps the leader; an empty group makes killpg(0) fail
        if popen.poll() is not None and not signal_group(pgid, 0):
            break
        time.sleep(0.01)
    else:
        signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=2)
    return time.monotonic()


def reap(popen: subprocess.Popen | None, timeout: float = 1.0) -> None:
    """Collect a child's exit status once it has died, so that no zombie is left behind (SIGKILL if it has not)."""
    if popen is None:
        return
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:  # still alive after everything the caller did: SIGKILL cannot be ignored
        popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout)


# --------------------------------------------------------------------------
# CPU: how many cores there are, and how many of them other programs keep busy.  One measure for every wing:
# llama.cpp's thread count, the harness's busy-machine note and the benchmark's all read it here.
# --------------------------------------------------------------------------


def machine_cores() -> int:
    """The machine's cores: what CPU percentages are scaled by (100 = one core, 100 x this = all of them)."""
    return os.cpu_count() or 1


def usable_cores() -> int:
    """Cores this process may run on (taskset, cgroup cpusets), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return machine_cores()


def busy_and_total(times: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds in one of psutil's ``cpu_times()`` readings: idle and iowait are not busy, and
    guest time is left out of the total (Linux counts it inside user and nice already)."""
    fields = times._asdict()
    total = sum(value for name, value in fields.items() if not name.startswith("guest"))
    return total - fields["idle"] - fields.get("iowait", 0.0), total


def machine_busy_s() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, all cores summed; None where it cannot be read."""
    import psutil

    try:
        return busy_and_total(psutil.cpu_times())
    except (psutil.Error, OSError):
        return None


def own_tree_seconds() -> float:
    """CPU seconds used so far by this process and every descendant (the MCP server may be starting meanwhile)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # gone meanwhile
            continue
    return total


class OtherPrograms:
    """Cores kept busy by programs that are not ours, reading by reading (1.0 = one core).

    The machine's busy share of all its cores between two readings, minus what our own processes used in the
    same interval (the caller says how much: a tree it samples, or its own CPU seconds).  Ticks are coarse, so
    the busy time is taken as a share of the ticks that passed, not as seconds."""

    def __init__(self) -> None:
        self._last, self._at = machine_busy_s(), time.monotonic()

    def cores(self, ours: float = 0.0, *, ours_s: float = 0.0) -> float | None:
        """Cores busy elsewhere since the previous reading (or the start), given what our own processes used
        meanwhile: ``ours`` cores (a tree the caller samples), or ``ours_s`` CPU seconds (spread here over the
        interval the machine was read over, so both sides share one clock).  None when the interval measured
        nothing."""
        now, at = machine_busy_s(), time.monotonic()
        first, self._last, self._at, elapsed = self._last, now, at, at - self._at
        if first is None or now is None or elapsed <= 0 or now[1] <= first[1]:
            return None
        share = (now[0] - first[0]) / (now[1] - first[1])
        return max(0.0, share * machine_cores() - ours - ours_s / elapsed)


# An idle machine is known sooner than a busy one: after IDLE_LOOK_S, a reading of at most IDLE_READING cores
# (one 10 ms tick of the time passed, at most) ends the wait; a program that keeps half a core busy shows well
# above it by then. Any other reading waits for the whole window, as a busy machine always did.
IDLE_LOOK_S = 0.1
IDLE_READING = 0.15


def busy_elsewhere(window: float = 0.25) -> float | None:
    """Cores kept busy by other programs right now (1.0 = one core), measured over ``window`` s, or sooner on an
    idle machine (``IDLE_LOOK_S``); None when the machine's CPU cannot be read.  This process and its children are
    ours, not others'."""
    whole, own = OtherPrograms(), own_tree_seconds()
    if IDLE_LOOK_S < window:
        early = copy.copy(whole)  # the same start, read once
        time.sleep(IDLE_LOOK_S)
        seen = early.cores(ours_s=own_tree_seconds() - own)
        if seen is not None and seen <= IDLE_READING:
            return seen
        time.sleep(window - IDLE_LOOK_S)
    else:
        time.sleep(window)
    return whole.cores(ours_s=own_tree_seconds() - own)


def load_average() -> float | None:
    """The 1-minute load average, or None where the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# --------------------------------------------------------------------------
# SIGTERM -> exception, so `with` blocks (the MCP client's, the harness's) unwind on `kill <pid>`
# --------------------------------------------------------------------------


class Terminated(SystemExit):
    """SIGTERM (or SIGHUP) arrived.  A SystemExit (exit status 128 + the signal: 143 for SIGTERM), so it unwinds
    ``with`` blocks and, if nothing catches it, ends the program quietly like any SystemExit."""


def _raise_once() -> Callable[[int, FrameType | None], None]:
    """A signal handler that raises :class:`Terminated` the first time and only says so after that.

    Later signals must not interrupt the clean-up the first one started (each clean-up is bounded, and SIGKILL
    still works)."""
    fired = False

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if fired:
            print(f"{signal.Signals(signum).name} again: already shutting down", file=sys.stderr, flush=True)
            return
        fired = True
        raise Terminated(128 + signum)

    return _on_signal


def install_sigterm_handler() -> Any:
    """Turn SIGTERM into :class:`Terminated` raised in the main thread (the agent's whole run).

    Python's default for SIGTERM is to die on the spot, skipping ``finally``
    and ``__exit__``: the client never gets to stop its server, and a wedged
    server survives as an orphan.  Raising instead unwinds the stack like
    Ctrl-C does.  Only the first SIGTERM raises.

    Must be called from the main thread.  Returns the previous handler.
    """
    return signal.signal(signal.SIGTERM, _raise_once())


@contextlib.contextmanager
def stops_unwind() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP unwind it like Ctrl-C (the old handlers afterwards).

    For the lab's own commands (``invoke exp``, ``class-load``, ``bench``...): each starts processes in
    sessions of their own (the agent, a model server), which a signal to the command does not reach; only
    the command's ``finally`` blocks stop them, and by default SIGTERM (``timeout``, ``kill``) and SIGHUP
    (the terminal closed) end Python without running any.  Outside the main thread it changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _raise_once()  # one for both: a SIGHUP after a SIGTERM is the second signal, not a new first
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def submit_in_callers_context(request: Awaitable[Any], loop) -> concurrent.futures.Future:
    """``request`` run on ``loop`` (another thread's) with the calling thread's context variables, the current span
    among them: a task there would start from that thread's context (the MCP SDK's span of a tool call would begin a
    trace of its own instead of sitting under the call's).

    Raises RuntimeError when the loop has stopped; ``request`` is then closed, never to run (the garbage collector
    would warn that it was never awaited)."""
    import asyncio  # already imported by the one caller, the MCP client; not by everything else this module serves

    values = contextvars.copy_context()

    async def run() -> Any:
        for variable, value in values.items():  # the task's own copy: nothing leaks into the loop's context
            variable.set(value)
        return await request

    wrapped = run()
    try:
        return asyncio.run_coroutine_threadsafe(wrapped, loop)
    except RuntimeError:
        wrapped.close()
        if asyncio.iscoroutine(request):
            request.close()
        raise
