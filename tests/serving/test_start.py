"""serving/start.py without a model: a stand-in server (a small OpenAI-compatible program started exactly as
the real ones are, ``python -m MODULE --model ... --host ... --port ...``) shows what the start-up waits for,
what it says when a server dies or never answers, and that the server's whole process group is always stopped.
The real servers are started by tests/serving/test_class_server.py and test_openai_backend.py."""

from __future__ import annotations

import gc
import http.server
import json
import os
import socket
import textwrap
import threading
import time
import warnings

import psutil
import pytest
from helpers import pid_alive, wait_gone

from miniagent.serving import start as ms
from miniagent.processes import stop_group

STAND_IN = textwrap.dedent('''
    """A stand-in model server: tells what it was started with, then serves one-token completions."""
    import argparse, http.server, json, os, signal, subprocess, sys, time

    parser = argparse.ArgumentParser()
    for flag in ("--model", "--host", "--port"):
        parser.add_argument(flag)
    parser.add_argument("--exit", type=int)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--child-ignores-term", action="store_true")
    parser.add_argument("--never-listen", action="store_true")
    args = parser.parse_args()
    ignores = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " if args.child_ignores_term else ""
    child = (subprocess.Popen([sys.executable, "-c", ignores + "print(1, flush=True); import time; time.sleep(600)"],
                              stdout=subprocess.PIPE) if args.child else None)
    if child:
        child.stdout.readline()  # its handler is in place
    print(json.dumps({"argv": sys.argv[1:], "pid": os.getpid(), "child": child and child.pid}), flush=True)
    print("the stand-in's own warning", file=sys.stderr, flush=True)  # a real server's errors go to stderr
    if args.exit is not None:
        sys.exit(args.exit)
    if args.never_listen:
        while True:
            time.sleep(1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"id": "c", "object": "text_completion", "created": 0, "model": "m",
                               "choices": [{"text": "!", "index": 0, "finish_reason": "length", "logprobs": None}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer((args.host, int(args.port)), Handler).serve_forever()
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """``kind="stand-in"`` starts the stand-in server; its first line of output (in the log) says how."""
    (tmp_path / "stand_in_server.py").write_text(STAND_IN, encoding="utf-8")
    monkeypatch.setitem(ms.SERVERS, "stand-in", "stand_in_server")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return tmp_path / "server.log"


def started(log) -> dict:
    return json.loads(log.read_text(encoding="utf-8").splitlines()[0])


def test_the_server_is_started_as_a_teacher_starts_it_and_stopped_with_its_children(stand_in):
    port = ms.free_port()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always", ResourceWarning)
        with ms.model_server("stand-in", "/models/m.gguf", port=port, log=stand_in, extra_args=("--child",)) as url:
            assert url == f"http://127.0.0.1:{port}/v1"
            how = started(stand_in)
            assert how["argv"] == ["--model", "/models/m.gguf", "--host", "127.0.0.1", "--port", str(port), "--child"]
            child = psutil.Process(how["child"])
            assert psutil.Process(how["pid"]).is_running() and child.is_running()
            assert os.getpgid(how["pid"]) == how["pid"] != os.getpgid(0)  # a group of its own, apart from ours
        gc.collect()
    assert not [w for w in warned if str(stand_in) in str(w.message)], "the log file it opened is closed"
    assert not pid_alive(how["pid"]), "the server is stopped"
    assert wait_gone(how["child"], within=10.0), "the server's whole process group is stopped"
    assert "the stand-in's own warning" in stand_in.read_text(encoding="utf-8")  # its stderr is in the log too


def test_without_a_model_path_the_lab_s_model_file_is_given(stand_in, monkeypatch):
    monkeypatch.setattr("miniagent.models.model_file.default_model_path", lambda: "/the/lab/model.gguf")
    with ms.model_server("stand-in", log=stand_in):
        assert started(stand_in)["argv"][:2] == ["--model", "/the/lab/model.gguf"]


def test_the_server_is_stopped_when_the_block_fails(stand_in):
    with pytest.raises(KeyError), ms.model_server("stand-in", "/m.gguf", log=stand_in):
        pid = started(stand_in)["pid"]
        raise KeyError("the block failed")
    assert not pid_alive(pid)


def test_an_open_log_is_written_and_left_open(stand_in):
    with open(stand_in, "w", encoding="utf-8") as log:
        with ms.model_server("stand-in", "/m.gguf", log=log):
            pass
        assert not log.closed
    assert started(stand_in)["argv"][1] == "/m.gguf"


def test_an_unknown_server_is_refused_before_anything_starts(stand_in):
    before = set(psutil.Process().children(recursive=True))
    with pytest.raises(ValueError, match="no model server named 'vllm': the servers are miniagent, "
                                         "llama-cpp-python, stand-in"):
        with ms.model_server("vllm", "/m.gguf", log=stand_in):
            pass
    assert set(psutil.Process().children(recursive=True)) == before and not stand_in.exists()


def test_a_server_that_exits_during_start_up_says_so_with_its_exit_code_and_its_child_is_stopped(stand_in):
    # the wait would last five minutes: only the process's exit, noticed between two tries, ends it sooner
    with pytest.raises(ms.ServerNotReady, match=r"^the model server exited during start-up \(exit code 3\)$"):
        with ms.model_server("stand-in", "/m.gguf", log=stand_in, extra_args=("--exit", "3", "--child")):
            pytest.fail("a server that exited was taken as ready")
    assert wait_gone(started(stand_in)["child"], within=10.0), "the child of a server that died was left running"


def test_a_server_child_that_ignores_sigterm_is_killed_after_the_grace(stand_in, monkeypatch):
    """The server obeys SIGTERM at once; its child does not, and would outlive it without the SIGKILL."""
    stops = []
    monkeypatch.setattr(ms, "stop_group", lambda process, grace: stops.append(grace) or stop_group(process, grace))
    monkeypatch.setattr(ms, "STOP_GRACE_S", 0.3)
    with ms.model_server("stand-in", "/m.gguf", log=stand_in, extra_args=("--child", "--child-ignores-term")):
        how = started(stand_in)
    assert stops == [0.3] and not pid_alive(how["pid"])
    assert wait_gone(how["child"], within=10.0), "the child that ignored SIGTERM was left running"


def test_a_server_that_never_answers_is_given_up_at_the_ready_bound_and_stopped(stand_in):
    port = ms.free_port()
    with pytest.raises(ms.ServerNotReady) as err:
        with ms.model_server("stand-in", "/m.gguf", port=port, log=stand_in, ready_timeout_s=1.5,
                             extra_args=("--never-listen",)):
            pytest.fail("a server that never answered was taken as ready")
    assert str(err.value).startswith(f"http://127.0.0.1:{port}/v1 did not answer a completion within 1.5 s "
                                     f"(could not reach the model server at http://127.0.0.1:{port}/v1")
    assert not pid_alive(started(stand_in)["pid"])


# --- the wait, against a server in this process -----------------------------------------------------------
class Flaky(http.server.ThreadingHTTPServer):
    """Answers 503 (busy) to its first ``busy`` requests, then one-token completions; counts every request."""

    def __init__(self, busy: int) -> None:
        self.busy, self.requests, self.asked = busy, 0, []
        flaky = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                flaky.asked.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
                flaky.requests += 1
                if flaky.requests <= flaky.busy:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"choices": [{"text": "!", "finish_reason": "length"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def test_each_try_is_one_request_and_the_wait_pauses_between_tries(monkeypatch):
    """The client retries nothing by itself: a try that failed is followed by the wait's own pause and a look at
    the process, never by a retry inside the client that would delay noticing a dead server."""
    server = Flaky(busy=2)
    pauses: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(ms.time, "sleep", lambda s: (pauses.append(s), real_sleep(s)))
    try:
        seconds = ms.wait_until_it_answers(server.url, timeout_s=30)
    finally:
        server.shutdown()
        server.server_close()
    assert server.requests == 3 and pauses == [0.3, 0.3]
    assert 0.6 <= seconds < 30
    # the cheapest question a server can answer only once its model is loaded: one token after a word
    assert [(a["prompt"], a["max_tokens"], a.get("stop")) for a in server.asked] == [("Hello", 1, None)] * 3


def test_a_server_that_takes_the_connection_and_never_answers_is_given_up_at_the_bound():
    """Each try is bounded by the wait's own deadline, not by the client's minute for a call outside a run."""
    with socket.socket() as wedged:
        wedged.bind(("127.0.0.1", 0))
        wedged.listen(8)  # connections complete in the backlog; nothing is ever read or written
        url = f"http://127.0.0.1:{wedged.getsockname()[1]}/v1"
        with pytest.raises(ms.ServerNotReady) as err:
            ms.wait_until_it_answers(url, timeout_s=1.0)
    assert str(err.value) == (f"{url} did not answer a completion within 1 s "
                              f"(the model server at {url} did not answer in the time left)")


def test_a_wait_with_no_time_says_no_answer_came():
    with pytest.raises(ms.ServerNotReady) as err:
        ms.wait_until_it_answers(f"http://127.0.0.1:{ms.free_port()}/v1", timeout_s=0)
    assert str(err.value).endswith("did not answer a completion within 0 s (no answer yet)")


def test_a_free_port_can_be_listened_on():
    port = ms.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


@pytest.mark.parametrize("name, kind", [("class_server", "miniagent"), ("llama_cpp_server", "llama-cpp-python")])
def test_each_named_server_is_a_model_server_of_its_kind(monkeypatch, name, kind):
    calls = []
    monkeypatch.setattr(ms, "model_server", lambda *args, **how: calls.append((args, how)) or "started")
    assert getattr(ms, name)("/m.gguf", port=8123, log=None) == "started"
    assert calls == [((kind, "/m.gguf"), {"port": 8123, "log": None})]
    assert ms.SERVERS[kind] in {"miniagent.serving.class_server", "miniagent.serving.llama_cpp_server"}


@pytest.mark.parametrize("page, says", [("classroom.md", "SIGTERM, then SIGKILL {:g} s later"),
                                        ("classroom.es.md", "SIGTERM y, {:g} s después, SIGKILL")])
def test_the_classroom_page_states_the_grace_a_server_s_group_gets(page, says):
    from miniagent.lab.catalogue import ROOT

    text = " ".join((ROOT / "docs" / page).read_text(encoding="utf-8").split())
    assert says.format(ms.STOP_GRACE_S) in text
