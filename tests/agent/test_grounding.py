"""Argument grounding: what the question names is all the model may choose (agent/grounding.py).

The rules read the user's words, never the model's; these tests pin each rule with the phrasings learners use
(written for this file, not taken from an eval set), and the guard's part in a run with the scripted models."""

from __future__ import annotations

import pytest

from miniagent.agent.actions import NEXT_ACTION_SCHEMA, schema_for_turn
from miniagent.agent.config import TutorConfig
from miniagent.agent.grounding import (ArgumentGrounding, Grounds, persons_named, proposed_verbs, tenses_named,
                                       verbs_named)
from miniagent.agent.loop import GrammarTutor
from miniagent.agent.ports import ModelReply
from miniagent.agent.trace import Trace
from miniagent.models.scripted import ScriptedBackend


@pytest.mark.parametrize("question, persons", [
    ("What is the past simple of go for she?", ("she",)),
    ("Give me the present continuous of run for they.", ("they",)),  # "me" asks, "for they" decides
    ("How do I say swim in the future for him?", ("he",)),
    ("Can you conjugate eat for us in the past?", ("we",)),
    ("Conjuga 'go' en pasado simple para 'we'.", ("we",)),
    ("Past perfect of sleep, con ella.", ("she",)),
    ("How do I say 'it rains' in the past continuous?", ("it",)),  # the quoted words are the ones asked about
    ("Future perfect of take, third person plural?", ("they",)),
    ("Third person singular of do in the present perfect?", ("he", "she", "it")),
    ("What is the past simple of go?", ()),  # none named: the model chooses
    ("Do you know how I say go in the past?", ()),  # two, and nothing to choose between them
])
def test_the_person_is_the_one_the_question_names(question, persons):
    assert persons_named(question) == persons


@pytest.mark.parametrize("question, tenses", [
    ("What is the past of go for she?", ("past simple",)),  # "simple" may be left out
    ("simple past of go, I", ("past simple",)),
    ("What is the past perfect of go for she?", ("past perfect",)),  # the longest of nested ones
    ("present perfect progressive of work for we", ("present perfect continuous",)),
    ("Conjuga 'speak' en presente perfecto para 'she'.", ("present perfect",)),
    ("¿Cuál es el futuro simple de 'begin'?", ("future simple",)),
    ("Is it the past or the present of go?", ()),  # two: the model chooses
    ("Conjugate go for she.", ()),
])
def test_the_tense_is_the_one_whose_words_the_question_holds(question, tenses):
    assert tenses_named(question) == tenses


@pytest.mark.parametrize("question, verbs", [
    ("What is the past simple of go for she?", ("go",)),
    ("Which is the present perfect of 'to weave' for 'we'?", ("weave",)),
    ("For 'they', what's the present simple of finish?", ("finish",)),  # only a pronoun is quoted
    ("How do I say 'it rings' in the past?", ("rings", "ring")),  # a quoted form and what it may come from
    ("Which form does bring take in the past for I?", ("bring", "take")),  # the decoder weighs them
    ("What is the past of do for you?", ("do",)),  # a word of the request, but "of" points at it
    ("Do you know the past of go for she?", ("know", "go")),  # "do" neither quoted nor pointed at: the request's
    ("What is the past of 'do' for you?", ("do",)),
])
def test_the_verb_is_a_word_of_the_question(question, verbs):
    assert verbs_named(question) == verbs


def test_a_tool_error_that_names_the_base_form_proposes_it():
    assert proposed_verbs("error: 'went' is the past of 'go'; give the base form 'go'.") == ("go",)
    assert proposed_verbs("error: 'lay' is the past of 'lie' or 'lay'; give the base form 'lie' or 'lay'.") == \
        ("lie", "lay")
    assert proposed_verbs("error: 'give up' is a phrasal verb; give the base form 'give up'.") == ()  # not one word
    assert proposed_verbs("error: Unknown tense 'x'.") == ()


def test_grounds_narrow_the_conjugate_call_and_the_answer_and_leave_the_rest():
    grounds = Grounds(persons=("she",), tenses=("past simple",), verbs=("go",), answer='she said "went"')
    schema = schema_for_turn(first_turn=False, may_answer=True, grounds=grounds)
    conjugate, list_tenses, answer = schema["anyOf"]
    assert conjugate["properties"]["person"] == {"enum": ["she"]}
    assert conjugate["properties"]["tense"] == {"enum": ["past simple"]}
    assert conjugate["properties"]["verb"] == {"type": "string", "enum": ["go"]}
    assert list_tenses == NEXT_ACTION_SCHEMA["anyOf"][1]
    assert answer["properties"]["answer"] == {"type": "string", "enum": ['she said "went"']}
    untouched = schema_for_turn(first_turn=False, may_answer=True, grounds=Grounds(persons=("I",)))
    assert untouched["anyOf"][0]["properties"]["tense"] == NEXT_ACTION_SCHEMA["anyOf"][0]["properties"]["tense"]
    assert "enum" not in untouched["anyOf"][2]["properties"]["answer"]


def test_the_guard_follows_the_run_and_is_silent_when_off_or_when_nothing_is_named():
    guard = ArgumentGrounding(enabled=True)
    guard.start("What is the past simple of 'went' for she?")
    assert guard.for_turn() == Grounds(("she",), ("past simple",), ("went",))
    guard.saw_error("error: 'went' is the past of 'go'; give the base form 'go'.")
    assert guard.for_turn().verbs == ("went", "go")
    guard.saw_result("conjugate", "she went")
    assert guard.for_turn().answer == "she went"
    guard.saw_result("list_tenses", "Tenses: ...")  # not a conjugation: nothing an answer could say
    assert guard.for_turn().answer == ""
    guard.start("What is the tense of the verb?")
    assert guard.for_turn() is None and guard.proposed == ()
    off = ArgumentGrounding(enabled=False)
    off.start("What is the past simple of go for she?")
    assert off.for_turn() is None


class Recorder(ScriptedBackend):
    """The scripted oracle, remembering the grounds of each call."""

    def __init__(self) -> None:
        super().__init__("oracle")
        self.given: list[Grounds | None] = []

    def next_action(self, scratchpad, **kwargs):
        self.given.append(kwargs.get("grounds"))
        return super().next_action(scratchpad, **kwargs)


class Tools:
    def call(self, tool, args, timeout=None):
        return "she went"


@pytest.mark.parametrize("enabled", [True, False])
def test_each_model_call_gets_the_grounds_and_the_trace_says_what_they_narrowed(enabled):
    model, trace = Recorder(), Trace.memory()
    outcome = GrammarTutor(model, Tools(), TutorConfig(ground_arguments=enabled), trace).run(
        "What is the past simple of go for she?")
    assert outcome.stop_reason == "answered"
    narrowed = [e["narrowed"] for e in trace.events if e["event"] == "guard" and e.get("name") == "grounding"]
    if not enabled:
        assert model.given == [None, None] and narrowed == []
        return
    asked = {"person": ["she"], "tense": ["past simple"], "verb": ["go"]}
    assert narrowed == [asked, {**asked, "answer": ["she went"]}]
    assert [g.narrowed() for g in model.given] == narrowed


# What the agent wing's mutation run (2026-11-26, after grounding landed) showed untested.

@pytest.mark.parametrize("quoted, verbs", [
    ("carries", ("carries", "carry")), ("tried", ("tried", "try")), ("watches", ("watches", "watch", "watche")),
    ("rings", ("rings", "ring")), ("baked", ("baked", "bak", "bake")), ("making", ("making", "mak", "make")),
    ("owing", ("owing", "ow", "owe")),  # the shortest word an ending leaves a stem of two letters in
    ("dies", ("dies", "di", "die")),  # too short for "ies" -> "y": read as "es"
    ("used", ("used", "use")),  # "us" is a pronoun, never a verb
    ("go", ("go",)), ("is", ("is",)),  # no ending: the word alone
])
def test_a_quoted_form_brings_the_stems_its_regular_ending_leaves(quoted, verbs):
    assert verbs_named(f"What is the past simple of '{quoted}' for she?") == verbs


def test_a_lone_pronoun_anywhere_in_the_question_is_its_person():
    assert persons_named("In the past simple, how does she say go?") == ("she",)


def test_before_any_question_the_guard_narrows_nothing():
    assert ArgumentGrounding(enabled=True).for_turn() is None


def test_an_error_clears_the_answer_a_result_offered_and_every_proposal_is_kept():
    guard = ArgumentGrounding(enabled=True)
    guard.start("What is the past simple of 'went' for she?")
    guard.saw_result("conjugate", "she went")
    assert guard.for_turn().answer == "she went"
    guard.saw_error("error: 'went' is the past of 'go'; give the base form 'go'.")
    guard.saw_error("error: 'wented' is not a verb; give the base form 'wend'.")
    turn = guard.for_turn()
    assert turn.answer == "" and turn.verbs == ("went", "go", "wend")


def test_a_proposal_does_not_ground_a_question_that_named_no_verb():
    guard = ArgumentGrounding(enabled=True)
    guard.start("Can you give the past simple for she?")  # "do" unquoted is a word of the request: no verb named
    guard.saw_error("error: 'went' is the past of 'go'; give the base form 'go'.")
    assert guard.for_turn().verbs == ()


class Repeater:
    """Calls conjugate, then list_tenses (whose result grounds nothing), then conjugate again with the same
    arguments (dedup answers it), then answers."""

    name = "repeater"

    def __init__(self) -> None:
        self.given: list[Grounds | None] = []

    def next_action(self, scratchpad, **kwargs):
        self.given.append(kwargs.get("grounds"))
        calls = sum(1 for e in scratchpad if e.role == "action")
        conjugate = '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'
        text = [conjugate, '{"tool": "list_tenses"}', conjugate][calls] if calls < 3 else '{"answer": "She went."}'

        return ModelReply(text, "stop", 10, 10, 0.0)


def test_a_repeat_that_dedup_answers_still_grounds_the_answer():
    model = Repeater()
    GrammarTutor(model, Tools(), TutorConfig(), Trace.memory()).run("What is the past simple of go for she?")
    assert model.given[2] is not None and model.given[2].answer == ""  # after list_tenses: nothing to say yet
    assert model.given[3] is not None and model.given[3].answer == "she went"
