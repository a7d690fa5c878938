"""The grammar tutor: a ReAct loop that always stops.

Read ``GrammarTutor`` top to bottom: ``run`` is the loop, ``step`` is one
turn.  Every turn: check the limits, ask the model for one action, then
either answer or run one tool call and show the result to the model.
Recoverable errors become observations; terminal ones end the run with a
typed stop reason and a fallback that says what was tried.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

from .actions import Action, InvalidAction, parse_action
from .ports import Backend, Entry, ModelReply, Tools
from .config import TutorConfig
from .errors import (CallBudgetExhausted, Cancelled, InvalidInput, ModelFailed, ModelTimeout, OutOfGrammar, Recoverable,
                     ServerFailed, StuckLoop, Terminal, ToolCallCapHit, TurnCapHit, WallClockExceeded, cap_reasons)
from .grounding import ArgumentGrounding
from .guards import (AutoContinue, CallDedup, CancelCheck, FailureBreaker, FormatBreaker, ModelClock, StuckDetector,
                     TokenBudget, ToolCallCap, TurnCap, WallClock)
from .scope import GrammarScope
from .trace import Trace

log = logging.getLogger("miniagent")

DEDUP_NUDGE = "(same call as before, not run again: answer with this result)"
# The limits after which the model gets one last round to answer: time and tokens are spent, and a model that
# cannot keep to the format would not answer either.
FINAL_ROUND_AFTER = (TurnCapHit, ToolCallCapHit, CallBudgetExhausted, StuckLoop)


@dataclass
class Stats:
    turns: int = 0
    tool_calls: Counter = field(default_factory=Counter)
    identical_calls: int = 0
    forced_calls: int = 0  # the breaker's recovery calls, counted in tool_calls but not charged to the cap
    tool_errors: int = 0
    last_tool_error: str = ""
    auto_continues: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    scoring_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "tool_calls": dict(self.tool_calls)}


@dataclass
class Outcome:
    answer: str
    stop_reason: str
    stats: Stats
    final_answer: str = ""  # the model's answer in the final round after a limit (also inside ``answer``)
    declined: str = ""  # out_of_grammar: the kind of no (OutOfGrammar.KINDS)


def grammar_tutor(
    user_input: str,
    *,
    model: Backend,
    tools: Tools,
    config: TutorConfig | None = None,
    trace: Trace | None = None,
    cancel: Callable[[], bool] | None = None,
) -> Outcome:
    """Answer one question; always returns, with a typed stop reason."""
    return GrammarTutor(model, tools, config, trace, cancel).run(user_input)


class GrammarTutor:
    """One run of the tutor. ``run`` is the loop; each step of a turn is one short method."""

    def __init__(self, model: Backend, tools: Tools, config: TutorConfig | None = None,
                 trace: Trace | None = None, cancel: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # tests pass a fake clock
        self.model, self.tools = model, tools
        self.config = config = config or TutorConfig()
        self.trace = trace or Trace.memory()
        self.stats = Stats()
        self.scratchpad: list[Entry] = []
        self.grounded = False  # the latest observation is a successful tool result: only then may the model answer
        self.calls_seen: set[str] = set()  # for the stats only: repeats are counted whether or not dedup stops them
        # The guards, each asked at the moment it matters.
        self.turn_cap = TurnCap(config.max_turns)
        self.call_cap = ToolCallCap(config.max_tool_calls, config.calls_per_plan_step, config.max_plan_tool_calls)
        self.dedup = CallDedup()
        self.breaker = FailureBreaker(config.max_consecutive_failures)
        self.format_breaker = FormatBreaker(config.max_format_errors)
        self.stuck = StuckDetector(config.max_repeats)
        self.clock = WallClock(config.wall_clock_s, clock)
        if config.model_wall_clock_s > 0:  # a shared model server: the time in its queue has a clock of its own
            self.model = ModelClock(model, config.model_wall_clock_s, self.clock)
        self.tokens = TokenBudget(config.max_run_tokens)
        self.cancelled = CancelCheck(cancel)
        self.grounding = ArgumentGrounding(config.ground_arguments)
        self.scope = GrammarScope(config.decline_out_of_grammar)

    def run(self, question: str) -> Outcome:
        self.trace.emit("run_start", question=question, llm=getattr(self.model, "name", "?"),
                        config=self.config.as_dict())
        self.scratchpad = [Entry("question", question)]
        self.grounding.start(question)
        try:
            check_input(question, self.config.max_input_chars)
            self.scope.start(question)  # a tense the grammar lacks: "no" before any model call
            while True:
                answer = self.step()
                if answer is not None:
                    return self.finish(answer, "answered")
        except ServerFailed as failure:
            return self.finish(server_failure_text(failure, self.stats), ServerFailed.stop_reason)
        except ModelFailed as failure:
            return self.finish(model_failure_text(failure, self.stats), ModelFailed.stop_reason)
        except OutOfGrammar as no:  # the honest "no": what the grammar lacks, never a form it made up
            self.trace.emit("guard", name=no.stop_reason, kind=no.kind, word=no.word)
            return self.finish(no.reason, no.stop_reason, declined=no.kind)
        except Terminal as stop:
            self.trace.emit("guard", name=stop.stop_reason, detail=str(stop))
            final = self.final_round(stop)
            return self.finish(fallback_text(stop, self.stats, final), stop.stop_reason, final)
        except KeyboardInterrupt:
            return self.finish(fallback_text(Cancelled("interrupted"), self.stats), Cancelled.stop_reason)

    def step(self) -> str | None:
        """One turn: check the limits, ask for an action, then answer (returned) or run one tool call."""
        self.check_limits()
        try:
            action = self.query_model()
        except InvalidAction as err:
            self.observe(f"error: invalid action ({err})")
            self.format_breaker.record(valid=False)  # raises FormatErrorLimit after max_format_errors in a row
            return None
        self.format_breaker.record(valid=True)
        if action.kind == "answer":
            return action.answer
        if action.plan_steps:
            self.call_cap.declare_plan(action.plan_steps)
        self.cancelled.check()
        self.observe(self.run_tool(action))
        return None

    def check_limits(self) -> None:
        """Before every model call: cancelled? out of time? out of turns? out of tokens?"""
        self.cancelled.check()
        self.clock.check()
        self.turn_cap.check(self.stats.turns)
        self.tokens.check(self.tokens_used())

    def query_model(self) -> Action:
        """One model turn, continuing a truncated reply at most max_auto_continues times."""
        first_turn, text, more = self.stats.turns == 0, "", AutoContinue(self.config.max_auto_continues)
        while True:
            reply = self.model_reply(first_turn, partial=text)
            text += reply.text
            if reply.finish_reason != "length":
                break
            more.next()  # raises AutoContinueLimit when the bound is reached
            self.stats.auto_continues += 1
            self.trace.emit("guard", name="auto_continue", used=more.used, limit=self.config.max_auto_continues)
            self.clock.check()
            self.tokens.check(self.tokens_used())  # a continuation is a model call too: it spends tokens
        self.stats.turns += 1
        self.scratchpad.append(Entry("action", text))
        return parse_action(text, first_turn=first_turn, may_answer=self.grounded)

    def tokens_used(self) -> int:
        return self.stats.prompt_tokens + self.stats.completion_tokens

    def model_reply(self, first_turn: bool, partial: str, final: bool = False) -> ModelReply:
        """One call to the model, given what is left of the run's time (like a tool call)."""
        grounds = self.grounding.for_turn()
        if grounds is not None and not partial:
            self.trace.emit("guard", name="grounding", narrowed=grounds.narrowed())
        try:
            reply = self.model.next_action(self.scratchpad, first_turn=first_turn, may_answer=self.grounded,
                                           partial=partial, timeout_s=self.clock.time_left(), final=final,
                                           grounds=grounds)
        except ModelTimeout:
            raise WallClockExceeded(f"the model was still replying when wall_clock_s={self.config.wall_clock_s:g}"
                                    " ran out") from None
        self.stats.prompt_tokens += reply.prompt_tokens
        self.stats.completion_tokens += reply.completion_tokens
        self.stats.scoring_tokens += reply.scoring_tokens
        self.trace.emit("model_action", turn=None if final else self.stats.turns + 1, final=final,
                        text=reply.text, finish_reason=reply.finish_reason,
                        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                        scoring_tokens=reply.scoring_tokens, latency_s=round(reply.latency_s, 4))
        return reply

    def run_tool(self, action: Action) -> str:
        """Run one tool call through dedup, the call cap, the failure breaker and the stuck detector."""
        key = action.call_key()
        self.stats.identical_calls += key in self.calls_seen
        self.calls_seen.add(key)
        earlier = self.dedup.earlier_result(key)
        if earlier is not None:
            self.trace.emit("guard", name="dedup", tool=action.tool, args=action.args)
            self.stuck.record(key, earlier)  # a repeat that dedup answers is still a repeat
            self.grounding.saw_result(action.tool, earlier)
            return f"{earlier} {DEDUP_NUDGE}"
        self.call_cap.check(sum(self.stats.tool_calls.values()) - self.stats.forced_calls)
        self.stats.tool_calls[action.tool] += 1
        self.trace.emit("tool_call", tool=action.tool, args=action.args)
        try:
            timeout = self.clock.tool_timeout(self.config.tool_timeout_s)
            result = self.tools.call(action.tool, action.args, timeout=timeout)
        except Recoverable as err:
            self.stats.tool_errors += 1
            self.stats.last_tool_error = f"{type(err).__name__}: {err}"
            self.trace.emit("tool_error", tool=action.tool, error=self.stats.last_tool_error)
            observation = f"error: {err}"
            self.stuck.record(key, observation)  # before the breaker's discovery, which is not the tool's answer
            self.grounding.saw_error(observation)
            self.scope.saw_error(action.args.get("verb"), err)  # no verb the question could mean: "no"
            if self.breaker.record(ok=False):
                self.trace.emit("guard", name="failure_breaker", after=self.config.max_consecutive_failures)
                observation += "\n" + self.discover()
            return observation
        self.breaker.record(ok=True)
        self.dedup.remember(key, result)
        self.trace.emit("tool_result", tool=action.tool, result=result)
        self.grounding.saw_result(action.tool, result)
        self.stuck.record(key, result)
        return result

    def discover(self) -> str:
        """The breaker's recovery step: show the model the valid options (not charged to its cap)."""
        self.stats.forced_calls += 1
        self.stats.tool_calls["list_tenses"] += 1
        self.trace.emit("tool_call", tool="list_tenses", args={}, forced=True)
        try:
            result = self.tools.call("list_tenses", {}, timeout=self.clock.tool_timeout(self.config.tool_timeout_s))
        except Recoverable as err:  # not one of the model's errors: stats.tool_errors counts those
            self.trace.emit("tool_error", tool="list_tenses", error=f"{type(err).__name__}: {err}", forced=True)
            return f"error: list_tenses failed too ({err})"
        self.trace.emit("tool_result", tool="list_tenses", result=result, forced=True)
        return result

    def observe(self, observation: str) -> None:
        """Show the model what happened; only a successful tool result lets it answer next."""
        self.grounded = not observation.startswith("error:")
        if self.config.remaining_budget_notice:
            observation += f" (turns left: {self.config.max_turns - self.stats.turns})"
        self.scratchpad.append(Entry("observation", observation))

    def final_round(self, stop: Terminal) -> str:
        """After a cap: one more model call whose only branch is the answer, so the user gets the model's
        best answer from what the run found (marked as such), not just canned text. "" when there is none."""
        if not (self.config.final_answer_round and isinstance(stop, FINAL_ROUND_AFTER)):
            return ""
        # No notice in the prompt: this base model copies the last line it sees, so a notice would become its
        # answer. The grammar alone makes this round final: it has no branch but the answer.
        try:
            reply = self.model_reply(first_turn=False, partial="", final=True)
            action = parse_action(reply.text, first_turn=False, may_answer=True)
        except (Recoverable, Terminal, KeyboardInterrupt) as err:  # out of time, a failed model, an invalid reply
            self.trace.emit("final_round", answer="", detail=f"{type(err).__name__}: {err}")
            return ""
        if action.kind != "answer":  # a backend without a grammar can still ask for a tool: it is not run
            self.trace.emit("final_round", answer="", detail=f"the model asked for {action.tool}; not run")
            return ""
        self.trace.emit("final_round", answer=action.answer)
        return action.answer

    def finish(self, answer: str, stop_reason: str, final_answer: str = "", declined: str = "") -> Outcome:
        self.stats.seconds = round(self.clock.elapsed(), 3)
        self.trace.emit("stop", stop_reason=stop_reason, answer=answer, final_answer=final_answer,
                        stats=self.stats.as_dict())
        log.info(summary_line(stop_reason, self.stats))
        return Outcome(answer, stop_reason, self.stats, final_answer, declined)


def check_input(user_input: str, max_chars: int) -> None:
    if not user_input.strip():
        raise InvalidInput("the question is empty")
    if len(user_input) > max_chars:
        raise InvalidInput(f"the question is {len(user_input)} characters long; the limit is {max_chars}")


def fallback_text(stop: Terminal, stats: Stats, final_answer: str = "") -> str:
    """What a user sees when a guard ends the run: what was tried, and what to do next."""
    tried = calls_summary(stats.tool_calls)
    lines = [
        f"Sorry, I could not finish this one: {stop.says or stop} ({stop})"
        f" [stop_reason: {stop.stop_reason}].",
    ]
    if final_answer:
        backed = sum(stats.tool_calls.values()) - stats.forced_calls - stats.tool_errors  # the model's own calls
        lines.append(f"Unconfirmed answer, written when the limit was hit "
                     f"({f'{backed} tool call(s) had succeeded' if backed else 'no tool call had succeeded'}):"
                     f" {final_answer}")
    lines.append(f"Tried: {tried} in {stats.turns} turn(s).")
    if stats.last_tool_error:
        lines.append(f"Last tool error: {stats.last_tool_error}")
    lines.append("Next: ask for one verb, one tense and one person, e.g. "
                 "'What is the past simple of go for she?'. The 12 tenses are "
                 "present/past/future x simple/continuous/perfect/perfect continuous.")
    return "\n".join(lines)


def server_failure_text(failure: ServerFailed, stats: Stats) -> str:
    return (f"The conjugation server failed: {failure} [stop_reason: server_failed].\n"
            f"Tried {sum(stats.tool_calls.values())} tool call(s) in {stats.turns} turn(s). "
            "Next: run the question again; if it keeps failing, check that `python -m miniagent.tools.server` starts.")


def model_failure_text(failure: ModelFailed, stats: Stats) -> str:
    return (f"The model failed, not the conjugation server: {failure} [stop_reason: model_failed].\n"
            f"Tried {sum(stats.tool_calls.values())} tool call(s) in {stats.turns} turn(s). "
            "Next: check that the model (or the model server named above) is up and answers, then ask again.")


def summary_line(stop_reason: str, stats: Stats) -> str:
    """One log line per run: converged, or which limit was hit."""
    turns = f"{stats.turns} turn{'' if stats.turns == 1 else 's'}"
    if stop_reason == "answered":
        return f"converged after {turns}"
    if stop_reason == OutOfGrammar.stop_reason:
        return f"declined after {turns}: the question is outside the grammar"
    counts = calls_summary(stats.tool_calls)
    last = f", last error: {stats.last_tool_error}" if stats.last_tool_error else ""
    kind = "cap hit" if stop_reason in cap_reasons() else "stopped"
    return f"{kind} ({stop_reason}) after {turns}: {counts}{last}"


def calls_summary(tool_calls: Mapping[str, int], none: str = "no tool calls") -> str:
    """A run's tool calls by tool, "conjugate x3, list_tenses x1": in the fallback, the log, the CLI, the harness."""
    return ", ".join(f"{tool} x{n}" for tool, n in sorted(tool_calls.items())) or none
