"""``invoke traces`` (lab/commands/traces.py) with a stand-in viewer: a small OTLP/HTTP receiver that says which
spans it got. The command, the viewer file it writes while the viewer runs, the runs sent there, and the stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from helpers import repo_copy, wait_for

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed (pip install -e '.[traces]')")

from miniagent.serving.start import free_port  # noqa: E402

RECEIVER = textwrap.dedent('''
    import http.server, json, os, sys
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    log = sys.argv[1]
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"a stand-in viewer")
        def do_POST(self):
            request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
            for resource in request.resource_spans:
                service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
                names = [s.name for scope in resource.scope_spans for s in scope.spans]
                with open(log, "a") as out:
                    out.write(json.dumps({"path": self.path, "service": service, "spans": names}) + "\\n")
            self.send_response(200); self.send_header("Content-Type", "application/x-protobuf"); self.end_headers()
        def log_message(self, *args):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PHOENIX_PORT"])), Handler).serve_forever()
''')


def test_runs_go_to_the_viewer_while_it_runs_and_ctrl_c_stops_it_with_nothing_left(tmp_path):
    tree = repo_copy(tmp_path / "repo")  # the viewer file of this copy, not of the checkout other tests run in
    receiver, received, port = tmp_path / "receiver.py", tmp_path / "received.jsonl", free_port()
    receiver.write_text(RECEIVER)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MINIAGENT_", "OTEL_"))},
           "PYTHONPATH": str(tree / "src")}
    serve = ("import sys; from miniagent.lab.commands import traces\n"
             f"sys.exit(traces.serve(port={port}, command=[sys.executable, {str(receiver)!r}, {str(received)!r}]))")
    viewer = subprocess.Popen([sys.executable, "-c", serve], cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    viewer_file = tree / ".miniagent" / "viewer.json"
    try:
        said = viewer.stdout.readline()
        assert said.startswith(f"Trace viewer: http://127.0.0.1:{port}"), said
        assert json.loads(viewer_file.read_text())["endpoint"] == f"http://127.0.0.1:{port}"
        stand_in = psutil.Process(json.loads(viewer_file.read_text())["pid"])
        ask = subprocess.run([sys.executable, "-m", "miniagent", "ask", "What is the past simple of go for she?",
                              "--llm", "scripted:oracle", "--cache-dir", ""], cwd=tree, env=env,
                             capture_output=True, text=True, timeout=60)
        assert ask.returncode == 0, ask.stderr
        expected = {("miniagent", "invoke_agent grammar_tutor"), ("miniagent", "execute_tool conjugate"),
                    ("miniagent-conjugation-server", "tools/call conjugate")}

        def arrived():  # each process sends its own batches: the server's may come after the agent's
            seen = [json.loads(line) for line in received.read_text().splitlines()] if received.is_file() else []
            return expected <= {(r["service"], name) for r in seen for name in r["spans"]} and seen

        seen = wait_for(arrived, 10, f"the spans {sorted(expected)} at the viewer")
        assert {r["path"] for r in seen} == {"/v1/traces"}
    finally:
        viewer.send_signal(signal.SIGINT)  # Ctrl-C
        code = viewer.wait(timeout=20)
    assert code == 0 and not viewer_file.exists()
    assert not stand_in.is_running() or stand_in.status() == psutil.STATUS_ZOMBIE, "the viewer is stopped too"


def test_without_phoenix_installed_it_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    from miniagent.lab.commands import traces

    monkeypatch.setattr(traces.importlib.util, "find_spec", lambda name: None)
    assert traces.serve(data=tmp_path / "data", viewer_file=tmp_path / "viewer.json") == 1
    assert "pip install -e '.[viewer]'" in capsys.readouterr().err and not (tmp_path / "viewer.json").exists()
