"""Argument grounding: the arguments of a tool call come from the user's words.

Where the question names the person, the tense or the verb, the model may choose only among what it names;
after a successful conjugate result, the answer may only be that result.  Where the question names none of
them, the model chooses among all of them, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .grammar import TENSES, is_subject_phrase

# Every case of each pronoun, and the Spanish subject pronouns learners write ("para yo", "con ella").
PERSON_WORDS: dict[str, str] = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself", "yo"), "I"),
    **dict.fromkeys(("you", "your", "yours", "yourself", "yourselves", "tú", "usted", "ustedes", "vosotros",
                     "vosotras"), "you"),
    **dict.fromkeys(("he", "him", "his", "himself", "él"), "he"),
    **dict.fromkeys(("she", "her", "hers", "herself", "ella"), "she"),
    **dict.fromkeys(("it", "its", "itself"), "it"),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves", "nosotros", "nosotras"), "we"),
    **dict.fromkeys(("they", "them", "their", "theirs", "themselves", "ellos", "ellas"), "they"),
}
# The word before the person a question is for: "... for she", "... with you", "... para 'we'".
FOR_WORDS = frozenset({"for", "with", "para", "con"})
# Grammar-book labels: "third person plural", "1st person singular".
_ORDINAL = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3}
_LABELS = {(1, "singular"): ("I",), (2, "singular"): ("you",), (3, "singular"): ("he", "she", "it"),
           (1, "plural"): ("we",), (2, "plural"): ("you",), (3, "plural"): ("they",)}

# Tense words, English and Spanish, as the tense names spell them ("simple" may be left out: "the past of go").
TENSE_WORDS: dict[str, str] = {
    "present": "present", "presente": "present", "past": "past", "pasado": "past", "pretérito": "past",
    "future": "future", "futuro": "future", "continuous": "continuous", "progressive": "continuous",
    "continuo": "continuous", "progresivo": "continuous", "perfect": "perfect", "perfecto": "perfect",
    "simple": "simple",
}
_TENSE_NEEDS = {tense: frozenset(tense.split()) - {"simple"} for tense in TENSES}

# Words of a question that are never the verb it asks about: function words, the request's own words, and (below)
# every pronoun and tense word. A verb that is also one of these ("do", "have", "be") must be quoted to be found;
# unquoted, the question's other words decide, and where none is left the model chooses as before.
NOT_VERBS = frozenset("""
a an the of in on at to for with from by and or not no yes please thanks thank what which how whats is are was
were be am do does did can could would should will shall may might must tell give show say said write conjugate
conjugation conjugated form forms verb verbs tense tenses person persons singular plural first second third
answer question mean means use using like this that these those there here one two all some any need want
subject sujeto
de del la el los las en para con por y o que qué cuál cual cómo como es son conjuga conjugar conjugación verbo
tiempo forma persona dime dame favor
""".split()) | frozenset(_ORDINAL)
VERB_RE = re.compile(r"^[a-z]{1,24}$")  # the schema's own pattern for a verb
_WORD_RE = re.compile(r"[^\W\d_]+(?:'[a-z]+)?", re.UNICODE)
# A quoted stretch: straight quotes only where they are not an apostrophe inside a word ("What's").
_QUOTED_RE = re.compile(r"(?<![^\W\d_])['\"]([^'\"]{1,40})['\"](?![^\W\d_])|[‘“«]([^’”»]{1,40})[’”»]", re.UNICODE)
# The words after which a word is the verb asked about ("the past of must", "the verb do"), even a modal or a word
# of the request; an article or a preposition there is not ("of the verb go", "the verb in the past").
_ASKS_ABOUT = frozenset({"of", "verb", "conjugate", "de", "verbo", "conjuga"})
_NEVER_ASKED = frozenset({"a", "an", "the", "verb", "verbo", "el", "la", "los", "las", "un", "una", "in", "on", "at",
                          "for", "with", "to", "from", "by", "and", "or", "is", "en", "para", "con", "por", "y", "es"})
# Where a subject after "for" ends: "for the cat in the past simple", "for my sisters, please".
_SUBJECT_ENDS = frozenset({"in", "of", "on", "at", "using", "please", "en", "de", "por"})
# Words that name the slot, not who fills it: "for the subject 'you'", "for the third person".
_QUOTES = "'\"‘“«"
_SLOT_WORDS = frozenset({"subject", "person", "pronoun", "verb", "tense", "form", "sujeto", "persona", "verbo"})
_PROPOSED_RE = re.compile(r"give the base form ((?:'[^']+'(?: or )?)+)")


@dataclass(frozen=True)
class Grounds:
    """The values a turn's action may take where the user's words decide them; an empty field narrows nothing."""

    persons: tuple[str, ...] = ()
    tenses: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    answer: str = ""

    def narrowed(self) -> dict[str, list[str]]:
        """What this narrows, field by field (for the trace)."""
        fields = {"person": self.persons, "tense": self.tenses, "verb": self.verbs,
                  "answer": (self.answer,) if self.answer else ()}
        return {name: list(values) for name, values in fields.items() if values}

    def apply(self, schema: dict) -> dict:
        """Narrow a turn's schema (see ``actions.schema_for_turn``) in place, and return it."""
        for branch in schema["anyOf"]:
            properties = branch["properties"]
            if properties.get("tool") == {"const": "conjugate"}:
                if self.persons:
                    properties["person"] = {"enum": list(self.persons)}
                if self.tenses:
                    properties["tense"] = {"enum": list(self.tenses)}
                if self.verbs:
                    properties["verb"] = {"type": "string", "enum": list(self.verbs)}
            elif "answer" in properties and self.answer:
                properties["answer"] = {"type": "string", "enum": [self.answer]}
        return schema


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text)]


def subject_named(question: str) -> str:
    """The subject after the last "for"/"with" when it is no pronoun ("the cat", "Maria and I"), as written; else ""."""
    tokens = re.findall(r"[^\W\d_]+(?:'[A-Za-z]+)?|[^\w\s]", question)
    starts = [i for i, t in enumerate(tokens) if t.lower() in FOR_WORDS]
    if not starts:
        return ""
    phrase: list[str] = []
    after = tokens[starts[-1] + 1:]
    for token in after[1:] if after and after[0] in _QUOTES else after:  # "para 'the birds'"
        if not token[0].isalpha() or token.lower() in _SUBJECT_ENDS or token.lower() in TENSE_WORDS:
            break
        phrase.append(token)
    text = " ".join(phrase)
    if text.lower() in PERSON_WORDS or _SLOT_WORDS & set(words(text)):
        return ""
    return text if is_subject_phrase(text) else ""


def persons_named(question: str) -> tuple[str, ...]:
    """The person(s) the question names: a subject that is no pronoun, one pronoun, the one after "for"/"with",
    or a grammar-book label."""
    subject = subject_named(question)
    if subject:
        return (subject,)
    said = words(question)
    after = {PERSON_WORDS[w] for before, w in zip(said, said[1:]) if before in FOR_WORDS and w in PERSON_WORDS}
    if len(after) == 1:
        return tuple(after)
    in_quotes = {PERSON_WORDS[w] for q in _quoted(question) for w in words(q) if w in PERSON_WORDS}
    if len(in_quotes) == 1:  # "How do I say 'it rings' ...": the quoted words are the ones asked about
        return tuple(in_quotes)
    named = {PERSON_WORDS[w] for w in said if w in PERSON_WORDS}
    if len(named) == 1:
        return tuple(named)
    labels = {_LABELS[(_ORDINAL[w], n)] for w in said if w in _ORDINAL
              for n in ("singular", "plural") if n in said}
    return next(iter(labels)) if len(labels) == 1 and not named else ()


def tenses_named(question: str) -> tuple[str, ...]:
    """The one tense whose words the question holds (the longest of nested ones), else none."""
    said = {TENSE_WORDS[w] for w in words(question) if w in TENSE_WORDS}
    found = [t for t, needs in _TENSE_NEEDS.items() if needs <= said]
    longest = [t for t in found if not any(_TENSE_NEEDS[t] < _TENSE_NEEDS[o] for o in found)]
    return tuple(longest) if len(longest) == 1 else ()


def verbs_named(question: str) -> tuple[str, ...]:
    """The words of the question that may be its verb: the quoted ones if it quotes any ("'to weave'", "'we
    carry'"), else all its words; never a pronoun or a tense word, and unquoted never a word of the request."""
    subject = set(words(subject_named(question)))
    quoted = [w for q in _quoted(question) for w in words(re.sub(r"^\s*to\s+", "", q.lower())) if w not in subject]
    said = words(question)
    asked = [(w, before in _ASKS_ABOUT and w not in _NEVER_ASKED) for before, w in zip(["", *said], said)
             if w not in subject]
    chosen: list[str] = []
    for word, is_quoted in [(w, True) for w in quoted] or asked:
        if not _may_be_verb(word, quoted=is_quoted):  # a pronoun or a tense word, and what its endings leave
            continue
        for candidate in (word, *(_stems(word) if is_quoted else ())):
            if VERB_RE.match(candidate) and candidate not in chosen and _may_be_verb(candidate, quoted=is_quoted):
                chosen.append(candidate)
    if not chosen and quoted:  # only a pronoun was quoted ("For 'they', ..."): the other words decide
        return verbs_named(_QUOTED_RE.sub(" ", question))
    return tuple(chosen)


def _stems(word: str) -> tuple[str, ...]:
    """What a quoted inflected form may come from ('it rings' asks about ring): the spellings the regular endings
    leave, for the decoder to weigh beside the word itself (a wrong one is refused by the tool, which names the
    base form, and that becomes a choice too)."""
    for ending, replacements in (("ies", ("y",)), ("ied", ("y",)), ("es", ("", "e")), ("s", ("",)),
                                 ("ed", ("", "e")), ("ing", ("", "e"))):
        if word.endswith(ending) and len(word) > len(ending) + 1:
            return tuple(word[:-len(ending)] + r for r in replacements)
    return ()


def _quoted(question: str) -> list[str]:
    return [q for pair in _QUOTED_RE.findall(question) for q in pair if q]


def _may_be_verb(word: str, *, quoted: bool) -> bool:
    """``quoted``: the question points at the word (quotes, or right after "of", "verb", "conjugate"), so a word
    of the request may be it."""
    if word in PERSON_WORDS or word in TENSE_WORDS:
        return False
    return quoted or word not in NOT_VERBS


def proposed_verbs(tool_error: str) -> tuple[str, ...]:
    """The base forms a tool error proposes ("... give the base form 'go'." or "'lie' or 'lay'")."""
    match = _PROPOSED_RE.search(tool_error)
    if not match:
        return ()
    return tuple(v for v in re.findall(r"'([^']+)'", match.group(1)) if VERB_RE.match(v))


class ArgumentGrounding:
    """The guard: what the question (and the run so far) lets the model choose, turn by turn.

    The loop tells it the question, each successful conjugate result and each tool error; ``for_turn`` gives
    the grounds of the next model call, or None when it is off or narrows nothing."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.question = Grounds()
        self.proposed: tuple[str, ...] = ()
        self.result = ""

    def start(self, question: str) -> None:
        self.question = Grounds(persons_named(question), tenses_named(question), verbs_named(question))
        self.proposed, self.result = (), ""

    def saw_result(self, tool: str, result: str) -> None:
        """A successful tool result: a conjugate result is what an answer now says; another tool's is not."""
        self.result = result if tool == "conjugate" else ""

    def saw_error(self, error: str) -> None:
        self.result = ""
        for verb in proposed_verbs(error):
            if verb not in self.proposed:
                self.proposed += (verb,)

    def for_turn(self) -> Grounds | None:
        if not self.enabled:
            return None
        q = self.question
        verbs = q.verbs + tuple(v for v in self.proposed if v not in q.verbs) if q.verbs else ()
        grounds = Grounds(q.persons, q.tenses, verbs, self.result)
        return grounds if grounds.narrowed() else None
