"""How the class server starts (serving/class_server.py main): every option reaches the model, the server and
what it says, without loading a model or opening a port."""

from __future__ import annotations

import pytest

from miniagent.serving import class_server
from miniagent.models.llama_params import AmxChoice


class Started:
    """What main() built: the weights it loaded, the slots, and what uvicorn was asked to serve."""

    def __init__(self, monkeypatch):
        import uvicorn

        from miniagent import processes
        from miniagent.models import llama_runtime
        from miniagent.serving import slots

        self.loaded, self.slots, self.served = [], [], []
        outer = self

        class FakeSlots:
            model_path, requests, evaluated, shared, n_ctx = "/models/x.gguf", 7, 1234, 5678, 64

            def __init__(self, weights, **how):
                outer.slots.append((weights, how))
                self.vocab = self

            def tokenize(self, text, *, bos=False):
                return [1] * bos + [2] * len(text.split())

            def piece(self, token):
                return "went"

            def complete(self, prompt, max_tokens, stop, logprobs, owner=None):
                return slots.Completion("went", [5], "stop", [], [])

        monkeypatch.setattr(llama_runtime, "load_weights", lambda path, amx: self.loaded.append((path, amx)) or "W")
        monkeypatch.setattr(slots, "Slots", FakeSlots)
        monkeypatch.setattr(processes, "usable_cores", lambda: 3)
        monkeypatch.setattr(uvicorn, "run", lambda app, **how: self.served.append((app, how)))


@pytest.fixture
def started(monkeypatch):
    monkeypatch.delenv("MINIAGENT_LLAMA_AMX", raising=False)
    monkeypatch.chdir("/")  # no miniagent.toml here
    return Started(monkeypatch)


def test_every_option_reaches_the_model_and_the_server(started, capsys):
    assert class_server.main(["--host", "0.0.0.0", "--port", "8123", "--model", "/m.gguf", "--slots", "3",
                              "--n-ctx", "999", "--n-threads", "5", "--llama-amx", "off"]) == 0
    ((path, amx),) = started.loaded
    assert path == "/m.gguf" and amx == AmxChoice(False, "forced by llama_amx = off")
    assert started.slots == [("W", {"slots": 3, "n_ctx": 999, "n_threads": 5})]
    ((app, how),) = started.served
    assert how == {"host": "0.0.0.0", "port": 8123, "log_level": "warning"}
    assert capsys.readouterr().err == ("[miniagent] class server: /models/x.gguf, 3 slots, n_ctx 999, 5 threads, "
                                       "AMX path: off (forced by llama_amx = off); http://0.0.0.0:8123/v1\n")


def test_the_defaults(started, capsys):
    assert class_server.main([]) == 0
    assert started.loaded[0][0] is None  # the embedded model
    assert started.slots[0][1] == {"slots": 16, "n_ctx": 16384, "n_threads": 3}  # every core it may use
    assert started.served[0][1] == {"host": "127.0.0.1", "port": 8000, "log_level": "warning"}
    assert ", 16 slots, n_ctx 16384, 3 threads, " in capsys.readouterr().err


def test_its_last_line_says_what_it_did(started, capsys):
    from starlette.testclient import TestClient

    class_server.main([])
    app = started.served[0][0]
    capsys.readouterr()
    with TestClient(app) as http:  # the app serves the slots main() built
        assert http.post("/v1/completions", json={"prompt": "go"}).json()["choices"][0]["text"] == "went"
    assert capsys.readouterr().err == ("[miniagent] class server: 7 requests, 1234 tokens evaluated, "
                                       "5678 reused from another slot's cache\n")


def test_the_amx_setting_comes_from_the_environment_too(started, monkeypatch, capsys):
    monkeypatch.setenv("MINIAGENT_LLAMA_AMX", "off")
    class_server.main([])
    assert started.loaded[0][1] == AmxChoice(False, "forced by llama_amx = off")
    capsys.readouterr()
    monkeypatch.setenv("MINIAGENT_LLAMA_AMX", "sometimes")
    assert class_server.main([]) == 2
    assert capsys.readouterr().err == "miniagent: bad setting: llama_amx must be auto, on or off, not 'sometimes'\n"
    assert len(started.loaded) == 1, "nothing loaded after a bad setting"


@pytest.mark.parametrize("flag", ["--slots", "--n-ctx", "--n-threads"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_number_below_one_is_refused_and_one_is_taken(started, capsys, flag, value):
    assert class_server.main([flag, value]) == 2
    assert capsys.readouterr().err == f"miniagent: bad setting: {flag} must be at least 1, not {value}\n"
    assert started.loaded == []
    assert class_server.main([flag, "1"]) == 0


def test_the_help_a_teacher_reads_says_what_each_option_is_for():
    parser = class_server.build_parser()
    assert "a slot per learner" in parser.description
    says = {"--host": "0.0.0.0: the whole network", "--model": "the embedded Gemma 3 270M",
            "--slots": "learners' prompts kept in the cache", "--n-ctx": "KV cells shared by all slots",
            "--n-threads": "default: every core", "--llama-amx": "MINIAGENT_LLAMA_AMX"}
    helps = {action.option_strings[-1]: action.help for action in parser._actions}
    for option, words in says.items():
        assert words in (helps[option] or ""), option


def test_the_options_and_their_defaults():
    assert vars(class_server.build_parser().parse_args([])) == {
        "host": "127.0.0.1", "port": 8000, "model": None, "slots": 16, "n_ctx": 16384, "n_threads": None,
        "llama_amx": None}
    with pytest.raises(SystemExit):
        class_server.build_parser().parse_args(["--llama-amx", "sometimes"])
    assert class_server.build_parser().prog == "python -m miniagent.serving.class_server"
