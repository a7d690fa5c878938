"""The loop's settings, four layers: defaults < config file < MINIAGENT_* env vars < CLI flags.

The last tests prove the layers reach the loop itself, through the real
command line and through `invoke ask`, not just the config object.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.agent.config import ConfigError, TutorConfig
from miniagent.settings import SHARED_MODEL_WALL_CLOCK_S, load_config

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the past simple of go for she?"


def test_defaults():
    config = load_config(env={}, cli={}).tutor
    assert (config.max_turns, config.max_tool_calls, config.wall_clock_s, config.tool_timeout_s) == (6, 4, 20.0, 2.0)
    assert config.max_auto_continues == 2 and config.max_consecutive_failures == 3


def test_layers_in_order(tmp_path):
    file = tmp_path / "miniagent.toml"
    file.write_text("[miniagent]\nmax_turns = 5\nmax_tool_calls = 3\nwall_clock_s = 9\n")
    env = {"MINIAGENT_MAX_TURNS": "4", "MINIAGENT_MAX_TOOL_CALLS": "2"}
    config = load_config(cli={"max_turns": 3, "max_tool_calls": None}, env=env, path=file).tutor
    assert config.max_turns == 3  # CLI beats env, file and default
    assert config.max_tool_calls == 2  # env beats file (the flag was not given)
    assert config.wall_clock_s == 9.0  # file beats default
    assert config.tool_timeout_s == TutorConfig().tool_timeout_s


def test_config_file_from_env_var(tmp_path):
    file = tmp_path / "lab.toml"
    file.write_text("max_turns = 7\n")
    assert load_config(env={"MINIAGENT_CONFIG": str(file)}).tutor.max_turns == 7


@pytest.mark.parametrize("kwargs,message", [
    ({"env": {"MINIAGENT_MAX_TURNS": "six"}}, "MINIAGENT_MAX_TURNS"),
    ({"env": {}, "cli": {"max_turns": 0}}, "max_turns must be at least 1"),
    ({"env": {}, "cli": {"wall_clock_s": -1}}, "wall_clock_s must be positive"),
    ({"env": {}, "cli": {"max_input_chars": 0}}, "^max_input_chars must be at least 1$"),
    ({"env": {}, "cli": {"calls_per_plan_step": -1}}, r"^calls_per_plan_step must be 0 \(a plan raises no limit\) or more$"),
    ({"env": {}, "cli": {"max_plan_tool_calls": -1}}, "^max_plan_tool_calls must be at least 1$"),
])
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        load_config(**kwargs)
    name = message.strip("^").split()[0]
    if message.endswith("at least 1$"):  # the bound itself is taken
        assert getattr(load_config(env={}, cli={name: 1}).tutor, name) == 1


@pytest.mark.parametrize("layer", ["file", "env", "cli"])
@pytest.mark.parametrize("setting,word,kind", [("max_turns", "six", "int"), ("wall_clock_s", "soon", "float")])
def test_a_number_given_as_a_word_is_refused_naming_the_setting_and_its_type(layer, setting, word, kind, tmp_path):
    """A number setting given a word, in any layer, is refused with the setting's name as that layer spells it
    and the type it expects (not "true or false", which only a boolean setting expects)."""
    file = tmp_path / "miniagent.toml"
    file.write_text(f'[miniagent]\n{setting} = "{word}"\n' if layer == "file" else "", encoding="utf-8")
    env = {f"MINIAGENT_{setting.upper()}": word} if layer == "env" else {}
    cli = {setting: word} if layer == "cli" else {}
    named = f"MINIAGENT_{setting.upper()}" if layer == "env" else setting
    with pytest.raises(ConfigError, match=f"^{named}: expected {kind}, got '{word}'$"):
        load_config(cli=cli, env=env, path=file)


@pytest.mark.parametrize("layer", ["file", "env", "cli"])
@pytest.mark.parametrize("setting, value", [("wall_clock_s", "nan"), ("tool_timeout_s", "inf"),
                                            ("model_wall_clock_s", "-inf")])
def test_a_time_that_is_not_a_finite_number_is_refused(layer, setting, value, tmp_path):
    """nan compares false with every bound (a nan wall clock never runs out, a nan timeout never fires): a time
    must be a number a clock can reach, in every layer."""
    file = tmp_path / "miniagent.toml"
    file.write_text(f"{setting} = {value}\n" if layer == "file" else "", encoding="utf-8")  # TOML spells nan and inf
    env = {f"MINIAGENT_{setting.upper()}": value} if layer == "env" else {}
    cli = {setting: float(value)} if layer == "cli" else {}
    named = f"MINIAGENT_{setting.upper()}" if layer == "env" else setting
    with pytest.raises(ConfigError, match=f"^{named}: expected a finite number, got "):
        load_config(cli=cli, env=env, path=file)


@pytest.mark.parametrize("line, message", [("max_turns = 1.7", "max_turns: expected a whole number, got 1.7"),
                                           ("max_turns = true", "max_turns: expected int, got True"),
                                           ("wall_clock_s = false", "wall_clock_s: expected float, got False"),
                                           ("max_turns = inf", "max_turns: expected int, got inf")])
def test_a_count_or_a_time_in_the_file_is_not_rounded_or_read_from_a_boolean(line, message, tmp_path):
    file = tmp_path / "miniagent.toml"
    file.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        load_config(env={}, path=file)
    file.write_text("max_turns = 2.0\nwall_clock_s = 3\n", encoding="utf-8")  # whole numbers, as TOML may write them
    assert (load_config(env={}, path=file).tutor.max_turns, load_config(env={}, path=file).tutor.wall_clock_s) == (2, 3.0)


@pytest.mark.parametrize("content, says", [(b"root:x:0:0:root:/root:/bin/bash\n", "not a TOML file"),
                                           (b"max_turns = 3 # \xff\n", "not a TOML file"),
                                           (b"miniagent = 3\n", "[miniagent] must be a table of settings, got 3")])
def test_a_config_file_that_is_not_one_is_refused_by_name(content, says, tmp_path):
    file = tmp_path / "lab.toml"
    file.write_bytes(content)
    for how in ({"path": file, "env": {}}, {"env": {"MINIAGENT_CONFIG": str(file)}}):
        with pytest.raises(ConfigError, match=f"^{re.escape(str(file))}: {re.escape(says)}"):
            load_config(**how)


@pytest.mark.parametrize("where", ["missing.toml", "."])
def test_a_config_file_named_by_the_environment_must_be_there_as_one_named_by_the_flag(where, tmp_path):
    named = tmp_path / where
    for how in ({"path": named, "env": {}}, {"env": {"MINIAGENT_CONFIG": str(named)}}):
        with pytest.raises(ConfigError, match=f"^config file not found: {re.escape(str(named))}$"):
            load_config(**how)


def test_unknown_setting_in_file_is_named(tmp_path):
    file = tmp_path / "miniagent.toml"
    file.write_text("max_turn = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'max_turn'"):
        load_config(env={}, path=file)


def _run(args: list[str], env_extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    env.update(env_extra or {})
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


CLI = [sys.executable, "-m", "miniagent", "ask", QUESTION, "--llm", "scripted:stubborn", "--json"]


def test_cli_flag_reaches_the_loop():
    outcome = _run(CLI + ["--max-turns", "2"])
    assert outcome["stop_reason"] == "max_turns" and outcome["stats"]["turns"] == 2


def test_env_var_reaches_the_loop():
    outcome = _run(CLI, {"MINIAGENT_MAX_TURNS": "2"})
    assert outcome["stop_reason"] == "max_turns" and outcome["stats"]["turns"] == 2


def test_flag_beats_env_var_in_the_loop():
    outcome = _run(CLI + ["--max-turns", "3"], {"MINIAGENT_MAX_TURNS": "2"})
    assert outcome["stats"]["turns"] == 3


def test_invoke_ask_max_turns_reaches_the_loop():
    invoke = [sys.executable, "-m", "invoke", "ask", QUESTION, "--llm", "scripted:stubborn", "--json",
              "--max-turns", "2"]
    outcome = _run(invoke)
    assert outcome["stop_reason"] == "max_turns" and outcome["stats"]["turns"] == 2


def test_a_shared_model_server_gets_a_model_clock_of_its_own_unless_one_is_set(tmp_path):
    """With llm = openai the queue of a class's server is not a hang: model calls get 300 s apart from the wall
    clock, whichever layer chose openai; a value set in any layer, 0 included, is kept; other models keep 0."""
    assert load_config(cli={"llm": "openai"}, env={}).tutor.model_wall_clock_s == SHARED_MODEL_WALL_CLOCK_S == 300.0
    assert load_config(env={"MINIAGENT_LLM": "openai"}).tutor.model_wall_clock_s == 300.0
    assert load_config(cli={"llm": "openai", "model_wall_clock_s": "0"}, env={}).tutor.model_wall_clock_s == 0.0
    assert load_config(env={"MINIAGENT_LLM": "openai", "MINIAGENT_MODEL_WALL_CLOCK_S": "45"}).tutor.model_wall_clock_s == 45.0
    toml = tmp_path / "miniagent.toml"
    toml.write_text('llm = "openai"\nmodel_wall_clock_s = 0\n')
    assert load_config(path=toml, env={}).tutor.model_wall_clock_s == 0.0
    assert load_config(env={}).tutor.model_wall_clock_s == 0.0
    assert load_config(cli={"llm": "scripted:oracle"}, env={}).tutor.model_wall_clock_s == 0.0
