"""A generated world for the property tests: a model, its tools, the settings and a fake clock.

Hypothesis draws each part:

* **the model** is a short script of replies that it plays in a cycle, for ever.  One reply repeated is a
  model that repeats itself; two are a model that alternates; a script may hold tool calls with any
  arguments (some the schema refuses), answers, text that is not JSON, replies cut off by the token limit
  (``finish_reason "length"``), slow replies and failures of the model server.  A model that "keeps to the
  schema" is decoded under the turn's grammar, like the llama and openai backends: it never answers when
  the answer branch is not offered, and in the final round, where the answer is the only branch, it answers
  (its tool calls may still break the schema: the grammar is modelled for the answer branch only);
* **the tools** play their own cycle of outcomes, one per different call (the same call always gets the
  same one, as from a real tool): a result, a tool error, a slow answer, a hang (no answer until the
  timeout), the server dying;
* **the settings** are any valid ``TutorConfig`` caps, budgets and timeouts, the edges included; each
  one stays at its default unless the example needs another value, so a shrunk counterexample names only
  the settings that matter;
* **time** comes from a fake clock that only the model and the tools move, so a 20-second wall clock is
  checked in microseconds.  Times are multiples of 1/64 s, which floats add up exactly.  The clock also keeps
  the model's share of it, for the settings where a shared model server has a clock of its own
  (``model_wall_clock_s``): the model's time is then not counted in ``wall_clock_s``.

Hypothesis shrinks a failing world to the shortest script and the plainest settings: that is the
counterexample a break's page shows (``describe`` writes it in English and Spanish).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from miniagent.agent.actions import PERSON_CHOICES
from miniagent.agent.config import TutorConfig, check
from miniagent.agent.errors import ModelFailed, ModelTimeout, ServerFailed, ToolError, ToolTimeout
from miniagent.agent.grammar import TENSES
from miniagent.agent.loop import GrammarTutor, Outcome
from miniagent.agent.ports import Entry, ModelReply
from miniagent.agent.trace import Trace

QUESTION = "What is the past simple of go for she?"
# A loop that has not stopped after this many model or tool calls never will: the fake model or tools raise
# Runaway, which no handler of the loop catches, so "it ends" is a property that can fail.
RUNAWAY_CALLS = 100  # the intact loop's bound here is at most 8 x (1 + 3) + 1 = 33 model calls
TICK = 1 / 64  # the fake clock's unit: sums of multiples of it are exact in floating point


class Runaway(Exception):
    """The loop kept calling past RUNAWAY_CALLS: it does not stop by itself."""


class HungForever(Exception):
    """A tool that never answers was called without a timeout: a real run would wait for ever."""


class FakeClock:
    """Seconds since the run began; only the model and the tools move it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.model_seconds = 0.0  # the part of ``now`` the model took

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float, *, model: bool = False) -> None:
        self.now += seconds
        if model:
            self.model_seconds += seconds


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Reply:
    """One reply of the model's script."""

    kind: str  # call | list_tenses | answer | garbage | ramble | fail
    verb: str = "go"
    tense: str = "past simple"
    person: str = "she"
    steps: int | None = None  # a plan; the schema allows it on the first turn only
    text: str = "she went"  # an answer's text, or the garbage
    cuts: int = 0  # pieces cut off by the token limit ("length") before the one that ends the reply
    seconds: float = 0.0  # how long the reply takes, cut to the time the loop gives the call
    prompt_tokens: int = 20
    completion_tokens: int = 10

    def json(self) -> str:
        if self.kind == "call":
            payload = {"tool": "conjugate", "verb": self.verb, "tense": self.tense, "person": self.person}
            if self.steps is not None:
                payload["steps"] = self.steps
            return json.dumps(payload)
        if self.kind == "list_tenses":
            return json.dumps({"tool": "list_tenses"})
        if self.kind == "answer":
            return json.dumps({"answer": self.text})
        return self.text  # garbage


@dataclass
class ModelCall:
    """What one call to the model was given and what it did (the properties read these)."""

    first_turn: bool
    may_answer: bool | None
    final: bool
    partial: str
    timeout_s: float | None
    last_entry: Entry
    reply: Reply
    outcome: str = ""  # stop | length | timeout | failed
    tokens: int = 0
    text: str = ""  # the piece of text it returned
    seconds: float = 0.0  # how long it took on the fake clock (cut to timeout_s, like a real backend)


class GeneratedModel:
    name = "generated"

    def __init__(self, script: tuple[Reply, ...], clock: FakeClock, keeps_to_schema: bool) -> None:
        self.script, self.clock, self.keeps_to_schema = script, clock, keeps_to_schema
        self.calls: list[ModelCall] = []
        self.turn = -1  # index of the reply being given
        self.pieces: list[str] = []

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: object = None) -> ModelReply:
        if len(self.calls) >= RUNAWAY_CALLS:
            raise Runaway(f"the model was called {RUNAWAY_CALLS} times")
        if not partial:  # a new reply (a continuation passes the text so far)
            self.turn += 1
            reply = self.script[self.turn % len(self.script)]
            self.pieces = self._pieces(reply, self._text(reply, scratchpad, may_answer, final))
        reply = self.script[self.turn % len(self.script)]
        call = ModelCall(first_turn, may_answer, final, partial, timeout_s, scratchpad[-1], reply)
        self.calls.append(call)
        if reply.seconds:
            # Like the llama and openai backends: a reply that would take longer than its timeout is given up
            # when the timeout runs out (ModelTimeout), after that long.
            if timeout_s is not None and reply.seconds > timeout_s:
                call.seconds = timeout_s
                self.clock.advance(timeout_s, model=True)
                call.outcome = "timeout"
                raise ModelTimeout(f"still replying after {timeout_s:g} s")
            call.seconds = reply.seconds
            self.clock.advance(reply.seconds, model=True)
        if reply.kind == "fail":
            call.outcome = "failed"
            raise ModelFailed("the model server answered 503")
        piece = self.pieces.pop(0) if len(self.pieces) > 1 or reply.kind != "ramble" else self.pieces[0]
        finish = "length" if self.pieces else "stop"
        call.outcome, call.tokens, call.text = finish, reply.prompt_tokens + reply.completion_tokens, piece
        scoring = reply.prompt_tokens % 7  # a backend that scores options evaluates tokens of its own
        return ModelReply(piece, finish, reply.prompt_tokens, reply.completion_tokens, call.seconds, scoring)

    def _text(self, reply: Reply, scratchpad: list[Entry], may_answer: bool | None, final: bool) -> str:
        """The reply's whole text; a model that keeps to the schema bends it to the turn's branches."""
        if reply.kind == "ramble":  # an answer that never closes, grammar or not (like the scripted rambler)
            return '{"answer": "and so on, '
        if self.keeps_to_schema and final:  # the answer is the only branch: its best answer
            results = [e.text for e in scratchpad if e.role == "observation" and not e.text.startswith("error")]
            return json.dumps({"answer": results[-1][:80] if results else "I could not work it out"})
        if self.keeps_to_schema and reply.kind == "answer" and not may_answer:  # no answer branch: a tool call
            first_call = next((r for r in self.script if r.kind == "call"), Reply("list_tenses"))
            return Reply("call", first_call.verb, first_call.tense, first_call.person).json() \
                if first_call.kind == "call" else first_call.json()
        return reply.json()

    @staticmethod
    def _pieces(reply: Reply, text: str) -> list[str]:
        """The text in ``cuts + 1`` pieces; a ramble is one piece that comes back for ever, always cut."""
        if reply.kind == "ramble":
            return [text]
        n = min(reply.cuts + 1, len(text))
        size = -(-len(text) // n)
        return [text[i:i + size] for i in range(0, len(text), size)]

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------
# The tools
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolOutcome:
    kind: str  # ok | error | slow | hang | server_failed
    seconds: float = 0.0  # for slow: how long the answer takes (past the timeout it is a ToolTimeout)


@dataclass
class ToolCall:
    tool: str
    args: dict
    timeout: float | None
    outcome: ToolOutcome
    at: float = 0.0  # the fake clock when it was called
    model_seconds: float = 0.0  # the model's share of ``at``
    result: str | None = None  # the text returned; None when it raised
    error: str = ""  # the message of what it raised


class GeneratedTools:
    def __init__(self, outcomes: tuple[ToolOutcome, ...], clock: FakeClock) -> None:
        self.outcomes, self.clock = outcomes, clock
        self.calls: list[ToolCall] = []
        self.keys: dict[str, int] = {}

    def call(self, tool: str, args: dict, timeout: float | None = None) -> str:
        if len(self.calls) >= RUNAWAY_CALLS:
            raise Runaway(f"the tools were called {RUNAWAY_CALLS} times")
        # Like a real tool, the same call always gets the same outcome: the n-th different call gets the n-th
        # outcome of the cycle.
        key = tool + json.dumps(args, sort_keys=True)
        outcome = self.outcomes[self.keys.setdefault(key, len(self.keys)) % len(self.outcomes)]
        call = ToolCall(tool, dict(args), timeout, outcome, self.clock.now, self.clock.model_seconds)
        self.calls.append(call)
        what = args.get("verb", tool)
        if timeout is not None and timeout <= 0:  # like the MCP client: no time left, no call
            call.error = f"{tool}: no time left for the call"
            raise ToolTimeout(call.error)
        if outcome.kind == "server_failed":
            call.error = "the MCP server exited"
            raise ServerFailed(call.error)
        if outcome.kind == "error":
            call.error = f"{what!r} is not something I can conjugate"
            raise ToolError(call.error)
        if outcome.kind in ("slow", "hang"):
            wait = float("inf") if outcome.kind == "hang" else outcome.seconds
            if timeout is None and wait == float("inf"):
                raise HungForever(f"{tool} never answers and was called without a timeout")
            if timeout is not None and wait > timeout:
                self.clock.advance(timeout)
                call.error = f"{tool}: no answer within {timeout:g} s"
                raise ToolTimeout(call.error)
            self.clock.advance(wait)
        call.result = "Tenses: all twelve." if tool == "list_tenses" else \
            f"{args.get('person')} {args.get('verb')} ({args.get('tense')})"
        return call.result


# --------------------------------------------------------------------------
# The world and one run of it
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class World:
    script: tuple[Reply, ...]
    keeps_to_schema: bool
    outcomes: tuple[ToolOutcome, ...]
    config: TutorConfig


@dataclass
class Run:
    world: World
    outcome: Outcome
    events: list[dict]
    model: GeneratedModel
    tools: GeneratedTools
    scratchpad: list[Entry]
    elapsed: float
    model_seconds: float = 0.0  # the part of ``elapsed`` the model took

    @property
    def config(self) -> TutorConfig:
        return self.world.config

    @property
    def counted_seconds(self) -> float:
        """The run's time as its wall clock counts it: all of it, or all but the model's when the model has a
        clock of its own (model_wall_clock_s > 0)."""
        return self.elapsed - (self.model_seconds if self.config.model_wall_clock_s > 0 else 0.0)


def run_world(world: World) -> Run:
    """One run of the intact loop in the generated world (a Runaway or HungForever escapes)."""
    clock = FakeClock()
    model = GeneratedModel(world.script, clock, world.keeps_to_schema)
    tools = GeneratedTools(world.outcomes, clock)
    trace = Trace.memory()
    tutor = GrammarTutor(model, tools, world.config, trace, clock=clock)
    outcome = tutor.run(QUESTION)
    return Run(world, outcome, trace.events, model, tools, tutor.scratchpad, clock.now, clock.model_seconds)


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

VERBS = ("go", "be", "would", "lovingly")  # a verb, another, a modal (the tool refuses it), not a verb
BAD_VERB, BAD_TENSE, BAD_PERSON = "X", "yesterday", "thou"  # arguments the action schema refuses


def ticks(low: int, high: int) -> st.SearchStrategy[float]:
    """Seconds as multiples of TICK, from low to high ticks."""
    return st.integers(low, high).map(lambda n: n * TICK)


def often(usual: st.SearchStrategy, *others: st.SearchStrategy, weight: int = 3) -> st.SearchStrategy:
    """``usual`` ``weight`` times as likely as each of the others; hypothesis shrinks towards it."""
    copies = [usual] + [usual.map(lambda x: x) for _ in range(weight - 1)]  # one_of merges equal strategies
    return st.one_of(*copies, *others)


def _seconds() -> st.SearchStrategy[float]:
    return often(st.just(0.0), ticks(1, 64 * 30), weight=8)


def replies() -> st.SearchStrategy[Reply]:
    call = st.builds(Reply, kind=st.just("call"), verb=often(st.sampled_from(VERBS), st.just(BAD_VERB), weight=8),
                     tense=often(st.sampled_from(TENSES[4:5] + TENSES[:4]), st.just(BAD_TENSE), weight=8),
                     person=often(st.sampled_from(("she", *PERSON_CHOICES)), st.just(BAD_PERSON), weight=8),
                     steps=often(st.none(), st.integers(0, 6), weight=8))
    answer = st.builds(Reply, kind=st.just("answer"), text=st.sampled_from(("she went", "she goed", " ")))
    simple = st.one_of(
        often(call, weight=6),
        often(answer, weight=3),
        st.just(Reply("list_tenses")),
        st.builds(Reply, kind=st.just("garbage"), text=st.sampled_from(('Sure! {"tool": "conjugate"', "[]",
                                                                        '{"tool": "conjugate_verb"}'))),
        st.just(Reply("ramble")),
        st.just(Reply("fail")),
    )
    return st.builds(
        lambda reply, cuts, seconds, prompt, completion: Reply(
            reply.kind, reply.verb, reply.tense, reply.person, reply.steps, reply.text, cuts, seconds, prompt,
            completion),
        simple, often(st.just(0), st.integers(1, 4), weight=8), _seconds(),
        often(st.just(20), st.integers(0, 400)), often(st.just(10), st.integers(1, 48)))


def tool_outcomes() -> st.SearchStrategy[ToolOutcome]:
    return st.one_of(
        often(st.just(ToolOutcome("ok")), weight=4),
        often(st.just(ToolOutcome("error")), weight=3),
        st.builds(ToolOutcome, kind=st.just("slow"), seconds=ticks(1, 64 * 10)),
        st.just(ToolOutcome("hang")),
        st.just(ToolOutcome("server_failed")),
    )


def _setting(default, values):
    """The default first: hypothesis shrinks towards it, so a counterexample changes only what it must."""
    return st.one_of(st.just(default), values)


def build(**values) -> TutorConfig:
    """The settings of a generated world: the given values, every other one at its default."""
    config = TutorConfig(**values)
    check(config)  # every generated setting is one the config layers would accept
    return config


def settings() -> st.SearchStrategy[TutorConfig]:
    d = TutorConfig()
    return st.builds(
        build,
        max_turns=_setting(d.max_turns, st.integers(1, 8)),
        max_tool_calls=_setting(d.max_tool_calls, st.integers(1, 8)),
        calls_per_plan_step=_setting(d.calls_per_plan_step, st.integers(0, 3)),
        max_plan_tool_calls=_setting(d.max_plan_tool_calls, st.integers(1, 10)),
        max_consecutive_failures=_setting(d.max_consecutive_failures, often(st.integers(1, 5), st.just(1))),
        max_format_errors=_setting(d.max_format_errors, st.integers(1, 5)),
        max_repeats=_setting(d.max_repeats, often(st.integers(0, 7), st.sampled_from((0, 1)))),
        final_answer_round=_setting(d.final_answer_round, st.just(not d.final_answer_round)),
        remaining_budget_notice=_setting(d.remaining_budget_notice, st.just(not d.remaining_budget_notice)),
        wall_clock_s=_setting(d.wall_clock_s, st.integers(1, 8 * 40).map(lambda n: n / 8)),
        tool_timeout_s=_setting(d.tool_timeout_s, st.integers(1, 8 * 10).map(lambda n: n / 8)),
        max_auto_continues=_setting(d.max_auto_continues, st.integers(0, 3)),
        max_run_tokens=_setting(d.max_run_tokens, st.integers(1, 3000)),
        # Mostly 0: the model's time counts in wall_clock_s; otherwise the model has a clock of its own.
        model_wall_clock_s=often(st.just(d.model_wall_clock_s), model_clocks()),
    )


def model_clocks() -> st.SearchStrategy[float]:
    """A shared model server's own budget, small next to the replies' seconds so that it runs out: up to 1 s
    (where a guard written ``> 1`` would show) or up to 20 s."""
    return st.one_of(ticks(1, 64), ticks(1, 64 * 20))


def short_or_long(elements: st.SearchStrategy, longest: int) -> st.SearchStrategy[tuple]:
    """Mostly one or two elements (a model that repeats itself, or alternates), sometimes up to ``longest``."""
    return often(st.lists(elements, min_size=1, max_size=2), st.lists(elements, min_size=1, max_size=longest),
                 weight=2).map(tuple)


def failing_tools() -> st.SearchStrategy[ToolOutcome]:
    """Tools that mostly fail: for the properties about what happens after failures."""
    return st.one_of(often(st.just(ToolOutcome("error")), weight=4), st.just(ToolOutcome("ok")),
                     st.just(ToolOutcome("hang")))


def with_a_plan(world: World, steps: int) -> World:
    """The same world, whose model declares a plan of ``steps`` calls on its first turn."""
    first = world.script[0]
    first = Reply("call", first.verb, first.tense, first.person, steps) if first.kind == "call" else \
        Reply("call", steps=steps)
    return World((first, *world.script[1:]), world.keeps_to_schema, world.outcomes, world.config)


def with_a_budget(world: World, tokens: int) -> World:
    """The same world with a token budget small enough to be reached within a few model calls."""
    return World(world.script, world.keeps_to_schema, world.outcomes, replace(world.config, max_run_tokens=tokens))


def with_a_model_clock(world: World, limit: float, seconds: float) -> World:
    """The same world with ``model_wall_clock_s=limit``; its first reply takes ``seconds`` unless it is slow already."""
    first = world.script[0]
    if not first.seconds:
        first = replace(first, seconds=seconds)
    return World((first, *world.script[1:]), world.keeps_to_schema, world.outcomes,
                 replace(world.config, model_wall_clock_s=limit))


def worlds(tools: st.SearchStrategy[ToolOutcome] | None = None, plans: bool = False,
           small_budgets: bool = False, model_clock: bool = False) -> st.SearchStrategy[World]:
    if model_clock:  # all of them have a model clock of their own, and most a slow model that may use it up
        return st.builds(with_a_model_clock, worlds(tools), model_clocks(), often(ticks(1, 64 * 2), st.just(0.0)))
    if plans:  # half of them declare a plan on the first turn, which may raise the tool-call limit
        return st.one_of(worlds(tools), st.builds(with_a_plan, worlds(tools), st.integers(1, 5)))
    if small_budgets:  # half of them have a token budget a few replies spend
        return st.one_of(worlds(tools), st.builds(with_a_budget, worlds(tools), st.integers(1, 200)))
    return st.builds(
        World,
        script=short_or_long(replies(), 6),
        keeps_to_schema=st.booleans().map(lambda b: not b),  # shrinks to True: a model with a grammar
        outcomes=short_or_long(tool_outcomes() if tools is None else tools, 5),
        config=settings(),
    )


__all__ = ["World", "Run", "Reply", "ToolOutcome", "build", "worlds", "run_world", "Runaway", "HungForever", "FakeClock"]
