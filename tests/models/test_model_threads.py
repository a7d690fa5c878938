"""How many threads llama.cpp gets: the free cores now, not the cores the machine has."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest
from helpers import start_foreign_spinner

from miniagent import models
from miniagent.agent.config import ConfigError, load_config
from miniagent.models import busy_elsewhere, resolve_threads, usable_cpus


def test_auto_is_the_default_and_a_negative_count_is_refused():
    assert load_config(env={}).n_threads == 0
    assert load_config(env={"MINIAGENT_N_THREADS": "3"}).n_threads == 3
    with pytest.raises(ConfigError, match="n_threads"):
        load_config(env={}, cli={"n_threads": -1})


def test_an_explicit_count_is_used_as_given(monkeypatch):
    monkeypatch.setattr(models, "busy_elsewhere", lambda *a: pytest.fail("an explicit count needs no measuring"))
    assert resolve_threads(3) == 3


@pytest.mark.parametrize("cpus,others,threads", [
    (2, 0.0, 2),   # idle laptop: both cores
    (2, 0.3, 2),   # a little background work does not cost a core
    (2, 1.0, 1),   # one core held by another program: one thread
    (2, 2.0, 1),   # everything busy: still one thread
    (8, 2.6, 5),
    (2, None, 2),  # cannot tell: trust the affinity
    (1, 0.0, 1),
])
def test_auto_counts_the_free_cores(monkeypatch, cpus, others, threads):
    monkeypatch.setattr(models, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(models, "busy_elsewhere", lambda *a: others)
    assert resolve_threads(0) == threads


def test_our_own_tree_is_not_counted_as_other_work(monkeypatch):
    # Machine: 2 CPUs, 1.5 of them busy during the window; we (and our children) used 1.0 of it.
    ticks = iter([(100.0, 400.0), (101.5, 402.0)])
    own = iter([10.0, 11.0])
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(models, "_busy_ticks", lambda: next(ticks))
    monkeypatch.setattr(models, "_own_tree_seconds", lambda: next(own))
    monkeypatch.setattr(models.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(models.time, "sleep", lambda s: None)
    monkeypatch.setattr(models.os, "cpu_count", lambda: 2)
    assert busy_elsewhere(1.0) == pytest.approx(0.5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat")
def test_a_program_spinning_elsewhere_is_seen():
    """A busy loop that is not our child (its parent has exited) shows up as about one busy core."""
    spinner = start_foreign_spinner()
    try:
        time.sleep(0.3)  # let it get going
        others = busy_elsewhere(1.0)
        assert others is not None and 0.7 <= others <= usable_cpus() + 0.1, others
    finally:
        spinner.kill()
        psutil.wait_procs([spinner], timeout=5)  # init reaps it; gone (or a zombie) is enough
        assert not spinner.is_running() or spinner.status() == psutil.STATUS_ZOMBIE


def test_only_a_model_run_here_gets_its_threads_measured(monkeypatch):
    monkeypatch.setattr(models, "busy_elsewhere", lambda window=0.25: 0.0)
    monkeypatch.setattr(models, "usable_cpus", lambda: 2)
    assert models.threads_for(load_config(cli={"llm": "scripted:oracle"})) is None
    assert models.threads_for(load_config(cli={"llm": "openai"})) is None
    assert models.threads_for(load_config(cli={"llm": "llama", "n_threads": 3})) == (3, "")
    assert models.threads_for(load_config(cli={"llm": "llama"}))[0] == 2


def test_the_threads_are_measured_before_anything_of_the_run_starts(monkeypatch):
    # The measurement counts other programs' CPU: the MCP server importing its SDK meanwhile would crowd
    # them out of the cores and hide them, so the server is spawned only once it is done.
    from miniagent.lab import session as session_module
    from miniagent.models.scripted import ScriptedBackend

    order: list[str] = []
    monkeypatch.setattr(session_module, "threads_for", lambda config: order.append("measure") or (1, "measured"))
    monkeypatch.setattr(session_module.MCPClient, "start", lambda self: order.append("server") or self)

    def make_backend(config, threads, weights):
        order.append(f"model {threads}")
        return ScriptedBackend("oracle")

    monkeypatch.setattr(session_module, "make_backend", make_backend)
    with session_module.TutorSession(load_config(cli={"llm": "scripted:oracle"})):
        pass
    assert order[0] == "measure" and sorted(order[1:]) == ["model (1, 'measured')", "server"]


@pytest.mark.real_model
def test_the_model_file_loads_once_in_its_own_thread_while_the_threads_are_measured(monkeypatch):
    """The load (C code, no GIL) overlaps the measurement; the backend gets those weights and loads nothing."""
    import threading

    from miniagent.lab import session as session_module
    from miniagent.models import llama_runtime

    loads: list[str] = []
    real_load = llama_runtime.load_weights

    def load_weights(*args, **kwargs):
        loads.append(threading.current_thread().name)
        return real_load(*args, **kwargs)

    def threads_for(config):
        loads.append("measure")
        return (1, "measured")

    monkeypatch.setattr(llama_runtime, "load_weights", load_weights)
    monkeypatch.setattr(session_module, "threads_for", threads_for)
    with session_module.TutorSession(load_config(cli={"llm": "llama", "cache_dir": ""})) as session:
        assert session.model.rt.n_threads == 1
        assert session.ask("What is the past simple of go for she?").stop_reason in ("answered", "fallback")
    assert sorted(loads) == ["measure", "miniagent-model-load"], loads


def test_a_model_file_that_cannot_be_loaded_ends_the_start_up_with_its_error(tmp_path):
    from miniagent.lab.session import TutorSession

    with pytest.raises(FileNotFoundError, match="model file not found"):
        with TutorSession(load_config(cli={"llm": "llama", "model": str(tmp_path / "absent.gguf")})):
            pass
