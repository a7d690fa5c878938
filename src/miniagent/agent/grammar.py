"""The tutor's vocabulary: the 12 tenses, the 6 persons and the pronouns that name them.

The action schema (what the model may ask for) and the conjugation engine
(what the tool accepts) share these, so they can never disagree.
"""

from __future__ import annotations

TENSES: tuple[str, ...] = (
    "present simple",
    "present continuous",
    "present perfect",
    "present perfect continuous",
    "past simple",
    "past continuous",
    "past perfect",
    "past perfect continuous",
    "future simple",
    "future continuous",
    "future perfect",
    "future perfect continuous",
)

PERSONS: tuple[str, ...] = (
    "1st singular",
    "2nd singular",
    "3rd singular",
    "1st plural",
    "2nd plural",
    "3rd plural",
)

PRONOUNS: dict[str, str] = {
    "I": "1st singular",
    "you": "2nd singular",
    "he": "3rd singular",
    "she": "3rd singular",
    "it": "3rd singular",
    "we": "1st plural",
    "you (plural)": "2nd plural",
    "they": "3rd plural",
}

# Modals have no -ing form or participle, so they cannot fill the 12 tenses.
MODALS = frozenset("can could may might must shall should will would ought".split())

# Words that open a subject that is no pronoun: "the cat", "my sisters", "these books".
DETERMINERS = frozenset("the a an my your his her its our their this that these those some no any all each every "
                        "another both many several few".split())
# Each case of a subject pronoun, and the pronoun of PRONOUNS it is ("me and Maria" is "Maria and I").
SUBJECT_PRONOUNS: dict[str, str] = {"i": "I", "me": "I", "you": "you", "he": "he", "him": "he", "she": "she",
                                    "her": "she", "it": "it", "we": "we", "us": "we", "they": "they", "them": "they"}
MAX_SUBJECT_WORDS = 6


def subject_parts(text: str) -> list[str]:
    """The subjects a coordinated one joins ("Maria and I" -> ["Maria", "I"]); one part for any other."""
    return " ".join(text.split()).replace(" And ", " and ").split(" and ")


def is_subject_phrase(text: str) -> bool:
    """A subject that is no pronoun, by its shape: a determiner and a noun ("the cat"), a name ("John"), or
    several joined by "and" ("Maria and I"). The conjugation tool decides its person."""
    said = text.split()
    if not 1 <= len(said) <= MAX_SUBJECT_WORDS or not all(w.replace("'", "").replace("-", "").isalpha() for w in said):
        return False
    parts = subject_parts(text)
    if len(parts) > 1:
        return all(p.lower() in SUBJECT_PRONOUNS or _one_subject(p.split()) for p in parts)
    return _one_subject(said)


def _one_subject(said: list[str]) -> bool:
    if said[0].lower() in DETERMINERS:
        return len(said) >= 2
    return all(w[0].isupper() for w in said) and said[0].lower() not in SUBJECT_PRONOUNS
