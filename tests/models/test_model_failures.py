"""The model's side failing: a typed ``model_failed`` stop (never a traceback, never blamed on the
MCP server), and a wall clock that bounds model calls as it bounds tool calls.

A small OpenAI-compatible server on loopback plays the broken model server; the real llama
backend shows that decoding stops between tokens when the run's time is up.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import FakeTools, config

from miniagent.agent.loop import grammar_tutor
from miniagent.agent.ports import Entry
from miniagent.models.openai_compat import OpenAIBackend

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 0.5  # what theory 05 promises beyond wall_clock_s
QUESTION = "What is the past simple of go for she?"


class FakeModelServer:
    """Answers every POST with ``reply`` (status, body); ``hang`` never answers until closed.

    A streamed request (``"stream": true``, the scored decoding's log-probabilities) gets the body as
    one server-sent event; ``answer`` may replace the fixed reply: (request) -> (status, body).
    """

    def __init__(self, status: int = 200, body: bytes = b"{}", hang: bool = False, answer=None) -> None:
        self.status, self.body, self.hang, self.answer = status, body, hang, answer
        self.release = threading.Event()
        self.requests: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    request = json.loads(raw)
                except json.JSONDecodeError:
                    request = {}
                outer.requests.append(request)
                if outer.hang:
                    outer.release.wait(30)
                    return
                status, body = outer.answer(request) if outer.answer else (outer.status, outer.body)
                kind = "application/json"
                if request.get("stream") and status == 200:
                    body, kind = b"data: " + body + b"\n\ndata: [DONE]\n\n", "text/event-stream"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def ask_openai(server: FakeModelServer, decode: str = "scored", **overrides):
    model = OpenAIBackend(server.url, decode=decode, response_format="json_object", max_retries=0)
    try:
        return grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config(**overrides))
    finally:
        model.close()


MALFORMED = {
    "no choices": b'{"choices": []}',
    "an error object": b'{"error": {"message": "model overloaded"}}',
    "a null message": b'{"choices": [{"message": null}]}',
    "a list": b'[1, 2, 3]',
    "not JSON": b'<html>bad gateway</html>',
    "content that is not text": b'{"choices": [{"message": {"content": 42}}]}',
}


@pytest.mark.parametrize("decode", ["scored", "greedy"])
@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_model_reply_is_a_typed_model_failure(kind, decode):
    with FakeModelServer(body=MALFORMED[kind]) as server:
        outcome = ask_openai(server, decode)
    assert outcome.stop_reason == "model_failed"
    assert server.url in outcome.answer, "the message names the model server"
    assert "conjugation server failed" not in outcome.answer
    assert "[stop_reason: model_failed]" in outcome.answer


@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_the_model_servers_own_error_message_reaches_the_user(decode):
    body = json.dumps({"error": {"message": "Input should be 'text' or 'json_object'"}}).encode()
    with FakeModelServer(status=500, body=body) as server:
        outcome = ask_openai(server, decode)
    assert outcome.stop_reason == "model_failed"
    assert "HTTP 500" in outcome.answer and "Input should be 'text' or 'json_object'" in outcome.answer
    assert len(server.requests) == 1, "an HTTP 500 is not retried: it will not change"


@pytest.mark.timing
@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_a_model_server_that_never_answers_is_bounded_by_the_wall_clock(decode):
    with FakeModelServer(hang=True) as server:
        model = OpenAIBackend(server.url, decode=decode)
        started = time.monotonic()
        outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config(wall_clock_s=1.5))
        elapsed = time.monotonic() - started
        model.close()
    assert outcome.stop_reason == "wall_clock"
    assert outcome.stats.seconds <= 1.5 + GRACE_S and elapsed <= 1.5 + GRACE_S + 0.5


def test_a_busy_model_server_is_retried_within_the_run():
    """503 twice, then a reply: the client's typed error, two bounded retries, an answer."""
    replies = [(503, b'{"error": {"message": "busy"}}')] * 2

    def answer(request):
        if replies:
            return replies.pop(0)
        return 200, json.dumps({"choices": [{"message": {"content": '{"tool": "conjugate", "verb": "go", '
                                                         '"tense": "past simple", "person": "she"}'},
                                             "finish_reason": "stop"}]}).encode()

    with FakeModelServer(answer=answer) as server:
        model = OpenAIBackend(server.url, decode="greedy", max_retries=2)
        reply = model.next_action([Entry("question", QUESTION)], first_turn=True, timeout_s=10)
        model.close()
    assert len(server.requests) == 3 and json.loads(reply.text)["verb"] == "go"


def test_retries_stop_at_max_retries_and_say_so():
    with FakeModelServer(status=503, body=b'{"error": {"message": "busy"}}') as server:
        outcome = ask_openai(server, "greedy")
    assert outcome.stop_reason == "model_failed" and "HTTP 503" in outcome.answer and len(server.requests) == 1
    with FakeModelServer(status=503, body=b'{"error": {"message": "busy"}}') as server:
        model = OpenAIBackend(server.url, decode="greedy", max_retries=2)
        outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
        model.close()
    assert outcome.stop_reason == "model_failed" and "after 2 retries" in outcome.answer and len(server.requests) == 3


@pytest.mark.timing
def test_retries_never_outlive_the_run():
    """Retries back off 0.5 s, 1 s, 2 s...: with 1.2 s left, no retry starts that would end past it."""
    with FakeModelServer(status=503, body=b'{"error": {"message": "busy"}}') as server:
        model = OpenAIBackend(server.url, decode="greedy", max_retries=10)
        started = time.monotonic()
        outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config(wall_clock_s=1.2))
        elapsed = time.monotonic() - started
        model.close()
    assert outcome.stop_reason == "model_failed" and elapsed <= 1.2 + GRACE_S
    assert 1 < len(server.requests) < 11


def _chat_reply(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 9}}).encode()


def _llama_cpp_python_dialect(request):
    """Like llama-cpp-python's server: HTTP 500 for json_schema, json_object with a schema is fine."""
    kind = (request.get("response_format") or {}).get("type")
    if kind == "json_schema":
        return 500, b'{"detail": "Internal Server Error"}'
    if kind == "json_object":
        return 200, _chat_reply('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}')
    return 200, _chat_reply('{"answer": "she went"}')


def test_a_server_without_logprobs_is_detected_at_start_and_decoded_greedily(caplog):
    """Completions answer, but without log-probabilities: scored decoding cannot work, greedy (chat) can."""
    def answer(request):
        if "messages" in request:
            return 200, _chat_reply('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}')
        return 200, json.dumps({"choices": [{"text": "x", "finish_reason": "length", "logprobs": None}],
                                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()

    with FakeModelServer(answer=answer) as server:
        with caplog.at_level("WARNING", logger="miniagent"):
            model = OpenAIBackend(server.url, warm_up=True)
        reply = model.next_action([Entry("question", QUESTION)], first_turn=True, timeout_s=10)
        model.close()
    assert model.decode == "greedy" and model.name == "openai:greedy"
    assert json.loads(reply.text)["verb"] == "go"
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert f"the model server at {server.url}" in warnings and "no token log-probabilities" in warnings
    assert "counts 3 tokens in the prompt header" in warnings, "the tokenizer check speaks up too"


def test_auto_response_format_falls_back_to_json_object_and_says_so(caplog):
    with FakeModelServer(answer=_llama_cpp_python_dialect) as server:
        model = OpenAIBackend(server.url, decode="greedy")
        with caplog.at_level("WARNING", logger="miniagent"):
            first = model.next_action([Entry("question", QUESTION)], first_turn=True, timeout_s=10)
            again = model.next_action([Entry("question", QUESTION)], first_turn=True, timeout_s=10)
        model.close()
    kinds = [(r.get("response_format") or {}).get("type") for r in server.requests]
    assert kinds == ["json_schema", "json_object", "json_object"], "detected once, then kept"
    assert json.loads(first.text)["verb"] == "go" and json.loads(again.text)["verb"] == "go"
    assert model.format_in_use == "json_object"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert f"the model server at {server.url}" in warning and "refused response_format json_schema" in warning


def test_an_explicit_json_schema_is_not_second_guessed():
    with FakeModelServer(answer=_llama_cpp_python_dialect) as server:
        model = OpenAIBackend(server.url, decode="greedy", response_format="json_schema")
        outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
        model.close()
    assert outcome.stop_reason == "model_failed" and "HTTP 500" in outcome.answer
    assert f"the model server at {server.url}" in outcome.answer and len(server.requests) == 1


def test_malformed_reply_through_the_cli_prints_a_typed_outcome():
    with FakeModelServer(body=MALFORMED["no choices"]) as server:
        proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", QUESTION, "--llm", "openai",
                               "--openai-base-url", server.url, "--json", "--cache-dir", ""],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["stop_reason"] == "model_failed" and proc.returncode == 1


@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_a_dead_model_server_is_a_model_failure_not_a_conjugation_server_failure(decode):
    with FakeModelServer() as server:
        url = server.url
    model = OpenAIBackend(url, decode=decode, max_retries=1)
    outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
    model.close()
    assert outcome.stop_reason == "model_failed"
    assert "could not reach the model server" in outcome.answer and url in outcome.answer
    assert "after 1 retries" in outcome.answer


@pytest.mark.timing
@pytest.mark.real_model
@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_real_llama_decoding_stops_when_the_run_is_out_of_time(decode):
    """Greedy decoding of a whole action takes ~2 s here; a 0.4 s run must end by 0.9 s."""
    from miniagent.models import resolve_threads
    from miniagent.models.llama import LlamaBackend

    # the threads a run gets (auto): two threads on a machine with a core busy stall on each other, and one
    # decode then outlasts the grace; the run itself would have measured that and taken one
    model = LlamaBackend(decode=decode, cache_dir=None, n_threads=resolve_threads(0))
    try:
        started = time.monotonic()
        # Without argument grounding: grounded, this question leaves one option per field, and a scored run
        # answers within the 0.4 s (measured 0.3 s), so nothing would be out of time.
        outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(delay=0.0),
                                config=config(wall_clock_s=0.4, ground_arguments=False))
        elapsed = time.monotonic() - started
        # the model still works after an interrupted reply: the next run answers
        after = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
    finally:
        model.close()
    assert outcome.stop_reason == "wall_clock", outcome.answer
    assert elapsed <= 0.4 + GRACE_S
    assert after.stop_reason == "answered" and after.answer.lower() == "she went"


class WedgedModelServer:
    """Takes every connection and never answers a byte: a class server wedged on something."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.held: list = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.held.append(conn)

    def __enter__(self) -> "WedgedModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_wedged_model_server_ends_invoke_ask_with_model_failed_and_says_so():
    """The server takes the connection and never answers: the start-up check has its own bound
    (openai_startup_s, here 2 s from the environment), the learner sees a line while it waits, and the run
    ends as model_failed naming the server and what it did not answer.  (Unbounded, it waited 300 s.)"""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    env.update(MINIAGENT_WALL_CLOCK_S="3", MINIAGENT_MODEL_WALL_CLOCK_S="0", MINIAGENT_OPENAI_STARTUP_S="2")
    with WedgedModelServer() as server:
        proc = subprocess.run([str(Path(sys.executable).parent / "invoke"), "ask", QUESTION, "--llm", "openai",
                               "--openai-base-url", server.url, "--json", "--cache-dir", ""], cwd=ROOT,
                              capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"checking the model server at {server.url} (each start-up request may take up to 2 s" in proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["stop_reason"] == "model_failed", outcome
    assert f"the model server at {server.url} took the connection but did not answer GET {server.url}/models " \
           "within 2 s" in outcome["answer"]


def test_every_completion_names_its_learner_and_two_learners_differ():
    """The class server keeps a learner's prompt in that learner's slot by the request's ``user``."""
    from miniagent.models.openai_server import ModelServer

    body = json.dumps({"choices": [{"text": "went", "finish_reason": "stop",
                                    "logprobs": {"top_logprobs": [{"went": -0.1}]}}]}).encode()
    with FakeModelServer(body=body) as fake:
        first, second = ModelServer(fake.url, max_retries=0), ModelServer(fake.url, max_retries=0)
        try:
            first.complete("Q: go", 4, ['"'], None)
            first.top_logprobs("Q: go", None)
            second.complete("Q: go", 4, ['"'], None)
        finally:
            first.close()
            second.close()
    users = [request.get("user") for request in fake.requests]
    assert users[0] == users[1] == first.user and users[2] == second.user != first.user
    assert first.user.startswith("miniagent-") and len(first.user) == len("miniagent-") + 12
