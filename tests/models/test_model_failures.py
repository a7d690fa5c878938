"""The model's side failing: a typed ``model_failed`` stop (never a traceback, never blamed on the
MCP server), and a wall clock that bounds model calls as it bounds tool calls.

A small OpenAI-compatible server on loopback plays the broken model server; the real llama
backend shows that decoding stops between tokens when the run's time is up.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import FakeModelServer, FakeTools, config, wait_for

from miniagent.agent.loop import grammar_tutor
from miniagent.agent.ports import Entry
from miniagent.models.openai_compat import OpenAIBackend

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 0.5  # what theory 05 promises beyond wall_clock_s
QUESTION = "What is the past simple of go for she?"


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
@pytest.mark.parametrize("decode, kept_alive", [("scored", False), ("greedy", False), ("scored", True)])
def test_a_model_server_that_never_answers_is_bounded_by_the_wall_clock(decode, kept_alive):
    with FakeModelServer(hang=True, pings=kept_alive) as server:
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
    """A 0.4 s run must end by 0.9 s, though its model's work is long on purpose: its first decode is a question
    of 461 tokens on one thread (3.9 s on a Zen 3 EPYC, about twice a 2-thread prefill's time elsewhere). A run
    that waited for the decode in progress would end seconds late; the deadline reaches inside it."""
    from miniagent.models.llama import LlamaBackend

    model = LlamaBackend(decode=decode, cache_dir=None, n_threads=1)
    try:
        started = time.monotonic()
        # Without argument grounding: grounded, this question leaves one option per field, and a scored run
        # answers within the 0.4 s (measured 0.3 s), so nothing would be out of time.
        long_question = QUESTION + " Please answer it carefully." * 90
        outcome = grammar_tutor(long_question, model=model, tools=FakeTools(delay=0.0),
                                config=config(wall_clock_s=0.4, ground_arguments=False,
                                              max_input_chars=len(long_question)))
        elapsed = time.monotonic() - started
        # the model still works after an interrupted reply: the next run answers
        after = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
    finally:
        model.close()
    assert outcome.stop_reason == "wall_clock", outcome.answer
    assert elapsed <= 0.4 + GRACE_S
    assert after.stop_reason == "answered" and after.answer.lower() == "she went"


@pytest.mark.real_model
def test_a_sigterm_during_a_decode_unwinds_the_run_and_is_not_taken_for_the_wall_clock(tmp_path):
    """llama.cpp reads the deadline inside a decode from C (models/deadline_flag.py): were it a Python callback,
    Python's SIGTERM handler would run inside C, its exception would be lost, and the run would end wall_clock."""
    trace = tmp_path / "trace.jsonl"
    question = QUESTION + " Please answer it carefully." * 90  # one long decode on one thread: seconds on any CPU
    agent = subprocess.Popen([sys.executable, "-m", "miniagent", "ask", question, "--max-input-chars", "5000",
                              "--n-threads", "1", "--cache-dir", "", "--trace", str(trace), "--json"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the grounding event comes right before the first model call, whose first decode is the long one
        wait_for(lambda: trace.is_file() and '"name": "grounding"' in trace.read_text(), within=120,
                 what="the first model call")
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=120)
    finally:
        agent.kill()
        agent.wait()
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert agent.returncode == 143, err[-2000:]
    assert not [e for e in events if e["event"] == "stop"], "a run ended by SIGTERM reports no stop reason of its own"


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
    from miniagent.models.server_client import ModelServerClient

    body = json.dumps({"choices": [{"text": "went", "finish_reason": "stop",
                                    "logprobs": {"top_logprobs": [{"went": -0.1}]}}]}).encode()
    with FakeModelServer(body=body) as fake:
        first, second = ModelServerClient(fake.url, max_retries=0), ModelServerClient(fake.url, max_retries=0)
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


def _recorded(body: bytes, ask):
    """Run ``ask(server)`` against a FakeModelServer answering ``body``; (what it returned, the requests sent)."""
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(body=body) as fake:
        server = ModelServerClient(fake.url, "gemma", max_retries=0)
        try:
            return ask(server), fake.requests
        finally:
            server.close()


def test_a_completion_asks_for_greedy_text_with_the_stop_marks_and_reads_the_reply():
    body = json.dumps({"choices": [{"text": "went", "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
    replies, (first, second) = _recorded(body, lambda server: [server.complete("Q: go", 4, ['"', "}"], None),
                                                               server.complete("Q: go", 7, [], None)])
    assert replies[0] == ("went", "length", {"prompt_tokens": 3, "completion_tokens": 1})
    assert {k: first[k] for k in ("model", "prompt", "max_tokens", "temperature", "stop")} == {
        "model": "gemma", "prompt": "Q: go", "max_tokens": 4, "temperature": 0, "stop": ['"', "}"]}
    assert second["max_tokens"] == 7 and second.get("stop") is None  # no stop marks: none sent


def test_a_reply_without_a_choice_names_the_model_server():
    from miniagent.agent.errors import ModelFailed
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(body=MALFORMED["no choices"]) as fake:
        server = ModelServerClient(fake.url, max_retries=0)
        try:
            with pytest.raises(ModelFailed, match=f"^the model server at {fake.url} answered without any choice"):
                server.complete("Q: go", 4, [], None)
        finally:
            server.close()


def test_the_model_list_is_read_and_no_request_is_sent_once_the_run_has_no_time_left():
    from miniagent.agent.errors import ModelTimeout

    listed = json.dumps({"object": "list", "data": [{"id": "gemma", "object": "model", "created": 0,
                                                      "owned_by": "lab"}]}).encode()
    ids, sent = _recorded(listed, lambda server: [server.model_ids(None),
                                                  pytest.raises(ModelTimeout, server.model_ids, time.monotonic() - 1)])
    assert ids[0] == ["gemma"] and len(sent) == 1, "no time left: nothing is sent"


# --- how a server's reply or error is read, whatever it holds (no server needed) --------------------------------
LONG = "x" * 200


@pytest.mark.parametrize("body, message, said", [
    ({"error": {"message": "busy, try later"}}, "fallback", "busy, try later"),
    ({"error": {"detail": "json_schema is not accepted"}}, "fallback", "json_schema is not accepted"),
    ({"error": {"code": 7}}, "fallback", '{"code": 7}'),
    ({"detail": "Not Found"}, "fallback", "Not Found"),
    ({"error": "overloaded"}, "fallback", "overloaded"),
    ("  Bad Gateway \n", "fallback", "Bad Gateway"),
    ("   ", "the client's words", "the client's words"),
    (None, "the client's words", "the client's words"),
    ({"error": {"message": LONG}}, "fallback", "x" * 160 + "..."),
    ({"error": {"message": "x" * 160}}, "fallback", "x" * 160),
    ({"error": {"message": "año"}}, "fallback", "año"),
])
def test_a_status_errors_detail_is_the_servers_own_words_cut_to_160_characters(body, message, said):
    from types import SimpleNamespace

    from miniagent.models.server_client import _status_detail

    assert _status_detail(SimpleNamespace(body=body, message=message)) == said


def test_an_unreachable_servers_cause_is_the_underlying_error_else_its_own():
    from miniagent.models.server_client import _cause

    try:
        try:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        except ConnectionRefusedError as inner:
            raise RuntimeError("Connection error.") from inner
    except RuntimeError as outer:
        assert _cause(outer) == "[Errno 111] Connection refused"
    try:
        try:
            raise OSError("the context")
        except OSError:
            raise RuntimeError("Connection error.")  # noqa: B904 - an implicit context, as the client leaves it
    except RuntimeError as outer:
        assert _cause(outer) == "the context"
    assert _cause(RuntimeError("alone " + LONG)) == ("alone " + LONG)[:160] + "..."


@pytest.mark.parametrize("reply, said", [
    ([1, 2], "sent JSON that is not an object: [1, 2]"),
    ({"error": {"message": "no"}}, 'answered with an error: {"message": "no"}'),
    ({"choices": []}, 'answered without any choice: {"choices": []}'),
    ({"choices": "text"}, 'answered without any choice: {"choices": "text"}'),
    ({"choices": ["text"]}, 'answered without any choice: {"choices": ["text"]}'),
    ({}, "answered without any choice: {}"),
])
def test_a_reply_without_a_usable_choice_is_a_model_failure_that_says_what_came(reply, said):
    from miniagent.agent.errors import ModelFailed
    from miniagent.models.server_client import _choice

    with pytest.raises(ModelFailed) as failed:
        _choice(reply, "the model server at http://class:8000/v1")
    assert str(failed.value) == f"the model server at http://class:8000/v1 {said}"
    assert _choice({"choices": [{"text": "a"}, {"text": "b"}]}, "here") == {"text": "a"}  # the first one


@pytest.mark.parametrize("chunk, top", [
    ({"choices": [{"logprobs": {"top_logprobs": [{"went": -0.1, "go": -2, "bad": "x", "inf": float("-inf")}]}}]},
     {"went": -0.1, "go": -2.0}),
    ({"choices": [{"logprobs": None}, {"logprobs": {"top_logprobs": [{"a": -1}]}}]}, {"a": -1.0}),
    ({"choices": [{"logprobs": {"top_logprobs": []}}]}, {}),
    ({"choices": [{"logprobs": {"top_logprobs": ["a"]}}]}, {}),
    ({"choices": ["text"]}, {}),
    ({"choices": None}, {}),
    ({}, {}),
])
def test_a_streamed_chunks_top_log_probabilities_are_read_and_anything_else_is_none(chunk, top):
    from miniagent.models.server_client import _top_of

    assert _top_of(chunk) == top
    assert all(type(v) is float for v in _top_of(chunk).values())


@pytest.mark.parametrize("chunk", [[1], {"error": "overloaded"}])
def test_a_chunk_that_is_not_a_completion_is_refused(chunk):
    from miniagent.models.server_client import _top_of

    with pytest.raises(ValueError, match="^not a completion chunk: "):
        _top_of(chunk)


def test_a_replys_usage_is_read_when_it_is_an_object():
    from miniagent.models.server_client import _usage

    assert _usage({"usage": {"prompt_tokens": 3}}) == {"prompt_tokens": 3}
    assert _usage({"usage": [3]}) == {} and _usage({}) == {} and _usage([1]) == {}


def test_an_error_without_a_body_or_a_message_is_read_as_its_text():
    from types import SimpleNamespace

    from miniagent.models.server_client import _status_detail

    assert _status_detail(SimpleNamespace(message="the client's words")) == "the client's words"  # no body at all
    assert _status_detail(RuntimeError("a plain error")) == "a plain error"  # no body, no message


def test_a_chunk_that_is_not_a_completion_is_shown_in_the_refusal():
    from miniagent.models.server_client import _top_of

    with pytest.raises(ValueError, match=r"^not a completion chunk: \[1\]$"):
        _top_of([1])


def test_a_reply_object_without_to_dict_is_read_by_its_fields():
    from types import SimpleNamespace

    from miniagent.models.server_client import _choice

    class Unserialisable:
        def __init__(self):
            self.choices = [{"text": "went"}]

        def to_dict(self):
            raise TypeError("cannot")

    assert _choice(SimpleNamespace(choices=[{"text": "went"}]), "here") == {"text": "went"}
    assert _choice(Unserialisable(), "here") == {"text": "went"}


def test_the_top_log_probabilities_are_asked_for_one_streamed_greedy_token():
    from miniagent.agent.errors import ModelFailed, ModelTimeout
    from miniagent.models.server_client import TOP_LOGPROBS

    body = json.dumps({"choices": [{"text": "went", "logprobs": {"top_logprobs": [{"went": -0.25}]}}]}).encode()
    top, (request,) = _recorded(body, lambda server: server.top_logprobs("Q: go", None))
    assert top == {"went": -0.25}
    assert {k: request[k] for k in ("model", "prompt", "max_tokens", "temperature", "logprobs", "stream")} == {
        "model": "gemma", "prompt": "Q: go", "max_tokens": 1, "temperature": 0, "logprobs": TOP_LOGPROBS,
        "stream": True}
    assert TOP_LOGPROBS == 20 and request["user"].startswith("miniagent-")
    _, sent = _recorded(body, lambda server: pytest.raises(ModelTimeout, server.top_logprobs, "Q", time.monotonic() - 1))
    assert sent == [], "no time left: nothing is sent"
    without = json.dumps({"choices": [{"text": "went"}]}).encode()
    failed, _ = _recorded(without, lambda server: pytest.raises(ModelFailed, server.top_logprobs, "Q", None))
    assert "gave no token log-probabilities (logprobs) for a completion" in str(failed.value)


def test_a_chat_asks_for_greedy_text_and_reads_the_message():
    from miniagent.agent.errors import ModelFailed

    def chat(server, response_format=None):
        return server.chat([{"role": "user", "content": "go?"}], 9, response_format, None)

    body = json.dumps({"choices": [{"message": {"content": "she went"}, "finish_reason": "length"}],
                       "usage": {"completion_tokens": 2}}).encode()
    reply, (plain, shaped) = _recorded(body, lambda server: [chat(server), chat(server, {"type": "json_object"})])
    assert reply[0] == ("she went", "length", {"completion_tokens": 2})
    assert {k: plain[k] for k in ("model", "messages", "temperature", "max_tokens")} == {
        "model": "gemma", "messages": [{"role": "user", "content": "go?"}], "temperature": 0, "max_tokens": 9}
    assert "response_format" not in plain and shaped["response_format"] == {"type": "json_object"}
    empty = json.dumps({"choices": [{"message": {"content": None}}]}).encode()
    assert _recorded(empty, chat)[0] == ("", "stop", {})
    for choice, said in [({"text": "x"}, 'sent a choice without a message: {"text": "x"}'),
                         ({"message": {"content": 42}}, "sent content that is not text: 42")]:
        body = json.dumps({"choices": [choice]}).encode()
        failed, _ = _recorded(body, lambda server: pytest.raises(ModelFailed, chat, server))
        assert str(failed.value).endswith(said)


def test_a_completion_without_text_is_refused_and_a_missing_finish_reason_reads_stop():
    from miniagent.agent.errors import ModelFailed

    body = json.dumps({"choices": [{"text": "went"}]}).encode()
    assert _recorded(body, lambda server: server.complete("Q", 4, [], None))[0] == ("went", "stop", {})
    body = json.dumps({"choices": [{"finish_reason": "stop"}]}).encode()
    failed, _ = _recorded(body, lambda server: pytest.raises(ModelFailed, server.complete, "Q", 4, [], None))
    assert str(failed.value).endswith('sent a completion without text: {"finish_reason": "stop"}')


def test_a_model_server_is_named_without_its_trailing_slash_counts_its_requests_and_takes_the_settings_defaults(
        monkeypatch):
    from miniagent.models.server_client import ModelServerClient
    from miniagent.models.settings import ModelSettings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = ModelServerClient("http://class:8000/v1/")
    try:
        assert (server.base_url, server.where) == ("http://class:8000/v1", "the model server at http://class:8000/v1")
        assert (server.model, server.max_retries, server.requests) == (
            ModelSettings().openai_model, ModelSettings().openai_max_retries, 0)
        assert server.client.api_key == "none"  # a local server needs no key
    finally:
        server.close()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hosted")
    server = ModelServerClient("http://class:8000/v1")
    try:
        assert server.client.api_key == "sk-hosted"
    finally:
        server.close()
    body = json.dumps({"choices": [{"text": "went"}]}).encode()
    assert _recorded(body, lambda server: [server.complete("Q", 4, [], None), server.requests][1])[0] == 1


def test_every_request_to_a_server_that_never_answers_ends_with_the_runs_time():
    from miniagent.agent.errors import ModelTimeout
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(hang=True) as wedged:
        server = ModelServerClient(wedged.url, max_retries=0)
        try:
            for ask in (lambda deadline: server.model_ids(deadline),
                        lambda deadline: server.complete("Q: go", 4, [], deadline),
                        lambda deadline: server.top_logprobs("Q: go", deadline),
                        lambda deadline: server.chat([{"role": "user", "content": "go?"}], 4, None, deadline)):
                with pytest.raises(ModelTimeout):  # the request's own timeout is the time left, not the client's
                    ask(time.monotonic() + 0.3)
            sent = len(wedged.requests)
            with pytest.raises(ModelTimeout):
                server.chat([{"role": "user", "content": "go?"}], 4, None, time.monotonic() - 1)
            assert len(wedged.requests) == sent == 4, "no time left: nothing is sent"
        finally:
            server.close()


def test_a_stream_kept_alive_without_a_token_ends_at_the_runs_deadline():
    """Each byte of a stream restarts the request's read timeout: keep-alive comments alone must not hold a run
    past its clock. Left to them, this stream would end after 5 s with no log-probabilities (ModelFailed)."""
    from miniagent.agent.errors import ModelTimeout
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(pings=True) as kept_alive:
        server = ModelServerClient(kept_alive.url, max_retries=2)
        try:
            with pytest.raises(ModelTimeout, match="did not answer in the time left"):
                server.top_logprobs("Q: go", time.monotonic() + 0.3)
            assert len(kept_alive.requests) == 1, "a deadline that has passed is not retried"
        finally:
            server.close()


@pytest.mark.timing
def test_a_kept_alive_stream_is_cut_at_its_deadline_not_later():
    from miniagent.agent.errors import ModelTimeout
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(pings=True) as kept_alive:
        server = ModelServerClient(kept_alive.url, max_retries=0)
        try:
            started = time.monotonic()
            with pytest.raises(ModelTimeout):
                server.top_logprobs("Q: go", started + 0.3)
            assert time.monotonic() - started < 0.3 + GRACE_S
        finally:
            server.close()


def test_a_stream_the_server_drops_is_a_connection_failure_and_is_retried():
    """Cut by the server, not by the deadline: the server could not be reached, as any dropped request."""
    from miniagent.agent.errors import ModelFailed
    from miniagent.models.server_client import ModelServerClient

    with FakeModelServer(drops=True) as dropping:
        server = ModelServerClient(dropping.url, max_retries=1, sleep=lambda s: None)
        try:
            with pytest.raises(ModelFailed, match=r"^could not reach the model server at .* \(after 1 retries\)$"):
                server.top_logprobs("Q: go", time.monotonic() + 30)
        finally:
            server.close()
    assert len(dropping.requests) == 2


def test_a_cutoff_shuts_its_connection_once_and_leaves_a_transport_without_a_socket_alone():
    import socket
    from types import SimpleNamespace

    from miniagent.models.server_client import Cutoff

    ours, theirs = socket.socketpair()
    network = SimpleNamespace(get_extra_info=lambda name: {"socket": ours}[name])
    cutoff = Cutoff(SimpleNamespace(extensions={"network_stream": network}), time.monotonic() + 60)
    try:
        assert not cutoff.fired
        cutoff._cut()  # what its timer runs at the deadline
        assert cutoff.fired and theirs.recv(1) == b"", "the other end reads the connection's end"
        ours.close()
        cutoff._cut()  # the caller closed the stream meanwhile: nothing left to shut, nothing raised
    finally:
        cutoff.cancel()
        theirs.close()
    without = Cutoff(SimpleNamespace(extensions={}), time.monotonic() - 1)
    without.cancel()
    assert not without.fired and not without._timer.is_alive()


def test_a_cutoff_never_holds_the_process_at_its_exit():
    """A Ctrl-C can land between the cut-off's start and the caller's cancel: the process still exits at once, not
    when the timer would have fired (a minute here)."""
    program = ("import socket, time; from types import SimpleNamespace; from miniagent.models.server_client import "
               "Cutoff; ours, theirs = socket.socketpair(); network = SimpleNamespace(get_extra_info=lambda n: ours); "
               "Cutoff(SimpleNamespace(extensions={'network_stream': network}), time.monotonic() + 60); print('left')")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "left\n"), done.stderr


def test_a_stream_that_ends_before_its_deadline_keeps_its_connection_and_its_answer():
    """The cut-off belongs to the stream it bounds: a reply read in time is returned whole, and the next request
    on the same client is answered."""
    from miniagent.models.server_client import ModelServerClient

    body = json.dumps({"choices": [{"text": " went", "logprobs": {"top_logprobs": [{" went": -0.1}]}}]}).encode()
    with FakeModelServer(body=body) as fake:
        server = ModelServerClient(fake.url, max_retries=0)
        try:
            for _ in range(3):
                assert server.top_logprobs("Q: go", time.monotonic() + 5) == {" went": -0.1}
        finally:
            server.close()
    assert len(fake.requests) == 3


def test_a_value_shown_in_a_message_keeps_its_characters_and_shows_what_json_cannot_write():
    from miniagent.models.server_client import _short

    assert _short({"answer": "él fue"}) == '{"answer": "él fue"}'
    assert _short({"when": frozenset({3})}) == '{"when": "frozenset({3})"}'


# --- ModelServerClient.call: which failures are retried, how long it waits, what it says (a stand-in send and sleep) -----
def _errors():
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://class:8000/v1/completions")

    def unreachable():
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as cause:
            error = openai.APIConnectionError(request=request)
            error.__cause__ = cause
            return error

    def status(code: int, words: str):
        return openai.APIStatusError(words, response=httpx2.Response(code, request=request),
                                     body={"error": {"message": words}})

    return openai, request, unreachable, status


def _caller(max_retries: int, outcomes: list):
    """A ModelServerClient whose request is ``outcomes`` in turn (raised when an exception), and the pauses it slept."""
    from miniagent.models.server_client import ModelServerClient

    slept: list[float] = []
    server = ModelServerClient("http://class:8000/v1", max_retries=max_retries, sleep=slept.append)
    timeouts: list[float] = []

    def send(timeout: float):
        timeouts.append(timeout)
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return server, send, slept, timeouts


def test_an_unreachable_or_busy_server_is_retried_after_pauses_that_double():
    openai, _, unreachable, status = _errors()
    server, send, slept, timeouts = _caller(3, [unreachable(), status(503, "busy"), unreachable(), "the reply"])
    try:
        assert server.call(send, time.monotonic() + 30) == "the reply"
    finally:
        server.close()
    assert slept == [0.5, 1.0, 2.0] and server.requests == 4
    assert all(0 < t <= 30 for t in timeouts) and timeouts == sorted(timeouts, reverse=True)


def test_when_the_retries_are_spent_the_failure_says_how_many_there_were():
    from miniagent.agent.errors import ModelFailed

    _, _, unreachable, _ = _errors()
    for retries, tail in [(2, " (after 2 retries)"), (0, "")]:
        server, send, slept, _ = _caller(retries, [unreachable() for _ in range(3)])
        try:
            with pytest.raises(ModelFailed) as failed:
                server.call(send, time.monotonic() + 30)
        finally:
            server.close()
        assert str(failed.value) == "could not reach the model server at http://class:8000/v1: refused" + tail
        assert len(slept) == retries and server.requests == retries + 1


def test_no_retry_starts_that_would_end_after_the_run():
    from miniagent.agent.errors import ModelFailed

    _, _, unreachable, _ = _errors()
    server, send, slept, _ = _caller(2, [unreachable(), "never asked"])
    try:
        with pytest.raises(ModelFailed, match="refused$"):  # the first pause (0.5 s) would end past the deadline
            server.call(send, time.monotonic() + 0.3)
    finally:
        server.close()
    assert slept == []


def test_a_server_that_says_no_is_not_asked_again_and_its_status_is_kept():
    from miniagent.models.server_client import RequestRefused

    _, _, _, status = _errors()
    server, send, slept, _ = _caller(2, [status(400, "json_schema is not accepted")])
    try:
        with pytest.raises(RequestRefused) as refused:
            server.call(send, time.monotonic() + 30)
    finally:
        server.close()
    assert refused.value.status == 400 and slept == []
    assert str(refused.value) == "the model server at http://class:8000/v1 answered HTTP 400: json_schema is not accepted"


def test_what_ends_a_call_says_which_clock_ended_it_and_what_came_back(monkeypatch):
    from miniagent.agent.errors import ModelFailed, ModelTimeout
    from miniagent.models import server_client

    openai, request, _, _ = _errors()
    where = "the model server at http://class:8000/v1"
    cases = [(openai.APITimeoutError(request=request), 30, ModelTimeout, f"{where} did not answer in the time left"),
             (openai.APITimeoutError(request=request), None, ModelFailed, f"{where} did not answer within 60 s"),
             (openai.APIError("stream broke", request, body=None), 30, ModelFailed,
              f"{where} answered with an error: stream broke"),
             (ValueError("no JSON"), 30, ModelFailed, f"{where} sent something that is not a reply: ValueError('no JSON')")]
    for error, left, kind, said in cases:
        server, send, _, _ = _caller(0, [error])
        try:
            with pytest.raises(kind) as ended:
                server.call(send, None if left is None else time.monotonic() + left)
        finally:
            server.close()
        assert type(ended.value) is kind and str(ended.value) == said
    server, send, _, timeouts = _caller(0, ["the reply"])
    try:
        assert server.call(send, time.monotonic() + 0.5) == "the reply"  # half a second left is time enough
        with pytest.raises(ModelTimeout, match=f"^{where} did not answer in the time left$"):
            server.call(send, time.monotonic() - 0.01)
        monkeypatch.setattr(server_client, "NO_RUN_LIMIT_S", 0.0)
        with pytest.raises(ModelFailed, match=f"^{where} did not answer within 0 s$"):
            server.call(send, None)
    finally:
        server.close()
    assert len(timeouts) == 1 and server.requests == 1
