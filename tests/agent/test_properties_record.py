"""The loop's record of a run, checked on generated worlds: its stats, its trace (in memory, in a file, on
stdout), and how a refused question or a cancelled run is written down.

Same worlds, clock and profile as tests/agent/test_properties.py.
"""

from __future__ import annotations

import json

from generated import (QUESTION, FakeClock, GeneratedModel, GeneratedTools, HungForever, Reply, Runaway, ToolOutcome,
                       worlds)
from hypothesis import example, given
from hypothesis import strategies as st
from trace_steps import is_final_piece, turns

from miniagent.agent.config import TutorConfig
from miniagent.agent.loop import GrammarTutor
from miniagent.agent.trace import Trace
from loop_worlds import (FINAL_ROUND_ASKS_FOR_A_TOOL, SERVER_DIES, MODEL_FAILS, FAILED_CALL_REPEATED_INTO_THE_CAP,
                         MODEL_STILL_REPLYING, one_failure, run, identical_calls)


# --- the record ------------------------------------------------------------------------------------------------
@given(worlds())
@example(FAILED_CALL_REPEATED_INTO_THE_CAP)
@one_failure
def test_the_stats_agree_with_the_trace_event_by_event(world):
    """The run's stats agree with its trace, event by event, and with what the model and the tools saw.

    (es) Las estadísticas de la ejecución coinciden con su traza, evento a evento, y con lo que vieron el modelo y las herramientas.
    """
    r = run(world)
    stats, events = r.outcome.stats, r.events
    calls = [e for e in events if e["event"] == "tool_call"]
    assert stats.turns == sum(1 for t in turns(events) if t[-1]["finish_reason"] != "length")
    assert dict(stats.tool_calls) == {t: sum(1 for e in calls if e["tool"] == t) for t in {e["tool"] for e in calls}}
    assert stats.forced_calls == sum(1 for e in calls if e.get("forced"))
    assert len(r.tools.calls) == len(calls), "every call the tools saw is in the trace, and only those"
    errors = [e for e in events if e["event"] == "tool_error" and not e.get("forced")]  # the model's calls'
    assert stats.tool_errors == len(errors)
    assert stats.last_tool_error == (errors[-1]["error"] if errors else "")
    for i, e in enumerate(events):  # each call, then at once its answer (forced or not, as the call was)
        if e["event"] == "tool_call":
            answer = events[i + 1] if i + 1 < len(events) else {"event": "end"}
            if answer["event"] in ("tool_result", "tool_error"):
                assert (answer["tool"], bool(answer.get("forced"))) == (e["tool"], bool(e.get("forced")))
            else:  # the call the run ended on (a server that died): no tool event after it
                assert not any(x["event"].startswith("tool_") for x in events[i + 1:]), events[i:]
        elif e["event"] in ("tool_result", "tool_error"):
            assert events[i - 1]["event"] == "tool_call", "an answer with no call just before it"
    assert stats.auto_continues == sum(1 for e in events if e["event"] == "guard" and e["name"] == "auto_continue")
    actions = [e for e in events if e["event"] == "model_action"]
    assert stats.prompt_tokens == sum(e["prompt_tokens"] for e in actions)
    assert stats.completion_tokens == sum(e["completion_tokens"] for e in actions)
    assert len(actions) == sum(1 for call in r.model.calls if call.outcome in ("stop", "length"))
    assert stats.scoring_tokens == sum(e["scoring_tokens"] for e in actions)
    assert stats.identical_calls == identical_calls(r)
    assert events[-1]["stats"]["tool_calls"] == dict(stats.tool_calls)
    assert events[0]["event"] == "run_start" and events[0]["question"] == QUESTION
    assert events[-1]["stats"] == stats.as_dict()


@given(worlds())
@example(FINAL_ROUND_ASKS_FOR_A_TOOL)
@example(SERVER_DIES)
@example(MODEL_FAILS)
@example(MODEL_STILL_REPLYING)
@one_failure
def test_the_trace_records_what_the_model_and_the_tools_really_did(world):
    """The trace records what the model and the tools really did, in order, and the outcome it ends with.

    (es) La traza recoge lo que de verdad hicieron el modelo y las herramientas, en orden, y el resultado final.
    """
    r = run(world)
    events = r.events
    replies = [call for call in r.model.calls if call.outcome in ("stop", "length")]
    actions = [e for e in events if e["event"] == "model_action"]
    assert [(e["text"], e["finish_reason"]) for e in actions] == [(c.text, c.outcome) for c in replies]
    assert [e["prompt_tokens"] + e["completion_tokens"] for e in actions] == [c.tokens for c in replies]
    assert [bool(e["final"]) for e in actions] == [c.final for c in replies]
    assert [e["latency_s"] for e in actions] == [round(c.seconds, 4) for c in replies]
    calls = [i for i, e in enumerate(events) if e["event"] == "tool_call"]
    assert [(events[i]["tool"], events[i]["args"]) for i in calls] == [(c.tool, c.args) for c in r.tools.calls]
    for i, call in zip(calls, r.tools.calls):
        after = events[i + 1] if i + 1 < len(events) else {}
        if events[i].get("forced") or call.outcome.kind == "server_failed":
            continue  # a forced call's result goes into the observation; a dead server ends the run
        if call.result is not None:
            assert after.get("event") == "tool_result" and after["result"] == call.result
        else:
            assert after.get("event") == "tool_error" and after["error"].endswith(call.error)
    for call in calls:  # each result or error names the tool it came from
        if call + 1 < len(events) and events[call + 1]["event"] in ("tool_result", "tool_error"):
            assert events[call + 1]["tool"] == events[call]["tool"]
    groups = turns(events)  # turn numbers: 1, 2, ... for every piece of a turn; the final round is no turn
    assert [e["turn"] for n, group in enumerate(groups, 1) for e in group] == \
        [n for n, group in enumerate(groups, 1) for _ in group]
    assert all(e["turn"] is None and e["final"] for i, e in enumerate(events) if is_final_piece(events, i))
    assert not any(e["final"] for group in groups for e in group)
    # the model sees the question first, then each turn's whole text (its pieces joined) as one action
    assert r.scratchpad[0].role == "question" and r.scratchpad[0].text == QUESTION
    done = [group for group in groups if group[-1]["finish_reason"] != "length"]
    assert [e.text for e in r.scratchpad if e.role == "action"] == ["".join(x["text"] for x in g) for g in done]
    stop = events[-1]
    assert (stop["answer"], stop["final_answer"]) == (r.outcome.answer, r.outcome.final_answer)
    if r.outcome.stop_reason in ("server_failed", "model_failed"):  # the failure's own words reach the user
        said = r.tools.calls[-1].error if r.outcome.stop_reason == "server_failed" else "503"
        assert said in r.outcome.answer
    for guard in (e for e in events if e["event"] == "guard"):
        if guard["name"] == "auto_continue":
            assert 1 <= guard["used"] <= guard["limit"] == r.config.max_auto_continues
        if guard["name"] == "failure_breaker":
            assert guard["after"] == r.config.max_consecutive_failures
    finals = [e for e in events if e["event"] == "final_round"]
    assert [e["answer"] for e in finals] == ([r.outcome.final_answer] if finals else [])
    assert events[0]["config"] == r.config.as_dict() and events[0]["llm"] == "generated"


# --- the trace file -----------------------------------------------------------------------------------------------
@given(world=worlds())
def test_a_trace_file_reads_back_as_the_runs_events(world, tmp_path_factory):
    """A run's trace file holds one JSON line per event, the same events the run kept, in order, non-ASCII
    text as it is, each stamped with the seconds since the trace began.

    (es) El archivo de traza de una ejecución tiene una línea JSON por evento, los mismos que guardó la ejecución,
    en orden, el texto no ASCII tal cual, cada uno con los segundos desde que empezó la traza.
    """
    path = tmp_path_factory.mktemp("trace") / "runs" / "today" / "trace.jsonl"  # folders made as needed
    Trace.to_path(path).close()  # an earlier trace's folder is there already: still fine
    trace = Trace.to_path(path)
    clock = FakeClock()
    tutor = GrammarTutor(GeneratedModel(world.script, clock, world.keeps_to_schema),
                         GeneratedTools(world.outcomes, clock), world.config, trace, clock=clock)
    try:
        tutor.run(QUESTION + " ¿Y «él»?")
    except (Runaway, HungForever):
        pass
    trace.close()
    trace.close()  # closing twice is harmless
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(trace.events, default=str))
    assert "«él»" in lines[0], "non-ASCII text is written as it is"
    stamps = [event["t"] for event in trace.events]
    assert stamps == sorted(stamps) and 0 <= stamps[0] < 60


def test_a_trace_to_dash_is_written_on_stdout(capsys, tmp_path, monkeypatch):
    """A trace to "-" (`--trace -` on the command line) writes each event on stdout as one JSON line, and makes no
    file of that name.

    (es) Una traza a "-" (`--trace -` en la línea de órdenes) escribe cada evento en la salida estándar como una
    línea JSON, y no crea ningún archivo con ese nombre.
    """
    monkeypatch.chdir(tmp_path)
    trace = Trace.to_path("-")
    trace.emit("run_start", question="¿qué?")
    trace.close()
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == trace.events
    assert not (tmp_path / "-").exists()



@given(length=st.integers(0, 30), limit=st.integers(1, 25), blank=st.booleans())
def test_a_question_too_long_or_empty_is_refused_before_any_model_call(length, limit, blank):
    """A question longer than max_input_chars, or empty, is refused before any model call, saying why.

    (es) Una pregunta más larga que max_input_chars, o vacía, se rechaza antes de llamar al modelo, diciendo por qué.
    """
    question = (" " if blank else "q") * length
    model = GeneratedModel((Reply("call"),), FakeClock(), True)
    config = TutorConfig(max_input_chars=limit)
    outcome = GrammarTutor(model, GeneratedTools((ToolOutcome("ok"),), FakeClock()), config).run(question)
    refused = not question.strip() or length > limit
    assert (outcome.stop_reason == "invalid_input") == refused
    if refused:
        assert not model.calls
        why = "the question is empty" if not question.strip() else \
            f"the question is {length} characters long; the limit is {limit}"
        assert why in outcome.answer


@given(world=worlds(), after=st.integers(0, 5), how=st.sampled_from(("callback", "ctrl-c")))
def test_a_cancelled_run_ends_cleanly_saying_so(world, after, how):
    """A run cancelled by its caller, or by Ctrl-C in a model call, ends as cancelled and says so.

    (es) Una ejecución que cancela quien la llamó, o Ctrl-C durante una llamada al modelo, termina como cancelada y
    lo dice.
    """
    clock = FakeClock()
    model = GeneratedModel(world.script, clock, world.keeps_to_schema)
    checks = []
    interrupted = []  # where Ctrl-C landed: True in the final round (which ends with the guard's own reason)

    def cancel() -> bool:
        checks.append(1)
        return how == "callback" and len(checks) > after

    if how == "ctrl-c":
        answer = model.next_action

        def next_action(*args, **kwargs):
            if len(model.calls) >= after:
                interrupted.append(kwargs.get("final", False))
                raise KeyboardInterrupt
            return answer(*args, **kwargs)
        model.next_action = next_action
    tutor = GrammarTutor(model, GeneratedTools(world.outcomes, clock), world.config, cancel=cancel, clock=clock)
    try:
        outcome = tutor.run(QUESTION)
    except (Runaway, HungForever):
        return
    if how == "ctrl-c":  # a Ctrl-C in a turn's model call ends the run as cancelled, whatever the world
        assert interrupted.count(False) <= 1, "the loop asked the model again after Ctrl-C"
        assert (outcome.stop_reason == "cancelled") == (interrupted[:1] == [False]), (interrupted, outcome)
    if outcome.stop_reason == "cancelled":
        said = "(cancelled by the caller)" if how == "callback" else "(interrupted)"
        assert f"the run was cancelled {said} [stop_reason: cancelled]" in outcome.answer
    elif how == "callback":
        assert len(checks) <= after, "the loop went on after its caller cancelled it"
