"""A traced MCP server that outlives its agent says so in the trace (telemetry/orphan.py): the agent is killed on
the spot while the server is wedged in a call, as break 09 lets happen, and the server's spans go on after it."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import LineWatch, wait_for, wait_for_server, wait_for_tool_call

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed (pip install -e '.[traces]')")

from miniagent.telemetry import orphan  # noqa: E402
from miniagent.telemetry.export import read_spans  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ERROR = 2  # OTLP's status code


def orphaned_spans(file: Path, count: int, within: float = 30.0) -> list[dict]:
    """The server's orphaned spans, once there are ``count`` of them (the bound only keeps a broken watch from
    hanging the suite)."""
    def found():
        spans = [s for s in (read_spans(file) if file.exists() else []) if s["name"].startswith("orphaned ")]
        return spans if len(spans) >= count else None

    return wait_for(found, within, f"{count} orphaned spans")


def wedged_traced_agent(tmp_path: Path):
    """(agent, its MCP server, the traces file), once the agent's call has wedged the server."""
    file, trace = tmp_path / "traces.jsonl", tmp_path / "trace.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINIAGENT_", "OTEL_"))}
    agent = subprocess.Popen(
        [sys.executable, "-m", "miniagent", "ask", "What is the past simple of eat for I?", "--cache-dir", "",
         "--llm", "scripted:stubborn", "--fault-hang-on", "eat", "--tool-timeout-s", "60", "--wall-clock-s", "60",
         "--trace", str(trace), "--traces", "file", "--traces-file", str(file)],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wedged = LineWatch(agent.stderr)
    server = wait_for_server(agent)
    try:
        wait_for_tool_call(trace)
        wedged.wait()
    except BaseException:
        server.kill()
        agent.kill()
        raise
    return agent, server, file


def test_a_server_left_behind_by_its_agent_goes_on_in_the_trace(tmp_path):
    agent, server, file = wedged_traced_agent(tmp_path)
    try:
        assert [s for s in read_spans(file) if s["name"].startswith("orphaned ")] == [], "the agent still runs"
        killed_ns = time.time_ns()
        os.kill(agent.pid, signal.SIGKILL)  # dies on the spot, as without its SIGTERM handler: nothing unwinds
        agent.wait(timeout=10)
        gone_ns = time.time_ns()  # by now the server has a new parent: the kernel gives it one as the agent exits
        first, second = orphaned_spans(file, 2)[:2]
        assert server.is_running()
    finally:
        server.kill()
    chats = [s for s in read_spans(file) if s["name"].startswith("chat ")]
    assert chats, "the model call ended before the kill and was written"
    for span in (first, second):
        assert span["name"] == "orphaned tools/call conjugate"
        assert span["service"] == "miniagent-conjugation-server" and span["status"] == ERROR
        assert span["trace_id"] == chats[0]["trace_id"], "in the agent's trace"
        assert span["attributes"]["miniagent.orphan.agent_pid"] == agent.pid
        assert span["attributes"]["process.pid"] == server.pid
        assert span["attributes"]["process.parent_pid"] != agent.pid
    # Under the open request (never written: it never ends), the same one each time, and after the agent's spans
    assert first["parent_id"] == second["parent_id"] not in {s["span_id"] for s in read_spans(file)}
    # The first runs from the last look that saw the agent alive to the one that found it gone; the next ones
    # follow on, the whole time after the kill.
    assert first["start_ns"] <= gone_ns and killed_ns <= first["end_ns"] == second["start_ns"]
    assert max(s["end_ns"] for s in chats) <= first["end_ns"]
    assert second["end_ns"] - second["start_ns"] >= orphan.FIRST_S * 1e9 * 0.9


def test_a_server_whose_agent_lives_writes_no_orphaned_span(tmp_path):
    """The fixed twin: the agent's SIGTERM handler unwinds and closes its client, which stops the wedged server."""
    agent, server, file = wedged_traced_agent(tmp_path)
    try:
        os.kill(agent.pid, signal.SIGTERM)
        agent.wait(timeout=60)
        server.wait(timeout=10)
    finally:
        if server.is_running():
            server.kill()
    spans = read_spans(file)
    assert [s for s in spans if s["name"] == "invoke_agent grammar_tutor"], "the agent's run span was written"
    assert [s for s in spans if s["name"].startswith("orphaned ")] == []


def test_the_intervals_double_up_to_the_longest():
    assert list(itertools.islice(orphan.doubling(0.25, 60.0), 11)) == [0.25, 0.5, 1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert (orphan.FIRST_S, orphan.MOST_S, orphan.POLL_S) == (0.25, 60.0, 0.1)


def test_the_watch_is_quiet_while_the_agent_lives_then_writes_under_each_open_request_until_it_ends():
    """In-process, the agent's death played by the parent's pid changing (so mutation testing sees it too)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider, exporter, open_spans = TracerProvider(), InMemorySpanExporter(), orphan.OpenSpans()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(open_spans)
    tracer = provider.get_tracer("test")
    request = tracer.start_span("tools/call conjugate")
    tracer.start_span("tools/list").end()  # ended before: nothing is written under it
    assert [span.name for span in open_spans.now()] == ["tools/call conjugate"]
    agent_alive = threading.Event()
    agent_alive.set()
    watch = threading.Thread(target=orphan._watch, args=(provider, open_spans, 4242, 0.005, 0.02, 0.04),
                             kwargs={"parent_now": lambda: 4242 if agent_alive.is_set() else 1}, daemon=True)
    watch.start()
    time.sleep(0.1)
    assert exporter.get_finished_spans()[1:] == (), "nothing while the agent lives"
    killed_ns = time.time_ns()
    agent_alive.clear()
    wait_for(lambda: len(exporter.get_finished_spans()) >= 5, 30, "four orphaned spans")
    request.end()
    watch.join(timeout=30)
    assert not watch.is_alive(), "the watch ends with the last open request"
    tiles = [span for span in exporter.get_finished_spans() if span.name.startswith("orphaned ")]
    assert len(tiles) >= 4 and {span.name for span in tiles} == {"orphaned tools/call conjugate"}
    assert {span.instrumentation_scope.name for span in tiles} == {"miniagent"}
    for span in tiles:
        assert span.parent.span_id == request.context.span_id and span.context.trace_id == request.context.trace_id
        assert span.status.status_code.name == "ERROR"
        assert span.status.description == "the agent (pid 4242) is gone; this server still runs"
        assert dict(span.attributes, **{"miniagent.orphan.alone_s": 0}) == {
            "miniagent.orphan.agent_pid": 4242, "process.pid": os.getpid(), "process.parent_pid": 1,
            "miniagent.orphan.alone_s": 0}
    assert tiles[0].start_time <= killed_ns <= tiles[0].end_time
    assert all(a.end_time == b.start_time for a, b in itertools.pairwise(tiles)), "each follows on"
    alone = [span.attributes["miniagent.orphan.alone_s"] for span in tiles]
    assert alone == sorted(alone) and alone[0] < alone[-1]
    # time alone since the agent was last seen, not since the tile before (issue 63)
    assert alone == [round((span.end_time - tiles[0].start_time) / 1e9, 3) for span in tiles]
    assert alone[0] == round((tiles[0].end_time - tiles[0].start_time) / 1e9, 3)
    # After each, the watch sleeps the next interval: 0.02, then 0.04 and no longer (at least that, on any machine)
    assert tiles[1].end_time - tiles[1].start_time >= 0.02e9 and tiles[2].end_time - tiles[2].start_time >= 0.04e9


def test_a_server_whose_agent_is_gone_at_the_first_look_counts_its_time_alone_from_the_watch_s_start():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider, exporter = TracerProvider(), InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = provider.get_tracer("test").start_span("started before the watch")
    open_spans = orphan.OpenSpans()
    provider.add_span_processor(open_spans)
    before.end()  # a span the watch never saw start ends without a fuss
    request = provider.get_tracer("test").start_span("tools/call conjugate")
    watch = threading.Thread(target=orphan._watch, args=(provider, open_spans, 4242, 0.005, 0.01, 0.01),
                             kwargs={"parent_now": lambda: 1}, daemon=True)
    started_ns = time.time_ns()
    watch.start()
    wait_for(lambda: [s for s in exporter.get_finished_spans() if s.name.startswith("orphaned ")], 30, "an orphaned span")
    request.end()
    watch.join(timeout=30)
    tile = next(s for s in exporter.get_finished_spans() if s.name.startswith("orphaned "))
    assert started_ns <= tile.start_time <= tile.end_time
    assert tile.attributes["miniagent.orphan.alone_s"] == round((tile.end_time - tile.start_time) / 1e9, 3)


def test_watch_adds_its_span_processor_and_watches_this_process_s_parent_from_a_daemon_thread(monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    watched, provider = [], TracerProvider()
    monkeypatch.setattr(orphan, "_watch", lambda *args: watched.append(args))
    thread = orphan.watch(provider)
    thread.join(timeout=30)
    assert thread.daemon and thread.name == "orphan-watch"
    [(given, open_spans, parent, poll_s, first_s, most_s)] = watched
    assert given is provider and (parent, poll_s, first_s, most_s) == (os.getppid(), 0.1, 0.25, 60.0)
    span = provider.get_tracer("test").start_span("tools/call conjugate")
    assert open_spans.now() == [span], "the provider tells it of every span"
    span.end()
    assert open_spans.now() == []
