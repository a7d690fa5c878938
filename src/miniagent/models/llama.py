"""The default backend: a local GGUF model (Gemma 3 270M base) via llama.cpp.

Two decoding modes over the turn's schema: ``greedy``, the whole action under the GBNF grammar llama.cpp makes
of it, and ``scored`` (default), the :class:`~miniagent.models.scored.ScoredDecoder` walk over the model in
this process (:class:`~miniagent.models.llama_runtime.KVRuntime`).
"""

from __future__ import annotations

import json
import os

from ..agent.actions import schema_for_turn
from ..agent.grounding import Grounds
from ..agent.ports import Entry, ModelReply
from .llama_params import AmxChoice
from .llama_runtime import KVRuntime, Weights
from .scored import ScoredDecoder
from .settings import DECODE_MODES, check_choice


class LlamaBackend:
    # Scored by default: greedy output under the grammar is always a valid action, but a 270M base model then
    # picks tense and person poorly (it leans towards "past" and "you").
    def __init__(self, model_path: str | None = None, *, n_ctx: int = 2048, n_threads: int = 2,
                 max_action_tokens: int = 48, decode: str = "scored",
                 cache_dir: str | os.PathLike | None = None, amx: AmxChoice | None = None,
                 weights: Weights | None = None) -> None:
        check_choice("decode", decode, DECODE_MODES)
        self.rt = KVRuntime(model_path, n_ctx=n_ctx, n_threads=n_threads, amx=amx, weights=weights)
        self.decoder = ScoredDecoder(self.rt, max_action_tokens=max_action_tokens, cache_dir=cache_dir)
        self.name = f"llama:{decode}"
        self.decode = decode

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> ModelReply:
        schema = schema_for_turn(first_turn, may_answer, final, grounds)
        return self.decoder.reply(scratchpad, schema, partial=partial, timeout_s=timeout_s,
                                  greedy=self._greedy if self.decode == "greedy" else None)

    def close(self) -> None:
        self.rt.close()

    def _greedy(self, prompt: str, schema: dict, partial: str) -> tuple[str, bool]:
        """The whole action greedily, under the grammar llama.cpp makes of the schema."""
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        gbnf = json_schema_to_gbnf(json.dumps(schema))
        out = self.rt.decode_greedy(self.decoder.tokens(prompt + partial), gbnf,
                                    max_tokens=self.decoder.max_action_tokens, done=_is_json_object,
                                    accept=self.rt.vocab.tokenize(partial) if partial else ())
        return out.text, out.finished


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False
