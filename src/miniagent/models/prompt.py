"""The few-shot prompt for a small base model, rendered exactly like a live scratchpad.

The examples are conversations in the same ``Q: / A: / O:`` format the loop
produces, rendered by the same function, so the model sees one format only.
No example uses a question or a verb from any eval set in ``labs/``.
"""

from __future__ import annotations

import json

from ..agent.grammar import TENSES
from ..agent.ports import Entry

INTRO = (
    "A grammar tutor answers questions about English verb forms. It always calls the conjugate tool "
    "first, with the verb, the tense and the person the question asks for, then answers with the "
    "tool's result.\n"
    f"Tenses: {', '.join(TENSES)}.\n"
    "Persons: I, you, he, she, it, we, they. The person is the pronoun the question names, copied as it is: "
    "a question for I (or yo) asks for \"person\": \"I\", a question for it asks for \"person\": \"it\", "
    "a question for you asks for \"person\": \"you\".\n"
    "Spanish words: presente = present, pasado = past, futuro = future, simple = simple, "
    "continuo = continuous, perfecto = perfect; yo = I, tú = you, usted = you, él = he, ella = she, "
    "nosotros = we, vosotros = you, ustedes = you, ellos = they, ellas = they.\n\n"
)

ROLE_PREFIX = {"question": "Q: ", "action": "A: ", "observation": "O: "}


def _call(verb: str, tense: str, person: str, steps: int | None = None) -> str:
    payload = {"tool": "conjugate", "verb": verb, "tense": tense, "person": person}
    if steps is not None:
        payload["steps"] = steps
    return json.dumps(payload, ensure_ascii=False)


def _answer(text: str) -> str:
    return json.dumps({"answer": text}, ensure_ascii=False)


def _one_call(question: str, verb: str, tense: str, person: str, result: str) -> list[Entry]:
    return [Entry("question", question), Entry("action", _call(verb, tense, person, 1)),
            Entry("observation", result), Entry("action", _answer(result))]


# The single calls cover 11 tenses (the twelfth, past simple, is the three-call example's) and all 7 persons,
# with varied phrasings.
# Order matters to a base model: it leans towards the last examples (recency).
# Moving the multi-call and error examples first (so that varied single calls
# come last) scored worse on held-out questions, so they stay at the end.
def examples() -> list[list[Entry]]:
    """The few-shot conversations, built afresh (EXAMPLES holds them once)."""
    return [
        _one_call("What is the present perfect of sing for they?", "sing", "present perfect", "they",
                  "they have sung"),
        _one_call("Conjugate open in the past continuous for I.", "open", "past continuous", "I",
                  "I was opening"),
        _one_call("Give me the future perfect continuous of walk for he.", "walk", "future perfect continuous",
                  "he", "he will have been walking"),
        _one_call("Conjuga 'choose' en futuro simple para 'ella'.", "choose", "future simple", "she",
                  "she will choose"),
        _one_call("Present simple of cook, we?", "cook", "present simple", "we", "we cook"),
        _one_call("How do you say ride in the past perfect continuous with you?", "ride", "past perfect continuous",
                  "you", "you had been riding"),
        _one_call("kick / past perfect / it", "kick", "past perfect", "it", "it had kicked"),
        _one_call("Which form of 'bake' fits 'I' in the present continuous?", "bake", "present continuous", "I",
                  "I am baking"),
        _one_call("Verb: dig. Person: she. Tense: future perfect.", "dig", "future perfect", "she",
                  "she will have dug"),
        _one_call("Conjuga 'sew' en presente perfecto continuo con 'yo'.", "sew", "present perfect continuous", "I",
                  "I have been sewing"),
        _one_call("Turn 'we fight' into the future continuous.", "fight", "future continuous", "we",
                  "we will be fighting"),
        [
            Entry("question", "Conjugate dance, paint and draw in the past simple for I."),
            Entry("action", _call("dance", "past simple", "I", 3)),
            Entry("observation", "I danced"),
            Entry("action", _call("paint", "past simple", "I")),
            Entry("observation", "I painted"),
            Entry("action", _call("draw", "past simple", "I")),
            Entry("observation", "I drew"),
            Entry("action", _answer("I danced, I painted, I drew")),
        ],
        [
            Entry("question", "What is the future simple of quickly for it?"),
            Entry("action", _call("quickly", "future simple", "it", 1)),
            Entry("observation", "error: 'quickly' is not a verb: give the base form of an English verb"),
            Entry("action", _answer("'quickly' is not a verb. Ask about a verb, for example: "
                                    "future simple of run for it.")),
        ],
    ]


EXAMPLES = examples()


def render(entries: list[Entry]) -> str:
    # One line per entry: a newline inside an observation would break the format.
    return "".join(ROLE_PREFIX[e.role] + " ".join(e.text.split("\n")) + "\n" for e in entries)


HEADER = INTRO + "".join(render(conversation) + "\n" for conversation in EXAMPLES)
NEXT_ACTION = ROLE_PREFIX["action"]
CONTENT_FREE_QUESTION = "N/A"  # calibration input: tells us each option's prior
