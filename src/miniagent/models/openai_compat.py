"""Any OpenAI-compatible server (llama-cpp-python's, llama.cpp's, vLLM) as the model.

A classroom can share one model server.  The backend talks to it with the
official ``openai`` client and decodes like the local backend (``decode``):

* ``scored`` (default): the very prompt the local backend builds (the few-shot
  header, then the scratchpad), sent as raw text to the completions endpoint,
  and the very same walk of the action schema (``LlamaBackend._scored``): only
  the runtime under it changes.  Where the local runtime scores the options of
  an enum in one batched decode, ``ServerRuntime`` asks the server for the
  next token's log-probabilities (``logprobs``, the top 20) at each point
  where the options part, and adds them up the same way; free strings (the
  verb, the answer) are decoded greedily by the server and checked against
  the same token masks.  Chat templates play no part, and nothing the server
  does to a JSON schema (or fails to do) matters.
* ``greedy``: the chat endpoint with the turn's schema as ``response_format``.
  Servers speak two dialects: OpenAI's ``json_schema`` (vLLM, llama.cpp's C++
  server) and llama-cpp-python's ``json_object`` with a ``schema``.  With
  ``response_format="auto"`` the backend tries ``json_schema`` and, when the
  server refuses it, uses ``json_object`` from then on and says so.

The tokenizer comes from the same GGUF file as the local backend's (config
``model``, default the embedded Gemma 3 270M), read without its weights: the
server must serve that model.  At start-up the backend checks that the server
counts the prompt's tokens as we do, puts the header in the server's prompt
cache, and checks that it gives log-probabilities (or falls back to greedy).

Time: each call gets what is left of the run (``timeout_s``); a server that is
still busy when that runs out raises ``ModelTimeout``.  The client's own
retries would start each attempt with the full timeout again and outlive the
run's clock, so the client is built with ``max_retries=0`` and the backend
retries by itself: only when the server could not be reached or said it is
busy (429, 502, 503, 504), only ``max_retries`` times, and only while the run
has time left.  Whatever else goes wrong on the server's side ends the run as
``model_failed``, with a message that names the model server: it is never
blamed on the conjugation server, and no reply, however malformed, becomes a
traceback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..agent.actions import schema_for_turn
from ..agent.grounding import Grounds
from ..agent.errors import ModelFailed, ModelTimeout
from ..agent.ports import Entry, ModelReply
from .llama import LlamaBackend
from .llama_params import vocab_only_params
from .llama_runtime import Decoded, KVRuntime, default_model_path
from .prompt import HEADER, render

log = logging.getLogger("miniagent")
for _name in ("httpx2", "httpx", "openai"):  # one line per HTTP request would drown the run's own lines
    logging.getLogger(_name).setLevel(logging.WARNING)

TOP_LOGPROBS = 20  # vLLM's default ceiling (--max-logprobs); llama-cpp-python takes any number
NO_RUN_LIMIT_S = 60.0  # a call made outside a run (no timeout_s): its own limit
# Each start-up request's limit (openai_startup_s): a busy class server serves a learner's first request after
# the others queued before it (about 0.35 s each), a wedged one never does.
STARTUP_S = 10.0
RETRY_STATUSES = {429, 502, 503, 504}  # "busy, try again": anything else is not going to change

SYSTEM = HEADER.split("\n\n", 1)[0] + (
    "\nReply with the next action only, as one JSON object, in the format of the examples.\n\nExamples:\n"
    + HEADER.split("\n\n", 1)[1]
)


class RequestRefused(ModelFailed):
    """The server answered an HTTP error that retrying will not change (it is not busy: it said no)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelServer:
    """One OpenAI-compatible server, through the official client: every failure a typed one."""

    def __init__(self, base_url: str, model: str = "local", *, max_retries: int = 2,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import openai

        self.openai = openai
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.where = f"the model server at {self.base_url}"
        self.max_retries = max_retries
        self.sleep = sleep
        self.requests = 0  # HTTP requests sent (retries included): the class-load figures read it
        # A local server needs no key; a hosted one reads it from OPENAI_API_KEY, never from a config file.
        self.client = openai.OpenAI(base_url=self.base_url, api_key=os.environ.get("OPENAI_API_KEY") or "none",
                                    max_retries=0)

    # --- one request, bounded by a deadline, failures typed ----------------------------------
    def call(self, send: Callable[[float], Any], deadline: float | None) -> Any:
        """``send(timeout)`` until it returns, within ``deadline`` (time.monotonic), else ModelTimeout/ModelFailed."""
        run_limited = deadline is not None
        deadline = deadline if deadline is not None else time.monotonic() + NO_RUN_LIMIT_S
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if run_limited:
                    raise ModelTimeout(f"{self.where} did not answer in the time left")
                raise ModelFailed(f"{self.where} did not answer within {NO_RUN_LIMIT_S:g} s")
            try:
                self.requests += 1
                return send(left)
            except self.openai.APITimeoutError:
                if run_limited:
                    raise ModelTimeout(f"{self.where} did not answer in the time left") from None
                raise ModelFailed(f"{self.where} did not answer within {NO_RUN_LIMIT_S:g} s") from None
            except self.openai.APIConnectionError as err:
                failure = f"could not reach {self.where}: {_cause(err)}"
            except self.openai.APIStatusError as err:
                failure = f"{self.where} answered HTTP {err.status_code}: {_status_detail(err)}"
                if err.status_code not in RETRY_STATUSES:
                    raise RequestRefused(failure, err.status_code) from None
            except self.openai.APIError as err:  # e.g. an error event inside a stream
                raise ModelFailed(f"{self.where} answered with an error: {_short(str(err))}") from None
            except (ValueError, TypeError, AttributeError, KeyError) as err:  # a body that is not a reply
                raise ModelFailed(f"{self.where} sent something that is not a reply: {_short(repr(err))}") from None
            pause = 0.5 * 2 ** attempt
            if attempt >= self.max_retries or time.monotonic() + pause >= deadline:
                raise ModelFailed(failure + (f" (after {attempt} retries)" if attempt else ""))
            attempt += 1
            self.sleep(pause)

    # --- what the backend asks -------------------------------------------------------------
    def top_logprobs(self, prompt: str, deadline: float | None) -> dict[str, float]:
        """The log-probabilities of the likeliest next tokens after ``prompt`` (raw text, no template).

        Streamed: llama-cpp-python computes them for the streamed token only (0.35 s here), where a
        plain request computes them for every token of the prompt first (2 s for our 1,230 tokens).
        """
        def send(timeout: float) -> dict[str, float]:
            stream = self.client.completions.create(
                model=self.model, prompt=prompt, max_tokens=1, temperature=0, logprobs=TOP_LOGPROBS,
                stream=True, timeout=timeout)
            try:
                for chunk in stream:  # llama-cpp-python may end a stream early when another request waits
                    top = _top_of(chunk)
                    if top:
                        return top
            finally:
                stream.close()
            raise ModelFailed(f"{self.where} gave no token log-probabilities (logprobs) for a completion")

        return self.call(send, deadline)

    def complete(self, prompt: str, max_tokens: int, stop: list[str], deadline: float | None) -> tuple[str, str, dict]:
        """Greedy text after ``prompt``: (text, finish_reason, usage)."""
        def send(timeout: float) -> tuple[str, str, dict]:
            reply = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=max_tokens,
                                                   temperature=0, stop=stop or None, timeout=timeout)
            choice = _choice(reply, self.where)
            text = choice.get("text")
            if not isinstance(text, str):
                raise ModelFailed(f"{self.where} sent a completion without text: {_short(choice)}")
            return text, str(choice.get("finish_reason") or "stop"), _usage(reply)

        return self.call(send, deadline)

    def chat(self, messages: list[dict], max_tokens: int, response_format: dict | None,
             deadline: float | None) -> tuple[str, str, dict]:
        def send(timeout: float) -> tuple[str, str, dict]:
            extra = {"response_format": response_format} if response_format else {}
            reply = self.client.chat.completions.create(model=self.model, messages=messages, temperature=0,
                                                        max_tokens=max_tokens, timeout=timeout, **extra)
            choice = _choice(reply, self.where)
            message = choice.get("message")
            if not isinstance(message, dict):
                raise ModelFailed(f"{self.where} sent a choice without a message: {_short(choice)}")
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise ModelFailed(f"{self.where} sent content that is not text: {_short(content)}")
            return content or "", str(choice.get("finish_reason") or "stop"), _usage(reply)

        return self.call(send, deadline)

    def model_ids(self, deadline: float | None) -> list[str]:
        def send(timeout: float) -> list[str]:
            return [m.id for m in self.client.models.list(timeout=timeout)]

        return self.call(send, deadline)

    def close(self) -> None:
        self.client.close()


class ServerRuntime(KVRuntime):
    """``KVRuntime``'s decisions (score, decode_masked) made from a server's replies.

    The tokenizer is read from the GGUF file alone (``vocab_only``): the trie of
    options, the token masks and the token counts are the local backend's.
    ``tokens`` mirrors what the server's prompt cache holds after our previous
    request, so ``evaluated`` counts what a lone client makes the server evaluate.
    """

    def __init__(self, server: ModelServer, model_path: str | None = None, *, n_ctx: int = 2048,
                 warm_up: bool = False, startup_s: float = STARTUP_S) -> None:
        from llama_cpp import _internals as internals

        path = model_path or default_model_path()
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model file not found: {path}")
        self.model = internals.LlamaModel(path_model=path, params=vocab_only_params(), verbose=False)
        self.server = server
        self.model_path = path
        self.n_ctx = n_ctx
        self.n_vocab = self.model.n_vocab()
        self.bos = self.model.token_bos()
        self.tokens: list[int] = []
        self.evaluated = 0
        self.deadline: float | None = None
        self.warm_up = warm_up
        self.startup_s = startup_s
        self.startup_failure: str | None = None  # the server did not answer its start-up check: no run can start
        self.logprobs_ok: bool | None = None  # known after the warm-up
        self.server_models: list[str] = []
        self.unseen_options = 0  # option tokens the server's top 20 did not list (scored at the floor)
        self._pieces: dict[int, str] = {}

    def _text(self, tokens: list[int]) -> str:
        return self.detokenize(tokens[1:] if tokens[:1] == [self.bos] else tokens)

    def piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.model.detokenize([token]).decode("utf-8", errors="ignore")
        return self._pieces[token]

    def sync(self, prompt: list[int]) -> None:
        common = 0
        for have, want in zip(self.tokens, prompt):
            if have != want:
                break
            common += 1
        self.evaluated += len(prompt) - common
        self.tokens = list(prompt)

    def rollback(self, length: int) -> None:
        del self.tokens[length:]

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
                value = top.get(self.piece(kid))
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

        While the server's greedy tokens are ones the mask allows, its text is the local backend's. At a
        token the mask refuses, that one token is chosen from the server's top log-probabilities among
        those the mask allows (the local backend's argmax over the mask), and the server goes on from there.

        Where the server stopped at a quote, the string is not taken as ended: the token that held the
        quote is often '",' or '"}' (the model writes the rest of the JSON with it), which the local
        backend's mask refuses, since only the quote alone ends a string there.  Taking the server's stop
        as the end wrote "clim" where the local backend wrote "climbed" (heldout, "climb for she"), so
        the end is decided like any refused token: the quote alone against the tokens the mask allows.
        """
        self.sync(prompt)
        out: list[int] = []
        while len(out) < max_tokens:
            text, finish, _ = self.server.complete(self._text(prompt + out), max_tokens - len(out), ['"'],
                                                   self.deadline)
            got = self.tokenize(text) if text else []
            self.evaluated += len(got) + 1
            good = 0
            while good < len(got) and allowed[got[good]]:
                good += 1
            out += got[:good]
            if good == len(got) and got and (finish == "length" or len(out) >= max_tokens):
                return Decoded(self.detokenize(out), out, False)
            top = self._top(prompt + out)  # a refused token, or a stop whose token we cannot see
            choices = []
            for piece, value in top.items():
                ids = self.tokenize(piece) if piece else []
                if len(ids) == 1 and (allowed[ids[0]] or (ids[0] == stop_token and out)):
                    choices.append((value, ids[0]))
            if not choices:
                if out:  # nothing the field allows among the likeliest tokens: close the string here
                    return Decoded(self.detokenize(out) + '"', out + [stop_token], True)
                raise ModelFailed(f"{self.server.where}: none of the {TOP_LOGPROBS} likeliest tokens fits the field")
            token = max(choices)[1]
            if token == stop_token:
                return Decoded(self.detokenize(out) + '"', out + [stop_token], True)
            out.append(token)
        return Decoded(self.detokenize(out), out, False)

    def decode_greedy(self, *args, **kwargs) -> Decoded:  # the backend's greedy mode is the chat endpoint
        raise NotImplementedError("ServerRuntime decodes greedily through the chat endpoint")

    def close(self) -> None:
        self.server.close()
        try:
            self.model.close()
        except Exception:  # closing twice or at interpreter exit
            pass


class OpenAIBackend(LlamaBackend):
    def __init__(self, base_url: str, model: str = "local", *, max_action_tokens: int = 48,
                 decode: str = "scored", response_format: str = "auto", model_path: str | None = None,
                 n_ctx: int = 2048, cache_dir: str | os.PathLike | None = None, max_retries: int = 2,
                 warm_up: bool = False, startup_s: float = STARTUP_S) -> None:
        if response_format not in ("auto", "json_schema", "json_object"):
            raise ValueError("openai_response_format must be auto, json_schema or json_object")
        self.server = ModelServer(base_url, model, max_retries=max_retries)
        self._warm_up, self._startup_s = warm_up, startup_s
        self.response_format = response_format
        self.format_in_use = "json_schema" if response_format == "auto" else response_format
        super().__init__(model_path, n_ctx=n_ctx, max_action_tokens=max_action_tokens, decode=decode,
                         cache_dir=cache_dir)
        self.url = self.server.base_url
        if decode == "scored" and self.rt.logprobs_ok is False:
            log.warning("%s gives no token log-probabilities on its completions endpoint: decoding greedily "
                        "through its chat endpoint instead (expect lower accuracy)", self.server.where)
            self.decode = "greedy"
        self.name = f"openai:{self.decode}"

    def _runtime(self, model_path: str | None, *, n_ctx: int, n_threads: int, amx=None, weights=None) -> ServerRuntime:
        return ServerRuntime(self.server, model_path, n_ctx=n_ctx, warm_up=self._warm_up, startup_s=self._startup_s)

    def _priors_path(self, cache: Path | None) -> Path | None:
        """The server's own priors: another file than the local model's, per server and model."""
        path = super()._priors_path(cache)
        if path is None:
            return None
        key = hashlib.sha256(repr((path.name, self.server.base_url, self.server.model,
                                   self.rt.server_models)).encode()).hexdigest()[:24]
        return path.with_name(f"priors-openai-{key}.npz")

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> ModelReply:
        if self.rt.startup_failure:  # no run can start on a server that did not answer
            raise ModelFailed(self.rt.startup_failure)
        if timeout_s is not None and timeout_s <= 0:
            raise ModelTimeout("no time left for a model call")
        if self.decode == "greedy":
            return self._chat_action(scratchpad, first_turn, may_answer, partial, timeout_s, final, grounds)
        return super().next_action(scratchpad, first_turn=first_turn, may_answer=may_answer, partial=partial,
                                   timeout_s=timeout_s, final=final, grounds=grounds)

    # --- greedy: the chat endpoint and the server's JSON mode ---------------------------------
    def _format(self, kind: str, first_turn: bool, may_answer: bool | None, final: bool = False,
                grounds: Grounds | None = None) -> dict:
        schema = schema_for_turn(first_turn, may_answer, final, grounds)
        if kind == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "next_action", "schema": schema, "strict": True}}

    def _chat_action(self, scratchpad: list[Entry], first_turn: bool, may_answer: bool | None, partial: str,
                     timeout_s: float | None, final: bool = False, grounds: Grounds | None = None) -> ModelReply:
        user = render(scratchpad) + "What is the next action (A:)?"
        if partial:
            user += f"\nYour reply was cut off after: {partial}\nWrite only the rest of it."
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        started = time.perf_counter()

        def ask(kind: str | None) -> tuple[str, str, dict]:
            fmt = self._format(kind, first_turn, may_answer, final, grounds) if kind else None
            return self.server.chat(messages, self.max_action_tokens, fmt, deadline)

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
                          prompt_tokens=_count(usage.get("prompt_tokens")),
                          completion_tokens=_count(usage.get("completion_tokens")),
                          latency_s=time.perf_counter() - started)


# --- reading replies defensively ------------------------------------------------------------------
def _as_dict(reply: Any) -> Any:
    if hasattr(reply, "to_dict"):
        try:
            with warnings.catch_warnings():  # the client builds replies without validation: we check them here
                warnings.simplefilter("ignore")
                return reply.to_dict()
        except Exception:  # a reply that does not even serialise: read its fields as they are
            pass
    return getattr(reply, "__dict__", reply)


def _choice(reply: Any, where: str) -> dict:
    data = _as_dict(reply)
    if not isinstance(data, dict):
        raise ModelFailed(f"{where} sent JSON that is not an object: {_short(data)}")
    if data.get("error"):
        raise ModelFailed(f"{where} answered with an error: {_short(data['error'])}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelFailed(f"{where} answered without any choice: {_short(data)}")
    return choices[0]


def _top_of(chunk: Any) -> dict[str, float]:
    data = _as_dict(chunk)
    if not isinstance(data, dict) or data.get("error"):
        raise ValueError(f"not a completion chunk: {_short(data)}")
    for choice in data.get("choices") or []:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
        if isinstance(tops, list) and tops and isinstance(tops[0], dict):
            return {str(k): float(v) for k, v in tops[0].items() if isinstance(v, (int, float)) and math.isfinite(v)}
    return {}


def _usage(reply: Any) -> dict:
    data = _as_dict(reply)
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."


def _cause(err: Exception) -> str:
    cause = err.__cause__ or err.__context__
    return _short(str(cause) if cause else str(err))


def _status_detail(err: Any) -> str:
    """The server's own words, when its error body says them (e.g. which response_format it accepts)."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        detail = body.get("error", body)
        if isinstance(detail, dict):
            detail = detail.get("message") or detail.get("detail") or detail
        return _short(detail)
    if isinstance(body, str) and body.strip():
        return _short(body.strip())
    return _short(getattr(err, "message", str(err)))
