"""The run's process tree: sample its CPU and memory, signal it, kill it, find what outlived it.

Used by :mod:`miniagent.lab.harness.run`.  Everything here works on pids and
process groups with psutil, and knows nothing about agents or traces.
:class:`MachineLoad` measures the rest of the machine: how much CPU the
programs *outside* the tree used meanwhile, so a run on a busy laptop can
say so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Any, Iterator

import psutil

from ...processes import OtherPrograms, alive, signal_group

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)

# --------------------------------------------------------------------------
# Sampling the process tree
# --------------------------------------------------------------------------


def cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"


class TreeSampler:
    """CPU and RSS of a process and all its descendants, and a memory of every process seen.

    ``cpu_percent()`` measures since its previous call on the *same* object,
    so the objects are kept between samples and each new one is primed once
    (its first reading is meaningless).
    """

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.procs: dict[int, psutil.Process] = {}
        self.seen: dict[int, dict[str, Any]] = {}  # pid -> {pid, cmdline, create_time}
        self.discover()

    def discover(self) -> None:
        """Add the root, its current descendants and the rest of its session; also called right before a kill."""
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []  # the root is gone: its children were seen before, or are found by their session
        for proc in tree + self._session_orphans():
            if proc.pid in self.procs:
                continue
            try:
                proc.cpu_percent(None)  # prime
                create_time = proc.create_time()
            except _GONE:
                continue
            self.procs[proc.pid] = proc
            self.seen[proc.pid] = {"pid": proc.pid, "cmdline": cmdline(proc), "create_time": create_time}

    def _session_orphans(self) -> list[psutil.Process]:
        """Processes of the root's session that are no longer its descendants.

        The harness starts the root in a session of its own; a process whose parent
        exited is re-parented (no one's descendant any more) but keeps that session.
        One that also left the session (setsid, like the MCP server) is found only
        if it was seen before its parent exited."""
        found = []
        for proc in psutil.process_iter():
            if proc.pid in self.procs or proc.pid == self.root_pid:
                continue
            with contextlib.suppress(OSError):
                if os.getsid(proc.pid) == self.root_pid:
                    found.append(proc)
        return found

    def sample(self) -> tuple[float, float, int]:
        """(cpu %, rss MB, live processes) summed over the tree."""
        cpu = rss = 0.0
        count = 0
        for proc in list(self.procs.values()):
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                self._refresh_cmdline(proc)
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
                count += 1
            except _GONE:
                continue  # exited between two samples: its last slice of CPU is lost, fine
        self.discover()  # newcomers count from the next sample on (once primed)
        return cpu, rss / 2**20, count

    def _refresh_cmdline(self, proc: psutil.Process) -> None:
        """A process first seen between fork and exec showed its parent's command line (or none): read it again."""
        line = cmdline(proc)
        if line != "?":
            self.seen[proc.pid]["cmdline"] = line

    def alive(self) -> list[psutil.Process]:
        """Every process seen that still runs, plus anything those spawned since."""
        self.discover()  # a process re-parented since the last sample is still found by its session
        found: dict[int, psutil.Process] = {}
        for proc in self.procs.values():
            if alive(proc):  # is_running() also rules out a reused pid (create time differs)
                found[proc.pid] = proc
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        found.setdefault(child.pid, child)
        for proc in found.values():
            if proc.pid not in self.seen:
                with contextlib.suppress(psutil.Error):
                    self.seen[proc.pid] = {"pid": proc.pid, "cmdline": cmdline(proc),
                                           "create_time": proc.create_time()}
        return [p for p in found.values() if alive(p)]


# --------------------------------------------------------------------------
# Killing
# --------------------------------------------------------------------------


def find_survivors(sampler: TreeSampler, settle: float, since: float) -> tuple[list[psutil.Process], list[dict]]:
    """Processes of the tree still alive after ``settle`` s, and those that exited by themselves meanwhile.

    ``since`` is when the agent was gone; ``outlived_s`` says how much longer a process lived.
    """
    first = {p.pid: p for p in sampler.alive()}
    exited: dict[int, float] = {}
    until = time.monotonic() + settle
    while True:
        alive = sampler.alive()
        now = time.monotonic()
        for pid in first.keys() - {p.pid for p in alive} - exited.keys():
            exited[pid] = round(now - since, 3)
        if not alive or now >= until:
            break
        time.sleep(0.02)
    outlived = [{"pid": pid, "cmdline": sampler.seen.get(pid, {}).get("cmdline", "?"), "outlived_s": after}
                for pid, after in exited.items()]
    return alive, outlived


def kill_all(procs: list[psutil.Process]) -> bool:
    """SIGKILL each survivor's whole group (a server leads its own). True when all are gone."""
    for proc in procs:
        try:
            pgid = os.getpgid(proc.pid)
        except ProcessLookupError:
            continue
        if not (proc.is_running() and signal_group(pgid, signal.SIGKILL)):
            with contextlib.suppress(psutil.Error):
                proc.kill()
    # Not psutil.wait_procs: a killed orphan is init's child, and a zombie
    # there (exited, not reaped yet) is as dead as we need it to be.
    until = time.monotonic() + 1.0
    while any(alive(p) for p in procs) and time.monotonic() < until:
        time.sleep(0.01)
    return not any(alive(p) for p in procs)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C must not interrupt the clean-up half way (that would leave orphans)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------
# The rest of the machine
# --------------------------------------------------------------------------


@contextlib.contextmanager
def spinning_core() -> Iterator[subprocess.Popen]:
    """Another program spinning on one core for as long as the block runs (a busy laptop); killed and reaped."""
    import sys

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


class MachineLoad:
    """CPU used by programs outside the run's tree (and outside the harness), sample by sample.

    Machine-wide busy CPU minus the tree's and the harness's own, in the same
    units as the tree (100 = one core).  A process the tree starts is counted
    as "outside" until the sampler has primed it (at most one sample), so the
    figure can be a little high during start-up, never low.
    """

    def __init__(self) -> None:
        self.others = OtherPrograms()  # counted from here
        self.me = psutil.Process()
        self.me.cpu_percent(None)  # prime: the next call measures from here

    def sample(self, tree_cpu: float) -> float:
        try:
            mine = self.me.cpu_percent(None)
        except psutil.Error:
            mine = 0.0
        cores = self.others.cores((tree_cpu + mine) / 100)
        return 0.0 if cores is None else cores * 100
