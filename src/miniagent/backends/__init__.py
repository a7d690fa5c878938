"""Model backends. Each one turns a scratchpad into the next action's JSON text.

``llama`` (default) runs a GGUF model in-process, ``openai`` talks to any
OpenAI-compatible server, ``scripted:<behaviour>`` is a deterministic
stand-in for fast tests and exact demos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Entry:
    """One scratchpad line: the user's question, an action, or an observation."""

    role: str  # "question" | "action" | "observation"
    text: str


@dataclass
class ModelReply:
    text: str  # the action's JSON text (or the next piece of it, when continuing)
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int  # prompt tokens evaluated for this reply (new ones only, with KV reuse)
    completion_tokens: int
    latency_s: float


class Backend(Protocol):
    name: str

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "") -> ModelReply:
        """Return the next action, following ``schema_for_turn(first_turn, may_answer)``.

        ``partial`` is the truncated text of this turn to continue from."""
        ...

    def close(self) -> None: ...


def make_backend(config) -> Backend:
    """Build the backend the config names (``llm``)."""
    kind, _, detail = config.llm.partition(":")
    if kind == "llama":
        from .llama import LlamaBackend

        return LlamaBackend(model_path=config.model or None, n_ctx=config.n_ctx,
                            n_threads=config.n_threads, max_action_tokens=config.max_action_tokens,
                            decode=config.decode, cache_dir=config.cache_dir or None)
    if kind == "openai":
        from .openai_compat import OpenAIBackend

        return OpenAIBackend(base_url=config.openai_base_url, model=config.openai_model,
                             max_action_tokens=config.max_action_tokens,
                             response_format=config.openai_response_format)
    if kind == "scripted":
        from .scripted import ScriptedBackend

        return ScriptedBackend(detail or "oracle")
    raise ValueError(f"unknown llm {config.llm!r}: use llama, openai or scripted:<behaviour>")
