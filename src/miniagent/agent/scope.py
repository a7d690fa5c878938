"""The grammar's scope: a question the tutor cannot answer gets a clear "no", never a made-up form.

The guard ends the run with ``out_of_grammar`` and says why. Before any model call: a tense the grammar lacks,
nothing to conjugate, no tense named (asked back). After a tool call: a word the tool refuses as a verb, once
every word that may be the verb was refused, in the tool's words.
"""

from __future__ import annotations

import re

from .errors import OutOfGrammar
from .grammar import TENSES
from .grounding import NOT_VERBS, PERSON_WORDS, TENSE_WORDS, tenses_named, verbs_named, words

# Words before "tense" (or after "tiempo") that do not name one: "which tense", "the same tense", "tiempo verbal".
_NOT_A_TENSE_NAME = frozenset("""
a an the what which whose this that same each every any all one right correct proper other another given
following its their verb verb's english wrong spanish grammatical new
de del en el la que qué cual cuál es está verbal correcto gramatical para con y o se
""".split())
_ENGLISH_TENSE_RE = re.compile(r"([^\W\d_]+)[ -]tenses?\b", re.IGNORECASE | re.UNICODE)
_SPANISH_TENSE_RE = re.compile(r"\btiempos?\s+([^\W\d_]+)", re.IGNORECASE | re.UNICODE)
# Other nouns a tense is named with. English names it before the noun, after an article or "in" ("the ancient past",
# "in the dreaming form", "the passive voice"); Spanish after it, before "de", "para"... («el pretérito galáctico
# de»). A name there must be made of the grammar's words; a mood or a voice is never among its tenses.
_NAMED_BEFORE = frozenset({"form", "forms", "mood", "moods", "voice", "aspect", "past", "present", "future", "perfect",
                           "continuous", "progressive", "simple"})
_NAMED_AFTER = frozenset({"forma", "modo", "pretérito", "pasado", "presente", "futuro"})
_NEVER_A_TENSE = frozenset({"mood", "moods", "voice", "modo"})
_OPENS = frozenset({"the", "a", "an", "in", "into", "its", "their", "this", "that", "my", "your"})
_CLOSES = frozenset({"de", "del", "para", "con", "en", "y", "", "?", ".", "!", ",", ";", ":"})
# Grammar's names for what is no tense of the twelve (moods, voices, non-finite forms): a closed list, unlike the
# made-up names above. Wherever the question says one, it asks for something the grammar lacks.
_OTHER_GRAMMAR = frozenset("""
subjunctive imperative conditional pluperfect jussive optative cohortative gerund gerundive infinitive participle
passive subjuntivo imperativo condicional pasiva gerundio infinitivo participio potencial
""".split())
# Spanish grammar's own names of tenses: not made up, though the grammar does not map them (the model chooses).
_SPANISH_TENSE_NAMES = frozenset({"indefinido", "imperfecto", "pluscuamperfecto", "compuesto", "anterior"})
# A question about conjugating names a tense or asks for one of these; one that does neither ("What is the capital of
# France?") has nothing to conjugate, whatever verb-like word it holds ("How tall is Mount Everest?" -> "mount").
_ASKS_TO_CONJUGATE = frozenset("""
conjugate conjugates conjugated conjugating conjugation conjugations tense tenses form forms verb verbs
conjuga conjugar conjugue conjugación conjugaciones tiempo tiempos verbo verbos forma formas
""".split())
# Words that may stand before a tense noun without naming a made-up tense: the request's, the tenses', the persons'.
_GRAMMAR_WORDS = _NOT_A_TENSE_NAME | NOT_VERBS | TENSE_WORDS.keys() | PERSON_WORDS.keys()
_TOKEN_RE = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*|[^\w\s]", re.UNICODE)
# How the tool refuses a word as a verb: "'blorf' is not an English verb I know", "'must' is not a verb (it is a
# modal verb ...)", "'beware' has no past or -ing forms", "'comer' is a Spanish word". Not "give the base form
# 'go'": that word has a verb.
# Words only a Spanish question holds; two of them make the tutor say its "no" in Spanish.
_SPANISH_WORDS = frozenset("""
conjuga conjugar conjugación tiempo verbo cuál qué cómo dime dame para del el la en es yo tú ella él nosotros
vosotros ellos ellas usted ustedes pasado presente futuro
""".split())

TEXTS = {
    "en": {"tense": "I cannot answer that: there is no {word!r} tense among the ones I conjugate. "
                    "The {n} I know: {tenses}.",
           "nearest": " The nearest of them: the {tense}.",
           "verb": "I cannot answer that: {reason}",
           "no_tense": "Which tense? Your question names none that I can tell apart, and I will not choose one "
                       "for you. The {n} I know: {tenses}.",
           "nothing": "I cannot answer that: I conjugate English verbs, and your question names no tense and asks "
                      "for no conjugation. Ask me, for example: \"What is the past simple of go for she?\""},
    "es": {"tense": "No puedo responder a eso: no hay un tiempo {word!r} entre los que conjugo. "
                    "Los {n} que conozco (en inglés): {tenses}.",
           "nearest": " El más cercano: el {tense}.",
           "verb": "No puedo responder a eso: {reason}",
           "no_tense": "¿En qué tiempo? Tu pregunta no nombra ninguno que yo sepa distinguir, y no voy a elegirlo "
                       "por ti. Los {n} que conozco (en inglés): {tenses}.",
           "nothing": "No puedo responder a eso: conjugo verbos ingleses, y tu pregunta no nombra ningún tiempo ni "
                      "pide ninguna conjugación. Pregúntame, por ejemplo: «¿Cuál es el pasado simple de 'go' para "
                      "'ella'?»"},
}


# The tool's refusal of a word (tools/conjugation.py, REFUSALS), said in Spanish from its data; in English the
# tool's own sentence says it.
REFUSED_ES = {
    "not_a_verb": "{word!r} no es un verbo (es {what}).",
    "spanish_word": "{word!r} es una palabra española, no un verbo inglés: conjugo verbos ingleses.",
    "no_full_conjugation": "{word!r} no tiene pasado ni forma en -ing, así que no tiene conjugación completa.",
    "unknown_word": "{word!r} no es un verbo inglés que yo conozca (no está en el léxico de verbos).",
}
KINDS_ES = {"modal": "un verbo modal, que no tiene conjugación completa", "article": "un artículo",
            "pronoun": "un pronombre", "preposition": "una preposición", "conjunction": "una conjunción",
            "determiner": "un determinante", "adverb": "un adverbio", "noun": "un sustantivo",
            "name": "un nombre propio", "adjective": "un adjetivo"}


def refusal_text(refusal: dict, language: str) -> str:
    """Why the tool refused the word, in the question's language, from the refusal's data."""
    template = REFUSED_ES.get(refusal.get("code", "")) if language == "es" else None
    if template is None:  # English, or a code this agent does not know (another server's): the tool's own words
        return refusal.get("text") or f"{refusal['word']!r} is not a verb I can conjugate."
    what = " o ".join(KINDS_ES.get(kind, kind) for kind in refusal.get("is", ()))
    said = template.format(word=refusal["word"], what=what)
    if refusal.get("instead"):
        said += (f" En su lugar, el inglés usa {refusal['instead']!r}: {refusal['example']}." if refusal["example"]
                 else f" En su lugar, el inglés usa {refusal['instead']!r}, en los tiempos simples y perfectos.")
    return said


def language_of(question: str) -> str:
    """"es" for a question put in Spanish, else "en"."""
    return "es" if len(_SPANISH_WORDS & set(words(question))) >= 2 else "en"


def made_up_tense(question: str) -> str:
    """The name of a tense the grammar lacks, as the question writes it ("dreaming", "ancient past"), or ""."""
    for pattern in (_ENGLISH_TENSE_RE, _SPANISH_TENSE_RE):
        for match in pattern.finditer(question):
            word = match.group(1).lower()
            if word not in _NOT_A_TENSE_NAME and word not in TENSE_WORDS:
                return match.group(1)
    tokens = _TOKEN_RE.findall(question)
    return _other_grammar(tokens) or _made_up_name(tokens)


def _other_grammar(tokens: list[str]) -> str:
    """A name of grammar beyond the twelve tenses, with its noun where it has one ("passive voice", «voz pasiva»)."""
    said = [t.lower() for t in tokens] + [""]
    for i, word in enumerate(said[:-1]):
        if word in _OTHER_GRAMMAR:
            if said[i + 1] in _NAMED_BEFORE | {"tense"}:
                return f"{tokens[i]} {tokens[i + 1]}"
            if i and said[i - 1] in _NAMED_AFTER | {"voz", "tiempo"}:
                return f"{tokens[i - 1]} {tokens[i]}"
            return tokens[i]
    return ""


def asks_to_conjugate(question: str) -> bool:
    """Whether the question names a tense word or asks for a conjugation, a form or a verb at all."""
    return bool(set(words(question)) & (_ASKS_TO_CONJUGATE | TENSE_WORDS.keys()))


def _made_up_name(tokens: list[str]) -> str:
    """A tense noun other than "tense" named with a word that is no grammar word ("the ancient past"), or ""."""
    said = [t.lower() for t in tokens]
    for i, noun in enumerate(said):
        if noun in _NAMED_BEFORE and i >= 2 and said[i - 2] in _OPENS and _not_a_grammar_word(said[i - 1], noun):
            return f"{tokens[i - 1]} {tokens[i]}"
        after, then = (said[i + 1:i + 3] + ["", ""])[:2]
        if noun in _NAMED_AFTER and then in _CLOSES and _not_a_grammar_word(after, noun):
            return f"{tokens[i]} {tokens[i + 1]}"
    return ""


def _not_a_grammar_word(word: str, noun: str) -> bool:
    if not word[:1].isalpha() or word in _SPANISH_TENSE_NAMES:
        return False
    return noun in _NEVER_A_TENSE or word not in _GRAMMAR_WORDS


def nearest_tense(question: str, made_up: str) -> str:
    """The grammar's one tense that the question's words still name once the made-up name's words are left out
    ("the ancient past" -> past simple), or ""."""
    named = tenses_named(" ".join(w for w in words(question) if w not in set(words(made_up)) - set(TENSE_WORDS)))
    return named[0] if named else ""


class GrammarScope:
    """The guard: raises ``OutOfGrammar`` when the question, or the tool's answers to it, fall outside the grammar.

    The loop tells it the question (``start``) and each tool error (``saw_error``); off, it never raises."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.candidates: set[str] = set()
        self.words: set[str] = set()
        self.refused: set[str] = set()
        self.language = "en"

    def start(self, question: str) -> None:
        self.language, self.refused = language_of(question), set()
        self.words = set(words(question))
        # The words the question names, not the stems grounding adds for a quoted form ('happiness' -> 'happines'):
        # a guess at what a word comes from is no word of the question that the tool could still accept.
        self.candidates = set(verbs_named(question)) & self.words
        tense = made_up_tense(question)
        if self.enabled and tense:
            nearest = nearest_tense(question, tense)
            said = self.text("tense", tense) + (self.text("nearest", tense=nearest) if nearest else "")
            raise OutOfGrammar("tense", tense, said)
        if self.enabled and not asks_to_conjugate(question):
            raise OutOfGrammar("nothing", "", self.text("nothing"))
        if self.enabled and not tenses_named(question):  # asked back: a tense is never chosen silently
            raise OutOfGrammar("no_tense", "", self.text("no_tense"))

    def saw_error(self, verb: object, error: Exception) -> None:
        """A tool error for a call with ``verb``: when the tool refused it (its ``refusal``, as data) and it was the
        question's last possible verb (or, where the question offers none, a word of it), the run ends."""
        refusal = getattr(error, "refusal", None) or {}
        word = refusal.get("word", "")
        if not (self.enabled and word and word == verb and word in (self.candidates or self.words)):
            return
        self.refused.add(word)
        if self.candidates <= self.refused:
            raise OutOfGrammar("verb", word, self.text("verb", reason=refusal_text(refusal, self.language)))

    def text(self, kind: str, word: str = "", reason: str = "", tense: str = "") -> str:
        return TEXTS[self.language][kind].format(word=word, reason=reason, tense=tense, n=len(TENSES),
                                                 tenses=", ".join(TENSES))
