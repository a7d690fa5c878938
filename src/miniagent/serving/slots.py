"""llama.cpp for a class: one model, one KV cache, a slot (a llama.cpp sequence) for each learner's prompt.

A prompt goes to the slot holding most of it: only what no slot holds is evaluated, the few-shot header once
for the whole class.  The numbers are llama.cpp's, as in :class:`.llama_runtime.KVRuntime`; one request at a
time (the caller holds a lock).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..agent.errors import ContextFull
from ..models.llama_params import context_params
from ..models.llama_runtime import Weights, close_quietly, common_prefix, log_softmax
from ..models.vocabulary import Vocabulary

# A prompt that would throw away more than this many tokens of the slot it shares most with belongs to another
# learner (or to a new question): it gets a slot of its own.  The scored walk's own backtracking is shorter.
KEEP_IF_DROPPING_AT_MOST = 64


@dataclass
class Completion:
    text: str
    tokens: list[int]
    finish_reason: str  # "stop" (a stop string or the end of text) or "length"
    top_logprobs: list[dict[str, float]]  # for each token of ``tokens``, when asked for
    token_logprobs: list[float]  # each token's own log-probability, when asked for


class Slots:
    def __init__(self, weights: Weights, *, slots: int = 16, n_ctx: int = 16384, n_threads: int = 2,
                 n_batch: int = 512) -> None:
        import llama_cpp
        from llama_cpp import _internals as internals

        self._lib = llama_cpp
        self.model = weights.model
        self.model_path = weights.path
        self.vocab = Vocabulary(self.model, weights.path)
        self.n_ctx, self.n_batch, self.n_threads = n_ctx, n_batch, n_threads
        params = context_params(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=slots, n_threads=n_threads)
        self.ctx = internals.LlamaContext(model=self.model, params=params, verbose=False)
        self.memory = self.ctx.memory
        self.batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self.held: list[list[int]] = [[] for _ in range(slots)]  # the tokens each sequence holds
        self.last_logits: list[np.ndarray | None] = [None] * slots  # the next token's logits after ``held``
        self.used_at = [0.0] * slots
        self.owners: dict[str, int] = {}  # a request's ``user`` -> its slot
        self.requests = 0  # prompts completed
        self.evaluated = 0  # tokens evaluated so far
        self.shared = 0  # tokens that came from another slot's cells instead of being evaluated

    # --- which slot -------------------------------------------------------------------------------
    def pick(self, prompt: list[int], owner: str | None = None) -> tuple[int, int]:
        """``(slot, tokens it keeps)`` for ``prompt``.

        With an ``owner`` (the request's ``user``: the openai backend sends one per learner), the owner's slot,
        or the one used longest ago when the owner has none.  Without one, the slot that holds most of the
        prompt, unless that would throw away more than ``KEEP_IF_DROPPING_AT_MOST`` of its tokens.  Either way a
        slot that starts over gets the cells of the longest start any slot shares with the prompt (``seq_cp``:
        no copy, no evaluation).
        """
        common = [common_prefix(held, prompt) for held in self.held]
        best = max(range(len(self.held)), key=lambda s: (common[s], self.used_at[s]))
        if owner is not None and owner in self.owners:
            target = self.owners[owner]
        elif owner is None and len(self.held[best]) - common[best] <= KEEP_IF_DROPPING_AT_MOST:
            return best, common[best]
        else:  # a slot of its own: the one used longest ago changes hands
            target = min(range(len(self.held)), key=lambda s: self.used_at[s])
            self.owners = {o: s for o, s in self.owners.items() if s != target}
            if owner is not None:
                self.owners[owner] = target
        if common[best] <= common[target]:
            return target, common[target]
        self._clear(target)
        # Shared, not copied or evaluated again: the header's cells serve every learner's slot.
        self._lib.llama_memory_seq_cp(self.memory, best, target, 0, common[best])
        self.held[target] = list(prompt[:common[best]])
        self.shared += common[best]
        return target, common[best]

    def _clear(self, slot: int) -> None:
        self._lib.llama_memory_seq_rm(self.memory, slot, -1, -1)
        self.held[slot], self.last_logits[slot] = [], None

    # --- evaluating -------------------------------------------------------------------------------
    def logits_after(self, prompt: list[int], owner: str | None = None) -> tuple[int, np.ndarray]:
        """The next token's logits after ``prompt``, evaluating only what no slot holds yet."""
        if not prompt:
            raise ValueError("an empty prompt")
        if len(prompt) > self.n_ctx:
            raise ContextFull(f"{len(prompt)} tokens do not fit in the server's n_ctx={self.n_ctx}")
        slot, keep = self.pick(prompt, owner)
        self.used_at[slot] = time.monotonic()
        if keep == len(prompt) == len(self.held[slot]) and self.last_logits[slot] is not None:
            return slot, self.last_logits[slot]
        keep = min(keep, len(prompt) - 1)  # at least one token, for fresh logits
        self._lib.llama_memory_seq_rm(self.memory, slot, keep, -1)
        del self.held[slot][keep:]
        return slot, self.feed(slot, prompt[keep:])

    def feed(self, slot: int, tokens: list[int]) -> np.ndarray:
        """Evaluate ``tokens`` after what ``slot`` holds; the next token's logits."""
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            self._decode(slot, chunk)
            self.held[slot].extend(chunk)
            self.evaluated += len(chunk)
        logits = np.ctypeslib.as_array(self.ctx.get_logits_ith(len(chunk) - 1), shape=(self.vocab.size,)).copy()
        self.last_logits[slot] = logits
        return logits

    def _decode(self, slot: int, chunk: list[int]) -> None:
        batch, at = self.batch.batch, len(self.held[slot])
        batch.n_tokens = len(chunk)
        for row, token in enumerate(chunk):
            batch.token[row], batch.pos[row] = token, at + row
            batch.n_seq_id[row], batch.seq_id[row][0] = 1, slot
            batch.logits[row] = row == len(chunk) - 1
        try:
            self.ctx.decode(self.batch)
        except RuntimeError:  # the cache is full: the other slots' cells go, oldest first, until it fits
            for other in sorted(range(len(self.held)), key=lambda s: self.used_at[s]):
                if other == slot or not self.held[other]:
                    continue
                self._clear(other)
                try:
                    self.ctx.decode(self.batch)
                    return
                except RuntimeError:
                    continue
            raise ContextFull(f"the server's KV cache (n_ctx={self.n_ctx}) cannot hold this prompt") from None

    # --- what a completion request asks -------------------------------------------------------------
    def top(self, logits: np.ndarray, k: int) -> dict[str, float]:
        """The ``k`` likeliest next tokens as {text: log-probability}, likeliest first (a text two tokens share
        keeps the likelier one's value)."""
        return self._top(log_softmax(logits.astype(np.float64)), k)

    def _top(self, logprobs: np.ndarray, k: int) -> dict[str, float]:
        k = max(1, min(k, logprobs.size))
        # One argpartition, not a sort of the whole vocabulary (262,144 tokens) for every request.
        best = np.argpartition(-logprobs, k - 1)[:k]
        out: dict[str, float] = {}
        for token in best[np.argsort(-logprobs[best], kind="stable")]:
            out.setdefault(self.vocab.piece(int(token)), float(logprobs[token]))
        return out

    def complete(self, prompt: list[int], max_tokens: int, stop: list[str], logprobs: int | None,
                 owner: str | None = None) -> Completion:
        """Greedy text after ``prompt``, cut before the first stop string, at the end of text or at ``max_tokens``."""
        self.requests += 1
        slot, logits = self.logits_after(prompt, owner)
        tokens: list[int] = []
        tops: list[dict[str, float]] = []
        own: list[float] = []
        text = ""
        while len(tokens) < max_tokens:
            token = int(np.argmax(logits))
            if self._lib.llama_vocab_is_eog(self.model.vocab, token):
                return Completion(text, tokens, "stop", tops, own)
            if logprobs is not None:
                every = log_softmax(logits.astype(np.float64))
                tops.append(self._top(every, logprobs))
                own.append(float(every[token]))
            tokens.append(token)
            text = self.vocab.detokenize(tokens)
            cut = min((text.find(s) for s in stop if s and s in text), default=-1)
            if cut >= 0:
                return Completion(text[:cut], tokens, "stop", tops, own)
            if len(tokens) < max_tokens:
                if len(self.held[slot]) + 1 > self.n_ctx:
                    break
                logits = self.feed(slot, [token])
        return Completion(text, tokens, "length", tops, own)

    def close(self) -> None:
        close_quietly(self.batch.close, self.ctx.close, self.model.close)
