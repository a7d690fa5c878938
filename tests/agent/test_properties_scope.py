"""The out-of-grammar guard as a property: for any question outside the grammar, in the phrasings learners use,
the run ends ``out_of_grammar`` within two turns, naming what the grammar lacks, and states no form as an answer.

The questions are generated: a made-up tense name, or a word that is no verb (a made-up word, a noun, an
adjective, an adverb, a modal), English and Spanish. The model keeps to the schema it is given (the first
option of every choice), the tools are the conjugation server's own logic, in-process."""

from __future__ import annotations

import json

from helpers import FakeTools
from hypothesis import assume, given, note
from hypothesis import strategies as st

from miniagent.agent.config import TutorConfig
from miniagent.agent.grammar import MODALS, TENSES
from miniagent.agent.grounding import NOT_VERBS as NOT_VERBS_OF_THE_REQUEST
from miniagent.agent.grounding import PERSON_WORDS, TENSE_WORDS
from miniagent.agent.loop import GrammarTutor
from miniagent.tools.conjugation import ConjugationError, validate_verb

from test_properties_grounding import KeepsToTheSchema

NOT_VERBS = ("kitchen", "idea", "apple", "happy", "tall", "beautiful", "quickly", "slowly", "often", "very")
SUBJECTS = ("I", "you", "she", "we", "they", "my sisters", "the cat")
ENGLISH = ("What is the {tense} of {verb} for {who}?", "Conjugate {verb} in the {tense} for {who}.",
           "Give me the {tense} of '{verb}' for {who}.")
SPANISH = ("Conjuga '{verb}' en {tense} para '{who}'.", "¿Cuál es el {tense} de '{verb}' para '{who}'?")
SPANISH_TENSES = {"past simple": "pasado simple", "present perfect": "presente perfecto",
                  "future simple": "futuro simple"}
ENGLISH_NOUNS = ("tense", "form", "mood", "voice", "aspect", "past", "present", "future")
SPANISH_NOUNS = ("tiempo", "forma", "modo", "pretérito", "pasado", "presente", "futuro")
NOT_GRAMMAR_WORDS = NOT_VERBS_OF_THE_REQUEST | set(PERSON_WORDS)  # a made-up name is none of these


def refused(word: str) -> bool:
    """The tool refuses it as no verb it knows (a made-up word may still be a verb: "blink" is)."""
    try:
        validate_verb(word)
    except ConjugationError as err:
        return err.refusal is not None and err.refusal["word"] == word
    return False


made_up_words = st.text(alphabet="bdfgklmnprstvz", min_size=2, max_size=3).flatmap(
    lambda consonants: st.sampled_from("aeiou").map(lambda v: consonants[0] + v + consonants[1:] + "le"))


def asked_of_the_loop(question: str, tools: FakeTools, en: str, es: str):
    """The loop's run of ``question``; what the world was, in both languages, for `invoke counterexamples`."""
    note("counterexample-json: " + json.dumps({
        "en": f"{en}\nA model that takes the first option of every choice its turn's schema offers.",
        "es": f"{es}\nUn modelo que toma la primera opción de cada elección que le ofrece el esquema de su turno.",
    }, ensure_ascii=False))
    return GrammarTutor(KeepsToTheSchema(), tools, TutorConfig()).run(question)


@st.composite
def outside(draw) -> tuple[str, str, str]:
    """(question, what its "no" names, kind): a made-up tense, or a word that is no verb."""
    kind = draw(st.sampled_from(["tense", "verb"]))
    spanish = draw(st.booleans())
    who = draw(st.sampled_from(SUBJECTS))
    if kind == "tense":
        name = draw(st.sampled_from(("dreaming", "hopeful", "magical", "purple", "sleepy", "quantum")) | made_up_words)
        assume(name not in TENSE_WORDS and name not in NOT_GRAMMAR_WORDS)
        # named as "X tense" / «tiempo X», or with another noun: "the X past", "the X mood", «el pretérito X»
        noun = draw(st.sampled_from(SPANISH_NOUNS if spanish else ENGLISH_NOUNS))
        tense = f"{noun} {name}" if spanish else f"{name} {noun}"
        name = name if noun in ("tense", "tiempo") else tense
        verb = draw(st.sampled_from(("eat", "go", "sing")))
    else:
        name = draw(st.sampled_from(NOT_VERBS + tuple(sorted(MODALS))) | made_up_words)
        assume(refused(name))
        real = draw(st.sampled_from(TENSES[4:5] + TENSES[2:3] + TENSES[8:9]))
        tense, verb = (SPANISH_TENSES[real] if spanish else real), name
    template = draw(st.sampled_from(SPANISH if spanish else ENGLISH))
    who = {"I": "yo", "you": "tú", "she": "ella", "we": "nosotros", "they": "ellos"}.get(who, who) if spanish else who
    return template.format(tense=tense, verb=verb, who=who), name, kind


@given(outside())
def test_a_question_outside_the_grammar_gets_a_no_that_names_what_it_lacks_and_never_a_form(asked):
    """A question outside the grammar ends out_of_grammar within two turns, naming what the grammar lacks, and states no form.

    (es) Una pregunta fuera de la gramática termina en out_of_grammar en dos turnos como mucho, nombra lo que le falta
    a la gramática y no afirma ninguna forma.
    """
    question, name, kind = asked
    what = {"tense": ("a tense the grammar lacks", "un tiempo que la gramática no tiene"),
            "verb": ("a word that is no verb the tool knows", "una palabra que no es un verbo que conozca la herramienta")}
    tools = FakeTools()
    outcome = asked_of_the_loop(question, tools, f"The question “{question}”: {what[kind][0]}, “{name}”.",
                                f"La pregunta «{question}»: {what[kind][1]}, «{name}».")
    assert outcome.stop_reason == "out_of_grammar", f"ended {outcome.stop_reason}: {outcome.answer!r}"
    assert outcome.stats.turns <= 2 and f"'{name.lower()}'" in outcome.answer.lower(), outcome.answer
    assert len(tools.calls) == (0 if kind == "tense" else 1), "the no comes from the question, or the tool's refusal"


REAL_SHAPES = ("What is the {tense} of {verb} for {who}?", "What is the {tense} form of '{verb}' for {who}?",
               "Conjugate {verb} in the {tense} for {who}.", "Give me {verb}, {tense}, {who}.")


@given(st.sampled_from(TENSES), st.sampled_from(REAL_SHAPES), st.sampled_from(("eat", "go", "sing", "walk")),
       st.sampled_from(("I", "you", "she", "we", "they")))
def test_every_real_tense_in_the_shapes_of_the_made_up_ones_is_answered(tense, shape, verb, who):
    """A real tense, written where the made-up names stand, is answered: the guard reads names, not shapes."""
    question = shape.format(tense=tense, verb=verb, who=who)
    outcome = GrammarTutor(KeepsToTheSchema(), FakeTools(), TutorConfig()).run(question)
    assert outcome.stop_reason == "answered", f"{question!r} ended {outcome.stop_reason}: {outcome.answer!r}"


TRIVIA = ("What is the {noun} of {place}?", "How {adjective} is {place}?", "Who won the {noun} in {year}?",
          "¿Cuál es la {noun} de {place}?", "Tell me about {place}.")


@given(st.sampled_from(TRIVIA), st.sampled_from(("capital", "population", "height", "cup", "mount", "river")),
       st.sampled_from(("France", "Mount Everest", "the moon", "Madrid", "my town")),
       st.sampled_from(("tall", "old", "big", "far")), st.integers(1900, 2030))
def test_a_question_with_nothing_to_conjugate_is_declined_before_any_call(shape, noun, place, adjective, year):
    """Nothing to conjugate (no tense named, no conjugation asked for): a no before any model or tool call.

    (es) Nada que conjugar (ningún tiempo nombrado, ninguna conjugación pedida): un no antes de llamar al modelo o
    a una herramienta.
    """
    question = shape.format(noun=noun, place=place, adjective=adjective, year=year)
    tools = FakeTools()
    outcome = asked_of_the_loop(question, tools, f"The question “{question}”: nothing to conjugate.",
                                f"La pregunta «{question}»: nada que conjugar.")
    assert outcome.stop_reason == "out_of_grammar", f"ended {outcome.stop_reason}: {outcome.answer!r}"
    assert outcome.stats.turns == 0 and tools.calls == []
    assert "I conjugate English verbs" in outcome.answer or "conjugo verbos ingleses" in outcome.answer
