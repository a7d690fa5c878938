"""The loop's settings, and the four layers every setting is read from: defaults < config file <
MINIAGENT_* env vars < CLI flags.

Every knob the loop reads lives in ``TutorConfig``.  The model's settings live with the backends
(``models/settings.py``) and the MCP server's fault settings with the tools (``tools/settings.py``);
``miniagent.settings.load_config`` reads all three through :func:`layered`, the only place the layers are
merged, so a setting that is read is also a setting that reaches its component.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

ENV_PREFIX = "MINIAGENT_"
CONFIG_FILE_ENV = "MINIAGENT_CONFIG"
DEFAULT_CONFIG_FILE = "miniagent.toml"


@dataclass
class TutorConfig:
    # Input: longer questions are refused up front (a prompt is not a document).
    max_input_chars: int = 500
    # Caps: the loop ends with a graceful fallback when either is reached.
    max_turns: int = 6
    max_tool_calls: int = 4
    # A declared plan may raise the tool-call limit: clamp(max_tool_calls, steps x per-step, ceiling).
    calls_per_plan_step: int = 1
    max_plan_tool_calls: int = 6
    # Consecutive tool failures before a list_tenses discovery is forced.
    max_consecutive_failures: int = 3
    # Invalid actions in a row before the run ends (a backend without a grammar can emit them every turn).
    max_format_errors: int = 3
    # Stuck detector: the same call with the same result this many times in a row ends the run, and so do two
    # calls taking turns over 6 steps (0 = off). Above the breaker's 3, so its discovery step gets its chance.
    max_repeats: int = 4
    # After a turn cap, tool-call cap, plan budget or stuck stop: one last model call that may only answer,
    # shown to the user as an unconfirmed answer next to the fallback (smolagents and CrewAI do the same).
    final_answer_round: bool = True
    # Argument grounding: where the question names the person, the tense or the verb, the model may only choose
    # what it names, and after a conjugate result its answer is that result (agent/grounding.py; break 15).
    ground_arguments: bool = True
    # Out of the grammar: a question about a tense it lacks, or a word the tool refuses as no verb it knows, ends
    # with the stop reason out_of_grammar and says why, instead of a form the model was made to choose
    # (agent/scope.py; break 16).
    decline_out_of_grammar: bool = True
    # Experiment (off): end every observation with the turns left, as smolagents and LangGraph's RemainingSteps
    # tell their models. docs/labs/04 measures what it changes for this model.
    remaining_budget_notice: bool = False
    # Time: the whole run, and each tool call.
    wall_clock_s: float = 20.0
    tool_timeout_s: float = 2.0
    # Truncated output ("length"): how many continuations before giving up.
    max_auto_continues: int = 2
    # Tokens (prompt + completion) per run, continuations included. With the defaults above the real
    # model cannot reach it: 6 turns x (1 + 2 continuations) model calls, each prompt held under
    # n_ctx=2048 and each reply under max_action_tokens=48, is at most 37,728; a normal run of the real
    # model or of the openai backend uses far less (66 tokens measured for one real-model question with
    # the prompt cache; a few thousand at most without it). So the budget only trips
    # when something else has stopped bounding the run (continuations raised, a model that rambles).
    max_run_tokens: int = 40_000
    # A shared model server queues a class's requests: a turn that waits there is not a hung run. When > 0,
    # the time a run spends in model calls has this budget of its own and does not count against wall_clock_s
    # (which keeps bounding the tools and the loop); 0 = model calls count against wall_clock_s.  Unset, it is
    # 0 for a model of your own and 300 s with llm = "openai" (miniagent.settings.load_config).
    model_wall_clock_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ConfigError(ValueError):
    """A setting has the wrong name or type; the message says which."""


_BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


def _coerce(name: str, raw: Any, kind: type) -> Any:
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            word = str(raw).strip().lower()
            if word not in _BOOL_WORDS:
                raise ValueError
            return _BOOL_WORDS[word]
        if kind in (int, float) and isinstance(raw, bool):  # a TOML true is no count and no time
            raise ValueError
        value = kind(raw)
    except (TypeError, ValueError, OverflowError):
        wanted = "true or false" if kind is bool else kind.__name__
        raise ConfigError(f"{name}: expected {wanted}, got {raw!r}") from None
    if kind is float and not math.isfinite(value):  # nan compares false with every bound: it would lift them all
        raise ConfigError(f"{name}: expected a finite number, got {raw!r}")
    if kind is int and isinstance(raw, float) and raw != value:  # 1.7 turns is not 1 turn
        raise ConfigError(f"{name}: expected a whole number, got {raw!r}")
    return value


def setting_types(*classes: type) -> dict[str, type]:
    """Each setting's name and type, over one or more settings dataclasses (a name must belong to one only)."""
    # Field annotations are strings under `from __future__ import annotations`.
    names = {"int": int, "float": float, "str": str, "bool": bool}
    types: dict[str, type] = {}
    for cls in classes:
        for f in fields(cls):
            if f.name in types:
                raise TypeError(f"setting {f.name!r} is declared twice")
            types[f.name] = names[str(f.type)]
    return types


def layered(types: Mapping[str, type], cli: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            path: str | os.PathLike | None = None, *, whole_file: bool = True) -> dict[str, Any]:
    """The settings of ``types`` that some layer gives, merged and typed. ``cli`` values of ``None`` mean "flag
    not given". A name that is not in ``types`` is refused, in the config file too unless ``whole_file`` is
    False: a reader of a few settings leaves the file's others to the reader of them all."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}

    named = path or env.get(CONFIG_FILE_ENV)
    file_path = Path(named or DEFAULT_CONFIG_FILE)
    if file_path.is_file():
        try:
            with file_path.open("rb") as fh:
                data = tomllib.load(fh)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"{file_path}: not a TOML file ({err})") from None
        data = data.get("miniagent", data)
        if not isinstance(data, dict):
            raise ConfigError(f"{file_path}: [miniagent] must be a table of settings, got {data!r}")
        for key, raw in data.items():
            if key in types:
                values[key] = _coerce(key, raw, types[key])
            elif whole_file:
                raise ConfigError(f"{file_path}: unknown setting {key!r}")
    elif named:  # a file named by a flag or MINIAGENT_CONFIG must be there; only the default may be missing
        raise ConfigError(f"config file not found: {file_path}")

    for name, kind in types.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _coerce(ENV_PREFIX + name.upper(), raw, kind)

    for name, raw in (cli or {}).items():
        if raw is None:
            continue
        if name not in types:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, raw, types[name])
    return values


def check(config: TutorConfig) -> None:
    """Refuse a loop setting that no run could honour."""
    for name in ("max_input_chars", "max_turns", "max_tool_calls", "max_plan_tool_calls", "max_consecutive_failures",
                 "max_run_tokens", "max_format_errors"):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    for name in ("wall_clock_s", "tool_timeout_s"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive")
    if config.calls_per_plan_step < 0:
        raise ConfigError("calls_per_plan_step must be 0 (a plan raises no limit) or more")
    if config.max_repeats < 0:
        raise ConfigError("max_repeats must be 0 (off) or more")
    if config.max_auto_continues < 0:
        raise ConfigError("max_auto_continues must be 0 or more")
    if config.model_wall_clock_s < 0:
        raise ConfigError("model_wall_clock_s must be 0 (model calls count in wall_clock_s) or more")
