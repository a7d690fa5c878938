"""One OpenAI-compatible model server, through the official ``openai`` client: every request bounded by the
run's clock, every failure a typed one.

:class:`ModelServerClient` retries by itself, only when the server was unreachable or busy and the run has
time left.  Anything else is ``ModelFailed``, with a message that names the model server; no reply, however
malformed, becomes a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
import warnings
from typing import Any, Callable

from ..agent.errors import ModelFailed, ModelTimeout

for _name in ("httpx2", "httpx", "openai"):  # one line per HTTP request would drown the run's own lines
    logging.getLogger(_name).setLevel(logging.WARNING)

TOP_LOGPROBS = 20  # vLLM's default ceiling (--max-logprobs); llama-cpp-python takes any number
NO_RUN_LIMIT_S = 60.0  # a call made outside a run (no timeout_s): its own limit
RETRY_STATUSES = {429, 502, 503, 504}  # "busy, try again": anything else is not going to change


class RequestRefused(ModelFailed):
    """The server answered an HTTP error that retrying will not change (it is not busy: it said no)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ModelServerClient:
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
        # Sent as the requests' ``user``: a server may keep each learner's prompt apart by it (the lab's class
        # server gives each its own slot of the cache); a random name, nothing about the learner.
        self.user = f"miniagent-{uuid.uuid4().hex[:12]}"
        # A local server needs no key; a hosted one reads it from OPENAI_API_KEY, never from a config file.
        # No retries of the client's own: each would start with the full timeout again, past the run's clock.
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
            ends = time.monotonic() + timeout
            stream = self.client.completions.create(
                model=self.model, prompt=prompt, max_tokens=1, temperature=0, logprobs=TOP_LOGPROBS,
                stream=True, user=self.user, timeout=timeout)
            cutoff = Cutoff(stream.response, ends)
            try:
                for chunk in stream:  # llama-cpp-python may end a stream early when another request waits
                    top = _top_of(chunk)
                    if top:
                        return top
            except self.openai.APIConnectionError:
                if not cutoff.fired:
                    raise
            finally:
                cutoff.cancel()
                stream.close()
            if cutoff.fired:  # the stream was cut at the deadline, wherever its reading was
                raise self.openai.APITimeoutError(request=stream.response.request)
            raise ModelFailed(f"{self.where} gave no token log-probabilities (logprobs) for a completion")

        return self.call(send, deadline)

    def complete(self, prompt: str, max_tokens: int, stop: list[str], deadline: float | None) -> tuple[str, str, dict]:
        """Greedy text after ``prompt``: (text, finish_reason, usage)."""
        def send(timeout: float) -> tuple[str, str, dict]:
            reply = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=max_tokens,
                                                   temperature=0, stop=stop or None, user=self.user, timeout=timeout)
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


class Cutoff:
    """Shuts a streamed reply's connection at ``deadline`` (time.monotonic).

    A request's timeout bounds each read of a stream, not the stream: every byte that arrives starts it again.
    llama-cpp-python's server answers a streamed request at once and then, while the request waits for the
    model, sends a keep-alive comment every 15 s that the client reads and skips; past 15 s of queue, only
    this ends the wait at the run's deadline.
    """

    def __init__(self, response: Any, deadline: float) -> None:
        self.fired = False
        network = response.extensions.get("network_stream")  # httpx's documented way to the connection
        self._socket = network.get_extra_info("socket") if network is not None else None
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._cut)
        self._timer.daemon = True  # never holds the process's exit (a Ctrl-C before the caller could cancel it)
        if self._socket is not None:  # a transport without a socket of its own: each read keeps its bound
            self._timer.start()

    def _cut(self) -> None:
        self.fired = True
        with contextlib.suppress(OSError):  # already closed: nothing is left to wait on
            self._socket.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once (close() would not wake it)

    def cancel(self) -> None:
        self._timer.cancel()


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


def token_count(value: Any) -> int:
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
