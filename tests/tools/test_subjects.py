"""Subjects that are no pronouns (tools/subjects.py), and a modal's usual stand-in: what the tool answers."""

from __future__ import annotations

import pytest

from miniagent.tools.conjugation import ConjugationError, modal_stand_in, normalize_person, subject_for
from miniagent.tools.server import ToolInputError, conjugate_text
from miniagent.tools.subjects import person_of_subject


@pytest.mark.parametrize("subject, person", [
    ("the cat", "3rd singular"), ("my sisters", "3rd plural"), ("the children", "3rd plural"),
    ("the people", "3rd plural"), ("these book", "3rd plural"), ("every student", "3rd singular"),
    ("John", "3rd singular"), ("Mrs Smith", "3rd singular"), ("Maria and I", "1st plural"),
    ("my brother and me", "1st plural"), ("you and John", "2nd plural"), ("Peter and Paul", "3rd plural"),
    ("the sheep", "3rd singular"),  # no -s to undo: read as one
    ("my two sisters", "3rd plural"), ("the big dog", "3rd singular"),  # the noun is the last word
    ("Tom And I", "1st plural"),
])
def test_a_subject_has_the_person_its_words_give(subject, person):
    assert person_of_subject(subject) == person == normalize_person(subject)
    assert subject_for(subject) == subject


@pytest.mark.parametrize("words", ["thou", "fourth", "cats", "the", "john", "I", "she", "the cat sat down on a mat",
                                   "the c4t", "Maria and", "and I", "my sister and thou"])
def test_what_is_no_subject_is_refused_naming_the_kinds_of_subject(words):
    assert person_of_subject(words) is None or words in ("I", "she")
    if words not in ("I", "she"):
        with pytest.raises(ConjugationError, match="or a subject such as 'the cat', 'my sisters', 'John'"):
            normalize_person(words)


@pytest.mark.parametrize("args, result", [
    (("sing", "past simple", "the cat"), "the cat sang"),
    (("eat", "present perfect", "my sisters"), "my sisters have eaten"),
    (("go", "past simple", "John"), "John went"),
    (("write", "past simple", "Maria and I"), "Maria and I wrote"),
    (("be", "present simple", "the people"), "the people are"),
    (("be", "past simple", "my brother"), "my brother was"),
    (("run", "present simple", "the dog"), "the dog runs"),
])
def test_the_tool_keeps_the_subject_and_agrees_with_it(args, result):
    assert conjugate_text(*args) == result


@pytest.mark.parametrize("modal, tense, person, sentence", [
    ("must", "present perfect", "he", "In its place English uses 'have to': he has had to."),
    ("can", "future simple", "I", "In its place English uses 'be able to': I will be able to."),
    ("could", "past perfect", "they", "In its place English uses 'be able to': they had been able to."),
    ("may", "past simple", "we", "In its place English uses 'be allowed to': we were allowed to."),
    ("can", "past continuous", "we", "In its place English uses 'be able to', in the simple and perfect tenses."),
    ("should", "future simple", "you", ""), ("would", "past simple", "she", ""), ("go", "past simple", "she", ""),
])
def test_a_modal_with_a_usual_stand_in_names_it_in_the_tense_asked(modal, tense, person, sentence):
    assert modal_stand_in(modal, tense, person) == sentence
    if modal != "go":
        with pytest.raises(ToolInputError) as refused:
            conjugate_text(modal, tense, person)
        assert str(refused.value).startswith(f"'{modal}' is not a verb (it is a modal verb")
        assert str(refused.value).endswith(sentence or "e.g. 'see', 'go', 'be'.")


@pytest.mark.parametrize("args, result", [
    (("eat", "present perfect", "The children"), "The children have eaten"),  # a capital determiner (issue 63)
    (("be", "present simple", "These books"), "These books are"),
    (("walk", "past simple", "the old man and his dog"), "the old man and his dog walked"),  # the longest subject
])
def test_a_capitalised_or_longest_subject_keeps_its_person(args, result):
    assert conjugate_text(*args) == result


def test_a_subject_one_word_longer_than_the_longest_is_none():
    from miniagent.agent.grammar import MAX_SUBJECT_WORDS

    longest = "the old man and his dog"
    assert len(longest.split()) == MAX_SUBJECT_WORDS and person_of_subject(longest) == "3rd plural"
    assert person_of_subject("the old man and his big dog") is None
