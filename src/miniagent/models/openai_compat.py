"""Any OpenAI-compatible server (llama-cpp-python's, llama.cpp's, vLLM) as the model.

``decode="scored"`` (the default) walks the action schema as the local backend does, from the server's top
log-probabilities; ``"greedy"`` asks the chat endpoint with the turn's schema as ``response_format``.  The
server must serve the model whose GGUF file gives the tokenizer (config ``model``).  How and why:
docs/classroom.md and docs/maintainers.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import numpy as np

from ..agent.actions import schema_for_turn
from ..agent.grounding import Grounds
from ..agent.errors import ModelFailed, ModelTimeout
from ..agent.ports import Entry, ModelReply
from .llama_params import vocab_only_params
from .llama_runtime import Decoded, close_quietly, common_prefix, open_model_file
from .model_file import default_model_path
from .server_client import TOP_LOGPROBS, ModelServerClient, RequestRefused, token_count
from .prompt import HEADER, render
from .scored import ScoredDecoder
from .settings import DECODE_MODES, RESPONSE_FORMATS, check_choice
from .vocabulary import Vocabulary

log = logging.getLogger("miniagent")

# Each start-up request's limit (openai_startup_s): a busy class server serves a learner's first request after
# the others queued before it (about 0.35 s each), a wedged one never does.
STARTUP_S = 10.0

SYSTEM = HEADER.split("\n\n", 1)[0] + (
    "\nReply with the next action only, as one JSON object, in the format of the examples.\n\nExamples:\n"
    + HEADER.split("\n\n", 1)[1]
)


class ServerRuntime:
    """The scored walk's runtime (score, decode_masked: what ``KVRuntime`` decides in this process) made from a
    server's replies.

    The tokenizer is read from the GGUF file alone (``vocab_only``): the trie of
    options, the token masks and the token counts are the local backend's.
    ``tokens`` mirrors what the server's prompt cache holds after our previous
    request, so ``evaluated`` counts what a lone client makes the server evaluate.
    """

    def __init__(self, server: ModelServerClient, model_path: str | None = None, *, n_ctx: int = 2048,
                 warm_up: bool = False, startup_s: float = STARTUP_S) -> None:
        path = model_path or default_model_path()
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file not found: {path}")
        self.model = open_model_file(path, vocab_only_params())
        self.vocab = Vocabulary(self.model, path)
        self.server = server
        self.model_path = path
        self.n_ctx = n_ctx
        self.tokens: list[int] = []
        self.evaluated = 0
        self.deadline: float | None = None
        self.warm_up = warm_up
        self.startup_s = startup_s
        self.startup_failure: str | None = None  # the server did not answer its start-up check: no run can start
        self.logprobs_ok: bool | None = None  # known after the warm-up
        self.server_models: list[str] = []
        self.unseen_options = 0  # option tokens the server's top 20 did not list (scored at the floor)

    @property
    def priors_tag(self) -> str:
        """The server and the model it serves decide the options' priors too (another server, other priors)."""
        return repr(("openai", self.server.base_url, self.server.model, self.server_models))

    def _text(self, tokens: list[int]) -> str:
        """The prompt as the server reads it: text, without our BOS (detokenized without special tokens; the
        server adds its own)."""
        return self.vocab.detokenize(tokens)

    def sync(self, prompt: list[int]) -> None:
        self.evaluated += self.pending(prompt)
        self.tokens = list(prompt)

    def pending(self, prompt: list[int]) -> int:
        return len(prompt) - common_prefix(self.tokens, prompt)

    def rollback(self, length: int) -> None:
        del self.tokens[length:]

    def aside(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to keep here: what the model has evaluated is the server's."""
        return contextlib.nullcontext()

    def prime(self, prefix: list[int], cache_dir: Path | None) -> bool:
        """Warm the server up: the header goes into its prompt cache before any run starts."""
        if self.warm_up:
            self._warm_up(prefix)
        return False

    def _warm_up(self, prefix: list[int]) -> None:
        """Before any run: does the server answer, does it count tokens as we do, does it give log-probabilities,
        and the header into its prompt cache.  Each request has ``startup_s`` seconds: a server that takes the
        connection and never answers (wedged) must not hold a learner's command for minutes."""
        where, limit = self.server.where, self.startup_s
        log.info("checking %s (each start-up request may take up to %g s: openai_startup_s)", where, limit)
        try:
            self.server_models = self.server.model_ids(time.monotonic() + limit)
        except ModelFailed:  # a server without /models can still complete: only the priors' file name needs it
            self.server_models = []
        except ModelTimeout:
            self.startup_failure = (f"{where} took the connection but did not answer GET {self.server.base_url}"
                                    f"/models within {limit:g} s (openai_startup_s): it is wedged, or too busy")
            log.warning("%s", self.startup_failure)
            return
        try:
            _, _, usage = self.server.complete(self._text(prefix), 1, [], time.monotonic() + limit)
            if usage.get("prompt_tokens") not in (None, len(prefix)):
                log.warning("%s counts %s tokens in the prompt header, the tokenizer of %s counts %d: it serves "
                            "another model, and scored decoding will be off", where, usage["prompt_tokens"],
                            self.model_path, len(prefix))
            self.server.top_logprobs(self._text(prefix), time.monotonic() + limit)
            self.logprobs_ok = True
        except ModelFailed as err:
            if "log-probabilities" in str(err) or isinstance(err, RequestRefused):
                self.logprobs_ok = False
            log.warning("warming up %s: %s", where, err)
        except ModelTimeout:  # it answered /models: busy or cold, not wedged; the first turn pays for the header
            log.warning("warming up %s: no answer within %g s (openai_startup_s); the first turn will wait for it",
                        where, limit)

    def _top(self, tokens: list[int]) -> dict[str, float]:
        top = self.server.top_logprobs(self._text(tokens), self.deadline)
        self.evaluated += 1
        return top

    def score(self, prompt: list[int], options: list[list[int]], *, renormalise: bool = True) -> np.ndarray:
        """``KVRuntime.score`` from the server's top log-probabilities, one request per branching point.

        An option token missing from the server's top 20 gets the 20th one's log-probability (a
        ceiling: the true value is lower); ``unseen_options`` counts how often that happened.
        """
        children: dict[tuple[int, ...], set[int]] = {}
        for option in options:
            for j, token in enumerate(option):
                children.setdefault(tuple(option[:j]), set()).add(token)
        self.sync(prompt)
        node_logprobs: dict[tuple[int, ...], dict[int, float]] = {}
        for path, kids in children.items():
            if len(kids) == 1 and renormalise:
                continue
            top = self._top(prompt + list(path))
            self.evaluated += len(path)
            floor = min(top.values())
            values = {}
            for kid in kids:
                value = top.get(self.vocab.piece(kid))
                if value is None:
                    self.unseen_options += 1
                    value = floor
                values[kid] = value
            node_logprobs[path] = values

        def logp(path: tuple[int, ...], token: int) -> float:
            if path not in node_logprobs:
                return 0.0  # the only token the options allow here
            values = node_logprobs[path]
            if not renormalise:
                return values[token]
            allowed = np.array(list(values.values()), dtype=np.float64)
            top = allowed.max()
            return float(values[token] - top - np.log(np.exp(allowed - top).sum()))

        return np.array([sum(logp(tuple(o[:j]), t) for j, t in enumerate(o)) for o in options])

    def decode_masked(self, prompt: list[int], allowed: np.ndarray, stop_token: int, *,
                      max_tokens: int) -> Decoded:
        """``KVRuntime.decode_masked`` by the server: greedy text up to the closing quote, checked token by token.

        While the server's tokens are ones the mask allows, its text is the local backend's.  Where the mask
        refuses one, or the server stopped, the next token is the likeliest the mask allows among the server's top
        log-probabilities, as the local backend's argmax would.
        """
        self.sync(prompt)
        out: list[int] = []
        while len(out) < max_tokens:
            text, finish, _ = self.server.complete(self._text(prompt + out), max_tokens - len(out), ['"'],
                                                   self.deadline)
            got = self.vocab.tokenize(text) if text else []
            self.evaluated += len(got) + 1
            good = 0
            while good < len(got) and allowed[got[good]]:
                good += 1
            out += got[:good]
            if good == len(got) and got and (finish == "length" or len(out) >= max_tokens):
                return Decoded(self.vocab.detokenize(out), out, False)
            # A stop at the quote is no end: its token is often '",' or '"}', which the local mask refuses; taken
            # as the end, it wrote "clim" where the local backend wrote "climbed" (heldout, "climb for she").
            top = self._top(prompt + out)  # a refused token, or a stop whose token we cannot see
            choices = []
            for piece, value in top.items():
                ids = self.vocab.tokenize(piece) if piece else []
                if len(ids) == 1 and (allowed[ids[0]] or (ids[0] == stop_token and out)):
                    choices.append((value, ids[0]))
            if not choices:
                if out:  # nothing the field allows among the likeliest tokens: close the string here
                    return Decoded(self.vocab.detokenize(out) + '"', out + [stop_token], True)
                raise ModelFailed(f"{self.server.where}: none of the {TOP_LOGPROBS} likeliest tokens fits the field")
            token = max(choices)[1]
            if token == stop_token:
                return Decoded(self.vocab.detokenize(out) + '"', out + [stop_token], True)
            out.append(token)
        return Decoded(self.vocab.detokenize(out), out, False)

    def close(self) -> None:
        self.server.close()
        close_quietly(self.model.close)


class OpenAIBackend:
    def __init__(self, base_url: str, model: str = "local", *, max_action_tokens: int = 48,
                 decode: str = "scored", response_format: str = "auto", model_path: str | None = None,
                 n_ctx: int = 2048, cache_dir: str | os.PathLike | None = None, max_retries: int = 2,
                 warm_up: bool = False, startup_s: float = STARTUP_S) -> None:
        check_choice("decode", decode, DECODE_MODES)
        check_choice("openai_response_format", response_format, RESPONSE_FORMATS)
        self.server = ModelServerClient(base_url, model, max_retries=max_retries)
        self.response_format = response_format
        self.format_in_use = "json_schema" if response_format == "auto" else response_format
        self.rt = ServerRuntime(self.server, model_path, n_ctx=n_ctx, warm_up=warm_up, startup_s=startup_s)
        # the same walk as the local backend's, over the server (its warm-up runs as the header is primed)
        self.decoder = ScoredDecoder(self.rt, max_action_tokens=max_action_tokens, cache_dir=cache_dir)
        self.decode = decode
        self.url = self.server.base_url
        if decode == "scored" and self.rt.logprobs_ok is False:
            log.warning("%s gives no token log-probabilities on its completions endpoint: decoding greedily "
                        "through its chat endpoint instead (expect lower accuracy)", self.server.where)
            self.decode = "greedy"
        self.name = f"openai:{self.decode}"

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> ModelReply:
        if self.rt.startup_failure:  # no run can start on a server that did not answer
            raise ModelFailed(self.rt.startup_failure)
        if timeout_s is not None and timeout_s <= 0:
            raise ModelTimeout("no time left for a model call")
        if self.decode == "greedy":
            return self._chat_action(scratchpad, first_turn, may_answer, partial, timeout_s, final, grounds)
        return self.decoder.reply(scratchpad, schema_for_turn(first_turn, may_answer, final, grounds),
                                  partial=partial, timeout_s=timeout_s)

    def close(self) -> None:
        self.rt.close()

    # --- greedy: the chat endpoint and the server's JSON mode ---------------------------------
    def _format(self, kind: str, first_turn: bool, may_answer: bool | None, final: bool,
                grounds: Grounds | None) -> dict:
        schema = schema_for_turn(first_turn, may_answer, final, grounds)
        if kind == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "next_action", "schema": schema, "strict": True}}

    def _chat_action(self, scratchpad: list[Entry], first_turn: bool, may_answer: bool | None, partial: str,
                     timeout_s: float | None, final: bool, grounds: Grounds | None) -> ModelReply:
        user = render(scratchpad) + "What is the next action (A:)?"
        if partial:
            user += f"\nYour reply was cut off after: {partial}\nWrite only the rest of it."
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        started = time.perf_counter()

        def ask(kind: str | None) -> tuple[str, str, dict]:
            fmt = self._format(kind, first_turn, may_answer, final, grounds) if kind else None
            return self.server.chat(messages, self.decoder.max_action_tokens, fmt, deadline)

        if partial:  # a continuation is a fragment, not a whole action
            text, finish, usage = ask(None)
        else:
            try:
                text, finish, usage = ask(self.format_in_use)
            except RequestRefused as refused:
                if self.response_format != "auto" or self.format_in_use != "json_schema" or refused.status in (401, 403, 404):
                    raise
                # llama-cpp-python's server answers HTTP 500 to json_schema; it takes json_object with a schema
                try:
                    text, finish, usage = ask("json_object")
                except ModelFailed as also:
                    raise ModelFailed(f"{refused}; with response_format json_object instead: {also}") from None
                self.format_in_use = "json_object"
                log.warning("%s refused response_format json_schema (%s) and took json_object with the schema "
                            "(llama-cpp-python's dialect): using that from now on", self.server.where, refused)
        return ModelReply(text=text, finish_reason="length" if finish == "length" else "stop",
                          prompt_tokens=token_count(usage.get("prompt_tokens")),
                          completion_tokens=token_count(usage.get("completion_tokens")),
                          latency_s=time.perf_counter() - started)
