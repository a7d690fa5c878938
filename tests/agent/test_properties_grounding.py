"""Argument grounding as a property: for any question that names its person, tense and verb, in any of the
phrasings learners use, every turn's schema offers the model only those, and after a result only that result.

The questions are generated from phrasings, cases of the pronoun (for I, for me), Spanish and English, quoted and
not; the model keeps to the schema it is given (a decoder's first option), so the property reads what the
decoder was offered, not what a particular model happened to pick."""

from __future__ import annotations

import json

from hypothesis import given, note
from hypothesis import strategies as st

from miniagent.agent.actions import schema_for_turn
from miniagent.agent.config import TutorConfig
from miniagent.agent.grammar import TENSES
from miniagent.agent.loop import GrammarTutor
from miniagent.agent.ports import ModelReply

VERBS = ("go", "see", "take", "sing", "walk", "eat", "swim", "break")  # none ends like an inflection
# Each person, the words that name it (any case), and its Spanish subject pronoun.
CASES = {"I": ("I", "me", "my", "yo"), "you": ("you", "your"), "he": ("he", "him", "él"),
         "she": ("she", "her", "ella"), "it": ("it", "its"), "we": ("we", "us", "nosotros"),
         "they": ("they", "them", "ellos")}
SPANISH_TENSE = {"present": "presente", "past": "pasado", "future": "futuro", "simple": "simple",
                 "continuous": "continuo", "perfect": "perfecto"}


def tense_words(tense: str, how: str) -> str:
    words = tense.split()
    if how == "short" and words[-1] == "simple":  # "the past of go"
        return words[0]
    if how == "reversed" and words[-1] == "simple":  # "simple past"
        return f"simple {words[0]}"
    if how == "progressive":
        return tense.replace("continuous", "progressive")
    if how == "spanish":
        return " ".join(SPANISH_TENSE[w] for w in (words if len(words) == 1 else [words[0], *words[1:]]))
    return tense


@st.composite
def questions(draw) -> tuple[str, str, str, str]:
    """(question, verb, tense, person) in one of the phrasings learners use."""
    verb, tense, person = draw(st.sampled_from(VERBS)), draw(st.sampled_from(TENSES)), draw(st.sampled_from(list(CASES)))
    said = draw(st.sampled_from(CASES[person]))
    spanish = said in ("yo", "él", "ella", "nosotros", "ellos")
    named = tense_words(tense, "spanish" if spanish else draw(st.sampled_from(["as is", "short", "reversed",
                                                                               "progressive"])))
    templates = (["Conjuga '{verb}' en {tense} para '{who}'.", "¿Cuál es el {tense} de {verb} para {who}?"]
                 if spanish else
                 ["What is the {tense} of {verb} for {who}?", "Conjugate {verb} in the {tense} for {who}.",
                  "{Tense} of '{verb}' with {who}, please.", "Can you tell me the {tense} of \"{verb}\" for {who}?"])
    template = draw(st.sampled_from(templates))
    question = template.format(verb=verb, tense=named, Tense=named[:1].upper() + named[1:], who=said)
    return question, verb, tense, person


class KeepsToTheSchema:
    """A model under a grammar: it takes the first option of every choice its turn's schema offers."""

    name = "schema-first"

    def __init__(self) -> None:
        self.schemas: list[dict] = []

    def next_action(self, scratchpad, *, first_turn, may_answer=None, partial="", timeout_s=None, final=False,
                    grounds=None) -> ModelReply:
        schema = schema_for_turn(first_turn, may_answer, final, grounds)
        self.schemas.append(schema)
        branch = schema["anyOf"][-1]  # the answer when it is offered, else list_tenses... so take conjugate first
        if not any("answer" in b["properties"] for b in schema["anyOf"]) or len(self.schemas) == 1:
            branch = schema["anyOf"][0]
        props = branch["properties"]
        if "answer" in props:
            action = {"answer": props["answer"].get("enum", ["made up"])[0]}
        else:
            action = {"tool": "conjugate", "verb": props["verb"].get("enum", ["whatever"])[0],
                      "tense": props["tense"]["enum"][0], "person": props["person"]["enum"][0]}
        return ModelReply(json.dumps(action), "stop", 1, 1, 0.0)

    def close(self) -> None:
        pass


class Tools:
    def call(self, tool, args, timeout=None):
        return f"{args['person']} did {args['verb']} ({args['tense']})"


@given(questions())
def test_each_turn_offers_only_the_person_tense_and_verb_the_question_names_and_then_only_the_result(asked):
    """Every turn offers the model only the person, tense and verb the question names, and after a result only that result.

    (es) Cada turno ofrece al modelo solo la persona, el tiempo y el verbo que nombra la pregunta, y tras un resultado solo ese resultado.
    """
    question, verb, tense, person = asked
    note("counterexample-json: " + json.dumps({
        "en": f"The question “{question}”, which names the person {person}, the tense {tense} and the verb {verb}.\n"
              "A model that takes the first option of every choice its turn's schema offers.",
        "es": f"La pregunta «{question}», que nombra la persona {person}, el tiempo {tense} y el verbo {verb}.\n"
              "Un modelo que toma la primera opción de cada elección que le ofrece el esquema de su turno.",
    }, ensure_ascii=False))
    model = KeepsToTheSchema()
    outcome = GrammarTutor(model, Tools(), TutorConfig()).run(question)
    assert outcome.stop_reason == "answered", outcome.answer
    first, then = model.schemas[0]["anyOf"][0]["properties"], model.schemas[1]["anyOf"]
    offered = {"person": first["person"].get("enum"), "tense": first["tense"].get("enum"),
               "verb": first["verb"].get("enum")}
    assert offered == {"person": [person], "tense": [tense], "verb": [verb]}, f"turn 1 offered {offered}"
    answers = [b["properties"]["answer"].get("enum") for b in then if "answer" in b["properties"]]
    assert answers == [[f"{person} did {verb} ({tense})"]], f"after the result, the answer offered was {answers}"
