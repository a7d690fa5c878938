"""English verb conjugation: 12 tenses x 6 persons, on the forms of a verb lexicon.

The tutor's tool calls land here, so every input is untrusted: tense, person and verb are validated and
normalised first, and every error is a ``ConjugationError`` that says what would have been accepted.  The
stems come from :mod:`miniagent.tools.lexicon`.
"""

from __future__ import annotations

import functools
import re

from ..agent.grammar import MODALS, PERSONS, PRONOUNS, TENSES
from .lexicon import PARTICLES, TAGS, irregular_verbs, library, preload, stems_of
from .subjects import person_of_subject

__all__ = [
    "TENSES",
    "PERSONS",
    "PRONOUNS",
    "ConjugationError",
    "normalize_tense",
    "normalize_person",
    "validate_verb",
    "conjugate",
    "subject_for",
    "modal_stand_in",
    "modal_stand_in_parts",
    "stand_in_sentence",
    "irregular_verbs",
    "preload",
]

# The pronoun printed for a canonical label (he stands in for he/she/it).
_DEFAULT_SUBJECT = {
    "1st singular": "I",
    "2nd singular": "you",
    "3rd singular": "he",
    "1st plural": "we",
    "2nd plural": "you",
    "3rd plural": "they",
}

MAX_VERB_LEN = 30
# Anything longer than this is rejected before any other work, so a huge
# argument costs O(1) instead of being stripped, lowercased and regex-matched.
_MAX_RAW_LEN = 64


# The caller is often a small model: a message that names what is accepted lets it correct itself next turn.
class ConjugationError(ValueError):
    """Bad verb, tense or person. The message says what is accepted instead; ``refusal``, for a word refused as
    no verb the tool knows, says the same as data (what the agent's "no" is made from, in any language)."""

    def __init__(self, message: str, refusal: dict | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal  # {"code": ..., "word": ..., "is": [kinds of word]} (REFUSALS)


# Why a word is no verb to conjugate, as ``ConjugationError.refusal["code"]``: what it is instead ("is": modal,
# article, pronoun, preposition, conjunction, determiner, adverb, noun, name, adjective), a Spanish word, a verb
# with no past or -ing forms, or a word the verb lexicon lacks.
REFUSALS = ("not_a_verb", "spanish_word", "no_full_conjugation", "unknown_word")


def _show(value: str, limit: int = 40) -> str:
    """Quote user input for an error message without echoing a 10 KB blob."""
    text = value if len(value) <= limit else value[:limit] + "..."
    return repr(text)


# --------------------------------------------------------------------------
# Tense and person normalisation
# --------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """Lowercase words; hyphens, underscores and parentheses count as spaces."""
    return re.sub(r"[-_()]", " ", text.lower()).split()


# Tenses are matched on their *set* of words, so "simple past", "past simple"
# and "Past  Simple" all hit the same entry; every tense has a distinct set.
_TENSE_BY_WORDS = {frozenset(t.split()): t for t in TENSES}
# "progressive" is the other common grammar-book name for "continuous".
_TENSE_SYNONYMS = {"progressive": "continuous"}


def normalize_tense(tense: str) -> str:
    """Map a user-supplied tense name to one of TENSES."""
    if isinstance(tense, str) and len(tense) <= _MAX_RAW_LEN:
        words = [_TENSE_SYNONYMS.get(w, w) for w in _words(tense) if w != "tense"]
        # len check: duplicate words ("past past simple") must not collapse to a match.
        if len(words) == len(set(words)):
            found = _TENSE_BY_WORDS.get(frozenset(words))
            if found:
                return found
    shown = _show(tense) if isinstance(tense, str) else f"<{type(tense).__name__}>"
    raise ConjugationError(f"Unknown tense {shown}. Valid tenses: {', '.join(TENSES)}.")


_ORDINALS = {
    "1st": "1st", "first": "1st", "1": "1st",
    "2nd": "2nd", "second": "2nd", "2": "2nd",
    "3rd": "3rd", "third": "3rd", "3": "3rd",
}
_NUMBERS = {"singular": "singular", "sg": "singular", "plural": "plural", "pl": "plural"}
_PRONOUN_INDEX = {" ".join(_words(p)): p for p in PRONOUNS}  # "you plural" -> "you (plural)"


def _pronoun_key(person: str) -> str | None:
    """The PRONOUNS key a user string refers to, if it is a pronoun."""
    return _PRONOUN_INDEX.get(" ".join(_words(person)))


def normalize_person(person: str) -> str:
    """Map a label ("3rd person singular", "third singular"), a pronoun or a subject ("my sisters") to PERSONS."""
    if isinstance(person, str) and len(person) <= _MAX_RAW_LEN:
        pronoun = _pronoun_key(person)
        if pronoun:
            return PRONOUNS[pronoun]
        words = [w for w in _words(person) if w != "person"]
        if len(words) == 2 and words[0] in _ORDINALS and words[1] in _NUMBERS:
            return f"{_ORDINALS[words[0]]} {_NUMBERS[words[1]]}"
        label = person_of_subject(person)
        if label:
            return label
    shown = _show(person) if isinstance(person, str) else f"<{type(person).__name__}>"
    raise ConjugationError(
        f"Unknown person {shown}. Valid persons: {', '.join(PERSONS)}; "
        f"or a pronoun: {', '.join(PRONOUNS)}; or a subject such as 'the cat', 'my sisters', 'John'."
    )


def subject_for(person: str) -> str:
    """The subject to print before the verb phrase: the pronoun, or the subject as given ("my sisters")."""
    short = isinstance(person, str) and len(person) <= _MAX_RAW_LEN
    pronoun = _pronoun_key(person) if short else None
    if pronoun:
        # "I" keeps its capital; "you (plural)" is still just "you" in a sentence.
        return "you" if pronoun == "you (plural)" else pronoun
    if short and person_of_subject(person):
        return " ".join(person.split())
    return _DEFAULT_SUBJECT[normalize_person(person)]


# --------------------------------------------------------------------------
# Verb validation
# --------------------------------------------------------------------------

_WORD_RE = re.compile(r"[a-z]+(?:-[a-z]+)*(?: [a-z]+)*")  # only ever run on <= 30 chars


# Closed-class words that are never verbs, with the reason shown to the user.
# Checked after the lexicon: a word it knows as a verb (mine, up, still) is one.
_NOT_VERBS: dict[str, str] = {}
for _kind, _list in {
    "an article": "a an the",
    "a pronoun": (
        "i me my mine myself you your yours yourself yourselves he him his himself "
        "she her hers herself it its itself we us our ours ourselves they them their "
        "theirs themselves who whom whose what which someone somebody something "
        "anyone anybody anything everyone everybody everything nobody nothing"
    ),
    "a preposition": (
        "of in on at by for with from to into onto about above below under over "
        "between among through during before after against without within upon "
        "toward towards across behind beyond beneath beside besides via despite"
    ),
    "a conjunction": "and or but nor if because although though unless whether than",
    "a determiner": (
        "this that these those some any every each either neither all both many "
        "much few several another such no"
    ),
    "an adverb": "not very too also here there when where why how then now never always often",
}.items():
    for _w in _list.split():
        _NOT_VERBS[_w] = _kind
del _kind, _list, _w

# How an error names a form, by its lemminflect tag.
_FORM_NAMES = {
    "VBD": "the past",
    "VBN": "the past participle",
    "VBG": "the -ing form",
    "VBZ": "the he/she/it form",
    "VBP": "a present form",
}
_POS_NAMES = {"NOUN": "a noun", "PROPN": "a name", "ADJ": "an adjective", "ADV": "an adverb"}


def _refused(code: str, word: str, *kinds: str) -> dict:
    return {"code": code, "word": word, "is": [kind.split()[-1] for kind in kinds]}  # "a noun" -> "noun"


def _what_it_is(word: str, particles: str = "") -> tuple[str, dict | None]:
    """Why ``word`` is not a verb's base form: the error message's text, and the refusal it is (None where the
    word is a form of a verb the message names: a correction, not a refusal)."""
    if word in _NOT_VERBS:
        return f"{word!r} is not a verb (it is {_NOT_VERBS[word]}).", _refused("not_a_verb", word, _NOT_VERBS[word])
    if is_spanish_word(word):
        return (f"{word!r} is a Spanish word, not an English verb: I conjugate English verbs.",
                _refused("spanish_word", word))
    lib = library()
    lemmas = lib.getAllLemmas(word)  # loads the lemma table: only ever on this error path
    found = []
    for lemma in dict.fromkeys(lemmas.get("VERB", ()) + lemmas.get("AUX", ())):
        if lemma == word:
            continue
        ours = stems_of(lemma) or {}
        tags = [tag for tag, spellings in lib.getAllInflections(lemma, "VERB").items()
                if word in spellings and tag in _FORM_NAMES]
        tags += [TAGS[stem] for stem, form in ours.items() if form == word and TAGS[stem] not in tags]
        names = [_FORM_NAMES[t] for t in _FORM_NAMES if t in tags] or ["a form"]
        found.append((" and ".join(names), lemma))
    if found:
        what = " or ".join(f"{names} of {lemma!r}" for names, lemma in found)
        bases = " or ".join(repr(lemma + particles) for _names, lemma in found)
        return f"{word!r} is {what}; give the base form {bases}.", None
    if word in lemmas.get("VERB", ()):
        return (f"{word!r} has no past or -ing forms, so it has no full conjugation.",
                _refused("no_full_conjugation", word))
    kinds = [_POS_NAMES[pos] for pos in _POS_NAMES if pos in lemmas]
    if kinds:
        return f"{word!r} is not a verb (it is {' or '.join(kinds)}).", _refused("not_a_verb", word, *kinds)
    return (f"{word!r} is not an English verb I know (it is not in the verb lexicon).",
            _refused("unknown_word", word))


# A word is Spanish where Spanish text uses it and English text all but never does ("comer", "mar"), measured by
# word frequency in each language's lists: "idea" or "hotel", common in both, stay English nouns.
SPANISH_AT_LEAST, ENGLISH_BELOW = 1e-6, 1e-6


def is_spanish_word(word: str) -> bool:
    spanish, english = _word_frequencies()
    return spanish.word_usage_frequency(word) >= SPANISH_AT_LEAST and english.word_usage_frequency(word) < ENGLISH_BELOW


@functools.lru_cache(maxsize=1)
def _word_frequencies():
    """pyspellchecker's Spanish and English word lists (0.3 s to load: only ever on this error path)."""
    from spellchecker import SpellChecker

    return SpellChecker(language="es", distance=1), SpellChecker(language="en", distance=1)


# The usual stand-in for a modal in the tenses it lacks: "must" -> "have to" (he has had to).
_MODAL_STAND_INS = {"can": "be able to", "could": "be able to", "must": "have to", "may": "be allowed to",
                    "might": "be allowed to"}


def modal_stand_in_parts(verb: str, tense: str, person: str) -> dict:
    """For a modal that has a usual stand-in: {"instead": "have to", "example": "he has had to"} (no example where
    the tense asked for has none: "we were being able to" is no English); else {}."""
    word = verb.strip().lower() if isinstance(verb, str) else ""
    if word not in _MODAL_STAND_INS:
        return {}
    head, _, rest = _MODAL_STAND_INS[word].partition(" ")
    if head == "be" and "continuous" in normalize_tense(tense):
        return {"instead": _MODAL_STAND_INS[word], "example": ""}
    return {"instead": _MODAL_STAND_INS[word], "example": f"{subject_for(person)} {conjugate(head, tense, person)} {rest}"}


def modal_stand_in(verb: str, tense: str, person: str) -> str:
    """For a modal that has a usual stand-in, a sentence giving it in the tense asked for; else ""."""
    return stand_in_sentence(modal_stand_in_parts(verb, tense, person))


def stand_in_sentence(parts: dict) -> str:
    """The English sentence for :func:`modal_stand_in_parts`' data ("" for none)."""
    if not parts:
        return ""
    if not parts["example"]:
        return f"In its place English uses {parts['instead']!r}, in the simple and perfect tenses."
    return f"In its place English uses {parts['instead']!r}: {parts['example']}."


def _check_word(word: str, particles: str = "") -> None:
    """Raise unless ``word`` (one word, letters and hyphens) is a verb's base form."""
    if word in MODALS:  # before the lexicon, which also lists 'can' (put in cans) and 'will' (bequeath)
        raise ConjugationError(f"{word!r} is not a verb (it is a modal verb, which has no full conjugation).",
                               _refused("not_a_verb", word, "modal"))
    if stems_of(word) is None:
        raise ConjugationError(*_what_it_is(word, particles))


def validate_verb(verb: str) -> str:
    """Return the clean lowercase base form, or raise ConjugationError.

    One verb ("go", "dry-clean") or a phrasal verb ("give up", "give-up"),
    returned as the engine conjugates it ("give up").
    """
    if not isinstance(verb, str):
        raise ConjugationError(f"The verb must be text, not {type(verb).__name__}.")
    too_long = f"The verb is too long (max {MAX_VERB_LEN} letters); give one word like 'go'."
    if len(verb) > _MAX_RAW_LEN:
        raise ConjugationError(too_long)
    word = " ".join(verb.lower().split())
    word = re.sub(r"^to ", "", word)  # "to go" -> "go"
    if not word:
        raise ConjugationError("The verb is empty; give one word like 'go'.")
    if len(word) > MAX_VERB_LEN:
        raise ConjugationError(too_long)
    not_one_verb = (
        f"{_show(verb.strip())} is not a single word; give one verb in letters only, like 'go', "
        "or a phrasal verb, like 'give up'."
    )
    if not _WORD_RE.fullmatch(word):
        raise ConjugationError(not_one_verb)
    first, *rest = word.split(" ")
    head, *parts = first.split("-")
    if not rest and parts and all(p in PARTICLES for p in parts) and stems_of(head):
        # give-up, log-in: a verb and its particles, hyphenated; conjugated as "give up"
        first, rest = head, parts
    if any(p not in PARTICLES for p in rest):
        raise ConjugationError(not_one_verb)
    _check_word(first, "".join(" " + p for p in rest))
    return " ".join([first, *rest])


# --------------------------------------------------------------------------
# Conjugation
# --------------------------------------------------------------------------

_BE_PRESENT = {"1st singular": "am", "3rd singular": "is"}  # every other person: "are"
_BE_PAST_SINGULAR = {"1st singular", "3rd singular"}  # was; every other person: "were"


def _forms(verb: str) -> dict[str, str]:
    """The stems every tense is built from; a phrasal verb keeps its particles after each."""
    first, _, particles = verb.partition(" ")
    stems = stems_of(first)
    assert stems is not None, verb  # validate_verb let it through
    tail = f" {particles}" if particles else ""
    return {stem: form + tail for stem, form in stems.items()}


def _be(person: str, past: bool) -> str:
    """Finite forms of 'be', the one verb that agrees beyond 3rd singular."""
    if past:
        return "was" if person in _BE_PAST_SINGULAR else "were"
    return _BE_PRESENT.get(person, "are")


def _have(person: str) -> str:
    return "has" if person == "3rd singular" else "have"


def conjugate(verb: str, tense: str, person: str) -> str:
    """The verb phrase without its subject.

    conjugate("see", "present perfect", "she") -> "has seen"
    """
    base = validate_verb(verb)
    tense = normalize_tense(tense)
    person = normalize_person(person)
    f = _forms(base)
    ing, participle = f["ing"], f["participle"]
    first, _, particles = base.partition(" ")

    if tense in ("present simple", "past simple"):
        past = tense == "past simple"
        if first == "be":  # be over -> they were over
            return " ".join(filter(None, [_be(person, past), particles]))
        if past:
            return f["past"]
        return f["third"] if person == "3rd singular" else base

    phrases = {
        "present continuous": f"{_be(person, past=False)} {ing}",
        "present perfect": f"{_have(person)} {participle}",
        "present perfect continuous": f"{_have(person)} been {ing}",
        "past continuous": f"{_be(person, past=True)} {ing}",
        "past perfect": f"had {participle}",
        "past perfect continuous": f"had been {ing}",
        "future simple": f"will {base}",
        "future continuous": f"will be {ing}",
        "future perfect": f"will have {participle}",
        "future perfect continuous": f"will have been {ing}",
    }
    return phrases[tense]
