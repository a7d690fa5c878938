"""The lab's class server (models/class_server.py): its HTTP side against a recording stand-in for the model
(every field of a request reaches it, every bad request is refused and the server stays up), then the real
server, started as a teacher starts it, with the openai backend and the official client against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.models.class_server import MAX_LOGPROBS, build_app, main
from miniagent.models.slots import Completion

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


@pytest.mark.parametrize("flag", ["--slots", "--n-ctx", "--n-threads"])
def test_a_bad_number_is_refused_before_anything_loads(flag, capsys):
    assert main([flag, "0"]) == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err


# --- the real server ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server_url():
    pytest.importorskip("uvicorn", reason="pip install 'llama-cpp-python[server]'")
    from miniagent.lab.model_server import class_server

    with class_server() as url:
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
    from miniagent.models.openai_server import ModelServer

    server = ModelServer(server_url)
    try:
        top = server.top_logprobs("The capital of France is", None)
        text, finish, usage = server.complete("The capital of France is", 3, [], None)
    finally:
        server.close()
    assert 1 <= len(top) <= 20 and list(top.values()) == sorted(top.values(), reverse=True)
    assert all(v <= 0 for v in top.values())
    assert finish == "length" and usage["completion_tokens"] == 3 and text.startswith(next(iter(top)))
