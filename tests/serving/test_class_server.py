"""The lab's class server (serving/class_server.py): its HTTP side against a recording stand-in for the model
(every field of a request reaches it, every bad request is refused and the server stays up), then the real
server, started as a teacher starts it, with the openai backend and the official client against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import THREADS

from miniagent.serving.class_server import MAX_LOGPROBS, build_app, main
from miniagent.serving.slots import Completion

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """Slots as the app sees them: a tokenizer, n_ctx, and complete(), which records what it was asked."""

    n_ctx = 64

    def __init__(self, reply: Completion | None = None, fail: Exception | None = None):
        self.asked: list[tuple] = []
        self.reply = reply or Completion("went", [7, 8], "stop", [{"went": -0.5, "go": -1.5}, {'nt"': -0.1}],
                                         [-0.5, -0.1])
        self.fail = fail
        self.vocab = self

    def tokenize(self, text: str, *, bos: bool = False) -> list[int]:
        return [1] * bos + [2] * len(text.split())

    def piece(self, token: int) -> str:
        return {7: "we", 8: 'nt"'}.get(token, "?")

    def complete(self, prompt, max_tokens, stop, logprobs, owner=None):
        self.asked.append((prompt, max_tokens, stop, logprobs, owner))
        if self.fail:
            raise self.fail
        return self.reply


@pytest.fixture
def client():
    from starlette.testclient import TestClient

    recorder = Recorder()
    with TestClient(build_app(recorder)) as http:
        http.recorder = recorder
        yield http


def test_every_field_of_a_completion_reaches_the_model(client):
    reply = client.post("/v1/completions", json={"prompt": "Q: go she", "max_tokens": 5, "stop": '"',
                                                 "logprobs": 2, "user": "learner-7", "temperature": 0.7})
    assert reply.status_code == 200
    assert client.recorder.asked == [([1, 2, 2, 2], 5, ['"'], 2, "learner-7")]
    body = reply.json()
    (choice,) = body["choices"]
    assert (choice["text"], choice["finish_reason"]) == ("went", "stop")
    assert choice["logprobs"]["tokens"] == ["we", 'nt"']
    assert choice["logprobs"]["top_logprobs"] == [{"went": -0.5, "go": -1.5}, {'nt"': -0.1}]
    assert choice["logprobs"]["token_logprobs"] == [-0.5, -0.1]
    assert choice["logprobs"]["text_offset"] == [len("Q: go she"), len("Q: go she") + 2]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert body["object"] == "text_completion" and body["model"] == "local"


def test_defaults_and_a_list_of_stop_strings(client):
    client.post("/v1/completions", json={"prompt": ["one two"], "stop": ['"', "\n"]})
    client.post("/v1/completions", json={"prompt": "one"})
    assert client.recorder.asked == [([1, 2, 2], 16, ['"', "\n"], None, None), ([1, 2], 16, [], None, None)]
    assert client.post("/v1/completions", json={"prompt": "one"}).json()["choices"][0]["logprobs"] is None


def test_a_streamed_completion_is_one_event_per_token_then_the_end(client):
    reply = client.post("/v1/completions", json={"prompt": "go", "max_tokens": 2, "logprobs": 2, "stream": True})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in reply.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert [c["text"] for c in chunks] == ["we", "nt", ""]  # the text is cut before the stop string
    assert [c["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert chunks[0]["logprobs"]["top_logprobs"] == [{"went": -0.5, "go": -1.5}]
    assert chunks[1]["logprobs"] == {"tokens": ['nt"'], "token_logprobs": [-0.1], "top_logprobs": [{'nt"': -0.1}],
                                     "text_offset": [len("go") + 2]}


@pytest.mark.parametrize("body, says", [
    ("not json", "not a completion request"),
    (json.dumps({"max_tokens": 3}), "prompt"),
    (json.dumps({"prompt": "go", "max_tokens": -1}), "max_tokens"),
    (json.dumps({"prompt": "go", "logprobs": MAX_LOGPROBS + 1}), "logprobs"),
    (json.dumps({"prompt": ["one", "two"]}), "one prompt per request"),
    (json.dumps({"prompt": "word " * 60, "max_tokens": 10}), "do not fit in n_ctx=64"),
    (json.dumps(["a", "list"]), "not a completion request"),
])
def test_a_bad_request_is_refused_with_a_reason_and_the_server_stays_up(client, body, says):
    reply = client.post("/v1/completions", content=body)
    assert reply.status_code == 400
    assert says in reply.json()["error"]["message"]
    assert client.recorder.asked == []
    assert client.post("/v1/completions", json={"prompt": "go"}).status_code == 200


def test_a_prompt_the_cache_cannot_hold_is_refused_not_a_crash():
    from starlette.testclient import TestClient

    from miniagent.agent.errors import ContextFull

    with TestClient(build_app(Recorder(fail=ContextFull("the server's KV cache (n_ctx=64) cannot hold it")))) as http:
        reply = http.post("/v1/completions", json={"prompt": "go"})
    assert reply.status_code == 400 and "cannot hold" in reply.json()["error"]["message"]


def test_models_and_no_chat(client):
    assert client.get("/v1/models").json()["data"][0]["id"] == "local"
    chat = client.post("/v1/chat/completions", json={"messages": []})
    assert chat.status_code == 404 and "greedy" in chat.json()["error"]["message"]


def frame_of(body: dict) -> dict:
    """A reply with its id and time checked and taken out (they change with every request)."""
    import re
    import time

    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", body.pop("id")), "an id as OpenAI's: cmpl- and 24 hex digits"
    assert abs(body.pop("created") - time.time()) < 60
    return body


def test_a_whole_completion_is_the_openai_format_field_for_field(client):
    reply = client.post("/v1/completions", json={"prompt": "go she", "max_tokens": 2, "logprobs": 1})
    assert frame_of(reply.json()) == {
        "object": "text_completion", "model": "local",
        "choices": [{"index": 0, "text": "went", "finish_reason": "stop",
                     "logprobs": {"tokens": ["we", 'nt"'], "token_logprobs": [-0.5, -0.1],
                                  "top_logprobs": [{"went": -0.5, "go": -1.5}, {'nt"': -0.1}],
                                  "text_offset": [6, 8]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def test_a_streamed_completion_is_the_openai_format_field_for_field():
    from starlette.testclient import TestClient

    three = Completion("abcdef", [7, 8, 9], "length", [{"ab": -0.1}, {"cd": -0.2}, {"ef": -0.3}], [-0.1, -0.2, -0.3])
    recorder = Recorder(three)
    recorder.piece = lambda token: {7: "ab", 8: "cd", 9: "ef"}[token]
    with TestClient(build_app(recorder)) as http:
        reply = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 3, "stream": True})
    *events, done = reply.text.split("\n\n")[:-1]
    assert done == "data: [DONE]" and all(e.startswith("data: {") for e in events)
    chunks = [frame_of(json.loads(e[len("data: "):])) for e in events]
    choice = {"object": "text_completion", "model": "local"}
    assert chunks == [
        {**choice, "choices": [{"index": 0, "text": "ab", "logprobs": None, "finish_reason": None}]},
        {**choice, "choices": [{"index": 0, "text": "cd", "logprobs": None, "finish_reason": None}]},
        {**choice, "choices": [{"index": 0, "text": "ef", "logprobs": None, "finish_reason": None}]},
        {**choice, "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]}]


def test_errors_are_the_openai_format(client):
    bad = client.post("/v1/completions", json={"prompt": "go", "max_tokens": -1})
    assert bad.json() == {"error": {"message": "not a completion request: max_tokens: Input should be greater than "
                                               "or equal to 0", "type": "invalid_request_error"}}
    assert client.post("/v1/completions", content="[1]").json()["error"]["message"].startswith(
        "not a completion request: body: ")
    nested = client.post("/v1/completions", json={"prompt": ["go", 3]}).json()["error"]["message"]
    assert "prompt.str: Input should be a valid string; prompt.list[str].1: Input should be a valid string" in nested
    assert client.post("/v1/completions", json={"prompt": ["a", "b"]}).json() == {
        "error": {"message": "this server completes one prompt per request", "type": "invalid_request_error"}}
    assert client.post("/v1/chat/completions", json={}).json() == {"error": {
        "message": "this server has no chat endpoint: it serves scored decoding (/v1/completions); "
                   "for decode = \"greedy\" use llama-cpp-python's server", "type": "not_found_error"}}
    assert client.get("/v1/models").json() == {
        "object": "list", "data": [{"id": "local", "object": "model", "owned_by": "miniagent"}]}


def test_each_endpoint_takes_its_method_only(client):
    assert client.post("/v1/models").status_code == 405
    assert client.get("/v1/completions").status_code == 405
    assert client.get("/v1/chat/completions").status_code == 405


def test_a_prompt_that_exactly_fills_the_context_is_served_one_more_token_is_not(client):
    fits = " ".join(["w"] * 53)  # 1 + 53 prompt tokens + 10 = 64 = n_ctx
    assert client.post("/v1/completions", json={"prompt": fits, "max_tokens": 10}).status_code == 200
    refused = client.post("/v1/completions", json={"prompt": fits, "max_tokens": 11})
    assert refused.json()["error"]["message"] == "54 prompt tokens and max_tokens 11 do not fit in n_ctx=64"


def test_one_stop_string_of_several_characters_stays_whole(client):
    client.post("/v1/completions", json={"prompt": "go", "stop": "\n\n"})
    assert client.recorder.asked[-1][2] == ["\n\n"]


def test_the_server_says_what_it_did_when_it_shuts_down():
    from starlette.testclient import TestClient

    said = []
    with TestClient(build_app(Recorder(), on_exit=lambda: said.append("bye"))):
        assert said == []
    assert said == ["bye"]
    with TestClient(build_app(Recorder())):  # nothing to say: it shuts down all the same, with no error
        pass


@pytest.mark.parametrize("flag", ["--slots", "--n-ctx", "--n-threads"])
def test_a_bad_number_is_refused_before_anything_loads(flag, capsys):
    assert main([flag, "0"]) == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err


# --- the real server ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server_url():
    pytest.importorskip("uvicorn", reason="pip install 'llama-cpp-python[server]'")
    from miniagent.serving.start import class_server

    with class_server(extra_args=("--n-threads", str(THREADS))) as url:
        yield url


@pytest.mark.real_model
def test_the_backend_gets_an_answer_through_the_class_server(server_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", "What is the past simple of go for she?",
                           "--llm", "openai", "--openai-base-url", server_url, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(ROOT / "src")})
    outcome = json.loads(proc.stdout)
    assert (proc.returncode, outcome["stop_reason"], outcome["answer"]) == (0, "answered", "she went"), proc.stderr
    assert "openai:scored" in proc.stderr or outcome.get("backend", "openai:scored") == "openai:scored"


@pytest.mark.real_model
def test_its_top_log_probabilities_through_the_official_client(server_url):
    from miniagent.models.server_client import ModelServerClient

    server = ModelServerClient(server_url)
    try:
        top = server.top_logprobs("The capital of France is", None)
        text, finish, usage = server.complete("The capital of France is", 3, [], None)
    finally:
        server.close()
    assert 1 <= len(top) <= 20 and list(top.values()) == sorted(top.values(), reverse=True)
    assert all(v <= 0 for v in top.values())
    assert finish == "length" and usage["completion_tokens"] == 3 and text.startswith(next(iter(top)))
