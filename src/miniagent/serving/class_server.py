"""The lab's class server: one model for a class, behind the part of the OpenAI API scored decoding uses.

    python -m miniagent.serving.class_server [--host 0.0.0.0] [--port 8000] [--slots 16] [--n-ctx 16384]
                                            [--n-threads N] [--model PATH] [--llama-amx auto|on|off]

A slot per learner (:mod:`.slots`), one request at a time.  No chat endpoint: ``decode = "greedy"`` needs
llama-cpp-python's server.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..agent.errors import ContextFull

MODEL_ID = "local"  # what the lab sends by default (openai_model)
MAX_LOGPROBS = 20  # the top ``logprobs`` a request may ask for, as vLLM's default


class CompletionRequest(BaseModel):
    """The fields of a completion request this server honours; others (``temperature``, ``seed``...) are
    accepted and ignored: decoding is always greedy."""

    model_config = ConfigDict(extra="ignore")
    prompt: str | list[str]
    max_tokens: int = Field(16, ge=0)
    stop: str | list[str] | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    stream: bool = False
    model: str = MODEL_ID
    user: str | None = None  # who asks: each learner's requests go to that learner's slot


def build_app(slots, *, model_id: str = MODEL_ID, on_exit=None):
    """The Starlette app over a :class:`.slots.Slots` (one lock: one request at a time); ``on_exit()`` runs
    when the server shuts down (uvicorn ends the process with the signal that stopped it, so a ``finally``
    after ``uvicorn.run`` would not run)."""
    import contextlib

    # Starlette and uvicorn come with llama-cpp-python[server]: no dependency of this server's own.
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    lock = threading.Lock()  # one request at a time: on a CPU one request already keeps every core busy

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)

    def models(request):
        return JSONResponse({"object": "list", "data": [{"id": model_id, "object": "model", "owned_by": "miniagent"}]})

    async def completions(request):
        from starlette.concurrency import run_in_threadpool

        try:
            body, prompt, stop = _parse(await request.body())
        except ValueError as err:
            return error(400, str(err))
        tokens = slots.vocab.tokenize(prompt, bos=True)
        if len(tokens) + body.max_tokens > slots.n_ctx:
            return error(400, f"{len(tokens)} prompt tokens and max_tokens {body.max_tokens} do not fit in "
                              f"n_ctx={slots.n_ctx}")

        def work():
            with lock:
                return slots.complete(tokens, body.max_tokens, stop, body.logprobs, body.user)

        try:
            done = await run_in_threadpool(work)
        except ContextFull as err:
            return error(400, str(err))
        reply = _Reply(done, [slots.vocab.piece(t) for t in done.tokens], prompt, len(tokens), body, model_id)
        if body.stream:
            return StreamingResponse(reply.events(), media_type="text/event-stream")
        return JSONResponse(reply.whole())

    def chat(request):
        return error(404, "this server has no chat endpoint: it serves scored decoding (/v1/completions); "
                          "for decode = \"greedy\" use llama-cpp-python's server", "not_found_error")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if on_exit is not None:
            on_exit()

    return Starlette(lifespan=lifespan, routes=[
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ])


def _parse(raw: bytes) -> tuple[CompletionRequest, str, list[str]]:
    """A request's body as (the request, its one prompt, its stop strings); ValueError says what is wrong."""
    try:
        body = CompletionRequest.model_validate(json.loads(raw))
    except ValidationError as err:
        raise ValueError("not a completion request: " + "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors())) from None
    except ValueError as err:  # not JSON
        raise ValueError(f"not a completion request: {err}") from None
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise ValueError("this server completes one prompt per request")
    return body, prompts[0], [body.stop] if isinstance(body.stop, str) else list(body.stop or [])


class _Reply:
    """One completion in the OpenAI format, whole or as server-sent events (a chunk per token)."""

    def __init__(self, done, pieces: list[str], prompt: str, prompt_tokens: int, body: CompletionRequest,
                 model_id: str) -> None:
        self.done, self.pieces, self.body, self.model_id = done, pieces, body, model_id
        self.prompt_tokens = prompt_tokens
        self.id, self.created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        self.offset = len(prompt)

    def _frame(self, choice: dict, usage: bool = False) -> dict:
        frame = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model_id,
                 "choices": [{"index": 0, **choice}]}
        if usage:
            completion = len(self.done.tokens)
            frame["usage"] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                              "total_tokens": self.prompt_tokens + completion}
        return frame

    def _logprobs(self, first: int, last: int) -> dict | None:
        """The ``logprobs`` of tokens ``first`` to ``last`` (excluded), in the OpenAI completions format."""
        if self.body.logprobs is None:
            return None
        at = self.offset + sum(len(p) for p in self.pieces[:first])
        offsets = []
        for piece in self.pieces[first:last]:
            offsets.append(at)
            at += len(piece)
        return {"tokens": self.pieces[first:last], "token_logprobs": self.done.token_logprobs[first:last],
                "top_logprobs": self.done.top_logprobs[first:last], "text_offset": offsets}

    def whole(self) -> dict:
        return self._frame({"text": self.done.text, "logprobs": self._logprobs(0, len(self.pieces)),
                            "finish_reason": self.done.finish_reason}, usage=True)

    def events(self):
        written = 0
        for k, piece in enumerate(self.pieces):
            text = self.done.text[written:written + len(piece)]  # the text is cut before a stop string
            written += len(text)
            yield _event(self._frame({"text": text, "logprobs": self._logprobs(k, k + 1), "finish_reason": None}))
        yield _event(self._frame({"text": "", "logprobs": None, "finish_reason": self.done.finish_reason}))
        yield "data: [DONE]\n\n"


def _event(frame: dict) -> str:
    return f"data: {json.dumps(frame)}\n\n"


def build_parser() -> argparse.ArgumentParser:
    from ..models.settings import AMX_CHOICES

    parser = argparse.ArgumentParser(prog="python -m miniagent.serving.class_server",
                                     description="The lab's class server: one model, a slot per learner, "
                                                 "the completions endpoint scored decoding uses.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: the whole network)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=None, help="GGUF file (default: the embedded Gemma 3 270M)")
    # One slot per learner of a 16-learner class; the cells: the header once, and each learner's own part
    # (a few hundred tokens, up to a 2048-token window).  About 300 MB of KV cache for this model.
    parser.add_argument("--slots", type=int, default=16, help="learners' prompts kept in the cache at once")
    parser.add_argument("--n-ctx", type=int, default=16384, help="KV cells shared by all slots")
    parser.add_argument("--n-threads", type=int, default=None, help="llama.cpp threads (default: every core)")
    parser.add_argument("--llama-amx", choices=AMX_CHOICES, default=None,
                        help="llama.cpp's AMX path (default: miniagent.toml, MINIAGENT_LLAMA_AMX, else auto)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("slots", "n_ctx", "n_threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"miniagent: bad setting: --{name.replace('_', '-')} must be at least 1, not {value}", file=sys.stderr)
            return 2
    from ..agent.config import ConfigError
    from .llama_cpp_server import amx_from_layers

    try:
        amx = amx_from_layers(args.llama_amx)
    except ConfigError as err:
        print(f"miniagent: bad setting: {err}", file=sys.stderr)
        return 2
    import uvicorn

    from ..processes import usable_cores
    from ..models.llama_runtime import load_weights
    from .slots import Slots

    threads = args.n_threads or usable_cores()
    slots = Slots(load_weights(args.model, amx), slots=args.slots, n_ctx=args.n_ctx, n_threads=threads)
    print(f"[miniagent] class server: {slots.model_path}, {args.slots} slots, n_ctx {args.n_ctx}, "
          f"{threads} threads, {amx.describe()}; http://{args.host}:{args.port}/v1", file=sys.stderr)

    def on_exit():
        print(f"[miniagent] class server: {slots.requests} requests, {slots.evaluated} tokens evaluated, "
              f"{slots.shared} reused from another slot's cache", file=sys.stderr)  # stderr is line-buffered

    uvicorn.run(build_app(slots, on_exit=on_exit), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
