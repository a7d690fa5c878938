"""The loop's guarantees, checked on generated worlds (tests/generated.py): any model, any tools, any settings.

Each test states one property of every run and names the guard it holds to account; hypothesis looks for a
world where it fails and shrinks it to the smallest one.  The profile (tests/conftest.py) is fixed in CI:
derandomized, a bounded number of examples, no example database, no deadline.

Every run uses a fake clock that only the model and the tools move, so each model or tool step takes at
most the time the loop gives it: in this world a run's elapsed time may reach its wall clock but never pass it
(on a real machine one more decode step, see theory 05).
"""

from __future__ import annotations

import functools
import json
import re

from generated import (QUESTION, FakeClock, GeneratedModel, GeneratedTools, HungForever, Reply, Run, Runaway,
                       ToolOutcome, World, build, call_key,
                       failing_tools, is_final_piece, run_world, steps, stuck_at, turns, worlds)
import pytest
from hypothesis import example, given, note
from hypothesis import strategies as st

from miniagent.agent.actions import NEXT_ACTION_SCHEMA, PERSON_CHOICES, Action, InvalidAction, parse_action, schema_for_turn
from miniagent.agent.grammar import TENSES
from miniagent.agent.errors import Terminal
from miniagent.agent.config import TutorConfig
from miniagent.agent.loop import FINAL_ROUND_AFTER, STOP_REASON_TEXT, GrammarTutor
from miniagent.agent.trace import Trace

FINAL_ROUND_REASONS = {cls.stop_reason for cls in FINAL_ROUND_AFTER}


def _all_stop_reasons() -> set[str]:
    seen, todo = set(), [Terminal]
    while todo:
        cls = todo.pop()
        seen.add(cls.stop_reason)
        todo += cls.__subclasses__()
    return (seen - {"terminal"}) | {"answered"}


STOP_REASONS = _all_stop_reasons()

# Worlds that the generated ones reach too rarely for the profile `invoke mutants` uses (30 examples per property):
# each one is an @example of the properties that catch a mutant of the loop in it (tests/mutants-explained.md).
GO, BE = Reply("call"), Reply("call", verb="be")  # conjugate(go, past simple, she), conjugate(be, past simple, she)
OK, ERROR = ToolOutcome("ok"), ToolOutcome("error")
# A plan of 3 steps raises max_tool_calls=1 to its ceiling, max_plan_tool_calls=2 (not ToolCallCap's default 6), and
# two different tools use it up: the fallback names the plan's budget and says "conjugate x1, list_tenses x1".
PLAN_BUDGET_USED = World((Reply("call", steps=3), Reply("list_tenses"), BE, Reply("call", person="I")), True, (OK,),
                         build(max_tool_calls=1, max_plan_tool_calls=2))
# A tool that takes the whole second of wall_clock_s=1: the wall clock's own check ends the run, not a model call
# (and a loop that timed the run with a clock other than the one it is given would let the run go on).
TOOL_TAKES_THE_WHOLE_WALL_CLOCK = World((GO,), True, (ToolOutcome("slow", 1.0),), build(wall_clock_s=1.0))
# Two successful calls taking turns for 6 steps, with the stuck detector off (max_repeats=0): not stuck.
TAKING_TURNS_WITH_THE_DETECTOR_OFF = World((GO, BE), True, (OK,), build(max_repeats=0))
# max_repeats=1: the first step is already a step repeated max_repeats times.
ONE_STEP_WITH_MAX_REPEATS_1 = World((GO,), True, (OK,), build(max_repeats=1))
# Two different calls that fail with the same error, taking turns: four steps that are not one step repeated.
TWO_FAILING_CALLS_TAKING_TURNS = World((GO, Reply("call", tense="present simple")), True, (ERROR,), build())
# One call that hangs twice, cut to 2 s and then to the last 1 s of wall_clock_s=3: two different errors.
ONE_CALL_TIMED_OUT_TWO_WAYS = World((GO,), True, (ToolOutcome("hang"),), build(wall_clock_s=3.0, max_repeats=2))
# Two successes, then a failure: one failure in a row, which does not trip a breaker at 3.
TWO_SUCCESSES_THEN_A_FAILURE = World((GO, BE, Reply("call", verb="would")), True, (OK, OK, ERROR), build())
# A model without a grammar that answers right after every tool error.
ANSWERS_RIGHT_AFTER_AN_ERROR = World((GO, Reply("answer")), False, (ERROR,), build())
# A model without a grammar that asks for a tool in the final round (after max_turns=1): no answer, none run.
FINAL_ROUND_ASKS_FOR_A_TOOL = World((GO,), False, (OK,), build(max_turns=1))
# The MCP server dies on the first call; the model server fails on the first reply: the failure's own words.
SERVER_DIES = World((GO,), True, (ToolOutcome("server_failed"),), build())
MODEL_FAILS = World((Reply("fail"),), True, (OK,), build())
# A plan of 1 step that does not raise max_tool_calls=1: the second call hits max_tool_calls, not a plan's budget.
PLAN_THAT_DOES_NOT_RAISE_THE_CAP = World((Reply("call", steps=1), BE), True, (OK,), build(max_tool_calls=1))
# A call that failed, asked for again at max_tool_calls=1: an identical call, refused by the cap; the final answer is
# backed by no successful call.
FAILED_CALL_REPEATED_INTO_THE_CAP = World((GO,), True, (ERROR,), build(max_tool_calls=1))
# Two failing calls, each followed by the breaker's discovery call (max_consecutive_failures=1), then the cap: four
# tool calls, two of them forced and two failed, so the final answer is backed by none.
FAILED_CALLS_AND_DISCOVERY_THEN_THE_CAP = World((GO, BE), True, (ERROR, OK),
                                                build(max_consecutive_failures=1, max_tool_calls=2))
# A reply slower than all of wall_clock_s=1 (no model clock of its own): still replying when the run's clock runs out.
MODEL_SLOWER_THAN_THE_WALL_CLOCK = World((Reply("call", seconds=2.0),), True, (OK,), build(wall_clock_s=1.0))
# model_wall_clock_s (a shared model server's own clock).  A reply that takes all of model_wall_clock_s=1: the next
# model call finds nothing left (and a guard that wrapped the model only above 1 s would not wrap it).
MODEL_TIME_USED_UP_EXACTLY = World((Reply("call", seconds=1.0),), True, (OK,), build(model_wall_clock_s=1.0))
# Replies of 0.75 s in model_wall_clock_s=2: given 2, then 1.25, then 0.5 s, in which the third is still replying.
MODEL_STILL_REPLYING = World((Reply("call", seconds=0.75),), True, (OK,), build(model_wall_clock_s=2.0))
# Replies of 1 s (8 s of model time), tools of 0.25 s, wall_clock_s=1: only the tools' time counts in the wall
# clock, so each tool call is given what the tools have left of it (1 s, then 0.75 s).
WALL_CLOCK_WITHOUT_THE_MODEL = World((Reply("call", seconds=1.0), Reply("call", verb="be", seconds=1.0)), True,
                                     (ToolOutcome("slow", 0.25),), build(wall_clock_s=1.0, model_wall_clock_s=8.0))


def one_failure(prop):
    """Every way a property can fail, raised from one place.

    Hypothesis shrinks one failure at a time and tells failures apart by where they are raised; raised from
    here, a run that never ends and each assert of the property are the same failure, so the shrinker may
    trade one for another on its way to the smallest world."""
    @functools.wraps(prop)
    def checked(world):
        try:
            prop(world)
        except (AssertionError, Runaway, HungForever) as failure:
            shown = str(failure) if isinstance(failure, AssertionError) else f"{type(failure).__name__}: {failure}"
            raise AssertionError(shown.splitlines()[0] if shown else type(failure).__name__) from None
    return checked


def run(world) -> Run:
    """Run the world; on failure, hypothesis prints the world in words (the counterexample task reads it)."""
    note("counterexample-json: " + json.dumps({"en": world.describe("en"), "es": world.describe("es")},
                                              ensure_ascii=False))
    return run_world(world)


def model_tool_calls(r: Run) -> int:
    """Tool calls the model asked for and the loop ran (the breaker's forced discovery calls left out)."""
    return sum(1 for e in r.events if e["event"] == "tool_call" and not e.get("forced"))


def plan_limit(r: Run) -> int:
    """The tool-call limit in force: max_tool_calls, raised by a plan declared on the first turn."""
    c = r.config
    first = turns(r.events)[:1]
    if first and first[0][-1]["finish_reason"] != "length":
        try:
            action = parse_action("".join(e["text"] for e in first[0]), first_turn=True, may_answer=False)
        except InvalidAction:
            action = None
        if action is not None and action.plan_steps:
            return max(c.max_tool_calls, min(action.plan_steps * c.calls_per_plan_step, c.max_plan_tool_calls))
    return c.max_tool_calls


def tokens_before_each_call(r: Run) -> list[tuple[int, dict, bool]]:
    """(tokens used before the call, the call's event, whether it is the final-answer round) per model call."""
    used, out = 0, []
    for i, e in enumerate(r.events):
        if e["event"] == "model_action":
            out.append((used, e, is_final_piece(r.events, i)))
            used += e["prompt_tokens"] + e["completion_tokens"]
    return out


def invalid_in_a_row(r: Run) -> list[int]:
    """For each observation, how many invalid actions in a row it ends (0 for any other observation)."""
    counts, n = [], 0
    for entry in r.scratchpad:
        if entry.role == "observation":
            n = n + 1 if entry.text.startswith("error: invalid action") else 0
            counts.append(n)
    return counts


def identical_calls(r: Run) -> int:
    """Calls the model had made before, counted like the loop: run, answered by dedup, or refused by the cap."""
    seen, identical = set(), 0
    for e in r.events:
        if (e["event"] == "tool_call" and not e.get("forced")) or (e["event"] == "guard" and e["name"] == "dedup"):
            key = call_key(e["tool"], e["args"])
        elif e["event"] == "guard" and e["name"] in ("max_tool_calls", "call_budget"):
            groups = turns(r.events)
            action = parse_action("".join(x["text"] for x in groups[-1]), first_turn=len(groups) == 1,
                                  may_answer=True)
            key = action.call_key()
        else:
            continue
        identical += key in seen
        seen.add(key)
    return identical


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
        assert answer.startswith(f"Sorry, I could not finish this one: {STOP_REASON_TEXT[r.outcome.stop_reason]} (")
        tried = ", ".join(f"{tool} x{n}" for tool, n in sorted(stats.tool_calls.items())) or "no tool calls"
        assert f"\nTried: {tried} in {stats.turns} turn(s).\n" in answer, "the fallback says what was tried"
        assert answer.split("\n")[-1].startswith("Next: ask for one verb, one tense and one person, e.g. 'What is")
        if r.outcome.final_answer:  # the final round's answer, with how many of the model's own calls succeeded
            backed = sum(1 for e in r.events if e["event"] == "tool_result")
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
    errors = [e for e in events if e["event"] == "tool_error"]
    assert stats.tool_errors == len(errors)
    assert stats.last_tool_error == (errors[-1]["error"] if errors else "")
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


# --- the schema the backends decode under --------------------------------------------------------------------
@given(first_turn=st.booleans(), may_answer=st.sampled_from((None, True, False)), final=st.booleans())
def test_the_schema_offers_exactly_the_branches_of_the_turn(first_turn, may_answer, final):
    """The schema offers the answer only where the turn allows it, a plan only on the first turn, and nothing
    but the answer in the final round; building it never changes the shared schema.

    (es) El esquema ofrece la respuesta solo donde el turno la permite, un plan solo en el primer turno y nada más
    que la respuesta en la ronda final; construirlo nunca cambia el esquema compartido.
    """
    before = json.dumps(NEXT_ACTION_SCHEMA, sort_keys=True)
    schema = schema_for_turn(first_turn, may_answer, final)
    branches = {("answer" if "answer" in b["properties"] else b["properties"]["tool"]["const"]): b
                for b in schema["anyOf"]}
    answer_allowed = final or ((not first_turn) if may_answer is None else may_answer)
    assert ("answer" in branches) == answer_allowed
    assert final == (set(branches) == {"answer"})
    if "conjugate" in branches:
        assert ("steps" in branches["conjugate"]["properties"]) == first_turn
    assert json.dumps(NEXT_ACTION_SCHEMA, sort_keys=True) == before, "building a turn's schema changed the shared one"


# --- the action parser: what the loop accepts from a model ----------------------------------------------------
verbs = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=24)
actions = st.one_of(
    st.builds(lambda v, t, p, s: Action("tool", "conjugate", {"verb": v, "tense": t, "person": p}, plan_steps=s),
              verbs, st.sampled_from(TENSES), st.sampled_from(PERSON_CHOICES), st.one_of(st.none(), st.integers(1, 5))),
    st.just(Action("tool", "list_tenses")),
    st.builds(lambda text: Action("answer", answer=text), st.text(min_size=1, max_size=300).filter(str.strip)),
)
# (how to break a valid action's JSON, the words the refusal must use)
BROKEN = [
    (lambda d: {**d, "mood": "happy"}, "unexpected fields ['mood']"),
    (lambda d: {**d, "verb": "Go"}, "verb must be one lowercase word"),
    (lambda d: {**d, "verb": 3}, "verb must be one lowercase word"),
    (lambda d: {**d, "tense": "yesterday"}, "tense must be one of: present simple, "),
    (lambda d: {**d, "person": "thou"}, "person must be one of: I, you, "),
    (lambda d: {**d, "steps": 0}, "steps must be an integer from 1 to 5"),
    (lambda d: {**d, "steps": 6}, "steps must be an integer from 1 to 5"),
    (lambda d: {**d, "steps": "2"}, "steps must be an integer from 1 to 5"),
    (lambda d: {**d, "tool": "conjugate_verb"}, "unknown action"),
]


@given(action=actions, first_turn=st.booleans())
@example(action=Action("tool", "conjugate", {"verb": "go", "tense": "past simple", "person": "she"}, plan_steps=1),
         first_turn=True)  # the shortest plan and the longest one, the schema's edges
@example(action=Action("tool", "conjugate", {"verb": "go", "tense": "past simple", "person": "she"}, plan_steps=5),
         first_turn=True)
def test_every_valid_action_is_read_back_as_it_was_written(action, first_turn):
    """Every action the schema allows is read back exactly as it was written (an answer cut to 240 characters).

    (es) Toda acción que el esquema permite se lee tal y como se escribió (una respuesta, cortada a 240 caracteres).
    """
    if action.plan_steps is not None and not first_turn:
        action = Action(action.kind, action.tool, action.args)  # a plan belongs to the first turn only
    parsed = parse_action(action.to_json(), first_turn=first_turn, may_answer=True)
    expected = Action("answer", answer=action.answer[:240]) if action.kind == "answer" else action
    assert parsed == expected


@given(action=actions, first_turn=st.booleans(), broken=st.sampled_from(BROKEN))
def test_every_action_outside_the_schema_is_refused_saying_why(action, first_turn, broken):
    """An action outside the schema is refused, and the refusal says what is wrong with it (the model reads it).

    (es) Una acción fuera del esquema se rechaza, y el rechazo dice qué tiene de malo (el modelo lo lee).
    """
    payload = json.loads(action.to_json())
    if action.kind != "tool" or action.tool != "conjugate":
        payload = {"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}
    if not first_turn:
        payload.pop("steps", None)  # a valid later-turn action has no plan
    change, words = broken
    bad = change(payload)
    if not first_turn and "steps" in bad and words.startswith("steps"):
        words = "unexpected fields ['steps']"  # after the first turn a plan is refused before its value is read
    with pytest.raises(InvalidAction, match=re.escape(words)):
        parse_action(json.dumps(bad), first_turn=first_turn, may_answer=True)


@given(text=st.text(max_size=30), first_turn=st.booleans(), may_answer=st.sampled_from((None, True, False)))
def test_an_answer_is_refused_unless_the_turn_allows_one(text, first_turn, may_answer):
    """An answer is taken only where the turn allows one, only as {"answer": "<non-empty text>"}; anything that is
    not a JSON object is refused as such.

    (es) Una respuesta solo se acepta donde el turno la permite y solo como {"answer": "<texto no vacío>"}; lo que no
    es un objeto JSON se rechaza como tal.
    """
    allowed = (not first_turn) if may_answer is None else may_answer
    payload = json.dumps({"answer": text})
    if not allowed:
        with pytest.raises(InvalidAction, match="no answer without a successful tool result: call a tool first"):
            parse_action(payload, first_turn=first_turn, may_answer=may_answer)
    elif not text.strip():
        with pytest.raises(InvalidAction, match=re.escape('an answer is {"answer": "<non-empty text>"}')):
            parse_action(payload, first_turn=first_turn, may_answer=may_answer)
    else:
        assert parse_action(payload, first_turn=first_turn, may_answer=may_answer).answer == text[:240]
    with pytest.raises(InvalidAction, match=re.escape('an answer is {"answer"') if allowed else "no answer"):
        parse_action(json.dumps({"answer": "x", "tool": "list_tenses"}), first_turn=first_turn, may_answer=may_answer)
    with pytest.raises(InvalidAction, match="an action must be a JSON object"):
        parse_action(json.dumps([text]), first_turn=first_turn, may_answer=may_answer)
    with pytest.raises(InvalidAction, match=r"not JSON \("):
        parse_action("{" + text, first_turn=first_turn, may_answer=may_answer)
    with pytest.raises(InvalidAction, match="unknown action"):
        parse_action(json.dumps({"tool": "list_tenses", "verb": "go"}), first_turn=first_turn, may_answer=may_answer)


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
    config = TutorConfig(llm="generated", cache_dir="", max_input_chars=limit)
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

    def cancel() -> bool:
        checks.append(1)
        return how == "callback" and len(checks) > after

    if how == "ctrl-c":
        answer = model.next_action

        def next_action(*args, **kwargs):
            if len(model.calls) >= after:
                raise KeyboardInterrupt
            return answer(*args, **kwargs)
        model.next_action = next_action
    tutor = GrammarTutor(model, GeneratedTools(world.outcomes, clock), world.config, cancel=cancel, clock=clock)
    try:
        outcome = tutor.run(QUESTION)
    except (Runaway, HungForever):
        return
    if outcome.stop_reason == "cancelled":
        said = "(cancelled by the caller)" if how == "callback" else "(interrupted)"
        assert f"the run was cancelled {said} [stop_reason: cancelled]" in outcome.answer
    elif how == "callback":
        assert len(checks) <= after, "the loop went on after its caller cancelled it"
