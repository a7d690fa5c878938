"""The scripted stand-ins: each does exactly what its one-line description promises, turn by turn.

The breaks' CI runs and many guard tests use these models to show a behaviour exactly; a stand-in that
drifted from its description would make a break's page describe a run that no longer happens.
"""

from __future__ import annotations

import json

import pytest

from miniagent.agent.actions import parse_action
from miniagent.agent.grounding import Grounds
from miniagent.agent.ports import Entry
from miniagent.models.scripted import BEHAVIOURS, PERSON_CHOICES, TENSES, ScriptedBackend, guess_call

QUESTION = "What is the past continuous of swim for she?"
CALL = {"verb": "swim", "tense": "past continuous", "person": "she"}
TENSE_LIST = "present simple, past simple, future simple, ... future perfect continuous"


@pytest.mark.parametrize("question, call", [
    (QUESTION, CALL),
    ("Conjugate the verb eat in the future perfect for they", {"verb": "eat", "tense": "future perfect",
                                                              "person": "they"}),
    ("conjugate 'write' in the present perfect continuous with I",
     {"verb": "write", "tense": "present perfect continuous", "person": "I"}),
    ("Past perfect of \"run\", we?", {"verb": "run", "tense": "past perfect", "person": "we"}),
    ("Tell me something", {"verb": "eat", "tense": "past simple", "person": "I"}),  # nothing to read: defaults
    ("What is the future simple of go for You?", {"verb": "go", "tense": "future simple", "person": "you"}),
    ("Future continuous of fly for it", {"verb": "fly", "tense": "future continuous", "person": "it"}),
    ("present simple of verb bake for he", {"verb": "bake", "tense": "present simple", "person": "he"}),
])
def test_guess_call_reads_the_longest_tense_the_first_person_and_the_word_after_verb_of_or_conjugate(question, call):
    assert guess_call(question) == call


def reply(model, pad, *, first_turn, may_answer=None, partial="", final=False, grounds=None):
    out = model.next_action(pad, first_turn=first_turn, may_answer=may_answer, partial=partial, final=final,
                            grounds=grounds)
    return out


def action(model, pad, **kw):
    out = reply(model, pad, **kw)
    assert out.finish_reason == "stop"
    return json.loads(out.text)


def pad_after(*pairs):
    pad = [Entry("question", QUESTION)]
    for act, obs in pairs:
        pad += [Entry("action", json.dumps(act)), Entry("observation", obs)]
    return pad


def test_every_described_behaviour_exists_and_an_unknown_one_is_refused_with_the_choices():
    for behaviour in BEHAVIOURS:
        model = ScriptedBackend(behaviour)
        assert model.name == f"scripted:{behaviour}"
    with pytest.raises(ValueError, match="unknown scripted behaviour 'nope'; choose from oracle, "):
        ScriptedBackend("nope")


def test_a_reply_counts_its_tokens_as_words_and_times_itself():
    out = reply(ScriptedBackend("oracle"), [Entry("question", QUESTION)], first_turn=True)
    assert out.prompt_tokens == len(QUESTION.split())
    assert out.completion_tokens == len(out.text.split()) and out.latency_s >= 0


def test_oracle_calls_once_then_answers_with_the_result_without_its_note():
    model = ScriptedBackend("oracle")
    first = action(model, [Entry("question", QUESTION)], first_turn=True)
    assert first == {"tool": "conjugate", **CALL}
    assert action(model, pad_after((first, "she was swimming (past continuous)")), first_turn=False) == \
        {"answer": "she was swimming"}


def test_stubborn_repeats_the_same_call_whatever_it_sees():
    model = ScriptedBackend("stubborn")
    pad = pad_after(({"tool": "conjugate", **CALL}, "she was swimming"))
    assert action(model, pad, first_turn=False) == {"tool": "conjugate", **CALL}


def test_wanderer_makes_a_different_call_each_turn_through_every_tense_then_the_next_person():
    model = ScriptedBackend("wanderer")
    seen = []
    pad = [Entry("question", QUESTION)]
    for turn in range(len(TENSES) + 2):
        act = action(model, pad, first_turn=turn == 0)
        seen.append((act["tense"], act["person"]))
        pad += [Entry("action", json.dumps(act)), Entry("observation", "ok")]
    assert seen[:len(TENSES)] == [(tense, PERSON_CHOICES[0]) for tense in TENSES]
    assert seen[len(TENSES):] == [(TENSES[0], PERSON_CHOICES[1]), (TENSES[1], PERSON_CHOICES[1])]
    assert len(set(seen)) == len(seen)


def test_alternator_takes_turns_between_two_calls():
    model = ScriptedBackend("alternator")
    tenses = []
    pad = [Entry("question", QUESTION)]
    for turn in range(4):
        act = action(model, pad, first_turn=turn == 0)
        tenses.append(act["tense"])
        pad += [Entry("action", json.dumps(act)), Entry("observation", "ok")]
    assert tenses == ["past continuous", "present simple"] * 2
    present = ScriptedBackend("alternator")
    pad = [Entry("question", "present simple of go for I"), Entry("action", "{}"), Entry("observation", "ok")]
    assert action(present, pad, first_turn=False)["tense"] == "past simple"  # its other call is another tense


def test_knowall_calls_only_when_it_may_not_answer_copies_a_result_in_view_else_answers_from_memory():
    model = ScriptedBackend("knowall")
    assert action(model, [Entry("question", QUESTION)], first_turn=True) == {"tool": "conjugate", **CALL}
    assert action(model, [Entry("question", QUESTION)], first_turn=False, may_answer=True) == \
        {"answer": "she swimed"}  # every verb is regular to it
    assert action(model, pad_after((CALL, "she was swimming (past continuous)")), first_turn=False) == \
        {"answer": "she was swimming"}
    assert action(model, pad_after((CALL, "error: nope")), first_turn=False) == {"answer": "she swimed"}
    assert action(model, pad_after((CALL, "she was swimming")), first_turn=False, may_answer=False) == \
        {"tool": "conjugate", **CALL}


def test_clumsy_sends_a_non_verb_until_it_sees_the_tense_list_then_calls_right_and_answers():
    model = ScriptedBackend("clumsy")
    assert action(model, [Entry("question", QUESTION)], first_turn=True) == \
        {"tool": "conjugate", **CALL, "verb": "lovingly"}
    after_error = pad_after(({"verb": "lovingly"}, "error: 'lovingly' is not a verb"))
    assert action(model, after_error, first_turn=False)["verb"] == "lovingly"
    after_list = after_error + [Entry("action", '{"tool": "list_tenses"}'), Entry("observation", TENSE_LIST)]
    assert action(model, after_list, first_turn=False) == {"tool": "conjugate", **CALL}
    done = after_list + [Entry("action", "{}"), Entry("observation", "she was swimming (past continuous)")]
    assert action(model, done, first_turn=False) == {"answer": "she was swimming"}
    failed = after_list + [Entry("action", "{}"), Entry("observation", "error: again")]
    assert action(model, failed, first_turn=False) == {"tool": "conjugate", **CALL}


def test_rambler_calls_first_then_every_answer_is_cut_off_at_the_length_limit():
    model = ScriptedBackend("rambler")
    assert action(model, [Entry("question", QUESTION)], first_turn=True) == {"tool": "conjugate", **CALL}
    pad = pad_after((CALL, "she was swimming"))
    first = reply(model, pad, first_turn=False)
    assert (first.text, first.finish_reason) == ('{"answer": "and so on, and so forth, ', "length")
    more = reply(model, pad, first_turn=False, partial=first.text)
    assert (more.text, more.finish_reason) == ("and so on, and so forth, ", "length")
    final = reply(model, pad, first_turn=False, final=True)  # unconstrained: the final round changes nothing
    assert final.finish_reason == "length"


def test_planner_declares_three_steps_conjugates_each_verb_then_answers_with_every_result():
    model = ScriptedBackend("planner")
    pad = [Entry("question", QUESTION)]
    for n, verb in enumerate(["be", "have", "go"]):
        act = action(model, pad, first_turn=n == 0)
        assert act == {"tool": "conjugate", **CALL, "verb": verb, **({"steps": 3} if n == 0 else {})}
        parse_action(json.dumps(act), first_turn=n == 0)  # the loop accepts each
        pad += [Entry("action", json.dumps(act)), Entry("observation", f"result {n}")]
    assert action(model, pad, first_turn=False) == {"answer": "result 0; result 1; result 2"}


def test_garbler_never_gives_a_valid_action():
    model = ScriptedBackend("garbler")
    pad = [Entry("question", QUESTION)]
    texts = []
    for turn in range(6):
        out = reply(model, pad, first_turn=turn == 0)
        texts.append(out.text)
        with pytest.raises(ValueError):
            parse_action(out.text, first_turn=turn == 0)
        pad += [Entry("action", out.text), Entry("observation", "error: invalid action")]
    assert texts[:3] == texts[3:] and len(set(texts[:3])) == 3  # three ways, in turn


def test_literal_takes_the_first_option_of_each_choice_it_is_offered():
    model = ScriptedBackend("literal")
    assert action(model, [Entry("question", QUESTION)], first_turn=True) == \
        {"tool": "conjugate", "verb": "go", "tense": TENSES[0], "person": PERSON_CHOICES[0]}
    grounds = Grounds(persons=("she",), tenses=("past continuous",), verbs=("swim",))
    assert action(model, [Entry("question", QUESTION)], first_turn=True, grounds=grounds) == \
        {"tool": "conjugate", **CALL}
    pad = pad_after((CALL, "she was swimming (past continuous)"))
    assert action(model, pad, first_turn=False) == {"answer": "she was swimming"}
    offered = Grounds(answer="she swam")  # the answer the turn offers wins over the result in view
    assert action(model, pad, first_turn=False, grounds=offered) == {"answer": "she swam"}


@pytest.mark.parametrize("behaviour", sorted(set(BEHAVIOURS) - {"rambler", "garbler"}))
def test_the_final_round_answers_with_the_latest_result_or_says_there_is_none(behaviour):
    model = ScriptedBackend(behaviour)
    pad = pad_after((CALL, "she swam (past simple)"), (CALL, "she was swimming (past continuous)"),
                    (CALL, "error: no"))
    assert action(model, pad, first_turn=False, final=True) == {"answer": "she was swimming"}
    assert action(model, pad_after((CALL, "error: no")), first_turn=False, final=True) == \
        {"answer": "I could not work it out"}


def test_guess_call_takes_the_longest_tense_named_and_the_first_pronoun_in_the_question():
    assert guess_call("Is it past simple or future continuous of go for I?")["tense"] == "future continuous"
    assert guess_call("What is the past simple of go for they, not he?")["person"] == "they"


def test_a_stand_in_made_without_a_behaviour_is_the_oracle_and_defaults_mean_a_first_ordinary_turn():
    assert ScriptedBackend().name == "scripted:oracle"
    model = ScriptedBackend("rambler")
    assert json.loads(model.next_action([Entry("question", QUESTION)], first_turn=True).text)["tool"] == "conjugate"
    pad = pad_after((CALL, "she was swimming"))
    assert model.next_action(pad, first_turn=False).text.startswith('{"answer": "')  # no partial reply given
    oracle = ScriptedBackend("oracle")
    out = oracle.next_action([Entry("question", QUESTION)], first_turn=True)  # not the final round
    assert json.loads(out.text)["tool"] == "conjugate" and 0 <= out.latency_s < 60


def test_garbler_cycles_through_its_three_garbles_in_order_counting_its_own_turns():
    model = ScriptedBackend("garbler")
    pad = [Entry("question", QUESTION)]
    expected = ['Sure! Here is the action: {"tool": "conjugate"',
                json.dumps({"tool": "conjugate_verb", **CALL}),
                json.dumps({"tool": "conjugate", **CALL, "tense": "yesterday"})]
    for turn in range(4):
        out = reply(model, pad, first_turn=turn == 0)
        assert (out.text, out.finish_reason) == (expected[turn % 3], "stop")
        pad += [Entry("action", out.text), Entry("observation", "error: invalid action")]


@pytest.mark.parametrize("behaviour", ["oracle", "knowall", "literal"])
def test_a_result_with_two_notes_is_answered_without_either(behaviour):
    model = ScriptedBackend(behaviour)
    pad = pad_after((CALL, "she swam (past simple) (irregular)"))
    assert action(model, pad, first_turn=False) == {"answer": "she swam"}


def test_clumsy_answers_a_result_with_two_notes_without_either():
    model = ScriptedBackend("clumsy")
    pad = pad_after(({"verb": "lovingly"}, "error: no")) + [Entry("action", "{}"), Entry("observation", TENSE_LIST),
                                                         Entry("action", "{}"), Entry("observation", "she swam (a) (b)")]
    assert action(model, pad, first_turn=False) == {"answer": "she swam"}


def test_the_final_round_takes_the_last_of_three_results():
    model = ScriptedBackend("oracle")
    pad = pad_after((CALL, "one (a)"), (CALL, "two (b)"), (CALL, "three (c) (d)"))
    assert action(model, pad, first_turn=False, final=True) == {"answer": "three"}


def test_literal_calls_when_the_turn_offers_no_answer_even_after_a_result():
    model = ScriptedBackend("literal")
    pad = pad_after((CALL, "she was swimming"))
    assert action(model, pad, first_turn=False, may_answer=False)["tool"] == "conjugate"
