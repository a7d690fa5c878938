"""The openai backend against a real OpenAI-compatible server: llama-cpp-python's, on loopback,
started with its defaults, as a teacher would start it for a class.

The fixture waits until the server answers a completion (not until its port opens: the model is
still loading then, and a cold server's first request evaluates the whole prompt) and always
stops and reaps the server.  The assertions read typed outcomes: stop reasons, not log lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import THREADS

from miniagent.serving.start import free_port, llama_cpp_server

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the past simple of go for she?"
pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def server_url():
    pytest.importorskip("llama_cpp.server", reason="pip install 'llama-cpp-python[server]'")
    with llama_cpp_server() as url:
        yield url


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    return {**env, "PYTHONPATH": str(ROOT / "src")}


def ask(*flags: str, timeout: float = 300) -> tuple[dict, subprocess.CompletedProcess]:
    proc = subprocess.run([sys.executable, "-m", "miniagent", "ask", QUESTION, "--llm", "openai", "--json", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=_env())
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_invoke_ask_with_the_flags_the_readme_shows(server_url):
    """The issue's first symptom: `invoke ask ... --llm openai --openai-base-url URL` must work."""
    proc = subprocess.run([sys.executable, "-m", "invoke", "ask", QUESTION, "--llm", "openai", "--openai-base-url",
                           server_url, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=_env())
    assert "No idea what" not in proc.stderr, proc.stderr
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["stop_reason"] == "answered" and outcome["answer"] == "she went", outcome
    assert proc.returncode == 0


def test_scored_decoding_through_the_server_takes_the_local_backends_decisions(server_url):
    """Same prompt, same walk, the server's log-probabilities: the same first action as in-process llama.cpp."""
    from miniagent.agent.ports import Entry
    from miniagent.models.llama import LlamaBackend
    from miniagent.models.openai_compat import OpenAIBackend

    questions = ["Conjugate swim in the present perfect continuous for we.", "¿Cuál es el pasado simple de 'eat' con 'ellos'?",
                 "Future perfect of write, you?"]
    remote, local = OpenAIBackend(server_url, warm_up=True), LlamaBackend(cache_dir=None, n_threads=THREADS)
    try:
        for question in questions:
            pad = [Entry("question", question)]
            theirs = remote.next_action(pad, first_turn=True, timeout_s=120)
            ours = local.next_action(pad, first_turn=True)
            assert json.loads(theirs.text) == json.loads(ours.text), question
            assert theirs.prompt_tokens > 0 and theirs.scoring_tokens > 0
    finally:
        remote.close()
        local.close()


def test_greedy_finds_the_response_format_the_server_takes(server_url):
    """llama-cpp-python's server answers HTTP 500 to json_schema: auto detects it and uses json_object."""
    outcome, proc = ask("--openai-base-url", server_url, "--decode", "greedy", "--trace", "-")
    assert "refused response_format json_schema" in proc.stderr and server_url in proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()[:-1] if line.strip()]
    actions = [e for e in events if e["event"] == "model_action"]
    assert json.loads(actions[0]["text"]).get("tool") == "conjugate", "the server applied the turn-1 schema"
    assert all(a["prompt_tokens"] > 0 for a in actions), "token counts come from the server's usage"
    assert outcome["stop_reason"] != "model_failed"


def test_an_explicit_json_schema_fails_in_the_model_servers_name(server_url):
    outcome, _ = ask("--openai-base-url", server_url, "--decode", "greedy", "--openai-response-format", "json_schema")
    assert outcome["stop_reason"] == "model_failed"
    assert f"the model server at {server_url} answered HTTP 500" in outcome["answer"]
    assert "conjugation server failed" not in outcome["answer"]


def test_the_server_is_reaped():
    pytest.importorskip("llama_cpp.server")
    import psutil

    before = {p.pid for p in psutil.Process().children()}  # the module's server may be running too
    with llama_cpp_server() as url:
        (server,) = [p for p in psutil.Process().children()
                     if p.pid not in before and "miniagent.serving.llama_cpp_server" in " ".join(p.cmdline())]
        assert url.startswith("http://127.0.0.1:")
    assert not psutil.pid_exists(server.pid), "stopped and waited for: no process, not even a zombie"


def test_a_dead_model_server_is_a_model_failure():
    outcome, proc = ask("--openai-base-url", f"http://127.0.0.1:{free_port()}/v1", timeout=60)
    assert outcome["stop_reason"] == "model_failed" and proc.returncode == 1
    assert "could not reach the model server" in outcome["answer"] and "conjugation server failed" not in outcome["answer"]
