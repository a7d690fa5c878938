"""Checks that hold for every test.

Every in-process run of the loop, in any test, must end within its wall clock plus the grace
theory 05 states (one decode step, well under 0.5 s on an idle machine). The check reads the
trace: each ``stop`` event's elapsed seconds against the ``wall_clock_s`` of its ``run_start``.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from miniagent.agent.trace import Trace
from miniagent.lab.learner import progress

ROOT = Path(__file__).resolve().parents[1]

# A suite started in the background of a non-interactive shell (`nohup invoke test &`, some CI runners) inherits
# SIGINT ignored, and so would every process it starts: the Ctrl-C tests would then test how the suite was
# started, not the lab (seen here: seven of them failed, and only in such a run). Python's own Ctrl-C, always.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

WALL_CLOCK_GRACE_S = 0.5

# The property tests' profile. "ci" (the default) is fixed: the same examples on every run and machine, a
# bounded number of them, no example database, no deadline (two busy cores make timings meaningless).
# HYPOTHESIS_PROFILE=deep searches ten times longer, with fresh random examples each run.
PHASES = (Phase.explicit, Phase.generate, Phase.shrink)  # no database to reuse, no "explain" pass
settings.register_profile("ci", derandomize=True, max_examples=100, database=None, deadline=None, phases=PHASES,
                          report_multiple_bugs=False, print_blob=False)
settings.register_profile("deep", max_examples=1000, database=None, deadline=None, phases=PHASES,
                          report_multiple_bugs=False)
# invoke mutants runs the tests once per mutant: fewer examples, still the same ones every time.
settings.register_profile("mutants", derandomize=True, max_examples=30, database=None, deadline=None, phases=PHASES,
                          report_multiple_bugs=False, print_blob=False)
# invoke counterexamples publishes the world hypothesis found and shrank itself, so the hand-written @example
# worlds (there to reach rare corners every run) are left out; generation is the same as in "ci".
settings.register_profile("counterexamples", derandomize=True, max_examples=100, database=None, deadline=None,
                          phases=(Phase.generate, Phase.shrink), report_multiple_bugs=False, print_blob=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The suite's runs are traced only where a test asks for it (--traces file): not sent to a collector the
# developer's shell names, nor to the viewer `invoke traces` may be running in this checkout. Set before any test
# starts a process, so every run inherits it; a flag of the command line wins over it, as over any variable.
os.environ["MINIAGENT_TRACES"] = "off"


@pytest.fixture(autouse=True)
def every_run_keeps_its_wall_clock(monkeypatch):
    overruns: list[str] = []
    original = Trace.emit

    def emit(self, event, **fields):
        original(self, event, **fields)
        if event != "stop":
            return
        start = next((e for e in reversed(self.events) if e["event"] == "run_start"), None)
        settings = (start or {}).get("config", {})
        limit = settings.get("wall_clock_s")
        if limit is not None:  # a shared server's model calls have their own budget (model_wall_clock_s)
            limit += settings.get("model_wall_clock_s") or 0
        seconds = (fields.get("stats") or {}).get("seconds")
        if limit is not None and seconds is not None and seconds > limit + WALL_CLOCK_GRACE_S:
            overruns.append(f"a run took {seconds:.2f} s with wall_clock_s={limit:g} "
                            f"(stop_reason {fields.get('stop_reason')})")

    monkeypatch.setattr(Trace, "emit", emit)
    yield
    assert not overruns, "; ".join(overruns)


def pytest_configure(config):
    """The remembered learner as the run found it, kept by the process that runs the session (not its workers):
    tests on two workers remember and restore throwaway learners of their own, and one's "before" can be the
    other's learner, so the checkout's own learner is put back once, when the whole run ends."""
    if not hasattr(config, "workerinput"):
        remembered = ROOT / progress.CURRENT_LEARNER
        config._remembered_learner = remembered.read_bytes() if remembered.is_file() else None


def pytest_unconfigure(config):
    if hasattr(config, "_remembered_learner"):
        remembered, before = ROOT / progress.CURRENT_LEARNER, config._remembered_learner
        if before is None:
            remembered.unlink(missing_ok=True)
        else:
            remembered.parent.mkdir(parents=True, exist_ok=True)
            remembered.write_bytes(before)


@pytest.fixture
def learner():
    """A throwaway learner in this checkout (the lab's tasks work on the checkout); removed afterwards,
    and the remembered learner put back as it was."""
    name = f"pytest-loop-{os.getpid()}"
    remembered = ROOT / progress.CURRENT_LEARNER
    before = remembered.read_bytes() if remembered.exists() else None
    yield name
    shutil.rmtree(ROOT / "learners" / name, ignore_errors=True)
    if before is None:
        remembered.unlink(missing_ok=True)
    else:
        remembered.write_bytes(before)


def pytest_collection_modifyitems(items):
    """Every test that times something runs in `invoke test`'s serial pass (see the `serial` marker)."""
    for item in items:
        if item.get_closest_marker("timing") is not None and item.get_closest_marker("serial") is None:
            item.add_marker(pytest.mark.serial)
