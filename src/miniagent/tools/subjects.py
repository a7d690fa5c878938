"""Subjects that are no pronouns: "the cat", "my sisters", "John", "Maria and I".

The person of such a subject decides the verb's agreement (the cat sings, my sisters sing); the answer keeps the
subject as the learner wrote it. A noun's number comes from lemminflect's lexicon (sisters -> sister: plural).
"""

from __future__ import annotations

from ..agent.grammar import DETERMINERS, PRONOUNS, SUBJECT_PRONOUNS, is_subject_phrase, subject_parts
from .lexicon import library

_PLURAL_DETERMINERS = frozenset("these those both many several few".split())
# Nouns that are plural without an -s the lexicon can undo ("the people were").
_PLURAL_ONLY = frozenset("people police cattle clothes scissors trousers jeans glasses".split())


def person_of_subject(subject: str) -> str | None:
    """The person label ("3rd plural") of a noun-phrase, name or coordinated subject, or None if it is none."""
    if not isinstance(subject, str) or not is_subject_phrase(subject):
        return None
    parts = subject_parts(subject)
    if len(parts) > 1:  # "Maria and I": 1st plural; "you and John": 2nd; "John and Maria": 3rd
        return f"{min(_ordinal(part) for part in parts)} plural"
    said = subject.split()
    if said[0].lower() in DETERMINERS:  # "the cat", "my sisters"; a name is 3rd singular
        return "3rd plural" if said[0].lower() in _PLURAL_DETERMINERS or _is_plural_noun(said[-1].lower()) \
            else "3rd singular"
    return "3rd singular"


def _ordinal(part: str) -> str:
    """"1st" for I or me, "2nd" for you, "3rd" for any other pronoun, name or noun phrase."""
    pronoun = SUBJECT_PRONOUNS.get(part.lower())
    return PRONOUNS[pronoun].split()[0] if pronoun else "3rd"


def _is_plural_noun(word: str) -> bool:
    if word in _PLURAL_ONLY:
        return True
    lemmas = library().getAllLemmas(word).get("NOUN", ())
    return bool(lemmas) and word not in lemmas
