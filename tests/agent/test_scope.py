"""The out-of-grammar guard (agent/scope.py): its unit, and the loop that asks it."""

from __future__ import annotations

import pytest
from helpers import FakeTools, config, scripted

from miniagent.agent.errors import OutOfGrammar, ToolError
from miniagent.agent.grammar import TENSES
from miniagent.agent.loop import grammar_tutor
from miniagent.agent.scope import GrammarScope, language_of, made_up_tense, nearest_tense, refusal_text
from miniagent.agent.trace import Trace
from miniagent.tools.server import ToolInputError, conjugate_text


@pytest.mark.parametrize("question, tense", [
    ("What is the dreaming tense of eat for I?", "dreaming"),
    ("Please conjugate the verb eat lovingly in the dreaming tense", "dreaming"),
    ("Give me the hopeful-tense of run for she.", "hopeful"),
    ("Conjuga 'eat' en el tiempo soñador para 'yo'.", "soñador"),
    ("What is the past simple tense of go for she?", ""),  # a tense word before "tense"
    ("Which tense is 'went'?", ""),
    ("Give the same tense of go for I.", ""),
    ("Tense: past simple. Verb: sell. Subject: we.", ""),
    ("¿En qué tiempo verbal está 'went'?", ""),
    ("What is the past of go for she?", ""),
    ("What is the Past Simple tense of go for she?", ""),  # capitals: a real tense all the same (issue 63)
    ("Conjuga 'eat' en el Tiempo soñador para 'yo'.", "soñador"),
])
def test_a_tense_the_grammar_lacks_is_read_from_the_question(question, tense):
    assert made_up_tense(question) == tense


@pytest.mark.parametrize("question, name, nearest", [
    # issue 62's shapes: a made-up tense named with another noun than "tense"
    ("What is the ancient past of write for they?", "ancient past", "past simple"),
    ("What is the dreaming form of eat for I?", "dreaming form", ""),
    ("Conjugate walk in the sparkly mood for she.", "sparkly mood", ""),
    ("Give me the subjunctive mood of be for I", "subjunctive mood", ""),  # a real mood: not one of the tenses
    ("Can you give me the hyper-conditional mood of walk for we?", "hyper-conditional mood", ""),
    ("¿Cuál es el pretérito galáctico de 'run' para 'yo'?", "pretérito galáctico", "past simple"),
    ("What's the passive voice of write for they?", "passive voice", ""),
    ("What is the distant Future Perfect of go for I?", "distant Future", "future perfect"),
    ("Dame el futuro lejano de 'go' para 'ella'.", "futuro lejano", "future simple"),
    ("What's 'dance' in the sleepy perfect, with my brother as subject?", "sleepy perfect", ""),
    # grammar beyond the twelve tenses, wherever the question names it, with its noun where it has one
    ("Can you give me 'run' in the subjunctive for she?", "subjunctive", ""),
    ("Please show me the conditional perfect of 'go' with we.", "conditional perfect", ""),
    ("JUSSIVE of 'leave' for he??", "JUSSIVE", ""),
    ("¿Cuál es la voz pasiva de 'build' para 'it'?", "voz pasiva", ""),
    ("¿Y en el imperativo? El verbo es 'listen', sujeto: you", "imperativo", ""),
    # the grammar's own words, persons, the request's words: no made-up name
    ("What's the past simple form of 'lend' for they?", "", ""),
    ("What is the -ing form of swim for I?", "", ""),
    ("Give the correct form of go in the past simple for she.", "", ""),
    ("What is the she form of go in the present simple?", "", ""),
    ("¿Qué forma tiene 'worry' en presente continuo con 'yo'?", "", ""),  # "tiene" is followed by the verb
    ("¿Cuál es el pretérito indefinido de 'go' para 'yo'?", "", ""),  # Spanish grammar's own name
    ("he / keep / present simple", "", ""),
    ("What is the Past Simple of go for she?", "", ""),
])
def test_a_tense_named_with_another_noun_must_be_made_of_the_grammars_words(question, name, nearest):
    assert made_up_tense(question) == name
    if name:
        assert nearest_tense(question, name) == nearest


@pytest.mark.parametrize("tense", TENSES)
@pytest.mark.parametrize("template", ["What is the {} form of go for she?", "What is the {} of go for she?",
                                      "Conjugate go in the {} for she.", "What's the {} tense of 'go' for she?"])
def test_every_real_tense_in_the_same_shapes_is_no_made_up_name(tense, template):
    assert made_up_tense(template.format(tense)) == ""


def test_the_no_to_a_made_up_name_offers_the_nearest_real_tense_in_the_learners_language():
    for question, said in [
        ("What is the ancient past of write for they?", "The nearest of them: the past simple."),
        ("¿Cuál es el pretérito galáctico de 'run' para 'yo'?", "El más cercano: el past simple."),
    ]:
        scope = GrammarScope(enabled=True)
        with pytest.raises(OutOfGrammar) as raised:
            scope.start(question)
        assert raised.value.reason.endswith(said) and f"{raised.value.word!r}" in raised.value.reason
    scope = GrammarScope(enabled=True)
    with pytest.raises(OutOfGrammar) as raised:
        scope.start("What's the passive voice of write for they?")
    assert "nearest" not in raised.value.reason and "'passive voice'" in raised.value.reason


def tool_error(verb: str, tense: str = "past simple", person: str = "she") -> ToolError:
    """The error the MCP server's own logic gives for this call, as the client raises it (its refusal as data)."""
    try:
        conjugate_text(verb, tense, person)
    except ToolInputError as err:
        return ToolError(str(err), err.refusal)
    raise AssertionError(f"{verb!r} was conjugated")


def made_up_refusal(word: str) -> ToolError:
    return ToolError(f"'{word}' is not a verb (pretend).", {"code": "not_a_verb", "word": word, "is": ["noun"],
                                                            "text": f"'{word}' is not a verb (pretend)."})


@pytest.mark.parametrize("verb, code", [
    ("blorf", "unknown_word"), ("quickly", "not_a_verb"), ("must", "not_a_verb"), ("comer", "spanish_word"),
    ("beware", "no_full_conjugation"), ("went", None),  # a form of a verb: the model may correct it
])
def test_a_refusal_is_told_from_a_correction_by_its_data_not_its_words(verb, code):
    refusal = tool_error(verb).refusal
    assert (refusal or {}).get("code") == code and (refusal is None or refusal["word"] == verb)


def test_an_error_about_another_argument_is_no_refusal():
    with pytest.raises(ToolInputError) as err:
        conjugate_text("go", "yesterday", "she")
    assert err.value.refusal is None


def test_a_refusal_of_a_kind_this_agent_does_not_know_is_said_in_the_tools_words():
    """A server newer than the agent may refuse for a reason it cannot name: its sentence, never a traceback."""
    refusal = {"code": "archaic", "word": "quoth", "is": [], "text": "'quoth' is archaic."}
    assert refusal_text(refusal, "es") == refusal_text(refusal, "en") == "'quoth' is archaic."
    assert refusal_text({"code": "archaic", "word": "quoth"}, "es") == "'quoth' is not a verb I can conjugate."


@pytest.mark.parametrize("verb, tense, english, spanish", [
    ("comer", "past simple", "'comer' is a Spanish word, not an English verb: I conjugate English verbs.",
     "'comer' es una palabra española, no un verbo inglés: conjugo verbos ingleses."),
    ("must", "present perfect", "'must' is not a verb (it is a modal verb, which has no full conjugation). In its "
     "place English uses 'have to': she has had to.", "'must' no es un verbo (es un verbo modal, que no tiene "
     "conjugación completa). En su lugar, el inglés usa 'have to': she has had to."),
    ("can", "past continuous", "'can' is not a verb (it is a modal verb, which has no full conjugation). In its "
     "place English uses 'be able to', in the simple and perfect tenses.", "'can' no es un verbo (es un verbo "
     "modal, que no tiene conjugación completa). En su lugar, el inglés usa 'be able to', en los tiempos simples "
     "y perfectos."),
    ("wont", "past simple", "'wont' is not a verb (it is a noun or an adjective).",
     "'wont' no es un verbo (es un sustantivo o un adjetivo)."),
    ("beware", "past simple", "'beware' has no past or -ing forms, so it has no full conjugation.",
     "'beware' no tiene pasado ni forma en -ing, así que no tiene conjugación completa."),
    ("blorf", "past simple", "'blorf' is not an English verb I know (it is not in the verb lexicon).",
     "'blorf' no es un verbo inglés que yo conozca (no está en el léxico de verbos)."),
])
def test_a_refusal_is_said_whole_in_the_questions_language(verb, tense, english, spanish):
    """Issue 65: the reason comes in the learner's language, made from the refusal's data; in English it is the
    tool's own sentence, stand-in included."""
    refusal = tool_error(verb, tense).refusal
    assert refusal_text(refusal, "en") == english
    assert refusal_text(refusal, "es") == spanish


@pytest.mark.parametrize("question, language", [
    ("Conjuga 'eat' en el tiempo soñador para 'yo'.", "es"), ("¿Cuál es el pasado de 'go' para ella?", "es"),
    ("What is the past of go for she?", "en"), ("What is the past of 'yo' for she?", "en"),  # one Spanish word
    ("What is the pasado of go para she?", "es"),  # two are enough
])
def test_the_no_is_said_in_the_questions_language(question, language):
    assert language_of(question) == language


def test_the_unit_declines_only_when_every_word_the_question_may_mean_was_refused():
    scope = GrammarScope(enabled=True)
    scope.start("Is quickly or eat the verb in the past simple for she?")  # two words that may be the verb
    scope.saw_error("quickly", tool_error("quickly"))  # one left: the model may try it
    with pytest.raises(OutOfGrammar) as no:
        scope.saw_error("eat", made_up_refusal("eat"))
    assert (no.value.kind, no.value.word) == ("verb", "eat")
    assert "'eat' is not a verb" in no.value.reason


def test_a_quoted_noun_is_declined_though_grounding_also_offers_what_its_ending_may_leave():
    """Grounding offers 'happines' beside 'happiness' (a quoted -s form); the no waits for neither guess."""
    scope = GrammarScope(enabled=True)
    scope.start("¿Cuál es el presente perfecto de 'happiness' para 'ellos'?")
    with pytest.raises(OutOfGrammar):
        scope.saw_error("happiness", tool_error("happiness"))


def test_the_unit_declines_a_refused_word_of_a_question_that_offers_no_verb():
    """Nothing the question says may be its verb ("can" is a word of the request): a refused word of it is enough."""
    scope = GrammarScope(enabled=True)
    scope.start("Can you give the past simple for she?")
    with pytest.raises(OutOfGrammar):
        scope.saw_error("can", tool_error("can"))


def test_the_unit_hears_only_a_refusal_of_the_word_called():
    scope = GrammarScope(enabled=True)
    scope.start("What is the past simple of 'blorf' for she?")
    scope.saw_error("blorf", tool_error("went"))  # a correction, not a no
    scope.saw_error("blorf", ToolError("Unknown tense 'x'. Valid tenses: ..."))  # another argument's error
    scope.saw_error("blurf", tool_error("blorf"))  # not called
    assert scope.refused == set()
    with pytest.raises(OutOfGrammar):
        scope.saw_error("blorf", tool_error("blorf"))


def test_a_scope_that_has_read_no_question_declines_nothing_and_speaks_english():
    scope = GrammarScope(enabled=True)
    scope.saw_error("blorf", tool_error("blorf"))
    assert scope.text("tense", "dreaming").startswith("I cannot answer that: there is no 'dreaming' tense")


def test_the_unit_ignores_a_refused_word_the_question_never_offered():
    scope = GrammarScope(enabled=True)
    scope.start("What is the past simple of go for she?")
    scope.saw_error("quickly", tool_error("quickly"))  # the model's own mistake


def test_the_unit_off_never_declines():
    scope = GrammarScope(enabled=False)
    scope.start("What is the dreaming tense of eat for I?")
    scope.saw_error("blorf", tool_error("blorf"))


def run(question, behaviour="literal", **overrides):
    trace = Trace.memory()
    outcome = grammar_tutor(question, model=scripted(behaviour), tools=FakeTools(), config=config(**overrides),
                            trace=trace)
    return outcome, trace


def test_a_made_up_tense_is_declined_before_any_model_call():
    outcome, trace = run("What is the dreaming tense of eat for I?")
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 0
    assert "there is no 'dreaming' tense" in outcome.answer and f"The 12 I know: {', '.join(TENSES)}." in outcome.answer
    guard = [e for e in trace.events if e["event"] == "guard"]
    assert guard == [{"event": "guard", "name": "out_of_grammar", "kind": "tense", "word": "dreaming",
                      "t": guard[0]["t"]}]
    assert trace.events[-1]["stop_reason"] == "out_of_grammar"


def test_a_word_the_tool_refuses_is_declined_in_the_tools_words_after_one_call():
    outcome, trace = run("What is the past simple of 'blorf' for she?")
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 1
    assert outcome.answer == ("I cannot answer that: 'blorf' is not an English verb I know (it is not in the verb "
                              "lexicon).")
    assert [e["kind"] for e in trace.events if e.get("name") == "out_of_grammar"] == ["verb"]


def test_a_modal_is_declined_with_its_usual_stand_in():
    outcome, _ = run("What's the present perfect of must for he?")
    assert outcome.stop_reason == "out_of_grammar"
    assert outcome.answer.endswith("In its place English uses 'have to': he has had to.")


def test_the_no_is_said_in_spanish_to_a_spanish_question():
    outcome, _ = run("¿Cuál es el pasado simple de 'blorf' para ella?")
    assert outcome.answer == ("No puedo responder a eso: 'blorf' no es un verbo inglés que yo conozca (no está en "
                              "el léxico de verbos).")


def test_a_question_in_the_grammar_is_answered_as_before():
    outcome, trace = run("What is the past simple of go for she?")
    assert (outcome.stop_reason, outcome.answer) == ("answered", "she went")
    assert not [e for e in trace.events if e.get("name") == "out_of_grammar"]


def test_with_the_guard_off_the_forced_choice_answers_a_made_up_tense():
    """What break 16 shows: the schema makes the model pick one of the 12 tenses, and the run says answered."""
    outcome, _ = run("What is the dreaming tense of eat for I?", "knowall", decline_out_of_grammar=False)
    assert outcome.stop_reason == "answered" and outcome.answer == "I ate"


@pytest.mark.parametrize("question, answer", [
    ("Give me the past simple of sing for the cat.", "the cat sang"),
    ("What is the present perfect of eat for my sisters?", "my sisters have eaten"),
    ("What is the past simple of go for John?", "John went"),
    ("Give me the past simple of write for Maria and I.", "Maria and I wrote"),
    ("Conjuga 'sing' en pasado simple para 'the birds'.", "the birds sang"),
])
def test_a_subject_that_is_no_pronoun_is_kept(question, answer):
    outcome, _ = run(question)
    assert (outcome.stop_reason, outcome.answer) == ("answered", answer)


@pytest.mark.parametrize("question, language", [
    ("How tall is Mount Everest?", "en"),  # "mount" is a verb, but nothing asks to conjugate it
    ("Who won the football world cup in 2018?", "en"),
    ("What is the capital of France?", "en"),
    ("Where does she live?", "en"),
    ("¿Cuál es la capital de Francia?", "es"),
])
def test_a_question_with_nothing_to_conjugate_gets_a_no_before_any_model_call(question, language):
    outcome, trace = run(question)
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 0 and not trace_calls(trace)
    said = {"en": "I cannot answer that: I conjugate English verbs, and your question names no tense",
            "es": "No puedo responder a eso: conjugo verbos ingleses, y tu pregunta no nombra ningún tiempo"}
    assert outcome.answer.startswith(said[language])
    assert [e["kind"] for e in trace.events if e.get("name") == "out_of_grammar"] == ["nothing"]


@pytest.mark.parametrize("question", ["Conjugate go for she.", "What is the perfect of go for she?",
                                      "Dame el verbo 'go' para ella."])
def test_a_question_that_names_no_tense_is_asked_which_one_never_answered_in_a_tense_chosen_silently(question):
    outcome, trace = run(question)
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 0
    assert outcome.answer.startswith(("Which tense? Your question names none", "¿En qué tiempo? Tu pregunta"))
    assert f"{', '.join(TENSES)}." in outcome.answer
    assert [e["kind"] for e in trace.events if e.get("name") == "out_of_grammar"] == ["no_tense"]


@pytest.mark.parametrize("question", ["What is the past simple of go for she?", "Conjugate swim in the future "
                                      "continuous for we.", "she / drink / past perfect?", "What is the past of go?"])
def test_a_question_that_asks_for_a_tense_is_not_held_up(question):
    scope = GrammarScope(enabled=True)
    scope.start(question)  # raises nothing


def test_a_spanish_word_is_named_as_such_by_the_tool_and_the_no_says_so():
    outcome, trace = run("¿Cuál es el pasado simple de 'comer' para yo?")
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 1
    assert outcome.answer == ("No puedo responder a eso: 'comer' es una palabra española, no un verbo inglés: "
                              "conjugo verbos ingleses.")  # issue 65: the reason in the question's language too
    english, _ = run("What is the past simple of 'comer' for I?")
    assert english.answer == ("I cannot answer that: 'comer' is a Spanish word, not an English verb: I conjugate "
                              "English verbs.")


def trace_calls(trace) -> list:
    return [e for e in trace.events if e["event"] in ("tool_call", "model_action")]


def test_a_verb_the_tool_refuses_for_having_no_past_gets_the_clear_no_after_one_call():
    """Issue 63: "beware" has no past: the tool's refusal ends the run, not a fallback after retries."""
    outcome, trace = run("What is the past simple of 'beware' for she?")
    assert outcome.stop_reason == "out_of_grammar" and outcome.stats.turns == 1
    assert outcome.answer == ("I cannot answer that: 'beware' has no past or -ing forms, so it has no full "
                              "conjugation.")
