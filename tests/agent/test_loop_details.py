"""Details of the loop that the guard tests pass over: what a continuation is given, what the trace says when
a guard stops the run, and the words of a model timeout. Found by the agent wing's mutation run (2026-11-26).
"""

from __future__ import annotations

from miniagent.agent.config import TutorConfig
from miniagent.agent.errors import ModelTimeout
from miniagent.agent.loop import GrammarTutor
from miniagent.agent.ports import ModelReply
from miniagent.agent.trace import Trace

QUESTION = "What is the past simple of go for she?"


class Tools:
    def call(self, tool, args, timeout=None):
        return "she went"


class Halves:
    """Answers in two pieces: the first cut off ("length"), the second the rest."""

    name = "halves"

    def __init__(self) -> None:
        self.partials: list[str] = []

    def next_action(self, scratchpad, *, partial="", **kwargs):
        self.partials.append(partial)
        if not any(e.role == "action" for e in scratchpad):
            return ModelReply('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}',
                              "stop", 10, 10, 0.0)
        if not partial:
            return ModelReply('{"answer": "She', "length", 10, 3, 0.0)
        return ModelReply(' went."}', "stop", 10, 3, 0.0)


def test_a_cut_off_reply_is_continued_from_what_it_had_written():
    model = Halves()
    outcome = GrammarTutor(model, Tools(), TutorConfig(), Trace.memory()).run(QUESTION)
    assert outcome.stop_reason == "answered" and outcome.answer == "She went."
    assert model.partials == ["", "", '{"answer": "She']


class Slow:
    name = "slow"

    def next_action(self, scratchpad, **kwargs):
        raise ModelTimeout("no reply in time")


def test_a_guard_that_stops_the_run_is_in_the_trace_with_its_words():
    trace = Trace.memory()
    outcome = GrammarTutor(Slow(), Tools(), TutorConfig(wall_clock_s=7.5), trace).run(QUESTION)
    assert outcome.stop_reason == "wall_clock"
    stops = [e for e in trace.events if e["event"] == "guard" and e.get("name") == "wall_clock"]
    assert [e["detail"] for e in stops] == ["the model was still replying when wall_clock_s=7.5 ran out"]
