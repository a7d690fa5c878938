"""The spans made from a run's trace events (telemetry/spans.py), read from an in-memory exporter: real runs of
the loop on scripted models and the real MCP server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import config, scripted

pytest.importorskip("opentelemetry.sdk", reason="the traces extra is not installed (pip install -e '.[traces]')")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from miniagent.agent.loop import grammar_tutor  # noqa: E402
from miniagent.agent.trace import Trace  # noqa: E402
from miniagent.telemetry.spans import RunSpans, _attribute, model_names  # noqa: E402
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


@pytest.mark.parametrize("question, behaviour", [("What is the dreaming tense of eat for I?", "oracle"),
                                                 ("What is the past simple of 'blorf' for she?", "literal"),
                                                 ("What is the capital of France?", "oracle")])
def test_a_run_rightly_declined_is_no_error_in_the_viewer(question, behaviour):
    """Issue 63: the honest no (out_of_grammar) gave the user what the grammar allows: its span ends OK, not red."""
    outcome, events, spans = traced_run(question, behaviour)
    [run] = [s for s in spans if s.parent is None]
    assert outcome.stop_reason == "out_of_grammar" == run.attributes["miniagent.stop_reason"]
    assert run.status.status_code == StatusCode.OK and "error.type" not in run.attributes
    assert [e.name for e in run.events if e.name.startswith("guard ")][-1] == "guard out_of_grammar"


@pytest.mark.parametrize("llm, model, openai_model, expected", [
    ("llama", "", "x", ("llama_cpp", "gemma-3-270m-q4_k_m")), ("llama", "/m/other.gguf", "x", ("llama_cpp", "other")),
    ("openai", "", "class-model", ("openai", "class-model")), ("scripted:wanderer", "", "x",
                                                               ("miniagent_scripted", "wanderer"))])
def test_the_model_is_named_as_the_settings_name_it(llm, model, openai_model, expected):
    assert model_names(llm, model, openai_model) == expected


def spans_of(events: list[dict], provider: str = "miniagent_scripted", model: str = "m", *, stopped_by=None):
    """Every span RunSpans makes of hand-written events, as (name, kind, parent's name, status, description,
    attributes, events): each field read exactly, in-process (mutation testing sees these)."""
    memory = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    spans = RunSpans(tracer_provider.get_tracer("test"), provider, model)
    for event in events:
        spans(event)
    if stopped_by is not False:
        spans.end_open(stopped_by)
    finished = memory.get_finished_spans()
    names = {s.context.span_id: s.name for s in finished}
    return [(s.name, s.kind.name, names.get(s.parent.span_id) if s.parent else None, s.status.status_code.name,
             s.status.description, dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
            for s in finished], finished


RUN_START = {"event": "run_start", "question": "Q?", "config": {"max_turns": 4, "grounding": True}}
RUN = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "grammar_tutor",
       "gen_ai.provider.name": "miniagent_scripted", "gen_ai.request.model": "m", "miniagent.question": "Q?",
       "miniagent.config.max_turns": 4, "miniagent.config.grounding": True}
REPLY = {"event": "model_action", "latency_s": 1.5, "prompt_tokens": 30, "completion_tokens": 7,
         "finish_reason": "stop", "turn": 1, "final": False, "scoring_tokens": 3, "text": '{"tool": "conjugate"}'}
STATS = {"prompt_tokens": 30, "completion_tokens": 7, "turns": 1, "tool_calls": {"conjugate": 2, "list_tenses": 1},
         "tool_errors": 1, "identical_calls": 1}


def test_every_field_of_every_span_of_an_answered_run():
    events = [RUN_START, REPLY,
              {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}, "forced": True},
              {"event": "tool_result", "result": "she went"},
              {"event": "guard", "name": "dedup", "t": 1.0, "calls": 2, "seen": ["a"]},
              {"event": "final_round", "answer": "she went", "detail": "d"},
              {"event": "stop", "stop_reason": "answered", "answer": "she went", "final_answer": "she went",
               "stats": STATS},
              {"event": "unknown_to_spans"}]
    spans, finished = spans_of(events)
    chat = ("chat m", "INTERNAL", "invoke_agent grammar_tutor", "UNSET", None, {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "miniagent_scripted", "gen_ai.request.model": "m",
        "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 7, "gen_ai.response.finish_reasons": ("stop",),
        "miniagent.turn": 1, "miniagent.final": False, "miniagent.scoring_tokens": 3,
        "miniagent.reply": '{"tool": "conjugate"}'}, [])
    tool = ("execute_tool conjugate", "INTERNAL", "invoke_agent grammar_tutor", "UNSET", None, {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "conjugate", "gen_ai.tool.type": "extension",
        "gen_ai.tool.call.arguments": '{"verb": "go"}', "miniagent.forced": True,
        "gen_ai.tool.call.result": "she went"}, [])
    run = ("invoke_agent grammar_tutor", "INTERNAL", None, "OK", None, {
        **RUN, "miniagent.stop_reason": "answered", "miniagent.answer": "she went",
        "miniagent.final_answer": "she went", "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 7,
        "miniagent.turns": 1, "miniagent.tool_calls": 3, "miniagent.tool_errors": 1,
        "miniagent.identical_calls": 1},
        [("guard dedup", {"miniagent.calls": 2, "miniagent.seen": '["a"]'}),
         ("final_round", {"miniagent.answer": "she went", "miniagent.detail": "d"})])
    assert spans == [chat, tool, run]
    assert finished[0].end_time - finished[0].start_time == 1_500_000_000, "drawn back by the reply's latency"


def test_a_fallback_a_failed_call_and_a_model_server_are_said_as_such():
    events = [RUN_START, {**REPLY, "latency_s": None, "prompt_tokens": None, "completion_tokens": None,
                          "finish_reason": None, "scoring_tokens": None, "text": None, "turn": None, "final": True},
              {"event": "tool_call", "tool": "conjugate", "args": None},
              {"event": "tool_error", "error": "ToolError: no such verb"},
              {"event": "tool_call", "tool": "conjugate", "args": {}},
              {"event": "tool_error", "error": ""},
              {"event": "tool_call", "tool": "conjugate", "args": {}},
              {"event": "tool_error", "error": "McpError: bad input: verb"},
              {"event": "final_round", "answer": "Sorry"},
              {"event": "stop", "stop_reason": "stuck", "answer": "Sorry"}]
    spans, finished = spans_of(events, "openai", "class-model")
    chat, failed, unnamed, two_colons, run = spans
    assert chat[1] == "CLIENT" and chat[5] == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "class-model",
        "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0, "gen_ai.response.finish_reasons": ("",),
        "miniagent.final": True, "miniagent.scoring_tokens": 0, "miniagent.reply": ""}, "the final round's reply"
    assert finished[0].end_time == finished[0].start_time
    assert failed[3:6] == ("ERROR", "ToolError: no such verb", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "conjugate", "gen_ai.tool.type": "extension",
        "gen_ai.tool.call.arguments": "{}", "miniagent.forced": False, "error.type": "ToolError"})
    assert unnamed[3:5] == ("ERROR", "") and unnamed[5]["error.type"] == "ToolError"
    assert two_colons[5]["error.type"] == "McpError", "the error's type is what comes before its first colon"
    assert run[3:5] == ("ERROR", "stop_reason stuck")
    assert run[5] == {**RUN, "gen_ai.provider.name": "openai", "gen_ai.request.model": "class-model",
                      "miniagent.stop_reason": "stuck", "error.type": "stuck", "miniagent.answer": "Sorry",
                      "miniagent.final_answer": "", "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0,
                      "miniagent.turns": 0, "miniagent.tool_calls": 0, "miniagent.tool_errors": 0,
                      "miniagent.identical_calls": 0}, "a stop without its counts counts nothing"
    assert run[6] == [("final_round", {"miniagent.answer": "Sorry", "miniagent.detail": ""})]


def test_a_run_stopped_from_outside_ends_its_open_spans_saying_what_stopped_them():
    events = [RUN_START, {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}}]
    spans, _ = spans_of(events, stopped_by=KeyboardInterrupt())
    tool, run = spans
    for span, name in ((tool, "execute_tool conjugate"), (run, "invoke_agent grammar_tutor")):
        assert span[0] == name
        assert span[3:5] == ("ERROR", "the process was stopped (KeyboardInterrupt) before the run ended")
        assert span[5]["miniagent.stopped_by"] == "KeyboardInterrupt" == span[5]["error.type"]
    spans, _ = spans_of([RUN_START], stopped_by=None)
    assert spans[0][3:5] == ("ERROR", "the process was stopped (closed) before the run ended")
    assert spans[0][5]["miniagent.stopped_by"] == "closed"
    # A stop with a call in flight ends the call first, as unfinished; events after the run's end change nothing
    spans, _ = spans_of([*events, {"event": "stop", "stop_reason": "cancelled", "answer": "x"},
                         {"event": "tool_result", "result": "late"}, {"event": "tool_error", "error": "late"},
                         {"event": "guard", "name": "late"}, {"event": "final_round", "answer": "late"},
                         {"event": "stop", "stop_reason": "late"}], stopped_by=False)
    tool, run = spans
    assert tool[3:5] == ("ERROR", "the run stopped while this call was in flight")
    assert tool[5]["error.type"] == "unfinished"
    assert run[5]["miniagent.stop_reason"] == "cancelled" and run[6] == []


def test_a_call_s_result_or_error_with_no_call_open_leaves_the_run_s_span_open():
    spans, _ = spans_of([RUN_START, {"event": "tool_result", "result": "stray"},
                         {"event": "tool_error", "error": "ToolError: stray"}], stopped_by=None)
    [run] = spans
    assert run[5]["miniagent.stopped_by"] == "closed", "still open when the process closed, not ended by either"


@pytest.mark.parametrize("value, attribute", [
    ("text", "text"), (True, True), (3, 3), (0.5, 0.5),
    ({"verb": "ñandú", "n": [1]}, '{"verb": "ñandú", "n": [1]}'),  # JSON, its letters as they are
    ({"path": Path("/m/x.gguf")}, '{"path": "/m/x.gguf"}'),  # what JSON cannot hold, as text
])
def test_an_attribute_is_a_plain_value_or_json_text(value, attribute):
    assert _attribute(value) == attribute
