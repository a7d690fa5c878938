"""Traced runs end to end (telemetry/export.py): the agent's process and the MCP server's both write OTLP JSON
to one file, and the spans of a run form one tree across the two processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FakeModelServer

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed (pip install -e '.[traces]')")

from miniagent.lab.harness.run import run_experiment  # noqa: E402
from miniagent.telemetry.export import read_spans  # noqa: E402
from miniagent.telemetry.settings import viewer_endpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIENT, SERVER = 3, 2  # OTLP's span kinds


def ask(question: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "miniagent", "ask", question, "--cache-dir", "", *flags]


def own_env() -> dict[str, str]:
    """No MINIAGENT_* or OTEL_* variables from the developer's shell: the flags alone decide."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MINIAGENT_", "OTEL_"))}


def no_viewer_here() -> None:
    if viewer_endpoint() is not None:
        pytest.skip("`invoke traces` runs a viewer in this checkout: every run is traced, by design")


def run_tree(spans: list[dict]) -> tuple[dict, list[dict]]:
    """The run's span and every span of its trace (the session's handshake is a trace of its own)."""
    [run] = [s for s in spans if s["name"] == "invoke_agent grammar_tutor"]
    return run, [s for s in spans if s["trace_id"] == run["trace_id"]]


def test_a_runs_spans_cross_into_the_mcp_server_under_its_tool_call_with_one_trace_id(tmp_path):
    file = tmp_path / "traces.jsonl"
    proc = subprocess.run(ask("What is the past simple of go for she?", "--llm", "scripted:oracle", "--traces",
                              "file", "--traces-file", str(file)), cwd=ROOT, env=own_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run, tree = run_tree(read_spans(file))
    by_id = {s["span_id"]: s for s in tree}
    assert run["parent_id"] is None and run["service"] == "miniagent"
    [tool] = [s for s in tree if s["name"] == "execute_tool conjugate"]
    # The SDK asks for the tool list before a session's first call (to check results against their schemas).
    sent_under_it = {s["name"]: s for s in tree if s["parent_id"] == tool["span_id"]}
    assert sorted(sent_under_it) == ["MCP send tools/call conjugate", "MCP send tools/list"]
    sent = sent_under_it["MCP send tools/call conjugate"]
    assert sent["name"] == "MCP send tools/call conjugate" and sent["kind"] == CLIENT
    assert sent["scope"] == "mcp-python-sdk" and sent["service"] == "miniagent"
    [served] = [s for s in tree if s["parent_id"] == sent["span_id"]]
    assert served["name"] == "tools/call conjugate" and served["kind"] == SERVER
    assert served["service"] == "miniagent-conjugation-server"
    assert served["attributes"]["gen_ai.tool.name"] == "conjugate"
    assert by_id[tool["parent_id"]] is run
    assert sorted(s["name"] for s in tree if s["parent_id"] == run["span_id"]) == [
        "chat oracle", "chat oracle", "execute_tool conjugate"]
    assert run["start_ns"] <= tool["start_ns"] <= sent["start_ns"] <= served["start_ns"] <= served["end_ns"] \
        <= sent["end_ns"] <= tool["end_ns"] <= run["end_ns"]


def test_a_run_on_a_class_model_server_is_traced_with_client_spans_for_its_model_calls(tmp_path):
    """--llm openai (a teacher's model server): each model call is a request to another process, a CLIENT span."""
    replies = ['{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}', '{"answer": "she went"}']

    def answer(request):
        if "prompt" not in request and "messages" not in request:  # GET /models
            return 200, b'{"data": [{"id": "class-model"}]}'
        if request.get("max_tokens") == 1:  # the client's start-up checks of the server
            return 200, json.dumps({"choices": [{"text": "x", "finish_reason": "length"}]}).encode()
        content = replies.pop(0)  # as a completion's text or a chat's message, whichever the client asked for
        choice = {"text": content, "message": {"content": content}, "finish_reason": "stop"}
        return 200, json.dumps({"choices": [choice], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}).encode()

    file = tmp_path / "traces.jsonl"
    with FakeModelServer(answer=answer) as server:
        proc = subprocess.run(ask("What is the past simple of go for she?", "--llm", "openai", "--openai-base-url",
                                  server.url, "--openai-model", "class-model", "--decode", "greedy",
                                  "--traces", "file", "--traces-file", str(file)),
                              cwd=ROOT, env=own_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run, tree = run_tree(read_spans(file))
    assert run["attributes"]["gen_ai.provider.name"] == "openai" and run["attributes"]["miniagent.answer"] == "she went"
    chats = [s for s in tree if s["name"] == "chat class-model"]
    assert len(chats) == 2 and {s["kind"] for s in chats} == {CLIENT}
    assert [s["attributes"]["gen_ai.usage.input_tokens"] for s in chats] == [40, 40]
    assert run["attributes"]["gen_ai.usage.output_tokens"] == 18
    assert [s["name"] for s in tree if s["parent_id"] == run["span_id"]] == [
        "chat class-model", "execute_tool conjugate", "chat class-model"]


def test_traces_off_load_no_sdk_in_either_process(tmp_path):
    no_viewer_here()
    code = ("import sys, miniagent.cli as cli, miniagent.tools.server as server\n"
            "code = cli.main(['ask', 'What is the past simple of go for she?', '--llm', 'scripted:oracle'])\n"
            "assert server._trace_calls() is None\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**own_env(), "OTEL_SERVICE_NAME": "x"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_a_run_the_harness_kills_still_ends_its_spans(tmp_path):
    """SIGTERM unwinds the process (processes.Terminated): the spans the run had open are ended, marked with what
    stopped them, and written with every span that had ended before."""
    file = tmp_path / "traces.jsonl"
    command = ask("Please conjugate the verb eat lovingly in the dreaming tense", "--llm", "scripted:wanderer",
                  "--max-turns", "100000", "--max-tool-calls", "100000", "--wall-clock-s", "100000",
                  "--max-run-tokens", "1000000000", "--decline-out-of-grammar", "false",
                  "--traces", "file", "--traces-file", str(file))
    record = run_experiment(command, timeout=1.5, trace_path=tmp_path / "trace.jsonl", live=False, cwd=ROOT,
                            env=own_env(), clock="loop")
    assert record.outcome == "timeout" and record.processes_left == []
    run, tree = run_tree(read_spans(file))
    assert run["attributes"]["miniagent.stopped_by"] == "Terminated" == run["attributes"]["error.type"]
    assert "miniagent.stop_reason" not in run["attributes"], "the loop never stopped: the process did"
    calls = [s for s in tree if s["name"].startswith("execute_tool ")]
    # The one in flight too; a SIGTERM between the trace's line of a call and its span leaves that one out.
    assert record.tool_calls - 1 <= len(calls) <= record.tool_calls and len(calls) >= 5
    assert all(s["end_ns"] <= run["end_ns"] for s in calls)


def test_the_file_holds_each_span_as_otlp_json_and_reads_back_field_by_field(tmp_path):
    """In-process (mutation testing sees it): spans written by OtlpJsonLines, read back by read_spans."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

    from miniagent.telemetry.export import OtlpJsonLines

    file = tmp_path / "deep" / "traces.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLines(file)))
    tracer = provider.get_tracer("scope-x")
    parent = tracer.start_span("parent", kind=SpanKind.SERVER, start_time=1_000)
    child = tracer.start_span("child", context=set_span_in_context(parent),
                              start_time=2_000, attributes={
                                  "s": "text", "b": True, "i": 7, "f": 0.5, "l": ["a", "b"], "li": [1, 2]})
    child.add_event("guard x", attributes={"n": 1})
    child.set_status(Status(StatusCode.ERROR, "bad"))
    child.end(end_time=3_000)
    parent.end(end_time=4_000)
    lines = file.read_text().splitlines()
    assert len(lines) == 2, "one line per export"
    child_read, parent_read = read_spans(file)
    trace_id = f"{parent.context.trace_id:032x}"
    assert parent_read == {"name": "parent", "trace_id": trace_id, "span_id": f"{parent.context.span_id:016x}",
                           "parent_id": None, "kind": SERVER, "status": 0, "service": "svc", "scope": "scope-x",
                           "start_ns": 1_000, "end_ns": 4_000, "attributes": {}, "events": []}
    assert child_read == {"name": "child", "trace_id": trace_id, "span_id": f"{child.context.span_id:016x}",
                          "parent_id": f"{parent.context.span_id:016x}", "kind": 1, "status": 2, "service": "svc",
                          "scope": "scope-x", "start_ns": 2_000, "end_ns": 3_000,
                          "attributes": {"s": "text", "b": True, "i": 7, "f": 0.5, "l": ["a", "b"], "li": [1, 2]},
                          "events": [{"name": "guard x", "attributes": {"n": 1}}]}


def test_the_lab_s_tracer_names_itself_and_the_conventions_it_follows(monkeypatch):
    from miniagent.telemetry import export
    from miniagent.telemetry.spans import SEMCONV_VERSION

    asked = []
    monkeypatch.setattr(export.trace, "get_tracer", lambda *args, **kwargs: asked.append((args, kwargs)) or "it")
    assert export.tracer() == "it"
    assert asked == [(("miniagent",), {"schema_url": f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"})]


def test_a_file_from_another_writer_with_every_default_left_out_reads_with_the_defaults(tmp_path):
    """OTLP JSON leaves out fields at their default (proto3): a line a collector wrote may hold no resource, no
    kind, no status, no attributes."""
    file = tmp_path / "collector.jsonl"
    span = {"name": "x", "traceId": "ab", "spanId": "cd", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    file.write_text("\n".join(json.dumps(line) for line in [
        {}, {"resourceSpans": [{}]}, {"resourceSpans": [{"scopeSpans": [{}]}]},
        {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]},
        {"resourceSpans": [{"scopeSpans": [{"scope": {}, "spans": [{
            **span, "attributes": [{"key": "k"}, {"key": "empty", "value": {"arrayValue": {}}}],
            "events": [{"name": "e"}]}]}]}]}]) + "\n")
    first, second = read_spans(file)
    assert first == {"name": "x", "trace_id": "ab", "span_id": "cd", "parent_id": None, "kind": 0, "status": 0,
                     "service": None, "scope": None, "start_ns": 1, "end_ns": 2, "attributes": {}, "events": []}
    assert second == {**first, "attributes": {"k": None, "empty": []}, "events": [{"name": "e", "attributes": {}}]}


def test_the_file_s_folder_is_made_once_its_lines_compact_and_not_executable(tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    from miniagent.telemetry.export import OtlpJsonLines

    file = tmp_path / "runs" / "deep" / "traces.jsonl"
    exporter = OtlpJsonLines(file)
    OtlpJsonLines(file)  # a second process on the same file: its folder is there already
    assert exporter.export([]) == SpanExportResult.SUCCESS
    span = TracerProvider().get_tracer("t").start_span("s")
    span.end()
    assert exporter.export([span]) == SpanExportResult.SUCCESS, "called directly: a failure would raise here"
    lines = file.read_text().splitlines()
    assert lines[0] == "{}" and json.dumps(json.loads(lines[1]), separators=(",", ":")) == lines[1]
    umask = os.umask(0)
    os.umask(umask)
    assert file.stat().st_mode & 0o777 == 0o644 & ~umask, "rw-r--r--, like any file the lab writes"


def test_start_sets_the_process_s_provider_for_its_service_writing_to_the_file_or_sending_otlp(tmp_path, monkeypatch):
    """In-process, each part the SDK is given recorded (mutation testing sees it): the provider, its service, the
    processor and exporter for a file and for OTLP, where OTLP goes, and a named setting beating the SDK's switch."""
    import opentelemetry.exporter.otlp.proto.http.trace_exporter as otlp_http

    from miniagent.telemetry import export
    from miniagent.telemetry.settings import TraceSettings

    made, set_to = [], []

    def recorder(kind):
        class Recorded:
            made_as = kind

            def __init__(self, *args, **kwargs):
                made.append((kind, args, kwargs))

            def __getattr__(self, name):  # what the provider calls on a processor: nothing to do
                return lambda *args, **kwargs: True

        return Recorded

    monkeypatch.setattr(export.trace, "set_tracer_provider", set_to.append)
    for kind in ("SimpleSpanProcessor", "BatchSpanProcessor"):
        monkeypatch.setattr(export, kind, recorder(kind))
    monkeypatch.setattr(otlp_http, "OTLPSpanExporter", recorder("OTLPSpanExporter"))
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert export.start(TraceSettings(""), "svc") is None and set_to == [] == made, "the SDK's switch: off"
    file = tmp_path / "t.jsonl"
    provider = export.start(TraceSettings("file", str(file)), "svc-a")
    assert set_to == [provider] and provider.resource.attributes["service.name"] == "svc-a"
    assert "OTEL_SDK_DISABLED" not in os.environ, "asked for by name: the switch would have made it a no-op"
    [(kind, (exporter,), kwargs)] = made
    assert kind == "SimpleSpanProcessor" and type(exporter) is export.OtlpJsonLines and exporter.path == file
    assert kwargs == {}
    made.clear()
    monkeypatch.setattr(export, "viewer_to_send_to", lambda: "http://127.0.0.1:6006")
    provider = export.start(TraceSettings("otlp"), "svc-b", send_every_s=0.25)
    assert set_to[-1] is provider and provider.resource.attributes["service.name"] == "svc-b"
    (exporter_kind, (), told), (processor_kind, (exporter,), kwargs) = made
    assert (exporter_kind, told) == ("OTLPSpanExporter", {"endpoint": "http://127.0.0.1:6006/v1/traces"})
    assert processor_kind == "BatchSpanProcessor" and kwargs == {"schedule_delay_millis": 250}
    assert exporter.made_as == "OTLPSpanExporter", "the batches go to the OTLP exporter"
    made.clear()
    monkeypatch.setattr(export, "viewer_to_send_to", lambda: None)  # the SDK's variables, or its default
    export.start(TraceSettings("otlp"), "svc-c")
    assert made[0] == ("OTLPSpanExporter", (), {})
    assert made[1][2] == {"schedule_delay_millis": 5000}
