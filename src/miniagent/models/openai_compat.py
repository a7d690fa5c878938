"""Any OpenAI-compatible server (llama.cpp's server, llama-cpp-python's, vLLM) as the model.

A classroom can share one model server.  The server constrains the reply
with the turn's JSON schema (``response_format``), so the reply is a valid
action.  Two dialects exist: OpenAI's ``{"type": "json_schema", ...}``
(llama.cpp's C++ server, vLLM) and llama-cpp-python's ``{"type":
"json_object", "schema": ...}``; ``response_format`` picks one.

Whatever goes wrong on the server's side ends the run as ``model_failed``,
with a message that names the server: it is never blamed on the conjugation
server, and no reply, however malformed, becomes a traceback.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

from ..agent.actions import schema_for_turn
from ..agent.errors import ModelFailed, ModelTimeout
from ..agent.ports import Entry, ModelReply
from .prompt import HEADER, render

SYSTEM = HEADER.split("\n\n", 1)[0] + (
    "\nReply with the next action only, as one JSON object, in the format of the examples.\n\nExamples:\n"
    + HEADER.split("\n\n", 1)[1]
)


class OpenAIBackend:
    def __init__(self, base_url: str, model: str = "local", *, max_action_tokens: int = 48,
                 response_format: str = "json_schema", timeout_s: float = 30.0) -> None:
        if response_format not in ("json_schema", "json_object"):
            raise ValueError("response_format must be json_schema or json_object")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_action_tokens = max_action_tokens
        self.response_format = response_format
        self.timeout_s = timeout_s
        self.name = f"openai:{model}"

    def _format(self, first_turn: bool, may_answer: bool | None, final: bool = False) -> dict:
        schema = schema_for_turn(first_turn, may_answer, final)
        if self.response_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "next_action", "schema": schema, "strict": True}}

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False) -> ModelReply:
        user = render(scratchpad) + "What is the next action (A:)?"
        if partial:
            user += f"\nYour reply was cut off after: {partial}\nWrite only the rest of it."
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": self.max_action_tokens,
        }
        if not partial:  # a continuation is a fragment, not a whole action
            body["response_format"] = self._format(first_turn, may_answer, final)
        started = time.perf_counter()
        data = self._post(body, timeout_s)
        text, finish_reason = self._choice(data)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return ModelReply(
            text=text,
            finish_reason="length" if finish_reason == "length" else "stop",
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            latency_s=time.perf_counter() - started,
        )

    def _post(self, body: dict, timeout_s: float | None) -> dict:
        """POST the request; the server's JSON object, or ModelTimeout / ModelFailed."""
        # The run's remaining time wins over our own request timeout: the wall clock bounds this call too.
        run_limited = timeout_s is not None and timeout_s < self.timeout_s
        limit = timeout_s if run_limited else self.timeout_s
        if limit <= 0:
            raise ModelTimeout("no time left for a model call")
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=limit) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            raise ModelFailed(f"the model server at {self.url} answered HTTP {err.code}: {_error_detail(err)}") from None
        except (TimeoutError, socket.timeout, urllib.error.URLError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, (TimeoutError, socket.timeout)):
                if run_limited:
                    raise ModelTimeout(f"the model server at {self.url} did not answer in the time left") from None
                raise ModelFailed(f"the model server at {self.url} did not answer within {limit:g} s") from None
            raise ModelFailed(f"could not reach the model server at {self.url}: {reason}") from None
        except (http.client.HTTPException, OSError) as err:
            raise ModelFailed(f"the model server at {self.url} broke the connection: {err!r}") from None
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ModelFailed(f"the model server at {self.url} sent something that is not JSON: "
                              f"{raw[:120]!r}") from None
        if not isinstance(data, dict):
            raise ModelFailed(f"the model server at {self.url} sent JSON that is not an object: {raw[:120]!r}")
        return data

    def _choice(self, data: dict) -> tuple[str, Any]:
        """The first choice's text and finish reason, checked field by field."""
        if "error" in data:
            raise ModelFailed(f"the model server at {self.url} answered with an error: {_short(data['error'])}")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ModelFailed(f"the model server at {self.url} answered without any choice: {_short(data)}")
        choice = choices[0]
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise ModelFailed(f"the model server at {self.url} sent a choice without a message: {_short(choice)}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ModelFailed(f"the model server at {self.url} sent content that is not text: {_short(content)}")
        return content or "", choice.get("finish_reason")

    def close(self) -> None:
        pass


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + "..."


def _error_detail(err: urllib.error.HTTPError) -> str:
    """The server's own words, when its error body says them (e.g. which response_format it accepts)."""
    try:
        body = err.read(2000).decode("utf-8", "replace")
    except OSError:
        return str(err.reason)
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return _short(body.strip() or str(err.reason))
    detail = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(detail, dict):
        detail = detail.get("message", detail)
    return _short(detail)
