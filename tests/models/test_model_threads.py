"""How many threads llama.cpp gets: the free cores now, not the cores the machine has."""

from __future__ import annotations

import pytest

from miniagent import models
from miniagent.agent.config import ConfigError
from miniagent.settings import load_config
from miniagent.models import resolve_threads


def test_auto_is_the_default_and_a_negative_count_is_refused():
    assert load_config(env={}).model.n_threads == 0
    assert load_config(env={"MINIAGENT_N_THREADS": "3"}).model.n_threads == 3
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
    monkeypatch.setattr(models, "usable_cores", lambda: cpus)
    monkeypatch.setattr(models, "busy_elsewhere", lambda *a: others)
    assert resolve_threads(0) == threads


def test_only_a_model_run_here_gets_its_threads_measured(monkeypatch):
    monkeypatch.setattr(models, "busy_elsewhere", lambda window=0.25: 0.0)
    monkeypatch.setattr(models, "usable_cores", lambda: 2)
    assert models.threads_for(load_config(cli={"llm": "scripted:oracle"}).model) is None
    assert models.threads_for(load_config(cli={"llm": "openai"}).model) is None
    assert models.threads_for(load_config(cli={"llm": "llama", "n_threads": 3}).model) == (3, "")
    assert models.threads_for(load_config(cli={"llm": "llama"}).model)[0] == 2


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


def test_choose_threads_keeps_a_given_count_and_otherwise_leaves_others_their_cores(monkeypatch):
    asked = []
    monkeypatch.setattr(models, "busy_elsewhere", lambda: asked.append(1) or 1.5)
    monkeypatch.setattr(models, "usable_cores", lambda: 4)
    assert models.choose_threads(1) == (1, "")
    assert models.choose_threads(6) == (6, "")
    assert asked == []
    # 4 usable, 1.5 busy elsewhere: a core counts as free when others use under half of it -> 3 (2.5 rounds up)
    assert models.choose_threads(0) == (3, "auto: usable CPUs 4, busy with other programs 1.5")
    monkeypatch.setattr(models, "busy_elsewhere", lambda: None)
    assert models.choose_threads(0) == (4, "auto: usable CPUs 4, busy with other programs unknown")
    monkeypatch.setattr(models, "busy_elsewhere", lambda: 9.0)
    assert models.choose_threads(0) == (1, "auto: usable CPUs 4, busy with other programs 9.0")  # at least one


def test_one_usable_core_is_not_measured(monkeypatch):
    monkeypatch.setattr(models, "usable_cores", lambda: 1)
    monkeypatch.setattr(models, "busy_elsewhere", lambda: pytest.fail("measured a single CPU"))
    assert models.choose_threads(0) == (1, "auto: usable CPUs 1, busy with other programs 0.0")
