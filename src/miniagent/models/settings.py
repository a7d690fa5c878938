"""The model's settings: which backend, which model file, how it decodes, and how it reaches a class's server.

Read from the same layers as the loop's (``agent.config.layered``: defaults < config file < MINIAGENT_* env
vars < CLI flags); :func:`~miniagent.models.make_backend` hands each one to the backend it configures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..agent.config import ConfigError


@dataclass
class ModelSettings:
    llm: str = "llama"  # llama | openai | scripted:<behaviour>
    model: str = ""  # GGUF path; empty = the embedded Gemma 3 270M
    decode: str = "scored"  # scored (calibrated option scoring) | greedy (llama: grammar only; openai: chat + JSON mode)
    max_action_tokens: int = 48
    cache_dir: str = str(Path.home() / ".cache" / "miniagent")  # prompt cache; "" turns it off
    n_ctx: int = 2048
    # llama.cpp threads; 0 = auto: the CPUs this process may use minus those other work keeps busy
    # right now (models.resolve_threads).  More threads than free cores makes llama.cpp crawl.
    n_threads: int = 0
    # llama.cpp's extra buffer types, the AMX path among them: auto = off where the CPU reports AMX (llama.cpp's
    # AMX kernel crashes with this model, ggml-org/llama.cpp#20824), on elsewhere; on | off force it.
    llama_amx: str = "auto"
    openai_base_url: str = "http://127.0.0.1:8000/v1"  # llama-cpp-python's and vLLM's default port
    openai_model: str = "local"
    # greedy decoding only: auto (json_schema, else json_object when the server refuses it) | json_schema (OpenAI,
    # vLLM, llama.cpp) | json_object (llama-cpp-python)
    openai_response_format: str = "auto"
    openai_max_retries: int = 2  # when the server cannot be reached or says it is busy, within the run's time
    # Seconds each start-up request to the server may take (does it answer, count tokens as we do, give
    # log-probabilities): one that takes the connection and never answers ends the run as model_failed.
    openai_startup_s: float = 10.0


DECODE_MODES = ("scored", "greedy")
RESPONSE_FORMATS = ("auto", "json_schema", "json_object")
AMX_CHOICES = ("auto", "on", "off")


SERVER_URL = re.compile(r"https?://[^/\s]+")  # what names a model server: a scheme and a host (class-load's too)


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """One of a setting's few values, or a :class:`ConfigError` that lists them (the backends ask it too)."""
    if value not in allowed:
        raise ConfigError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, not {value!r}")


def check(settings: ModelSettings) -> None:
    """Refuse a model setting that no backend could honour."""
    check_choice("decode", settings.decode, DECODE_MODES)
    check_choice("openai_response_format", settings.openai_response_format, RESPONSE_FORMATS)
    check_choice("llama_amx", settings.llama_amx, AMX_CHOICES)
    if settings.max_action_tokens < 1:
        raise ConfigError("max_action_tokens must be at least 1")
    if settings.n_ctx < 1:  # 0 would make llama.cpp take the model's own window (128k tokens for Gemma 3)
        raise ConfigError("n_ctx must be at least 1")
    if settings.openai_startup_s <= 0:
        raise ConfigError("openai_startup_s must be positive")
    if settings.n_threads < 0:
        raise ConfigError("n_threads must be 0 (auto) or more")
    if settings.openai_max_retries < 0:
        raise ConfigError("openai_max_retries must be 0 or more")
    if not SERVER_URL.match(settings.openai_base_url):  # else retried as a server out of reach
        raise ConfigError(f"openai_base_url must be a server's URL (http://HOST:PORT/v1), not "
                          f"{settings.openai_base_url!r}")
