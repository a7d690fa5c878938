"""When runs are traced, and what the MCP server is told (telemetry/settings.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.agent.config import ConfigError
from miniagent.settings import load_config
from miniagent.telemetry.settings import TraceSettings, check, export_to, from_server_env, server_env

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006"}


@pytest.mark.parametrize("traces, environ, expected", [
    ("", {}, None),  # off by default
    ("", ENDPOINT, "otlp"),  # the SDK's own variable turns it on
    ("", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/v1/traces"}, "otlp"),
    ("", {**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, None),  # and its own switch off
    ("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, None),
    ("off", ENDPOINT, None),  # a setting of ours beats the variables
    ("file", {}, "file"), ("otlp", {}, "otlp"), ("file", {"OTEL_SDK_DISABLED": "true"}, "file"),
])
def test_runs_are_traced_only_when_a_setting_or_the_sdks_variables_say_so(traces, environ, expected, tmp_path):
    assert export_to(TraceSettings(traces=traces), environ, tmp_path / "no-viewer.json") == expected


def test_a_running_viewer_of_invoke_traces_gets_the_runs_and_a_stopped_one_does_not(tmp_path):
    viewer = tmp_path / "viewer.json"
    viewer.write_text(json.dumps({"endpoint": "http://127.0.0.1:6006", "pid": os.getpid()}))
    assert export_to(TraceSettings(), {}, viewer) == "otlp"
    told = server_env(TraceSettings(), {}, viewer)
    assert told == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006", "MINIAGENT_TRACES": "otlp"}
    assert server_env(TraceSettings(), ENDPOINT, viewer)["OTEL_EXPORTER_OTLP_ENDPOINT"] == ENDPOINT[
        "OTEL_EXPORTER_OTLP_ENDPOINT"], "the SDK's own variable wins"
    assert export_to(TraceSettings("off"), {}, viewer) is None
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    viewer.write_text(json.dumps({"endpoint": "http://127.0.0.1:6006", "pid": int(gone.stdout)}))
    assert export_to(TraceSettings(), {}, viewer) is None, "a viewer killed without a word leaves a stale file"
    viewer.write_text("{not json")
    assert export_to(TraceSettings(), {}, viewer) is None


def test_every_settings_layer_reaches_the_traces_setting(tmp_path):
    config = tmp_path / "miniagent.toml"
    config.write_text('traces = "file"\ntraces_file = "from-the-file.jsonl"\n')
    assert load_config(env={}, path=config).traces == TraceSettings("file", "from-the-file.jsonl")
    assert load_config(env={"MINIAGENT_TRACES": "otlp"}).traces.traces == "otlp"
    assert load_config(cli={"traces": "off"}, env={"MINIAGENT_TRACES": "otlp"}).traces.traces == "off"


@pytest.mark.parametrize("settings, said", [
    (TraceSettings("on"), "traces must be off, otlp or file (or left empty), not 'on'"),
    (TraceSettings("file", " "), "traces = file needs a traces_file")])
def test_a_setting_no_exporter_could_honour_is_refused(settings, said):
    with pytest.raises(ConfigError) as refused:
        check(settings)
    assert str(refused.value) == said


def test_the_server_is_told_where_spans_go_with_the_sdks_variables_and_nothing_when_off(tmp_path):
    environ, none = {**ENDPOINT, "OTEL_SERVICE_NAME": "x", "HOME": "/home/someone"}, tmp_path / "no-viewer.json"
    assert server_env(TraceSettings(), {}, none) == {}
    told = server_env(TraceSettings(), environ, none)
    assert told == {**ENDPOINT, "OTEL_SERVICE_NAME": "x", "MINIAGENT_TRACES": "otlp"}
    told = server_env(TraceSettings("file", str(tmp_path / "t.jsonl")), {}, none)
    assert told == {"MINIAGENT_TRACES": "file", "MINIAGENT_TRACES_FILE": str(tmp_path / "t.jsonl")}
    assert from_server_env(told) == TraceSettings("file", str(tmp_path / "t.jsonl"))
    assert export_to(from_server_env({**ENDPOINT}), ENDPOINT, none) is None, "the server traces when its client does"
    assert from_server_env({"MINIAGENT_TRACES": "otlp"}) == TraceSettings("otlp", "")
    # Asked for by name, traces beat the SDK's switch: the server is not handed the switch that would undo it
    told = server_env(TraceSettings("otlp"), {**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, none)
    assert told == {**ENDPOINT, "MINIAGENT_TRACES": "otlp"}


def test_a_run_in_a_copy_of_the_checkout_is_sent_to_its_viewer_and_writes_into_its_runs_folder(tmp_path):
    from miniagent.telemetry.settings import sandbox_env

    viewer = tmp_path / "viewer.json"
    assert sandbox_env(tmp_path, {}, viewer) == {"MINIAGENT_TRACES_FILE": str(tmp_path / "runs/traces.otlp.jsonl")}
    mine = {"MINIAGENT_TRACES_FILE": "/mine.jsonl"}
    assert sandbox_env(tmp_path, mine, viewer) == mine
    # relative to where the learner is, not to the copy the run starts in
    assert sandbox_env(tmp_path, {"MINIAGENT_TRACES_FILE": "mine.jsonl"}, viewer) == {
        "MINIAGENT_TRACES_FILE": str(Path.cwd() / "mine.jsonl")}
    viewer.write_text(json.dumps({"endpoint": "http://127.0.0.1:6006", "pid": os.getpid()}))
    assert sandbox_env(tmp_path, mine, viewer) == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006", **mine}
    assert sandbox_env(tmp_path, {**mine, **ENDPOINT}, viewer) == mine, "the SDK's own wins"


def test_a_traces_value_no_exporter_can_honour_is_refused_from_every_layer(tmp_path):
    """Issue 63: through load_config (the file, the environment, a flag), not only by check() called directly."""
    config = tmp_path / "miniagent.toml"
    config.write_text('traces = "jaeger"\n')
    for layers in ({"path": config, "env": {}}, {"env": {"MINIAGENT_TRACES": "jaeger"}},
                   {"cli": {"traces": "jaeger"}, "env": {}}):
        with pytest.raises(ConfigError, match="^traces must be off, otlp or file \\(or left empty\\), not 'jaeger'$"):
            load_config(**layers)


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_the_command_line_refuses_a_traces_value_no_exporter_can_honour_with_exit_2(how, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    argv = [sys.executable, "-m", "miniagent", "ask", "What is the past simple of go for she?", "--llm",
            "scripted:oracle", "--cache-dir", ""]
    if how == "flag":
        argv += ["--traces", "jaeger"]
    else:
        env["MINIAGENT_TRACES"] = "jaeger"
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "traces must be off, otlp or file" in proc.stderr and "Traceback" not in proc.stderr
