"""make_backend: every model setting reaches the constructor of the backend the config names, as given.

tests/test_settings_reach.py proves a setting reaches the config from each layer (flag, environment, file);
this is the last step, config -> backend, checked argument by argument with the backends replaced by
recorders (no model is loaded, no server asked).
"""

from __future__ import annotations

import logging
import re
import threading

import pytest

from miniagent import models
from miniagent.models.settings import ModelSettings
from miniagent.models import llama as llama_module
from miniagent.models import openai_compat
from miniagent.models.llama_params import AmxChoice
from miniagent.models.scripted import ScriptedBackend

SET = dict(model="/models/tiny.gguf", n_ctx=4096, max_action_tokens=64, decode="greedy", cache_dir="/tmp/cache",
           openai_base_url="http://class:8080/v1", openai_model="gemma", openai_response_format="json_object",
           openai_max_retries=5, openai_startup_s=7.5, llama_amx="off")


class Recorder:
    made: list[dict] = []

    def __init__(self, *args, **kwargs):
        Recorder.made.append(kwargs)
        self.rt = self  # what make_backend logs: rt.startup_line(why)

    def startup_line(self, why):
        return f"llama.cpp threads: (recorded) {why}"


@pytest.fixture
def recorded(monkeypatch):
    Recorder.made = []
    monkeypatch.setattr(llama_module, "LlamaBackend", Recorder)
    monkeypatch.setattr(openai_compat, "OpenAIBackend", Recorder)
    return Recorder.made


def test_every_llama_setting_reaches_the_llama_backend_and_the_start_up_line_is_logged_once(recorded, caplog):
    config = ModelSettings(llm="llama", **SET)
    with caplog.at_level(logging.INFO, logger="miniagent"):
        models.make_backend(config, threads=(3, "auto: usable CPUs 4, busy with other programs 1.0"))
    assert recorded == [dict(model_path="/models/tiny.gguf", n_ctx=4096, n_threads=3, max_action_tokens=64,
                             decode="greedy", cache_dir="/tmp/cache", amx=AmxChoice(False, "forced by llama_amx = off"),
                             weights=None)]
    assert [r.getMessage() for r in caplog.records] == [
        "llama.cpp threads: (recorded) auto: usable CPUs 4, busy with other programs 1.0"]


def test_weights_already_loaded_carry_their_own_amx_choice_and_empty_settings_mean_the_defaults(recorded):
    weights = object()
    models.make_backend(ModelSettings(llm="llama", model="", cache_dir=""), threads=(1, ""), weights=weights)
    assert recorded[0]["amx"] is None and recorded[0]["weights"] is weights
    assert recorded[0]["model_path"] is None and recorded[0]["cache_dir"] is None  # "" is "not set"


def test_without_measured_threads_make_backend_measures_them(recorded, monkeypatch):
    monkeypatch.setattr(models, "choose_threads", lambda requested: (requested or 2, "asked"))
    models.make_backend(ModelSettings(llm="llama", n_threads=5))
    assert recorded[0]["n_threads"] == 5


def test_every_openai_setting_reaches_the_openai_backend(recorded):
    models.make_backend(ModelSettings(llm="openai", **SET))
    assert recorded == [dict(base_url="http://class:8080/v1", model="gemma", max_action_tokens=64, decode="greedy",
                             response_format="json_object", model_path="/models/tiny.gguf", n_ctx=4096,
                             cache_dir="/tmp/cache", max_retries=5, warm_up=True, startup_s=7.5)]
    models.make_backend(ModelSettings(llm="openai", model="", cache_dir=""))
    assert recorded[1]["model_path"] is None and recorded[1]["cache_dir"] is None


def test_scripted_takes_its_behaviour_after_the_colon_oracle_by_default_and_an_unknown_llm_is_refused():
    assert models.make_backend(ModelSettings(llm="scripted:stubborn")).name == "scripted:stubborn"
    assert isinstance(models.make_backend(ModelSettings(llm="scripted")), ScriptedBackend)
    assert models.make_backend(ModelSettings(llm="scripted")).name == "scripted:oracle"
    config = ModelSettings(llm="scripted")
    object.__setattr__(config, "llm", "gpt")  # past the config's own check: make_backend checks too
    with pytest.raises(ValueError) as refused:
        models.make_backend(config)
    assert str(refused.value) == "unknown llm 'gpt': use llama, openai or scripted:<behaviour>"


@pytest.mark.parametrize("llm, runs_a_model_here", [("llama", True), ("llama:anything", True), ("openai", False),
                                                    ("scripted:oracle", False)])
def test_only_the_llama_backend_measures_threads_and_loads_weights_here(llm, runs_a_model_here, monkeypatch):
    monkeypatch.setattr(models, "choose_threads", lambda requested: (2, "measured"))
    assert (models.threads_for(ModelSettings(llm=llm)) is not None) == runs_a_model_here
    if not runs_a_model_here:
        assert models.start_loading(ModelSettings(llm=llm)) is None


def test_the_model_loads_in_a_daemon_thread_and_a_failed_load_reaches_whoever_waits(monkeypatch):
    from miniagent.models import llama_runtime

    release, started, seen = threading.Event(), threading.Event(), {}

    def load_weights(path, amx):
        seen["thread"] = threading.current_thread()
        seen["args"] = (path, amx)
        started.set()
        release.wait(10)
        raise FileNotFoundError(f"model file not found: {path}")

    monkeypatch.setattr(llama_runtime, "load_weights", load_weights)
    loading = models.start_loading(ModelSettings(llm="llama:q4", model="/nowhere.gguf", llama_amx="on"))  # kind:detail
    assert loading is not None and started.wait(10), "the load never started"
    assert seen["thread"].daemon and seen["thread"].name == "miniagent-model-load"  # an interrupted start-up
    assert seen["args"] == ("/nowhere.gguf", AmxChoice(True, "forced by llama_amx = on"))  # does not wait on it
    release.set()
    with pytest.raises(FileNotFoundError, match="/nowhere.gguf"):
        loading.result(10)


# A setting with a few values has one list of them: the settings check and each backend refuse the same way.
CHOICES = [("decode", "sampled", "decode must be scored or greedy, not 'sampled'"),
           ("openai_response_format", "yaml", "openai_response_format must be auto, json_schema or json_object, "
                                              "not 'yaml'"),
           ("llama_amx", "maybe", "llama_amx must be auto, on or off, not 'maybe'")]


@pytest.mark.parametrize("name, value, message", CHOICES)
def test_a_value_outside_a_settings_few_is_refused_from_every_layer_with_the_list(name, value, message):
    from miniagent.agent.config import ConfigError
    from miniagent.settings import load_config

    with pytest.raises(ConfigError, match=f"^{message}$"):
        load_config(cli={name: value}, env={})
    with pytest.raises(ConfigError, match=f"^{message}$"):
        load_config(env={f"MINIAGENT_{name.upper()}": value})


# A number with a bound: the value at the bound is taken, the next one past it refused, with the bound's words.
BOUNDS = [("max_action_tokens", "1", "0", "max_action_tokens must be at least 1"),
          ("n_ctx", "1", "0", "n_ctx must be at least 1"),
          ("openai_startup_s", "0.5", "0", "openai_startup_s must be positive"),
          ("n_threads", "0", "-1", r"n_threads must be 0 \(auto\) or more"),
          ("openai_max_retries", "0", "-1", "openai_max_retries must be 0 or more")]


@pytest.mark.parametrize("name, edge, past, message", BOUNDS)
def test_a_number_past_its_bound_is_refused_from_every_layer_and_the_bound_itself_is_taken(name, edge, past,
                                                                                          message):
    from miniagent.agent.config import ConfigError
    from miniagent.settings import load_config

    for layer in ({"cli": {name: edge}, "env": {}}, {"env": {f"MINIAGENT_{name.upper()}": edge}}):
        kind = type(getattr(ModelSettings(), name))  # int or float, as the layers read it
        assert getattr(load_config(**layer).model, name) == kind(edge)
    for layer in ({"cli": {name: past}, "env": {}}, {"env": {f"MINIAGENT_{name.upper()}": past}}):
        with pytest.raises(ConfigError, match=f"^{message}$"):
            load_config(**layer)


@pytest.mark.parametrize("url", ["not-a-url", "ftp://host/v1", "http:///v1", ""])
def test_a_model_server_url_that_names_no_server_is_refused_from_every_layer(url):
    """It was sent anyway and retried as a server out of reach ("could not reach"), status 1, seconds later."""
    from miniagent.agent.config import ConfigError
    from miniagent.settings import load_config

    says = f"^openai_base_url must be a server's URL \\(http://HOST:PORT/v1\\), not {re.escape(repr(url))}$"
    with pytest.raises(ConfigError, match=says):
        load_config(cli={"openai_base_url": url}, env={})
    if url:  # an empty variable is a variable not set
        with pytest.raises(ConfigError, match=says):
            load_config(env={"MINIAGENT_OPENAI_BASE_URL": url})
    for good in ("http://127.0.0.1:8000/v1", "https://models.example.org/v1"):
        assert load_config(cli={"openai_base_url": good}, env={}).model.openai_base_url == good


def test_each_backend_refuses_a_decode_mode_it_has_not_before_it_loads_or_asks_anything():
    from miniagent.agent.config import ConfigError
    from miniagent.models.llama_params import choose_amx

    with pytest.raises(ConfigError, match="^decode must be scored or greedy, not 'beam'$"):
        llama_module.LlamaBackend("/no/such/model.gguf", decode="beam")  # the file is never opened
    with pytest.raises(ConfigError, match="^decode must be scored or greedy, not 'beam'$"):
        openai_compat.OpenAIBackend("http://127.0.0.1:9/v1", decode="beam")  # nothing listens on port 9
    with pytest.raises(ConfigError, match="^openai_response_format must be auto, json_schema or json_object, not"):
        openai_compat.OpenAIBackend("http://127.0.0.1:9/v1", response_format="text")
    with pytest.raises(ConfigError, match="^llama_amx must be auto, on or off, not 'yes'$"):
        choose_amx("yes")
