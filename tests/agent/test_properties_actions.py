"""What the loop accepts from a model: the schema each turn offers and the parser of actions, on generated
actions (valid ones read back as written, broken ones refused saying why).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from miniagent.agent.actions import NEXT_ACTION_SCHEMA, PERSON_CHOICES, Action, InvalidAction, parse_action, schema_for_turn
from miniagent.agent.grammar import TENSES


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
    assert set(branches) - {"answer"} == (set() if final else {"conjugate", "list_tenses"})
    if not final:
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
