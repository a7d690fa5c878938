"""Scored decoding: the turn's action schema walked field by field, over any runtime that can score.

Literal parts are emitted, free strings (verb, answer) decoded greedily under a token mask, each enum decided
by its options' log-probabilities (calibrated for tense and person).  The local backend (``KVRuntime``) and a
class's model server (``ServerRuntime``) share one :class:`ScoredDecoder`; only the runtime differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, ContextManager, Protocol

import numpy as np

from ..agent.actions import PERSON_CHOICES
from ..agent.grammar import TENSES
from ..agent.ports import Entry, ModelReply
from .llama_runtime import Decoded
from .prompt import CONTENT_FREE_QUESTION, HEADER, NEXT_ACTION, render
from .vocabulary import Vocabulary

# How much of each field's content-free prior is subtracted: 0 is plain scoring,
# 1 full calibration (Zhao et al. 2021).  Full calibration over-corrects here
# (rare options such as "past perfect continuous" win too often).  Half for the
# tense and three quarters for the person were the best on the public and the
# old held-out set together, with the prompt's person hint (issue 7).
CALIBRATION = {"tense": 0.5, "person": 0.75}
UNIVERSE = {"tense": TENSES, "person": PERSON_CHOICES}  # every option of a calibrated field
CONTEXT_MARGIN = 160  # room for the action being decoded and the options being scored


class Runtime(Protocol):
    """What evaluates the model for the walk: a tokenizer, and three decisions over a prompt it keeps in sync."""

    vocab: Vocabulary
    model_path: str
    n_ctx: int
    evaluated: int  # tokens evaluated so far: a turn's counts are differences of it
    deadline: float | None  # time.monotonic() past which no more work starts
    priors_tag: str  # what besides the model file and the prompt decides the priors (a server's name and model)

    def prime(self, prefix: list[int], cache_dir: Path | None) -> bool: ...

    def aside(self) -> ContextManager[None]: ...  # work that leaves the conversation's evaluation as it was

    def sync(self, prompt: list[int]) -> object: ...

    def pending(self, prompt: list[int]) -> int: ...  # how many of the prompt's tokens a sync would evaluate

    def score(self, prompt: list[int], options: list[list[int]]) -> np.ndarray: ...

    def decode_masked(self, prompt: list[int], allowed: np.ndarray, stop_token: int, *,
                      max_tokens: int) -> Decoded: ...

    def close(self) -> None: ...


Decide = Callable[[str, dict, str], tuple[str, bool]]  # (prompt, schema, partial) -> (text, finished)


class ScoredDecoder:
    def __init__(self, rt: Runtime, *, max_action_tokens: int = 48, cache_dir: str | os.PathLike | None = None):
        self.rt, self.vocab = rt, rt.vocab
        self.max_action_tokens = max_action_tokens
        self.header_tokens = self.vocab.tokenize(HEADER, bos=True)
        cache = Path(cache_dir) if cache_dir else None
        self.prefix_from_disk = rt.prime(self.header_tokens, cache)
        self.masks = self.vocab.masks(cache)
        (self.quote_token,) = self.vocab.tokenize('"')
        self._priors_file = self._priors_path(cache)
        self._calibration: dict[str, np.ndarray] = self._load_priors()

    # --- prompt ------------------------------------------------------------------
    def prompt_text(self, scratchpad: list[Entry]) -> str:
        """The scratchpad as text; old steps are dropped when the window is full."""
        question, history = scratchpad[0], list(scratchpad[1:])
        omitted: list[Entry] = []
        budget = self.rt.n_ctx - len(self.header_tokens) - CONTEXT_MARGIN
        while True:
            text = render([question, *omitted, *history]) + NEXT_ACTION
            if len(history) <= 2 or len(self.vocab.tokenize(text)) <= budget:
                return text
            # keep the question, drop the oldest action/observation pair (pairs stay aligned)
            history, omitted = history[2:], [Entry("observation", "(earlier steps omitted)")]

    def tokens(self, text: str) -> list[int]:
        return self.header_tokens + self.vocab.tokenize(text)

    # --- one turn ------------------------------------------------------------------
    def reply(self, scratchpad: list[Entry], schema: dict, *, partial: str = "", timeout_s: float | None = None,
              greedy: Decide | None = None) -> ModelReply:
        """The next action, timed and counted: scored, a cut-off answer continued, or ``greedy`` where the
        backend decodes the whole action greedily instead."""
        started = time.perf_counter()
        evaluated_before = self.rt.evaluated
        self.rt.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            prompt = self.prompt_text(scratchpad)
            prompt_tokens = self.rt.pending(self.tokens(prompt + partial))
            if greedy is not None:  # the scored walk evaluates the prompt with its first options or string
                self.rt.sync(self.tokens(prompt + partial))
            if greedy is not None:
                text, finished = greedy(prompt, schema, partial)
            elif partial:
                text, finished = self._continue_answer(prompt + partial)
            else:
                text, finished = self._scored(prompt, schema)
        finally:
            self.rt.deadline = None
        completion_tokens = len(self.vocab.tokenize(text)) if text else 0
        return ModelReply(
            text=text,
            finish_reason="stop" if finished else "length",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=time.perf_counter() - started,
            # the rest of what the model evaluated: the options it weighed (and, once, the calibration prompt)
            scoring_tokens=max(0, self.rt.evaluated - evaluated_before - prompt_tokens - completion_tokens),
        )

    # --- walk the schema ----------------------------------------------------------
    def _scored(self, prompt: str, schema: dict) -> tuple[str, bool]:
        branches = schema["anyOf"]
        openings = [_literal_opening(b) for b in branches]
        choice = int(np.argmax(self.rt.score(self.tokens(prompt), [self.vocab.tokenize(o) for o in openings])))
        branch, text = branches[choice], openings[choice]
        properties = [(n, spec) for n, spec in branch["properties"].items() if "const" not in spec]
        if not properties:  # e.g. {"tool": "list_tenses"}: the opening is the whole action
            return text, True
        for index, (name, spec) in enumerate(properties):
            if index > 0:  # the opening already holds the first free field's key
                text += f', "{name}": ' + ('"' if _is_string(spec) else "")
            if "enum" in spec or spec.get("type") == "integer":
                close = "}" if index == len(properties) - 1 else ","
                text += self._choose(prompt + text, name, _options(spec), close, quoted=_is_string(spec))
            elif name == "answer":
                piece, finished = self._decode_string(prompt + text, "text", self.max_action_tokens)
                text += piece
                if not finished:
                    return text, False
            else:
                piece, _ = self._decode_string(prompt + text, "word", 8)
                text += piece if piece.endswith('"') else piece + '"'
        return text + "}", True

    def _choose(self, prefix: str, field: str, options: list[str], close: str, *, quoted: bool) -> str:
        # The close mark is scored too ("present perfect" must not win over "present perfect
        # continuous"), written as in the examples: '",' is one token, '"' then ',' is not.
        close = ('"' if quoted else "") + close
        if quoted:  # an option is written as JSON string content (a grounded answer may hold any character)
            options = [json.dumps(o, ensure_ascii=False)[1:-1] for o in options]
        if len(options) == 1:  # grounding left one option: nothing to weigh
            return options[0] + ('"' if quoted else "")
        scores = self.rt.score(self.tokens(prefix), [self.vocab.tokenize(o + close) for o in options])
        # Calibration: part of each option's log-probability after a content-free question is taken off,
        # which damps a small base model's prior.
        if CALIBRATION.get(field):
            scores = scores - CALIBRATION[field] * self._prior(field, prefix, options, close)
        return options[int(np.argmax(scores))] + ('"' if quoted else "")

    def _prior(self, field: str, prefix: str, options: list[str], close: str) -> np.ndarray:
        """Each option's log-probability after a content-free question (computed once per close mark, over all
        of the field's options, so that a grounded turn weighs its few options against the same prior)."""
        every = list(UNIVERSE[field])
        key = f"{field}{close}"  # "person" closes with '",' on turn 1 (steps follow), '"}' later
        if key not in self._calibration:
            action_so_far = prefix[prefix.rindex(NEXT_ACTION):]
            neutral = render([Entry("question", CONTENT_FREE_QUESTION)]) + action_so_far
            neutral = _neutralise(neutral)
            with self.rt.aside():  # apart from the conversation: neither depends on the other
                self._calibration[key] = self.rt.score(self.tokens(neutral),
                                                       [self.vocab.tokenize(o + close) for o in every])
            self._save_priors()
        return self._calibration[key][[every.index(o) for o in options]]

    # The priors depend only on the model (and the server that serves it), the prompt and this code: computing
    # them costs the first turn of every process ~0.5 s, so they are kept on disk like the prompt cache.
    def _priors_path(self, cache: Path | None) -> Path | None:
        if cache is None:
            return None
        source = b"".join(Path(m.__file__).read_bytes() for m in (sys.modules[__name__], sys.modules[render.__module__]))
        key = hashlib.sha256(repr((self.rt.model_path, os.path.getsize(self.rt.model_path), self.header_tokens,
                                   CALIBRATION, self.rt.priors_tag)).encode() + source).hexdigest()[:24]
        return cache / f"priors-{key}.npz"

    def _load_priors(self) -> dict[str, np.ndarray]:
        if self._priors_file is None or not self._priors_file.is_file():
            return {}
        try:
            with np.load(self._priors_file) as data:
                return {name: data[name] for name in data.files}
        except (OSError, ValueError):  # a damaged cache file is recomputed, never trusted
            return {}

    def _save_priors(self) -> None:
        if self._priors_file is None:
            return
        self._priors_file.parent.mkdir(parents=True, exist_ok=True)
        scratch = self._priors_file.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(scratch, **self._calibration)
        os.replace(scratch, self._priors_file)  # atomic: a half-written file is never read

    def _decode_string(self, prefix: str, mask: str, max_tokens: int) -> tuple[str, bool]:
        out = self.rt.decode_masked(self.tokens(prefix), self.masks[mask], self.quote_token, max_tokens=max_tokens)
        return out.text, out.finished

    def _continue_answer(self, prefix: str) -> tuple[str, bool]:
        piece, finished = self._decode_string(prefix, "text", self.max_action_tokens)
        return (piece + "}", True) if finished else (piece, False)


def _neutralise(action_prefix: str) -> str:
    """Fix the verb and any earlier enum choice, so the prior depends on the field only."""
    action_prefix = re.sub(r'"verb": "[^"]*"', '"verb": "do"', action_prefix)
    return re.sub(r'"tense": "[^"]*"', '"tense": "present simple"', action_prefix)


def _options(spec: dict) -> list[str]:
    if "enum" in spec:
        return [str(o) for o in spec["enum"]]
    return [str(n) for n in range(spec["minimum"], spec["maximum"] + 1)]


def _literal_opening(branch: dict) -> str:
    """The fixed start of a branch: its const fields, up to the first free field."""
    text = "{"
    for name, spec in branch["properties"].items():
        if "const" not in spec:
            return text + f', "{name}": "' if text != "{" else text + f'"{name}": "'
        text += ("" if text == "{" else ", ") + f'"{name}": {json.dumps(spec["const"])}'
    return text + "}"


def _is_string(spec: dict) -> bool:
    return spec.get("type") == "string" or ("enum" in spec and all(isinstance(o, str) for o in spec["enum"]))
