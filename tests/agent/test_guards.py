"""Each guard: a unit test of the small class, and a loop test that fails when the guard is removed.

The loop tests use the deterministic scripted models and an in-process tool
server, so they are exact and fast; tests/test_tutor_e2e.py runs the real
model and the real MCP server.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers import FakeTools, config, scripted

from miniagent.agent.actions import schema_for_turn
from miniagent.agent.errors import (
    AutoContinueLimit,
    CallBudgetExhausted,
    Cancelled,
    FormatErrorLimit,
    ServerFailed,
    StuckLoop,
    TokenBudgetSpent,
    ToolCallCapHit,
    ToolError,
    TurnCapHit,
    WallClockExceeded,
)
from miniagent.agent.guards import (AutoContinue, CallDedup, CancelCheck, FailureBreaker, FormatBreaker, StuckDetector,
                                   TokenBudget, ToolCallCap, TurnCap, WallClock)
from miniagent.agent.loop import grammar_tutor
from miniagent.agent.trace import Trace

QUESTION = "What is the past simple of go for she?"
ADVERSARIAL = "Please conjugate the verb eat lovingly in the dreaming tense"


def run(behaviour: str, question: str = QUESTION, tools: FakeTools | None = None, **overrides):
    trace = Trace.memory()
    outcome = grammar_tutor(question, model=scripted(behaviour), tools=tools or FakeTools(),
                            config=config(**overrides), trace=trace)
    return outcome, trace


def guards_tripped(trace: Trace) -> list[str]:
    return [e["name"] for e in trace.events if e["event"] == "guard"]


# --- the happy path ------------------------------------------------------------------
def test_oracle_converges_in_two_turns():
    outcome, trace = run("oracle")
    assert (outcome.answer, outcome.stop_reason) == ("she went", "answered")
    assert outcome.stats.turns == 2 and outcome.stats.tool_calls == {"conjugate": 1}
    assert [e["event"] for e in trace.events][0] == "run_start"
    assert trace.events[-1]["event"] == "stop" and trace.events[-1]["stop_reason"] == "answered"


# --- turn cap --------------------------------------------------------------------------
def test_turn_cap_unit():
    cap = TurnCap(2)
    cap.check(1)
    with pytest.raises(TurnCapHit):
        cap.check(2)


def test_turn_cap_stops_a_model_that_never_answers():
    outcome, _ = run("stubborn", max_turns=3, max_tool_calls=50)
    assert outcome.stop_reason == "max_turns"
    assert outcome.stats.turns == 3


# --- tool-call cap and plan budget -----------------------------------------------------------
def test_tool_call_cap_unit():
    cap = ToolCallCap(max_tool_calls=2, per_step=1, ceiling=6)
    cap.check(1)
    with pytest.raises(ToolCallCapHit):
        cap.check(2)


def test_plan_raises_the_budget_up_to_the_ceiling():
    cap = ToolCallCap(max_tool_calls=2, per_step=2, ceiling=5)
    cap.declare_plan(3)  # 3 steps x 2 = 6, clamped to the ceiling
    assert cap.limit == 5
    cap.check(4)
    with pytest.raises(CallBudgetExhausted):
        cap.check(5)
    small = ToolCallCap(max_tool_calls=4, per_step=1, ceiling=6)
    small.declare_plan(1)  # a plan never lowers the base limit
    assert small.limit == 4


def test_tool_call_cap_stops_distinct_calls():
    outcome, _ = run("wanderer", max_turns=50, max_tool_calls=4)
    assert outcome.stop_reason == "max_tool_calls"
    assert outcome.stats.tool_calls["conjugate"] == 4


def test_the_breakers_discovery_call_is_not_charged_to_the_models_cap():
    """The list_tenses call the breaker forces is not charged to max_tool_calls.

    After three failures the model still has its fourth call: a cap that counted the forced one would stop the
    run one call early."""
    outcome, trace = run("stubborn", "What is the past simple of lovingly for she?", max_turns=50, max_tool_calls=4,
                         max_repeats=0, decline_out_of_grammar=False)
    assert outcome.stop_reason == "max_tool_calls"
    assert (outcome.stats.tool_calls["conjugate"], outcome.stats.tool_calls["list_tenses"]) == (4, 1)
    assert outcome.stats.forced_calls == 1


def test_declared_plan_lets_a_three_verb_question_finish():
    outcome, _ = run("planner", "Conjugate be, have and go in the past simple for they.", max_tool_calls=2)
    assert outcome.stop_reason == "answered", outcome.answer
    assert outcome.stats.tool_calls["conjugate"] == 3
    assert outcome.answer == "they were; they had; they went"


# --- identical-call dedup ----------------------------------------------------------------------
def test_dedup_unit():
    dedup = CallDedup()
    assert dedup.earlier_result("k") is None
    dedup.remember("k", "she went")
    assert dedup.earlier_result("k") == "she went"


def test_identical_calls_are_not_executed_again():
    tools = FakeTools()
    outcome, trace = run("stubborn", tools=tools, max_turns=6, max_tool_calls=4, max_repeats=0)
    assert len(tools.calls) == 1, "the repeated call reached the tool server"
    assert outcome.stats.identical_calls == 5
    assert outcome.stop_reason == "max_turns"  # with the stuck detector off, the turn cap ends a model that ignores the nudge
    assert "dedup" in guards_tripped(trace)
    # the trace says which call was answered from memory, so a learner reading it sees what repeated
    dedups = [e for e in trace.events if e["event"] == "guard" and e["name"] == "dedup"]
    assert all(e["tool"] == "conjugate" and e["args"] == tools.calls[0][1] for e in dedups)


# --- consecutive-failure breaker ----------------------------------------------------------------
def test_breaker_unit():
    breaker = FailureBreaker(3)
    assert [breaker.record(ok=False) for _ in range(3)] == [False, False, True]
    assert breaker.consecutive == 0  # reset after tripping
    breaker.record(ok=False)
    breaker.record(ok=True)
    assert breaker.consecutive == 0


def test_breaker_forces_discovery_and_the_model_recovers():
    outcome, trace = run("clumsy", max_turns=8, max_tool_calls=6)
    assert outcome.stats.tool_calls["list_tenses"] == 1
    assert outcome.stats.tool_errors == 3
    assert "failure_breaker" in guards_tripped(trace)
    [tripped] = [e for e in trace.events if e["event"] == "guard" and e["name"] == "failure_breaker"]
    assert tripped["after"] == 3  # the trace says after how many failures in a row
    assert outcome.stop_reason == "answered" and outcome.answer == "she went"
    forced = [(e["event"], e.get("tool")) for e in trace.events if e.get("forced")]
    assert forced == [("tool_call", "list_tenses"), ("tool_result", "list_tenses")]  # its answer is on record too
    [result] = [e["result"] for e in trace.events if e["event"] == "tool_result" and e.get("forced")]
    assert result.startswith("Tenses: present simple")


def test_a_forced_discovery_that_fails_is_on_record_and_not_counted_as_the_models_error():
    outcome, trace = run("clumsy", max_turns=8, max_tool_calls=6, tools=FakeTools(fail_with=ToolError("down")))
    forced = [e for e in trace.events if e.get("forced")]
    assert [(e["event"], e["tool"]) for e in forced] == [("tool_call", "list_tenses"), ("tool_error", "list_tenses")]
    assert forced[1]["error"] == "ToolError: down"
    model_errors = [e for e in trace.events if e["event"] == "tool_error" and not e.get("forced")]
    assert outcome.stats.tool_errors == len(model_errors) >= 3  # the forced failure is not among them


# --- stuck-pattern detector ----------------------------------------------------------------------------
def test_stuck_detector_unit_repeats():
    stuck = StuckDetector(repeats=3)
    stuck.record("a", "error: no")
    stuck.record("a", "error: no")
    stuck.record("a", "she went")  # same call, another result: not a repeat
    stuck.record("a", "she went")
    with pytest.raises(StuckLoop, match="3 times in a row"):
        stuck.record("a", "she went")


def test_stuck_detector_unit_alternation():
    stuck = StuckDetector(repeats=4)
    for key in "ABABA":
        stuck.record(key, key.lower())
    with pytest.raises(StuckLoop, match="took turns"):
        stuck.record("B", "b")
    other = StuckDetector(repeats=4)
    for key in "ABABAC":  # the sixth step breaks the pattern
        other.record(key, key.lower())


def test_stuck_detector_off_at_zero():
    stuck = StuckDetector(repeats=0)
    for _ in range(20):
        stuck.record("a", "a")


def test_stuck_detector_ends_a_repeating_model_before_the_caps():
    outcome, trace = run("stubborn", max_turns=30, max_tool_calls=30, max_repeats=4)
    assert outcome.stop_reason == "stuck"
    assert outcome.stats.turns == 4, "one call and three repeats, not thirty turns"
    assert "stuck" in guards_tripped(trace)


def test_stuck_detector_ends_two_calls_taking_turns():
    tools = FakeTools()
    outcome, trace = run("alternator", tools=tools, max_turns=30, max_tool_calls=30)
    assert outcome.stop_reason == "stuck"
    assert outcome.stats.turns == 6 and len(tools.calls) == 2  # dedup answered the repeats; the detector saw them
    assert "took turns" in outcome.answer


def test_stuck_detector_lets_the_breaker_act_first():
    # three identical failures force a discovery; the fourth is where the run is stuck
    outcome, trace = run("stubborn", "What is the past simple of lovingly for she?", max_turns=30, max_tool_calls=30,
                         decline_out_of_grammar=False)  # on, 'lovingly' refused would end the run at once
    assert outcome.stats.tool_calls["list_tenses"] == 1
    assert outcome.stop_reason == "stuck" and outcome.stats.tool_errors == 4


# --- wall clock and per-tool timeout ------------------------------------------------------------------
def test_wall_clock_unit():
    now = [0.0]
    clock = WallClock(5.0, clock=lambda: now[0])
    assert clock.tool_timeout(2.0) == 2.0
    now[0] = 4.0
    assert clock.tool_timeout(2.0) == pytest.approx(1.0)  # cut to what the run has left
    now[0] = 5.0
    assert clock.tool_timeout(2.0) == 0.0  # nothing left: the client refuses the call as a timeout
    with pytest.raises(WallClockExceeded):
        clock.check()


@pytest.mark.serial
def test_wall_clock_ends_a_run_of_slow_tools():
    tools = FakeTools(delay=0.3)
    started = time.monotonic()
    # the caps sit past what 1 s allows (a call takes 0.3 s) but near it: a run without its wall clock ends by
    # max_tool_calls after 3 s, the test fails then, not after 50 calls
    outcome, _ = run("wanderer", tools=tools, wall_clock_s=1.0, max_turns=12, max_tool_calls=10)
    elapsed = time.monotonic() - started
    assert outcome.stop_reason == "wall_clock"
    assert elapsed < 1.6, f"the run outlived its 1 s budget: {elapsed:.2f} s"


def test_no_tool_call_may_wait_past_what_is_left_of_the_run():
    """A 30 s per-call timeout is cut to the 0.5 s the run has: for the model's calls and the breaker's discovery."""
    tools = FakeTools(hang=True, hang_at_most=0.6)  # a wait the clock did not cut is seen, not sat through
    outcome, _ = run("stubborn", tools=tools, tool_timeout_s=30.0, wall_clock_s=0.5, max_turns=10)
    assert tools.calls and all(timeout <= 0.5 for _, _, timeout in tools.calls)
    assert outcome.stop_reason == "wall_clock"
    discovery = FakeTools(hangs_on=("list_tenses",), hang_at_most=0.6)  # the model's calls fail at once
    outcome, _ = run("clumsy", tools=discovery, tool_timeout_s=30.0, wall_clock_s=0.5, max_turns=10)
    [(_, _, timeout)] = [call for call in discovery.calls if call[0] == "list_tenses"]
    assert timeout <= 0.5


def test_per_tool_timeout_reaches_the_tool_and_is_cut_by_the_wall_clock():
    tools = FakeTools(hang=True)
    outcome, _ = run("stubborn", tools=tools, tool_timeout_s=0.2, wall_clock_s=0.5, max_turns=10)
    assert all(timeout is not None and timeout <= 0.2 + 1e-9 for _, _, timeout in tools.calls)
    assert outcome.stop_reason == "wall_clock"
    assert "ToolTimeout" in outcome.stats.last_tool_error


# --- bounded auto-continue -----------------------------------------------------------------------------
def test_auto_continue_unit():
    more = AutoContinue(2)
    more.next()
    more.next()
    with pytest.raises(AutoContinueLimit):
        more.next()


def test_auto_continue_is_bounded():
    outcome, trace = run("rambler", max_auto_continues=2)
    assert outcome.stop_reason == "auto_continue_limit"
    assert outcome.stats.auto_continues == 2
    assert guards_tripped(trace).count("auto_continue") == 2


# --- token budget -----------------------------------------------------------------------------------------
def test_token_budget_unit():
    budget = TokenBudget(100)
    budget.check(99)
    with pytest.raises(TokenBudgetSpent):
        budget.check(100)


def test_token_budget_ends_endless_continuations():
    # The rambler's replies never close; with continuations allowed, only the token budget bounds the turn.
    # (Without it this run goes on until the wall clock or the continuation bound: the test fails either way.)
    outcome, trace = run("rambler", max_auto_continues=100_000, max_run_tokens=2_000, wall_clock_s=10)
    assert outcome.stop_reason == "token_budget"
    used = outcome.stats.prompt_tokens + outcome.stats.completion_tokens
    assert 2_000 <= used < 2_100, "it stops at the first continuation that reaches the budget"
    assert outcome.stats.auto_continues < 100
    assert "token_budget" in guards_tripped(trace)


def test_token_budget_is_checked_before_each_model_call():
    # stubborn finishes every turn; the check before the next model call is the one that stops it.
    outcome, _ = run("stubborn", max_turns=1_000, max_tool_calls=1_000, max_run_tokens=300, max_repeats=0)
    assert outcome.stop_reason == "token_budget"
    assert outcome.stats.prompt_tokens + outcome.stats.completion_tokens >= 300
    assert outcome.stats.turns < 1_000


# --- repeated invalid actions ---------------------------------------------------------------------------
def test_format_breaker_unit():
    breaker = FormatBreaker(3)
    breaker.record(valid=False)
    breaker.record(valid=False)
    breaker.record(valid=True)  # a valid action resets the count
    breaker.record(valid=False)
    breaker.record(valid=False)
    with pytest.raises(FormatErrorLimit):
        breaker.record(valid=False)


def test_format_breaker_ends_a_model_that_never_gives_a_valid_action():
    outcome, trace = run("garbler", max_turns=50, max_format_errors=3)
    assert outcome.stop_reason == "format_errors"
    assert outcome.stats.turns == 3
    assert sum(outcome.stats.tool_calls.values()) == 0
    assert "format_errors" in guards_tripped(trace)


# --- cancellation -----------------------------------------------------------------------------------------
def test_cancel_check_unit():
    CancelCheck(None).check()
    with pytest.raises(Cancelled):
        CancelCheck(lambda: True).check()


def test_cancel_callback_ends_the_run_cleanly():
    cancelled = threading.Event()
    tools = FakeTools()
    original = tools.call

    def call_then_cancel(*args, **kwargs):
        cancelled.set()
        return original(*args, **kwargs)

    tools.call = call_then_cancel
    outcome = grammar_tutor(QUESTION, model=scripted("stubborn"), tools=tools,
                            config=config(max_turns=50, max_tool_calls=50), cancel=cancelled.is_set)
    assert outcome.stop_reason == "cancelled"
    assert outcome.stats.turns == 1


def test_ctrl_c_inside_a_tool_call_becomes_cancelled():
    outcome, _ = run("oracle", tools=FakeTools(fail_with=KeyboardInterrupt()))
    assert outcome.stop_reason == "cancelled"


# --- stop reasons stay distinct; the fallback says what happened --------------------------------------------
def test_a_cap_hit_is_never_reported_as_a_server_failure():
    outcome, _ = run("stubborn", max_turns=2)
    assert outcome.stop_reason == "max_turns"
    assert "server" not in outcome.answer.lower()


def test_a_dead_server_is_reported_as_a_server_failure():
    outcome, _ = run("oracle", tools=FakeTools(fail_with=ServerFailed("server process exited")))
    assert outcome.stop_reason == "server_failed"
    assert "server" in outcome.answer.lower()


def test_fallback_says_what_was_tried_and_what_to_do():
    # the out-of-grammar guard would decline the dreaming tense at once: off, the caps are what end the run
    outcome, _ = run("clumsy", ADVERSARIAL, max_turns=2, max_tool_calls=4, decline_out_of_grammar=False)
    assert outcome.stop_reason == "max_turns"
    assert outcome.answer, "the fallback must never be empty"
    assert "stop_reason: max_turns" in outcome.answer
    assert "conjugate x2" in outcome.answer
    assert "Last tool error" in outcome.answer and "lovingly" in outcome.answer
    assert "Next:" in outcome.answer


@pytest.mark.parametrize("behaviour,limits,reason", [
    ("stubborn", {"max_turns": 2}, "max_turns"),
    ("wanderer", {"max_turns": 50, "max_tool_calls": 2}, "max_tool_calls"),
    ("rambler", {}, "auto_continue_limit"),
    ("rambler", {"max_auto_continues": 100_000, "max_run_tokens": 2_000, "wall_clock_s": 10}, "token_budget"),
    ("garbler", {"max_turns": 50}, "format_errors"),
    ("alternator", {"max_turns": 50, "max_tool_calls": 50}, "stuck"),
])
def test_every_cap_ends_with_a_non_empty_fallback_and_its_reason(behaviour, limits, reason):
    outcome, trace = run(behaviour, **limits)
    assert outcome.stop_reason == reason
    assert outcome.answer.strip() and f"stop_reason: {reason}" in outcome.answer
    assert trace.events[-1]["stop_reason"] == reason
    assert reason in guards_tripped(trace), "the guard that ended the run is in the trace"
    [stopped] = [e for e in trace.events if e["event"] == "guard" and e["name"] == reason]
    assert stopped["detail"].strip(), "and says what it counted"


def test_one_summary_line_per_run(caplog):
    with caplog.at_level("INFO", logger="miniagent"):
        run("oracle")
        run("stubborn", max_turns=2)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "converged after 2 turns"
    assert lines[1].startswith("cap hit (max_turns) after 2 turns: conjugate x1")


def test_the_summary_line_reads_as_a_sentence_for_one_turn_too():
    """Issue 65: "declined at 1 turns" read wrong."""
    from miniagent.agent.loop import Stats, summary_line

    assert summary_line("out_of_grammar", Stats(turns=1)) == "declined after 1 turn: the question is outside the grammar"
    assert summary_line("answered", Stats(turns=1)) == "converged after 1 turn"
    assert summary_line("stuck", Stats(turns=0)) == "cap hit (stuck) after 0 turns: no tool calls"


# --- grounding: no answer before a successful tool result ---------------------------------------------------
def test_the_model_may_not_answer_before_a_successful_tool_result():
    tools = FakeTools()
    outcome, _ = run("knowall", tools=tools)
    assert len(tools.calls) == 1, "the first turn must call the tool"
    assert (outcome.answer, outcome.stop_reason) == ("she went", "answered"), "not the made-up 'she goed'"


def test_no_answer_right_after_a_tool_error():
    outcome, _ = run("knowall", "What is the past simple of lovingly for she?", max_turns=3, final_answer_round=False)
    assert outcome.stop_reason != "answered", "an error is not a result to answer from"


def test_the_model_is_told_each_turn_whether_it_may_answer():
    """The backend is told whether the turn offers the answer (its grammar is built from it): not on the first
    turn, yes right after a tool result, not right after a tool error. Told nothing, a backend would offer the
    answer on every later turn, and the loop would refuse it: a wasted turn."""
    model = RecordingModel("oracle")
    grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config())
    assert model.may_answer == [False, True]
    model = RecordingModel("knowall")
    outcome = grammar_tutor("What is the past simple of lovingly for she?", model=model, tools=FakeTools(),
                            config=config(max_turns=3, final_answer_round=False, decline_out_of_grammar=False))
    assert model.may_answer == [False, False, False]
    assert outcome.stats.tool_calls["conjugate"] == 3, "every turn called the tool: no answer refused"


# --- the first turn can only call a tool (enforced by the schema the grammar is built from) ---------------
def test_first_turn_schema_has_no_answer_branch():
    first = schema_for_turn(first_turn=True)
    later = schema_for_turn(first_turn=False)
    assert not any("answer" in branch["properties"] for branch in first["anyOf"])
    assert any("answer" in branch["properties"] for branch in later["anyOf"])


# --- the final round after a limit -------------------------------------------------------------------------
class RecordingModel:
    """A scripted model that remembers the ``final`` and ``may_answer`` flags of every call (and may ignore
    ``final``)."""

    def __init__(self, behaviour: str, ignore_final: bool = False):
        self.inner, self.ignore_final, self.finals, self.may_answer = scripted(behaviour), ignore_final, [], []
        self.name = self.inner.name

    def next_action(self, scratchpad, **kw):
        self.finals.append(kw.get("final", False))
        self.may_answer.append(kw.get("may_answer"))
        if self.ignore_final:
            kw["final"] = False
        return self.inner.next_action(scratchpad, **kw)

    def close(self):
        pass


def test_final_round_schema_offers_only_the_answer():
    final = schema_for_turn(first_turn=False, may_answer=False, final=True)
    assert [list(b["properties"]) for b in final["anyOf"]] == [["answer"]]


def test_final_round_gives_the_models_best_answer_after_a_cap():
    model, tools = RecordingModel("stubborn"), FakeTools()
    outcome = grammar_tutor(QUESTION, model=model, tools=tools, config=config(max_turns=3, max_repeats=0))
    assert outcome.stop_reason == "max_turns" and outcome.stats.turns == 3
    assert model.finals == [False, False, False, True], "one extra call, marked final, after the cap"
    assert outcome.final_answer == "she went"
    assert "Unconfirmed answer" in outcome.answer and "she went" in outcome.answer
    assert "stop_reason: max_turns" in outcome.answer, "still a fallback, with its reason"
    assert len(tools.calls) == 1


def test_a_tool_asked_for_in_the_final_round_is_not_run():
    model, tools = RecordingModel("stubborn", ignore_final=True), FakeTools()
    trace = Trace.memory()
    outcome = grammar_tutor(QUESTION, model=model, tools=tools, config=config(max_turns=3, max_repeats=0), trace=trace)
    assert outcome.stop_reason == "max_turns" and outcome.final_answer == ""
    assert len(tools.calls) == 1 and outcome.stats.tool_calls == {"conjugate": 1}, "the cap still holds"
    assert [e["detail"] for e in trace.events if e["event"] == "final_round"] == ["the model asked for conjugate; not run"]


@pytest.mark.parametrize("behaviour,limits,reason", [
    ("garbler", {"max_turns": 50}, "format_errors"),
    ("rambler", {}, "auto_continue_limit"),
    ("stubborn", {"max_turns": 3, "max_repeats": 0, "final_answer_round": False}, "max_turns"),
])
def test_no_final_round_where_it_cannot_help_or_is_turned_off(behaviour, limits, reason):
    model = RecordingModel(behaviour)
    outcome = grammar_tutor(QUESTION, model=model, tools=FakeTools(), config=config(**limits))
    assert outcome.stop_reason == reason
    assert True not in model.finals and outcome.final_answer == ""


def test_final_round_after_a_stuck_stop_and_within_the_wall_clock():
    outcome, trace = run("alternator", max_turns=30, max_tool_calls=30, wall_clock_s=5)
    assert outcome.stop_reason == "stuck"
    assert outcome.final_answer in ("she went", "she goes")
    assert outcome.stats.seconds < 5


def test_remaining_budget_notice_is_off_by_default_and_counts_down_when_on():
    model = RecordingPad("stubborn")
    grammar_tutor(QUESTION, model=model, tools=FakeTools(),
                  config=config(max_turns=3, max_repeats=0, final_answer_round=False, remaining_budget_notice=True))
    observations = [e.text for e in model.last_pad if e.role == "observation"]
    assert observations[0] == "she went (turns left: 2)"
    assert observations[1].endswith("(turns left: 1)")
    plain = RecordingPad("stubborn")
    grammar_tutor(QUESTION, model=plain, tools=FakeTools(), config=config(max_turns=3, max_repeats=0))
    assert not any("turns left" in e.text for e in plain.last_pad)


class RecordingPad(RecordingModel):
    def next_action(self, scratchpad, **kw):
        self.last_pad = list(scratchpad)
        return super().next_action(scratchpad, **kw)
