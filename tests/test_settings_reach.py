"""Every setting of every wing, from every layer, reaches the component it configures: the loop's
(``TutorConfig``), the model's (``ModelSettings``), the MCP server's faults (``ServerFaults``) and the traces
(``TraceSettings``).

A setting can be parsed (from a flag, the config file or the environment) and then dropped on its way: the
session builds the loop, the model backend and the MCP client from the config, and each of those three
handoffs is a place where a value can be lost (break 01 is one such loss, in the loop). Here each setting
gets a value other than its default, through each layer, and the test reads it back from the component:
the guard object, the backend's constructor, the MCP client and the server's command line.
"""

from __future__ import annotations

import pytest

import miniagent.models.openai_compat  # noqa: F401  imported before the backends are replaced below
import miniagent.models.scripted  # noqa: F401
from miniagent import cli
from miniagent.agent.config import TutorConfig, setting_types
from miniagent.agent.loop import GrammarTutor
from miniagent.lab import session as session_module
from miniagent.models.llama_params import choose_amx
from miniagent.models.settings import ModelSettings
from miniagent.settings import WINGS, Settings, load_config, setting_fields
from miniagent.telemetry.settings import TraceSettings
from miniagent.tools.settings import ServerFaults
from miniagent.tools.mcp_client import MCPClient

# A value other than the default for each setting, valid on its own and with the others at their defaults.
VALUES = {
    "max_input_chars": 321, "max_turns": 5, "max_tool_calls": 3, "calls_per_plan_step": 2, "max_plan_tool_calls": 7,
    "max_consecutive_failures": 2, "max_format_errors": 5, "max_repeats": 6, "final_answer_round": False,
    "ground_arguments": False, "decline_out_of_grammar": False,
    "remaining_budget_notice": True, "wall_clock_s": 12.5, "tool_timeout_s": 1.25, "max_auto_continues": 1,
    "max_run_tokens": 12345, "llm": "scripted:planner", "model": "/some/model.gguf", "decode": "greedy",
    "max_action_tokens": 40, "cache_dir": "/some/cache", "n_ctx": 1024, "n_threads": 3, "llama_amx": "off",
    "openai_base_url": "http://10.0.0.1:9000/v1", "openai_model": "class-model",
    "openai_response_format": "json_object", "openai_max_retries": 4, "openai_startup_s": 3.5,
    "model_wall_clock_s": 42.0, "fault_delay_s": 0.75, "fault_hang_on": "eat",
    "traces": "file", "traces_file": "/some/traces.jsonl",
}
# Settings read where they are needed need another setting to take effect: the backend that reads them.
BACKEND = {name: "openai" for name in VALUES if name.startswith("openai_")} | \
    {name: "llama" for name in ("model", "decode", "max_action_tokens", "cache_dir", "n_ctx", "n_threads", "llama_amx")}
# And the traces' file: the spans go to it only when traces = file.
ALSO = {"traces_file": {"traces": "file"}}


class Stub:
    """Anything a component is built with: remembers its arguments, does nothing."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs
        self.rt, self.name = self, "stub"

    def startup_line(self, why=""):
        return ""

    def __getattr__(self, name):
        return lambda *a, **k: None


def components(config: Settings, monkeypatch) -> dict:
    """What the session hands each component, from this config: the loop, the backend, the MCP client."""
    seen: dict = {}

    def backend(kind):
        def build(*args, **kwargs):
            seen["backend"] = (kind, args, kwargs)
            return Stub()
        return build

    monkeypatch.setattr("miniagent.models.busy_elsewhere", lambda *a: 0.0)  # auto threads: no 0.25 s measurement
    monkeypatch.setattr("miniagent.models.llama.LlamaBackend", backend("llama"))
    # the model file is loaded apart, in a thread, before the backend is built: it takes the path and the AMX path
    monkeypatch.setattr("miniagent.models.llama_runtime.load_weights",
                        lambda model_path, amx: seen.setdefault("weights", {"model_path": model_path, "amx": amx}))
    monkeypatch.setattr("miniagent.models.openai_compat.OpenAIBackend", backend("openai"))
    monkeypatch.setattr("miniagent.models.scripted.ScriptedBackend", backend("scripted"))

    class Client(Stub):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            seen["mcp"] = kwargs
            seen["server_args"] = MCPClient(**kwargs)._server_args()

    monkeypatch.setattr(session_module, "MCPClient", Client)
    # The SDK is set up as the settings say (here only recorded: a tracer provider is set once per process).
    monkeypatch.setattr("miniagent.telemetry.export.start",
                        lambda settings, service, **how: seen.setdefault("spans", settings) and Stub())

    def run(tutor, question):
        seen["tutor"] = tutor
        return None

    monkeypatch.setattr(GrammarTutor, "run", run)
    with session_module.TutorSession(config) as session:
        session.ask("What is the past simple of go for she?")
    return seen


def reached(name: str, seen: dict):
    """The value of ``name`` as the component it configures holds it."""
    tutor = seen["tutor"]
    kind, _, kwargs = seen["backend"]
    loop = {
        "max_turns": lambda: tutor.turn_cap.max_turns, "max_tool_calls": lambda: tutor.call_cap.max_tool_calls,
        "calls_per_plan_step": lambda: tutor.call_cap.per_step, "max_plan_tool_calls": lambda: tutor.call_cap.ceiling,
        "max_consecutive_failures": lambda: tutor.breaker.threshold,
        "max_format_errors": lambda: tutor.format_breaker.threshold, "max_repeats": lambda: tutor.stuck.repeats,
        "ground_arguments": lambda: tutor.grounding.enabled, "decline_out_of_grammar": lambda: tutor.scope.enabled,
        "wall_clock_s": lambda: tutor.clock.limit_s, "max_run_tokens": lambda: tutor.tokens.max_tokens,
        "model_wall_clock_s": lambda: tutor.model.limit_s,
        # read by the loop from its own config at the moment they matter
        "max_input_chars": lambda: tutor.config.max_input_chars, "final_answer_round": lambda: tutor.config.final_answer_round,
        "remaining_budget_notice": lambda: tutor.config.remaining_budget_notice,
        "max_auto_continues": lambda: tutor.config.max_auto_continues,
        "tool_timeout_s": lambda: (seen["mcp"]["timeout"], tutor.config.tool_timeout_s),
        "fault_delay_s": lambda: (seen["mcp"]["delay"], float(seen["server_args"][seen["server_args"].index("--delay") + 1])),
        "fault_hang_on": lambda: (seen["mcp"]["hang_on"], seen["server_args"][seen["server_args"].index("--hang-on") + 1]),
        "llm": lambda: f"{kind}:{(seen['backend'][1] or ('',))[0]}" if kind == "scripted" else kind,
        "model": lambda: seen["weights"]["model_path"] if kind == "llama" else kwargs["model_path"],
        "decode": lambda: kwargs["decode"],
        "max_action_tokens": lambda: kwargs["max_action_tokens"], "cache_dir": lambda: kwargs["cache_dir"],
        "n_ctx": lambda: kwargs["n_ctx"], "n_threads": lambda: kwargs["n_threads"],
        "llama_amx": lambda: "off" if not (amx := seen["weights"]["amx"]).enabled and "forced" in amx.reason else amx,
        "openai_base_url": lambda: kwargs["base_url"], "openai_model": lambda: kwargs["model"],
        "openai_response_format": lambda: kwargs["response_format"], "openai_max_retries": lambda: kwargs["max_retries"],
        "openai_startup_s": lambda: kwargs["startup_s"],
        # the agent's tracer provider, and the server it starts, which traces its own side
        "traces": lambda: (seen["spans"].traces, seen["mcp"]["env"]["MINIAGENT_TRACES"]),
        "traces_file": lambda: (seen["spans"].traces_file, seen["mcp"]["env"]["MINIAGENT_TRACES_FILE"]),
    }
    return loop[name]()


def expected(name: str, value):
    return {"tool_timeout_s": (value, value), "fault_delay_s": (value, value),
            "fault_hang_on": (value, value), "traces": (value, value), "traces_file": (value, value)}.get(name, value)


def config_from(layer: str, name: str, value, tmp_path) -> Settings:
    """The config as the real entry point builds it, with ``name`` given through ``layer`` only."""
    others = {"llm": BACKEND[name]} if name in BACKEND else ALSO.get(name, {})
    empty = tmp_path / "none.toml"  # a config file of its own, empty: not the checkout's miniagent.toml
    empty.write_text("", encoding="utf-8")
    env = {"MINIAGENT_CONFIG": str(empty)}
    env.update({f"MINIAGENT_{k.upper()}": str(v) for k, v in others.items()})
    if layer == "flag":
        flag = "--" + name.replace("_", "-")
        args = cli.build_parser().parse_args(["ask", "q", flag, str(value).lower() if isinstance(value, bool) else str(value)])
        cli_values = {f.name: getattr(args, f.name) for f in setting_fields()}
        return load_config(cli=cli_values, env=env, path=None)
    if layer == "env":
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return load_config(env={**env, f"MINIAGENT_{name.upper()}": text})
    file = tmp_path / "miniagent.toml"
    literal = repr(value).lower() if isinstance(value, bool) else f'"{value}"' if isinstance(value, str) else repr(value)
    file.write_text(f"[miniagent]\n{name} = {literal}\n", encoding="utf-8")
    return load_config(env=env, path=file)


def test_every_setting_has_a_value_and_a_component_here():
    assert set(VALUES) == {f.name for f in setting_fields()}, "a new setting needs its row in this test"
    for name, value in VALUES.items():
        assert value != Settings().as_dict()[name], f"{name}: a value equal to the default proves nothing"


# Which wing declares each setting: the loop's limits and clocks, the model's, the MCP server's faults.
MODEL = {"llm", "model", "decode", "max_action_tokens", "cache_dir", "n_ctx", "n_threads", "llama_amx",
         "openai_base_url", "openai_model", "openai_response_format", "openai_max_retries", "openai_startup_s"}
FAULTS = {"fault_delay_s", "fault_hang_on"}
TRACES = {"traces", "traces_file"}


def test_each_wing_declares_its_own_settings_and_hands_them_to_its_part():
    assert WINGS == (TutorConfig, ModelSettings, ServerFaults, TraceSettings)
    assert set(setting_types(ModelSettings)) == MODEL and set(setting_types(ServerFaults)) == FAULTS
    assert set(setting_types(TraceSettings)) == TRACES
    assert set(setting_types(TutorConfig)) == set(VALUES) - MODEL - FAULTS - TRACES
    settings = load_config(cli={name: VALUES[name] for name in ("max_turns", "n_ctx", "fault_hang_on")}, env={})
    assert (settings.tutor.max_turns, settings.model.n_ctx, settings.faults.fault_hang_on) == (5, 1024, "eat")


def test_a_setting_declared_by_two_wings_is_refused():
    from dataclasses import make_dataclass

    twice = make_dataclass("Twice", [("n_ctx", "int", 1)])
    with pytest.raises(TypeError, match="'n_ctx' is declared twice"):
        setting_types(ModelSettings, twice)


@pytest.mark.parametrize("layer", ["flag", "env", "file"])
@pytest.mark.parametrize("name", sorted(VALUES))
def test_a_setting_reaches_its_component_from_every_layer(name, layer, tmp_path, monkeypatch):
    config = config_from(layer, name, VALUES[name], tmp_path)
    seen = components(config, monkeypatch)
    got = reached(name, seen)
    if name == "llama_amx":
        assert got == "off" and seen["weights"]["amx"] == choose_amx("off")
        assert seen["backend"][2]["weights"] is seen["weights"], "the backend is built on the weights loaded"
    else:
        assert got == expected(name, VALUES[name]), (name, layer, got)


def test_the_check_sees_a_setting_that_is_dropped(tmp_path, monkeypatch):
    """A planted loss (the session builds the MCP client without the config's tool timeout) fails the check."""
    original = session_module.TutorSession.__enter__

    def dropping(self):
        tutor = self.settings.tutor
        tutor.tool_timeout_s, kept = TutorConfig().tool_timeout_s, tutor.tool_timeout_s
        try:
            return original(self)
        finally:
            tutor.tool_timeout_s = kept

    monkeypatch.setattr(session_module.TutorSession, "__enter__", dropping)
    config = config_from("env", "tool_timeout_s", VALUES["tool_timeout_s"], tmp_path)
    assert reached("tool_timeout_s", components(config, monkeypatch)) != expected("tool_timeout_s", 1.25)
