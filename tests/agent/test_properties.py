"""The loop's guarantees, checked on generated worlds (tests/generated.py): any model, any tools, any settings.

Each test states one property of every run and names the guard it holds to account; hypothesis looks for a
world where it fails and shrinks it to the smallest one.  The profile (tests/conftest.py) is fixed in CI:
derandomized, a bounded number of examples, no example database, no deadline.

Every run uses a fake clock that only the model and the tools move, so each model or tool step takes at
most the time the loop gives it: in this world a run's elapsed time may reach its wall clock but never pass it
(on a real machine one more decode step, see theory 05).
"""
from __future__ import annotations

import json
import re

from generated import Run, failing_tools, worlds
from hypothesis import example, given

from trace_steps import steps, stuck_at, turns
from loop_worlds import (FINAL_ROUND_REASONS, STOP_REASONS, PLAN_BUDGET_USED, TOOL_TAKES_THE_WHOLE_WALL_CLOCK,
                         TAKING_TURNS_WITH_THE_DETECTOR_OFF, ONE_STEP_WITH_MAX_REPEATS_1,
                         TWO_FAILING_CALLS_TAKING_TURNS, ONE_CALL_TIMED_OUT_TWO_WAYS,
                         TWO_SUCCESSES_THEN_A_FAILURE, ANSWERS_RIGHT_AFTER_AN_ERROR,
                         PLAN_THAT_DOES_NOT_RAISE_THE_CAP, FAILED_CALL_REPEATED_INTO_THE_CAP,
                         FAILED_CALLS_AND_DISCOVERY_THEN_THE_CAP,
                         MODEL_SLOWER_THAN_THE_WALL_CLOCK, MODEL_TIME_USED_UP_EXACTLY,
                         MODEL_STILL_REPLYING, WALL_CLOCK_WITHOUT_THE_MODEL, one_failure, run,
                         model_tool_calls, plan_limit, tokens_before_each_call,
                         invalid_in_a_row)

from miniagent.agent.errors import terminal_classes

STOP_REASON_CLASS = {cls.stop_reason: cls for cls in terminal_classes()}


# --- it ends ---------------------------------------------------------------------------------------------------
@given(worlds())
@one_failure
def test_every_run_ends_with_a_known_stop_reason_and_no_exception(world):
    """Every run ends, with a known stop reason and a non-empty answer, and no exception escapes.

    (es) Toda ejecución termina, con un motivo de parada conocido y una respuesta no vacía, y no se escapa ninguna excepción.
    """
    r = run(world)  # a Runaway (the loop never stops) or any other exception fails the test
    assert r.outcome.stop_reason in STOP_REASONS
    assert r.outcome.answer.strip(), "every run ends with an answer or a fallback text"
    assert r.events[-1]["event"] == "stop" and r.events[-1]["stop_reason"] == r.outcome.stop_reason


@given(worlds())
@example(PLAN_THAT_DOES_NOT_RAISE_THE_CAP)
@one_failure
def test_the_stop_reason_names_the_guard_that_really_ended_the_run(world):
    """The stop reason names the guard that really ended the run, at the threshold its setting gives.

    (es) El motivo de parada nombra la guarda que de verdad terminó la ejecución, en el umbral que le da su ajuste.
    """
    r = run(world)
    c, reason, stats = r.config, r.outcome.stop_reason, r.outcome.stats
    last_model, last_tool = r.model.calls[-1], (r.tools.calls[-1] if r.tools.calls else None)
    if reason == "max_turns":
        assert stats.turns == c.max_turns
    elif reason == "max_tool_calls":
        assert model_tool_calls(r) == c.max_tool_calls == plan_limit(r)
    elif reason == "call_budget":
        assert model_tool_calls(r) == plan_limit(r) > c.max_tool_calls
    elif reason == "wall_clock":  # the run's clock ran out (the model's time not counted if it has its own), or that
        assert r.counted_seconds >= c.wall_clock_s or (  # own clock, model_wall_clock_s, did
            c.model_wall_clock_s > 0 and r.model_seconds == c.model_wall_clock_s)
    elif reason == "token_budget":
        assert stats.prompt_tokens + stats.completion_tokens >= c.max_run_tokens
    elif reason == "auto_continue_limit":
        pieces = [e["finish_reason"] for e in turns(r.events)[-1]]
        assert pieces == ["length"] * (c.max_auto_continues + 1)
    elif reason == "format_errors":
        assert invalid_in_a_row(r)[-1] == c.max_format_errors
    elif reason == "stuck":
        found = steps(r.events)
        assert stuck_at(found, c.max_repeats) == len(found) - 1
    elif reason == "model_failed":
        assert last_model.outcome == "failed"
    elif reason == "server_failed":
        assert last_tool is not None and last_tool.outcome.kind == "server_failed", \
            f"stop reason server_failed, but the tools' last call {last_tool.outcome.kind if last_tool else 'never came'}"
    elif reason == "answered":
        assert last_model.outcome == "stop" and not last_model.final
    else:
        raise AssertionError(f"stop reason {reason!r} cannot happen in this world")


# The words each guard's fallback uses to name its limit, from the run's own settings (not a class default).
LIMIT_WORDS = {
    "max_turns": lambda c, r: f"max_turns={c.max_turns}",
    "max_tool_calls": lambda c, r: f"max_tool_calls={c.max_tool_calls}",
    "call_budget": lambda c, r: f"budget of {plan_limit(r)} tool calls",
    "wall_clock": lambda c, r: f"wall_clock_s={c.wall_clock_s:g}" if r.counted_seconds >= c.wall_clock_s else
    f"model_wall_clock_s={c.model_wall_clock_s:g}",  # the model's own clock ran out (model_wall_clock_s > 0)
    "token_budget": lambda c, r: f"max_run_tokens={c.max_run_tokens}",
    "format_errors": lambda c, r: f"max_format_errors={c.max_format_errors}",
    "auto_continue_limit": lambda c, r: f"after {c.max_auto_continues} continuations",
    "stuck": lambda c, r: f"max_repeats={c.max_repeats}" if "in a row" in r.outcome.answer else "took turns",
}


@given(worlds())
@example(PLAN_BUDGET_USED)
@example(TOOL_TAKES_THE_WHOLE_WALL_CLOCK)
@example(MODEL_SLOWER_THAN_THE_WALL_CLOCK)
@example(FAILED_CALL_REPEATED_INTO_THE_CAP)
@example(FAILED_CALLS_AND_DISCOVERY_THEN_THE_CAP)
@one_failure
def test_a_fallback_names_the_limit_that_was_hit_with_its_setting(world):
    """A run a guard ended says which limit it hit, with the value the run's settings gave it.

    (es) Una ejecución que termina una guarda dice qué límite alcanzó, con el valor que le daban sus ajustes.
    """
    r = run(world)
    words = LIMIT_WORDS.get(r.outcome.stop_reason)
    if words is not None:
        answer, stats = r.outcome.answer, r.outcome.stats
        expected = words(r.config, r)
        assert expected in answer, f"the fallback does not say {expected!r}"
        assert f"[stop_reason: {r.outcome.stop_reason}]" in answer
        assert answer.startswith(f"Sorry, I could not finish this one: {STOP_REASON_CLASS[r.outcome.stop_reason].says} (")
        tried = ", ".join(f"{tool} x{n}" for tool, n in sorted(stats.tool_calls.items())) or "no tool calls"
        assert f"\nTried: {tried} in {stats.turns} turn(s).\n" in answer, "the fallback says what was tried"
        assert answer.split("\n")[-1].startswith("Next: ask for one verb, one tense and one person, e.g. 'What is")
        if r.outcome.final_answer:  # the final round's answer, with how many of the model's own calls succeeded
            backed = sum(1 for e in r.events if e["event"] == "tool_result" and not e.get("forced"))
            said = f"{backed} tool call(s) had succeeded" if backed else "no tool call had succeeded"
            assert f"Unconfirmed answer, written when the limit was hit ({said}): {r.outcome.final_answer}" in answer
        else:
            assert "Unconfirmed answer" not in answer


# --- turns and model calls -------------------------------------------------------------------------------------
@given(worlds())
@one_failure
def test_turns_never_pass_max_turns(world):
    """A run never takes more turns than max_turns.

    (es) Una ejecución nunca dura más turnos que max_turns.
    """
    r = run(world)
    assert r.outcome.stats.turns <= r.config.max_turns
    assert len(turns(r.events)) <= r.config.max_turns


@given(worlds())
@one_failure
def test_model_calls_stay_within_turns_times_continuations_plus_the_final_round(world):
    """Model calls stay within max_turns x (1 + max_auto_continues), plus one final-answer round.

    (es) Las llamadas al modelo no pasan de max_turns x (1 + max_auto_continues), más una ronda final de respuesta.
    """
    r = run(world)
    c = r.config
    bound = c.max_turns * (1 + c.max_auto_continues) + (1 if c.final_answer_round else 0)
    assert len(r.model.calls) <= bound


@given(worlds())
@one_failure
def test_a_reply_is_continued_at_most_max_auto_continues_times(world):
    """A reply cut off by the token limit is continued at most max_auto_continues times.

    (es) Una respuesta cortada por el límite de tokens se continúa como mucho max_auto_continues veces.
    """
    r = run(world)
    assert all(len(pieces) <= 1 + r.config.max_auto_continues for pieces in turns(r.events))
    if r.outcome.stop_reason == "auto_continue_limit":
        assert len(turns(r.events)[-1]) == 1 + r.config.max_auto_continues


# --- tool calls ------------------------------------------------------------------------------------------------
@given(worlds(plans=True))
@example(PLAN_BUDGET_USED)
@one_failure
def test_the_models_tool_calls_stay_within_the_cap_or_the_plan_budget(world):
    """The model's own tool calls stay within max_tool_calls (or its plan's budget); forced calls are not charged to it.

    (es) Las llamadas a herramientas del propio modelo no pasan de max_tool_calls (o del presupuesto de su plan); las forzadas no se le cobran.
    """
    r = run(world)
    assert model_tool_calls(r) <= plan_limit(r)
    if r.outcome.stop_reason in ("max_tool_calls", "call_budget"):  # the cap in force, named as such
        raised = plan_limit(r) > r.config.max_tool_calls
        assert model_tool_calls(r) == plan_limit(r) and (r.outcome.stop_reason == "call_budget") == raised
    stats = r.outcome.stats
    assert sum(stats.tool_calls.values()) - stats.forced_calls == model_tool_calls(r)


@given(worlds(tools=failing_tools()))
@example(TWO_SUCCESSES_THEN_A_FAILURE)
@one_failure
def test_forced_discovery_calls_are_counted_apart_and_follow_every_breaker_trip(world):
    """After max_consecutive_failures tool failures in a row the breaker forces one list_tenses call, counted apart.

    (es) Tras max_consecutive_failures fallos seguidos de la herramienta, el cortacircuitos fuerza una llamada a list_tenses, contada aparte.
    """
    r = run(world)
    threshold, failures, expected, events = r.config.max_consecutive_failures, 0, 0, r.events
    for i, e in enumerate(events):
        if e.get("forced"):  # the discovery itself: its answer is not one of the model's calls
            continue
        if e["event"] == "tool_result":
            failures = 0
        elif e["event"] == "tool_error":
            failures += 1
            if failures == threshold:
                failures, after = 0, [x.get("name", x["event"]) for x in events[i + 1:i + 3]]
                if after[:1] == ["stuck"]:  # the stuck detector is told first, and may end the run there
                    continue
                expected += 1
                assert after == ["failure_breaker", "tool_call"] and events[i + 2].get("forced")
    assert r.outcome.stats.forced_calls == expected
    assert r.outcome.stats.forced_calls <= r.outcome.stats.tool_errors // threshold
    for call in r.model.calls:  # what the model is shown after a trip: the error, then the discovery's answer
        if call.last_entry.role == "observation" and "\n" in call.last_entry.text:
            error, discovery = call.last_entry.text.split("\n", 1)
            assert error.startswith("error: ") and discovery.startswith(("Tenses: all twelve.", "error: list_tenses"))


@given(worlds())
@one_failure
def test_a_call_that_succeeded_is_never_sent_to_the_tools_again(world):
    """A call that succeeded is never sent to the tools again (dedup answers it).

    (es) Una llamada que salió bien no vuelve a llegar nunca a las herramientas (la responde la deduplicación).
    """
    r = run(world)
    succeeded = set()
    for call in r.tools.calls:
        key = (call.tool, json.dumps(call.args, sort_keys=True))
        forced = call.tool == "list_tenses" and not call.args and call.timeout is not None and key in succeeded
        assert key not in succeeded or forced, f"{call.tool}{call.args} ran again after it had succeeded"
        if call.result is not None:
            succeeded.add(key)


# --- budgets -------------------------------------------------------------------------------------------------------
@given(worlds(small_budgets=True))
@one_failure
def test_the_token_budget_is_checked_before_every_model_call(world):
    """Before every model call but the final round, the run has used fewer tokens than max_run_tokens.

    (es) Antes de cada llamada al modelo, salvo la ronda final, la ejecución ha gastado menos tokens que max_run_tokens.
    """
    r = run(world)
    budget = r.config.max_run_tokens
    calls = tokens_before_each_call(r)
    for used, event, final in calls:
        assert final or used < budget, f"turn {event['turn']} was asked for with {used} tokens used of {budget}"
    # The bound that follows: the budget, less one, plus the last checked call and the final round (unchecked).
    checked = [e["prompt_tokens"] + e["completion_tokens"] for _, e, final in calls if not final]
    unchecked = [e["prompt_tokens"] + e["completion_tokens"] for _, e, final in calls if final]
    total = r.outcome.stats.prompt_tokens + r.outcome.stats.completion_tokens
    assert total <= budget - 1 + max(checked, default=0) + sum(unchecked)


@given(worlds())
@example(TOOL_TAKES_THE_WHOLE_WALL_CLOCK)
@one_failure
def test_a_run_never_outlives_its_wall_clock(world):
    """A run never outlives wall_clock_s (the model's time not counted when model_wall_clock_s gives it a clock of its own), and every model and tool call gets a time limit.

    (es) Una ejecución nunca dura más que wall_clock_s (sin contar el tiempo del modelo cuando model_wall_clock_s le da un reloj propio), y cada llamada al modelo o a una herramienta tiene un plazo.
    """
    r = run(world)
    assert r.counted_seconds <= r.config.wall_clock_s  # with model_wall_clock_s=0: all of the run's time
    assert r.outcome.stats.seconds == round(r.elapsed, 3)  # the whole run, the model's time included
    assert r.outcome.stats.seconds <= round(r.config.wall_clock_s + r.elapsed - r.counted_seconds, 3)
    assert all(call.timeout_s is not None for call in r.model.calls), "a model call without a time limit"
    assert all(call.timeout is not None and call.timeout <= r.config.tool_timeout_s for call in r.tools.calls)


# --- a shared model server's own clock (model_wall_clock_s) ------------------------------------------------------
def named_clock(r: Run) -> str | None:
    """The clock a wall_clock fallback names: "wall_clock_s" or "model_wall_clock_s" (None: neither, or both)."""
    c, answer = r.config, r.outcome.answer
    run_clock = re.search(rf"(?<!model_)wall_clock_s={re.escape(f'{c.wall_clock_s:g}')}(?!\.?\d)", answer)
    model_clock = c.model_wall_clock_s > 0 and re.search(
        rf"model_wall_clock_s={re.escape(f'{c.model_wall_clock_s:g}')}(?!\.?\d)", answer)
    if bool(run_clock) == bool(model_clock):
        return None
    return "wall_clock_s" if run_clock else "model_wall_clock_s"


@given(worlds(model_clock=True))
@example(MODEL_TIME_USED_UP_EXACTLY)
@example(MODEL_STILL_REPLYING)
@one_failure
def test_each_model_call_is_given_what_is_left_of_model_wall_clock_s(world):
    """With model_wall_clock_s, each model call is given what is left of it (never nothing), so the model's time in all never passes model_wall_clock_s.

    (es) Con model_wall_clock_s, cada llamada al modelo recibe lo que queda de él (nunca nada), así que el tiempo del modelo, en total, nunca pasa de model_wall_clock_s.
    """
    r = run(world)
    limit, spent = r.config.model_wall_clock_s, 0.0
    for n, call in enumerate(r.model.calls, 1):
        assert call.timeout_s == limit - spent > 0, \
            f"model call {n} was given {call.timeout_s} s with {limit - spent} s of model_wall_clock_s={limit:g} left"
        spent += call.seconds
    assert r.model_seconds == spent <= limit


@given(worlds(model_clock=True))
@example(WALL_CLOCK_WITHOUT_THE_MODEL)
@one_failure
def test_with_a_model_clock_the_tools_and_the_loop_keep_to_wall_clock_s_without_the_models_time(world):
    """With model_wall_clock_s, wall_clock_s still bounds the tools and the loop, the model's time not counted: each tool call gets its timeout, cut to what is left of wall_clock_s.

    (es) Con model_wall_clock_s, wall_clock_s sigue acotando las herramientas y el bucle, sin contar el tiempo del modelo: cada llamada a una herramienta recibe su plazo, recortado a lo que queda de wall_clock_s.
    """
    r = run(world)
    c = r.config
    assert r.counted_seconds <= c.wall_clock_s
    for call in r.tools.calls:
        left = c.wall_clock_s - (call.at - call.model_seconds)
        assert call.timeout == min(c.tool_timeout_s, max(0.0, left)), \
            f"{call.tool} was given {call.timeout} s with {left} s of wall_clock_s={c.wall_clock_s:g} left"


@given(worlds(model_clock=True))
@example(MODEL_TIME_USED_UP_EXACTLY)
@example(MODEL_STILL_REPLYING)
@example(WALL_CLOCK_WITHOUT_THE_MODEL)
@one_failure
def test_a_run_out_of_model_time_ends_as_wall_clock_naming_model_wall_clock_s(world):
    """A run whose model runs out of model_wall_clock_s ends as wall_clock naming model_wall_clock_s; a wall_clock fallback names the one clock that really ran out, with its value.

    (es) Una ejecución cuyo modelo agota model_wall_clock_s termina como wall_clock nombrando model_wall_clock_s; el texto de reserva de wall_clock nombra el único reloj que de verdad se agotó, con su valor.
    """
    r = run(world)
    c, last = r.config, r.model.calls[-1]
    if last.outcome == "timeout" and not last.final:  # still replying when model_wall_clock_s ran out
        assert r.outcome.stop_reason == "wall_clock" and named_clock(r) == "model_wall_clock_s"
    if r.outcome.stop_reason != "wall_clock":
        return
    clock = named_clock(r)
    assert clock is not None, "a wall_clock fallback names wall_clock_s or model_wall_clock_s, with its value"
    if clock == "model_wall_clock_s":
        assert r.model_seconds == c.model_wall_clock_s and r.counted_seconds < c.wall_clock_s
    else:
        assert r.counted_seconds >= c.wall_clock_s


# --- answers -----------------------------------------------------------------------------------------------------
@given(worlds())
@example(ANSWERS_RIGHT_AFTER_AN_ERROR)
@one_failure
def test_an_answer_comes_from_a_successful_tool_result_of_the_run(world):
    """An answered run answers right after a successful tool result of that run.

    (es) Una ejecución que responde lo hace justo después de un resultado correcto de la herramienta en esa misma ejecución.
    """
    r = run(world)
    if r.outcome.stop_reason != "answered":
        return
    asked = [call for call in r.model.calls if not call.partial][-1]  # the first piece of the answering turn
    results = [call.result for call in r.tools.calls if call.result is not None]
    seen = asked.last_entry
    assert seen.role == "observation" and any(seen.text.startswith(result) for result in results), \
        f"the model answered after {seen.role} {seen.text!r}, not after a successful tool result"


@given(worlds())
@one_failure
def test_after_a_cap_a_model_that_keeps_to_the_schema_gives_its_final_answer(world):
    """After a cap or a stuck stop, the final round offers only the answer, and a model that keeps to it gets its answer shown.

    (es) Tras un tope o una parada por bucle, la ronda final solo ofrece la respuesta, y un modelo que la respeta ve su respuesta mostrada.
    """
    r = run(world)
    reason, final_calls = r.outcome.stop_reason, [call for call in r.model.calls if call.final]
    if not (reason in FINAL_ROUND_REASONS and r.config.final_answer_round):
        assert not final_calls and not r.outcome.final_answer
        return
    last = r.model.calls[-1]
    assert last.final and len(final_calls) == 1, "the final round must offer the answer branch only"
    if world.keeps_to_schema and last.outcome == "stop":
        assert r.outcome.final_answer, "the model answered in the final round, and the answer was lost"


# --- the guards that end a run early --------------------------------------------------------------------------
@given(worlds())
@one_failure
def test_invalid_actions_in_a_row_end_the_run_at_max_format_errors(world):
    """max_format_errors invalid actions in a row end the run, right then and not before.

    (es) max_format_errors acciones no válidas seguidas terminan la ejecución, justo entonces y no antes.
    """
    r = run(world)
    counts = invalid_in_a_row(r)
    assert max(counts, default=0) <= r.config.max_format_errors
    reached = counts and counts[-1] == r.config.max_format_errors
    assert (r.outcome.stop_reason == "format_errors") == bool(reached)


@given(worlds())
@example(TAKING_TURNS_WITH_THE_DETECTOR_OFF)
@example(ONE_STEP_WITH_MAX_REPEATS_1)
@example(TWO_FAILING_CALLS_TAKING_TURNS)
@example(ONE_CALL_TIMED_OUT_TWO_WAYS)
@one_failure
def test_a_run_that_repeats_itself_is_stopped_at_max_repeats(world):
    """A run that repeats a step max_repeats times in a row (or alternates two) is stopped right then, and only then.

    (es) Una ejecución que repite un paso max_repeats veces seguidas (o alterna dos) se detiene justo entonces, y solo entonces.
    """
    r = run(world)
    found = steps(r.events)
    at = stuck_at(found, r.config.max_repeats)
    if at is None:
        assert r.outcome.stop_reason != "stuck"
    else:
        assert at == len(found) - 1 and r.outcome.stop_reason == "stuck", \
            f"stuck at step {at + 1} of {len(found)}, stop reason {r.outcome.stop_reason}"
