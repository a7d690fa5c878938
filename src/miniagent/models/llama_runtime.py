"""A thin runtime over llama.cpp that keeps one KV cache across turns: a turn evaluates only its new tokens,
an enum's options cost one batched decode (each in its own sequence, sharing the prompt's cells), and a free
string decodes greedily under a mask. ``Llama.create_completion`` gives none of the three; ``Llama`` still loads
the model and tokenizes.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..agent.errors import ContextFull, ModelTimeout
from .deadline_flag import DeadlineFlag
from .llama_params import AmxChoice, LlamaLog, choose_amx, context_params, model_params, weight_buffers
from .model_file import default_model_path
from .vocabulary import Vocabulary

MAX_SEQUENCES = 16  # option scoring uses sequences 1..15; 0 is the conversation


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens two prompts share from the start: what a KV cache holding one can keep for the other."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def close_quietly(*closers: Callable[[], object]) -> None:
    """Free llama.cpp's objects in order, each even if one before it failed."""
    for closer in closers:
        try:
            closer()
        except Exception:  # closing twice or at interpreter exit: nothing left to free
            pass


def log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max()
    return logits - top - np.log(np.exp(logits - top).sum())


@dataclass
class Decoded:
    text: str
    tokens: list[int]
    finished: bool  # False when max_tokens cut it off


@dataclass
class Weights:
    """A model file loaded by llama.cpp, before any context (the part that needs no thread count)."""

    model: object  # llama_cpp._internals.LlamaModel
    path: str
    amx: AmxChoice
    buffers: dict[str, float]  # {llama.cpp buffer type: MiB}, as llama.cpp reported them


def load_weights(model_path: str | None = None, amx: AmxChoice | None = None) -> Weights:
    """Load the model file (mostly C code that releases the GIL: a session runs it in a thread)."""
    path = model_path or default_model_path()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file not found: {path}")
    amx = amx or choose_amx()
    # Loaded here, not through llama_cpp.Llama: Llama offers no switch for llama.cpp's extra buffer types (the
    # AMX path), and its own context would be thrown away (ours has 16 sequences).
    with LLAMA_LOG.capture() as load_log:
        model = open_model_file(path, model_params(amx))
    return Weights(model, path, amx, weight_buffers(load_log))


def open_model_file(path: str, params):
    """llama.cpp's model read from ``path``, the whole process's stdout and stderr left where they are.

    Not llama-cpp-python's quiet load (verbose=False): it points fds 1 and 2 at /dev/null while it runs, and a load
    runs beside the MCP server's start, so the server inherited /dev/null as its stderr (its fault and crash lines
    were lost). llama.cpp's own log goes through :data:`LLAMA_LOG` either way."""
    from llama_cpp import _internals as internals

    return internals.LlamaModel(path_model=path, params=params, verbose=True)


class KVRuntime:
    """llama.cpp in this process: the model's weights, one context with 16 sequences, and its KV cache."""

    priors_tag = ""  # the model file alone decides the options' priors (see scored.ScoredDecoder)

    def __init__(self, model_path: str | None = None, *, n_ctx: int = 2048, n_threads: int = 2,
                 amx: AmxChoice | None = None, weights: Weights | None = None) -> None:
        import llama_cpp
        from llama_cpp import _internals as internals

        self._lib, self._internals = llama_cpp, internals
        weights = weights or load_weights(model_path, amx)
        path, self.amx, self.model, self.weight_buffers = weights.path, weights.amx, weights.model, weights.buffers
        self._params = params = context_params(n_ctx=n_ctx, n_batch=512, n_seq_max=MAX_SEQUENCES, n_threads=n_threads)
        # read between the steps of each decode (every context with these params): a 3.5 s prefill is cut short
        self.deadline_flag, self._deadline = DeadlineFlag(), None
        params.abort_callback, params.abort_callback_data = self.deadline_flag.callback(llama_cpp.ggml_abort_callback)
        self.ctx = internals.LlamaContext(model=self.model, params=params, verbose=False)
        self.memory, self.n_ctx, self.n_threads = self.ctx.memory, n_ctx, n_threads
        self.vocab, self.model_path = Vocabulary(self.model, path), path
        self.n_vocab, self.n_batch = self.vocab.size, 512
        self.batch = internals.LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=MAX_SEQUENCES, verbose=False)
        self.tokens: list[int] = []  # what the KV cache of sequence 0 holds
        self._next_logits: dict[int, np.ndarray] = {}  # length of prefix -> logits of the next token
        self.evaluated = 0  # tokens evaluated so far (benchmarks read it)
        self._header: tuple[Path | None, list[int]] = (None, [])  # prime's: its cache file and tokens

    def startup_line(self, threads_why: str = "") -> str:
        """What llama.cpp was given and did, in one line (make_backend logs it once)."""
        threads = f"{self.n_threads} ({threads_why})" if threads_why else str(self.n_threads)
        weights = ", ".join(f"{name} {mib:.0f} MiB" for name, mib in self.weight_buffers.items()) or "unknown"
        return f"llama.cpp threads: {threads}, {self.amx.describe()}, weights in {weights}"

    def _get_deadline(self) -> float | None:
        return self._deadline

    def _set_deadline(self, value: float | None) -> None:
        self._deadline = value
        self.deadline_flag.set(value)  # the decode's own look, from C

    # time.monotonic() past which no more work starts: looked at before each decode and within it
    deadline = property(_get_deadline, _set_deadline)

    def _check_deadline(self) -> None:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise ModelTimeout("the model ran out of time between two decodes")

    def _decode(self) -> None:
        """llama.cpp decodes ``self.batch``; a decode aborted at the deadline leaves the cache as it found it."""
        code = self._lib.llama_decode(self.ctx.ctx, self.batch.batch)
        if code == 2:  # aborted: llama.cpp removed the batch's cells (one micro-batch: n_ubatch == n_batch)
            self._lib.llama_memory_seq_rm(self.memory, 0, len(self.tokens), -1)
            raise ModelTimeout("the model ran out of time in the middle of a decode")
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """For the block, a context of its own holding the header alone, as a load places it: what is computed
        there (a first run's priors) does not depend on the conversation, which goes on untouched."""
        kept, (path, header) = (self.ctx, self.memory, self.tokens, self._next_logits), self._header
        self.ctx = self._internals.LlamaContext(model=self.model, params=self._params, verbose=False)
        self.memory, self.tokens, self._next_logits = self.ctx.memory, [], {}
        try:
            if header and not (path is not None and path.is_file() and self._load_prefix(path, header)):
                self.sync(header)
                self._reload_prefix()
            yield
        finally:
            self.ctx.close()
            self.ctx, self.memory, self.tokens, self._next_logits = kept

    # --- the KV cache ----------------------------------------------------------
    def rollback(self, length: int) -> None:
        if length < len(self.tokens):
            self._lib.llama_memory_seq_rm(self.memory, 0, length, -1)
            del self.tokens[length:]
            for key in [k for k in self._next_logits if k > length]:
                del self._next_logits[key]

    def feed(self, tokens: list[int]) -> np.ndarray:
        """Evaluate tokens after what the cache holds; return the next token's logits."""
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise ContextFull(f"{len(self.tokens) + len(tokens)} tokens do not fit in n_ctx={self.n_ctx}")
        for start in range(0, len(tokens), self.n_batch):
            self._check_deadline()
            chunk = tokens[start:start + self.n_batch]
            self.batch.set_batch(batch=chunk, n_past=len(self.tokens), logits_all=False)
            self._decode()
            self.tokens.extend(chunk)
            self.evaluated += len(chunk)
        logits = np.ctypeslib.as_array(self.ctx.get_logits_ith(len(chunk) - 1), shape=(self.n_vocab,)).copy()
        self._next_logits[len(self.tokens)] = logits
        return logits

    def sync(self, prompt: list[int]) -> np.ndarray:
        """Make the cache hold exactly ``prompt``, evaluating only what is new."""
        new = self._new_part(prompt)
        return self._next_logits[len(prompt)] if new is None else self.feed(new)

    def pending(self, prompt: list[int]) -> int:
        """How many tokens of ``prompt`` the cache lacks: what a sync, or a score's own decode, evaluates."""
        common = common_prefix(self.tokens, prompt)
        if common == len(prompt) == len(self.tokens) and common in self._next_logits:
            return 0
        return len(prompt) - min(common, len(prompt) - 1)  # at least one token, to get fresh logits

    def _new_part(self, prompt: list[int]) -> list[int] | None:
        """The cache rolled back to what it shares with ``prompt``; the tokens left to evaluate (None: the cache
        holds the prompt and its next token's logits)."""
        count = self.pending(prompt)
        if count == 0:
            return None
        self.rollback(len(prompt) - count)
        return prompt[len(prompt) - count:]

    # --- decisions -------------------------------------------------------------
    def score(self, prompt: list[int], options: list[list[int]], *, renormalise: bool = True) -> np.ndarray:
        """Log-probability of each option after ``prompt``, as a grammar would allow it.

        The options form a token trie; at every branching node the model's probabilities are renormalised over
        the allowed next tokens (what a grammar mask does), and a node with one allowed token costs nothing.
        With ``renormalise=False`` every token is scored against the whole vocabulary instead.
        """
        children: dict[tuple[int, ...], set[int]] = {}
        for option in options:
            for j, token in enumerate(option):
                children.setdefault(tuple(option[:j]), set()).add(token)
        # Each path a sequence of its own that shares the prompt's KV cells, batched together: the prompt is never
        # evaluated twice, and only the nodes scored pay for the (262k-token) output layer. The prompt's new tokens
        # go into the first batch's decode, in every sequence: one decode less per choice.
        scored = [path for path, kids in children.items() if path and (len(kids) > 1 or not renormalise)]
        batches = [scored[start:start + MAX_SEQUENCES - 1] for start in range(0, len(scored), MAX_SEQUENCES - 1)]
        new = self._new_part(prompt)
        if new is not None and (not batches or len(new) + sum(map(len, batches[0])) > self.n_batch):
            self.feed(new)  # too long to share a decode with the options (or none to share it with)
            new = None
        node_logits = {(): self._next_logits[len(prompt)]} if new is None else {}
        for paths in batches:
            self._check_deadline()
            node_logits.update(self._eval_paths(paths, new or []))
            new = None

        def logp(path: tuple[int, ...], token: int) -> float:
            kids = children[path]
            if not renormalise:  # plain log-probability: a token the model finds unlikely costs even where forced
                return float(log_softmax(node_logits[path].astype(np.float64))[token])
            if len(kids) == 1:
                return 0.0
            logits = node_logits[path]
            allowed = logits[list(kids)].astype(np.float64)
            top = allowed.max()
            return float(logits[token] - top - np.log(np.exp(allowed - top).sum()))

        return np.array([sum(logp(tuple(o[:j]), t) for j, t in enumerate(o)) for o in options])

    def _eval_paths(self, paths: list[tuple[int, ...]], new: list[int]) -> dict[tuple[int, ...], np.ndarray]:
        """Logits after each path, one sequence per path, in one decode; the prompt's ``new`` tokens (appended to
        the cache) go first, in every sequence, and their last one's logits are the key ``()``."""
        if len(self.tokens) + len(new) + max(map(len, paths)) > self.n_ctx:
            raise ContextFull(f"{len(self.tokens) + len(new)} tokens and the options do not fit in n_ctx={self.n_ctx}")
        n, batch = len(self.tokens), self.batch.batch
        batch.n_tokens, rows = 0, {}
        for k in range(len(paths)):
            self._lib.llama_memory_seq_cp(self.memory, 0, k + 1, 0, n)
        for j, token in enumerate(new):
            self._add(token, n + j, range(len(paths) + 1), last=j == len(new) - 1)
        if new:
            rows[()] = batch.n_tokens - 1
        for k, path in enumerate(paths):
            for j, token in enumerate(path):
                self._add(token, n + len(new) + j, (k + 1,), last=j == len(path) - 1)
            rows[path] = batch.n_tokens - 1
        try:
            self._decode()
            self.evaluated += batch.n_tokens
            logits = {p: np.ctypeslib.as_array(self.ctx.get_logits_ith(r), shape=(self.n_vocab,)).copy()
                      for p, r in rows.items()}
        finally:  # the paths' sequences emptied, also when the deadline cut the decode short
            for k in range(len(paths)):
                self._lib.llama_memory_seq_rm(self.memory, k + 1, -1, -1)
        if new:
            self.tokens.extend(new)
            self._next_logits[len(self.tokens)] = logits[()]
        return logits

    def _add(self, token: int, pos: int, sequences: Sequence[int], *, last: bool) -> None:
        batch = self.batch.batch
        row = batch.n_tokens
        batch.token[row], batch.pos[row], batch.n_seq_id[row], batch.logits[row] = token, pos, len(sequences), last
        for i, seq in enumerate(sequences):
            batch.seq_id[row][i] = seq
        batch.n_tokens += 1

    def decode_masked(self, prompt: list[int], allowed: np.ndarray, stop_token: int, *,
                      max_tokens: int) -> Decoded:
        """Greedy decoding of a string field: only ``allowed`` tokens, until ``stop_token``.

        A boolean mask over the vocabulary does what a one-rule grammar would, at numpy speed (llama.cpp's
        grammar sampler checks all 262k tokens in C on every step, ~40 ms here).
        """
        logits = self.sync(prompt)
        out: list[int] = []
        for step in range(max_tokens):
            masked = np.where(allowed, logits, -np.inf)
            if out:  # a string field is never empty
                masked[stop_token] = logits[stop_token]
            token = int(np.argmax(masked))
            if token == stop_token:
                # Not evaluated here: no choice reads the logits after the closing quote, and the next sync
                # evaluates it in one batch with what follows.  Alone it would be a decode of its own (~20 ms,
                # most of it the 262k-token output layer), once per string field.
                return Decoded(self.vocab.detokenize(out) + '"', out + [token], True)
            out.append(token)
            if step + 1 < max_tokens:  # the same for the last token allowed: nothing reads what would follow it
                logits = self.feed([token])
        return Decoded(self.vocab.detokenize(out), out, False)

    def decode_greedy(self, prompt: list[int], gbnf: str, *, max_tokens: int,
                      done: Callable[[str], bool], accept: Sequence[int] = ()) -> Decoded:
        """Greedy decoding under a GBNF grammar until ``done(text)`` or ``max_tokens``."""
        from llama_cpp import LlamaGrammar

        grammar = LlamaGrammar.from_string(gbnf, verbose=False)
        sampler = self._internals.LlamaSampler()
        sampler.add_grammar(self.model, grammar)
        sampler.add_greedy()
        for token in accept:  # continuing: the grammar must first walk the text already emitted
            sampler.accept(token)
        self.sync(prompt)
        out: list[int] = []
        text = ""
        try:
            for _ in range(max_tokens):
                token = sampler.sample(self.ctx, -1)
                if self._lib.llama_vocab_is_eog(self.model.vocab, token):
                    return Decoded(text, out, True)
                out.append(token)
                text = self.vocab.detokenize(out)
                self.feed([token])
                if done(text):
                    return Decoded(text, out, True)
            return Decoded(text, out, False)
        finally:
            sampler.close()

    # --- prompt cache ------------------------------------------------------------
    def prime(self, prefix: list[int], cache_dir: Path | None) -> bool:
        """Put ``prefix`` (the few-shot header) in the cache, from disk when we can; True when it came from disk.

        Its cells depend only on the model file and the tokens, so they are saved once and loaded at the next
        start (a prompt cache). Evaluated here, they are then placed where a load places them: where they lie
        decides the last bits of later logits (the maintainers page, "Every CPU").
        """
        path = None
        if cache_dir is not None:
            key = hashlib.sha256(repr((self.model_path, os.path.getsize(self.model_path), self.n_ctx,
                                       self._lib.__version__, prefix)).encode()).hexdigest()[:24]
            path = Path(cache_dir) / f"prefix-{key}.kv"
        self._header = (path, list(prefix))  # what aside() gives its own context
        if path is not None and path.is_file() and self._load_prefix(path, prefix):
            return True
        self.rollback(0)
        self.sync(prefix)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch = path.with_suffix(f".{os.getpid()}.tmp")
            array = (self._lib.llama_token * len(prefix))(*prefix)
            if self._lib.llama_state_seq_save_file(self.ctx.ctx, str(scratch).encode(), 0, array, len(prefix)):
                os.replace(scratch, path)  # atomic: a half-written file is never read
        self._reload_prefix()
        return False

    def _reload_prefix(self) -> None:
        """Sequence 0's cells saved, cleared and restored: placed in the cache as a load from disk places them."""
        size = self._lib.llama_state_seq_get_size(self.ctx.ctx, 0)
        state = (ctypes.c_uint8 * size)()
        written = self._lib.llama_state_seq_get_data(self.ctx.ctx, state, size, 0)
        self._lib.llama_memory_seq_rm(self.memory, 0, -1, -1)
        if not written or self._lib.llama_state_seq_set_data(self.ctx.ctx, state, written, 0) != written:
            raise RuntimeError("llama.cpp could not restore the prompt's KV cells")
        self._next_logits.clear()  # a load gives no logits either: the next sync evaluates at least one token

    def _load_prefix(self, path: Path, prefix: list[int]) -> bool:
        self.rollback(0)
        array, count = (self._lib.llama_token * len(prefix))(), ctypes.c_size_t(0)
        read = self._lib.llama_state_seq_load_file(self.ctx.ctx, str(path).encode(), 0, array, len(prefix),
                                                  ctypes.byref(count))
        if read == 0 or count.value != len(prefix) or list(array) != prefix:
            self._lib.llama_memory_seq_rm(self.memory, 0, -1, -1)
            return False
        self.tokens = list(prefix)
        return True

    def close(self) -> None:
        close_quietly(self.deadline_flag.close, self.batch.close, self.ctx.close, self.model.close)


# llama.cpp's C log is silent but for the load's buffer lines (it writes to stderr on every context otherwise).
LLAMA_LOG = LlamaLog()
