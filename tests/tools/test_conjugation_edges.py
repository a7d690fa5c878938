"""The conjugation engine at its edges: the length limit exactly, whole refusals, the data files, spellings.

Found by ``invoke mutants --wing tools``: test_conjugation checks what the engine conjugates and that it refuses,
rarely the exact limit or the whole of what a refusal says; and its data files are read once per process, before
any test runs, so only a test that reads them again sees a fault in the reading."""

from __future__ import annotations

import re

import pytest

from miniagent.tools import conjugation as cj
from miniagent.tools import lexicon
from miniagent.tools.conjugation import PERSONS, PRONOUNS, TENSES, ConjugationError, validate_verb

LIMIT = cj._MAX_RAW_LEN


def test_a_tense_or_person_padded_to_exactly_the_limit_is_read_and_one_longer_is_refused():
    assert cj.normalize_tense("past simple".ljust(LIMIT)) == "past simple"
    assert cj.normalize_person("she".ljust(LIMIT)) == "3rd singular"
    assert cj.subject_for("she".ljust(LIMIT)) == "she"
    for refuse in (cj.normalize_tense, cj.normalize_person, cj.subject_for):
        value = ("past simple" if refuse is cj.normalize_tense else "she").ljust(LIMIT + 1)
        with pytest.raises(ConjugationError):
            refuse(value)


def test_the_word_tense_in_a_tense_name_is_left_out():
    assert cj.normalize_tense("past simple tense") == "past simple"
    assert cj.normalize_tense("Present Perfect tense") == "present perfect"


@pytest.mark.parametrize("tense, shown", [(5, "<int>"), (None, "<NoneType>"), ("pastish", "'pastish'")])
def test_an_unknown_tense_is_refused_listing_every_tense(tense, shown):
    with pytest.raises(ConjugationError) as refused:
        cj.normalize_tense(tense)
    assert str(refused.value) == f"Unknown tense {shown}. Valid tenses: {', '.join(TENSES)}."


@pytest.mark.parametrize("refuse", [cj.normalize_person, cj.subject_for])
@pytest.mark.parametrize("person, shown", [(5, "<int>"), ([], "<list>"), ("someone", "'someone'")])
def test_an_unknown_person_is_refused_listing_every_person_and_pronoun(refuse, person, shown):
    with pytest.raises(ConjugationError) as refused:
        refuse(person)
    assert str(refused.value) == (f"Unknown person {shown}. Valid persons: {', '.join(PERSONS)}; "
                                  f"or a pronoun: {', '.join(PRONOUNS)}; or a subject such as 'the cat', "
                                  "'my sisters', 'John'.")


def test_the_data_files_are_read_as_tab_separated_rows_under_their_header():
    rows = lexicon._tsv("extra_verbs.tsv", ("verb", "why"))
    assert rows and all(len(row) == 2 and row[0] == row[0].strip().lower() for row in rows)
    assert frozenset(verb for verb, _why in rows) == lexicon._extra_verbs()
    chosen = lexicon._tsv("chosen_forms.tsv", ("verb", "stem", "form", "why"))
    assert {verb for verb, *_ in chosen} == set(lexicon._chosen_forms())


def test_a_data_file_under_another_header_is_refused_naming_the_header_it_must_have():
    with pytest.raises(RuntimeError) as refused:
        lexicon._tsv("extra_verbs.tsv", ("verb", "reason"))
    assert str(refused.value) == "extra_verbs.tsv: header must be 'verb\\treason'"


def test_a_spelling_is_chosen_written_like_the_input_then_starting_like_it():
    assert lexicon._shape("re-re-read") == "--" and lexicon._shape("reread") == ""
    assert lexicon._pick(("re-read", "reread"), "reread") == "reread"
    assert lexicon._pick(("reread", "re-read"), "re-read") == "re-read"
    assert lexicon._pick(("gelled", "jelled"), "jell") == "jelled"
    assert lexicon._pick(("jelled", "gelled"), "gell") == "gelled"
    assert lexicon._pick(("a-b", "ab"), "xy") == "ab"


def test_the_regular_pasts_are_what_ed_makes_with_and_without_a_doubled_consonant():
    assert lexicon._regular_pasts("stop") == {"stoped", "stopped"}
    assert "studied" in lexicon._regular_pasts("study")


def test_the_irregular_verbs_are_plain_words_whose_past_or_participle_is_not_regular():
    table = cj.irregular_verbs()
    assert table["go"] == ("went", "gone") and table["see"] == ("saw", "seen")
    assert "bake" not in table and "stop" not in table
    assert all(re.fullmatch(r"[a-z]+(?:-[a-z]+)*", verb) for verb in table)
    assert all(not {past, participle} <= lexicon._regular_pasts(verb) for verb, (past, participle) in table.items())


@pytest.mark.parametrize("word, says, refusal", [
    ("went", "'went' is the past of 'go'; give the base form 'go'.", None),
    ("am", "'am' is a present form of 'be'; give the base form 'be'.", None),
    ("felt", "'felt' is the past and the past participle of 'feel'; give the base form 'feel'.", None),
    ("beware", "'beware' has no past or -ing forms, so it has no full conjugation.",
     {"code": "no_full_conjugation", "word": "beware", "is": []}),
    ("wont", "'wont' is not a verb (it is a noun or an adjective).",
     {"code": "not_a_verb", "word": "wont", "is": ["noun", "adjective"]}),
    ("quickly", "'quickly' is not a verb (it is an adverb).", {"code": "not_a_verb", "word": "quickly", "is": ["adverb"]}),
    ("quoth", "'quoth' is not an English verb I know (it is not in the verb lexicon).",
     {"code": "unknown_word", "word": "quoth", "is": []}),
    ("comer", "'comer' is a Spanish word, not an English verb: I conjugate English verbs.",
     {"code": "spanish_word", "word": "comer", "is": []}),
    ("the", "'the' is not a verb (it is an article).", {"code": "not_a_verb", "word": "the", "is": ["article"]}),
    ("must", "'must' is not a verb (it is a modal verb, which has no full conjugation).",
     {"code": "not_a_verb", "word": "must", "is": ["modal"]}),
])
def test_a_word_that_is_not_a_base_form_is_refused_saying_what_it_is(word, says, refusal):
    """The message is for the model; the refusal, the same as data, is what the agent's no is made from (a form
    of a known verb is a correction, not a refusal)."""
    with pytest.raises(ConjugationError) as refused:
        cj.validate_verb(word)
    assert (str(refused.value), refused.value.refusal) == (says, refusal)
    assert refusal is None or refusal["code"] in cj.REFUSALS


def test_a_phrasal_verb_given_in_the_past_is_told_its_base_form_with_its_particle():
    with pytest.raises(ConjugationError) as refused:
        cj.validate_verb("went out")
    assert str(refused.value) == "'went' is the past of 'go'; give the base form 'go out'."


@pytest.mark.parametrize("word, past, why", [
    ("redig", "redug", "a prefix and a verb of three letters, the shortest rest a prefix may take"),
    ("re-member", "re-membered", "hyphenated: the joined word is a verb, its last part is not"),
    ("re-fer", "re-ferred", "the joined word's own spelling (its doubled r), hyphenated again"),
    ("double-dry-clean", "double-dry-cleaned", "two hyphens: the last part alone is the verb"),
])
def test_a_word_the_lexicon_lacks_inflects_like_the_verb_it_is_made_of(word, past, why):
    assert lexicon._lexicon_stems(word) is None, "not in the lexicon itself"
    assert lexicon.stems_of(word)["past"] == past, why


def test_a_hyphenated_word_made_of_no_verb_is_not_one():
    assert lexicon.stems_of("zzq-qzz") is None


@pytest.mark.parametrize("rows, says", [
    ([("go", "past", "went", "."), ("go", "past", "gone", ".")], "bad or repeated stem 'past' for 'go'"),
    ([("go", "pluperfect", "went", ".")], "bad or repeated stem 'pluperfect' for 'go'"),
])
def test_a_chosen_form_under_a_stem_that_is_not_one_or_given_twice_is_a_packaging_bug(rows, says, monkeypatch):
    monkeypatch.setattr(lexicon, "_tsv", lambda name, header: rows)
    with pytest.raises(RuntimeError, match=re.escape(f"chosen_forms.tsv: {says}")):
        lexicon._chosen_forms.__wrapped__()  # the cache holds the real file's reading


def test_chosen_forms_of_different_verbs_under_the_same_stem_are_each_kept(monkeypatch):
    monkeypatch.setattr(lexicon, "_tsv", lambda name, header: [("go", "past", "went", "."), ("be", "past", "was", ".")])
    assert lexicon._chosen_forms.__wrapped__() == {"go": {"past": "went"}, "be": {"past": "was"}}


@pytest.mark.parametrize("word", ["comer", "hablar", "ser", "mujer"])
def test_a_spanish_word_is_refused_as_a_spanish_word(word):
    with pytest.raises(ConjugationError, match=f"^'{word}' is a Spanish word, not an English verb: I conjugate "
                                               "English verbs.$"):
        validate_verb(word)


@pytest.mark.parametrize("word, said", [("idea", "'idea' is not a verb (it is a noun)."),  # common in both lists
                                        ("hotel", "'hotel' is not a verb (it is a noun)."),
                                        ("kitchen", "'kitchen' is not a verb (it is a noun).")])
def test_an_english_noun_that_spanish_uses_too_stays_an_english_noun(word, said):
    with pytest.raises(ConjugationError, match=f"^{re.escape(said)}$"):
        validate_verb(word)
