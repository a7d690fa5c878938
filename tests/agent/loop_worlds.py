"""What the loop's property tests share: rare worlds they name in ``@example``, and how they read a run.

The generated worlds (tests/generated.py) reach these too rarely for the profile ``invoke mutants`` uses
(30 examples per property), so each property that depends on one names it.
"""

from __future__ import annotations

import functools
import json

from generated import HungForever, Reply, Run, Runaway, ToolOutcome, World, build, run_world
from hypothesis import note
from trace_steps import call_key, is_final_piece, turns
from world_words import describe_world

from miniagent.agent.actions import InvalidAction, parse_action
from miniagent.agent.errors import stop_reasons
from miniagent.agent.loop import FINAL_ROUND_AFTER

FINAL_ROUND_REASONS = {cls.stop_reason for cls in FINAL_ROUND_AFTER}


STOP_REASONS = stop_reasons()

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
    note("counterexample-json: " + json.dumps({"en": describe_world(world, "en"), "es": describe_world(world, "es")},
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
