"""The spans made from a run's trace events (telemetry/spans.py), read from an in-memory exporter: real runs of
the loop on scripted models and the real MCP server."""

from __future__ import annotations

import json

import pytest
from helpers import config, scripted

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed (pip install -e '.[traces]')")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from miniagent.agent.loop import grammar_tutor  # noqa: E402
from miniagent.agent.trace import Trace  # noqa: E402
from miniagent.telemetry.spans import RunSpans, model_names  # noqa: E402
from miniagent.tools.mcp_client import MCPClient  # noqa: E402


def traced_run(question: str, behaviour: str, **limits):
    """(outcome, trace events, finished spans) of one run through a real MCP server."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace = Trace.memory()
    trace.listeners.append(RunSpans(provider.get_tracer("test"), "miniagent_scripted", behaviour))
    with MCPClient(timeout=5.0) as tools:
        outcome = grammar_tutor(question, model=scripted(behaviour), tools=tools, config=config(**limits),
                                trace=trace)
    return outcome, trace.events, memory.get_finished_spans()


def test_a_run_is_one_trace_the_agents_span_over_each_model_call_and_each_tool_call():
    outcome, events, spans = traced_run("What is the past simple of go for she?", "oracle")
    assert outcome.stop_reason == "answered"
    [run] = [s for s in spans if s.parent is None]
    assert run.name == "invoke_agent grammar_tutor" and run.kind == SpanKind.INTERNAL
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    assert all(s.parent.span_id == run.context.span_id for s in spans if s is not run)
    expected = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "grammar_tutor",
                "gen_ai.request.model": "oracle", "gen_ai.provider.name": "miniagent_scripted",
                "miniagent.stop_reason": "answered", "miniagent.turns": 2, "miniagent.tool_calls": 1,
                "miniagent.answer": outcome.answer}
    assert {key: run.attributes.get(key) for key in expected} == expected
    assert run.status.status_code == StatusCode.OK
    chats = [s for s in spans if s.attributes["gen_ai.operation.name"] == "chat"]
    replies = [e for e in events if e["event"] == "model_action"]
    assert [s.name for s in chats] == ["chat oracle"] * len(replies) == ["chat oracle"] * 2
    assert [s.attributes["gen_ai.usage.output_tokens"] for s in chats] == [e["completion_tokens"] for e in replies]
    assert run.attributes["gen_ai.usage.input_tokens"] == sum(e["prompt_tokens"] for e in replies)
    [tool] = [s for s in spans if s.attributes["gen_ai.operation.name"] == "execute_tool"]
    assert tool.name == "execute_tool conjugate" and tool.attributes["gen_ai.tool.name"] == "conjugate"
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == next(
        e["args"] for e in events if e["event"] == "tool_call")
    assert tool.attributes["gen_ai.tool.call.result"] == "she went" and tool.status.status_code == StatusCode.UNSET
    # In the order they happened: the first reply, the call, the answer.
    assert [s.name for s in sorted((s for s in spans if s is not run), key=lambda s: s.start_time)] == [
        "chat oracle", "execute_tool conjugate", "chat oracle"]


def test_each_guards_decision_is_an_event_of_the_run_and_a_failed_call_is_a_span_in_error():
    outcome, events, spans = traced_run("What is the present perfect of would for you?", "stubborn",
                                        decline_out_of_grammar=False)
    [run] = [s for s in spans if s.parent is None]
    guards = [e["name"] for e in events if e["event"] == "guard"]
    assert guards and [e.name for e in run.events if e.name.startswith("guard ")] == [f"guard {g}" for g in guards]
    assert run.attributes["miniagent.stop_reason"] == outcome.stop_reason != "answered"
    assert run.status.status_code == StatusCode.ERROR and run.attributes["error.type"] == outcome.stop_reason
    failed = [s for s in spans if s.name == "execute_tool conjugate"]
    errors = [e for e in events if e["event"] == "tool_error" and e["tool"] == "conjugate"]
    assert len(failed) == len(errors) >= 1
    assert all(s.status.status_code == StatusCode.ERROR and s.attributes["error.type"] == "ToolError" for s in failed)


@pytest.mark.parametrize("llm, model, openai_model, expected", [
    ("llama", "", "x", ("llama_cpp", "gemma-3-270m-q4_k_m")), ("llama", "/m/other.gguf", "x", ("llama_cpp", "other")),
    ("openai", "", "class-model", ("openai", "class-model")), ("scripted:wanderer", "", "x",
                                                               ("miniagent_scripted", "wanderer"))])
def test_the_model_is_named_as_the_settings_name_it(llm, model, openai_model, expected):
    assert model_names(llm, model, openai_model) == expected
