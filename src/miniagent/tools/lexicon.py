"""The stems of an English verb: lemminflect's lexicon and the engine's own decisions on top of it.

Every tense is built from five stems (base, he/she/it form, past, past participle, -ing form), taken from
lemminflect's verb lexicon, read offline.  The engine adds a few tested choices: the spelling, a regular
verb's participle, ``data/chosen_forms.tsv`` and verbs the lexicon lacks.
"""

from __future__ import annotations

import functools
import re
import threading
from importlib import resources
from types import ModuleType

# The engine's stem names and the Penn Treebank tags lemminflect files them under.
TAGS = {"third": "VBZ", "past": "VBD", "participle": "VBN", "ing": "VBG"}
_STEMS = tuple(TAGS)
_LOAD_LOCK = threading.Lock()


@functools.cache
def library() -> ModuleType:
    """lemminflect with its inflection table loaded (once, even from two threads).

    Imported here, not at the top: ``import miniagent.tools.conjugation`` stays
    cheap for code that only needs TENSES or normalize_tense.  The server loads
    the table before it serves (see :func:`preload`), so no tool call waits for it.
    """
    with _LOAD_LOCK:
        import lemminflect

        lemminflect.getInflection("be", "VBD")  # the first lookup reads the table
    return lemminflect


def preload() -> None:
    """Load the lexicon now, so the first conjugation does not wait for it."""
    library()


def _tsv(name: str, header: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Rows of a data file; a malformed row is a packaging bug, so fail loudly."""
    # importlib.resources, not __file__: works from a wheel or a zip as well.
    text = resources.files("miniagent.tools").joinpath("data", name).read_text("utf-8")
    lines = text.splitlines()
    if not lines or tuple(lines[0].split("\t")) != header:
        raise RuntimeError(f"{name}: header must be {chr(9).join(header)!r}")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = tuple(line.split("\t"))
        if len(fields) != len(header) or not all(f and f == f.strip() for f in fields):
            raise RuntimeError(f"{name}:{lineno}: expected {len(header)} tab-separated fields, got {line!r}")
        rows.append(fields)
    return rows


@functools.cache
def _chosen_forms() -> dict[str, dict[str, str]]:
    """verb -> {stem: form} from data/chosen_forms.tsv."""
    chosen: dict[str, dict[str, str]] = {}
    for verb, stem, form, _why in _tsv("chosen_forms.tsv", ("verb", "stem", "form", "why")):
        if stem not in TAGS or stem in chosen.get(verb, {}):
            raise RuntimeError(f"chosen_forms.tsv: bad or repeated stem {stem!r} for {verb!r}")
        chosen.setdefault(verb, {})[stem] = form
    return chosen


@functools.cache
def _extra_verbs() -> frozenset[str]:
    return frozenset(verb for verb, _why in _tsv("extra_verbs.tsv", ("verb", "why")))


def _shape(word: str) -> str:
    """The non-letters of a word, in order: '-' for re-read, '' for reread."""
    return "".join(c for c in word if not c.isalpha())


def _pick(spellings: tuple[str, ...], like: str) -> str:
    """The first spelling written like the input: same hyphens, spaces and apostrophes,
    then same first letter (jell -> jelled, not the lexicon's first, gelled)."""
    shape = _shape(like)
    return min(spellings, key=lambda s: (_shape(s) != shape, s[:1] != like[:1], spellings.index(s)))


def _regular_pasts(word: str) -> set[str]:
    """What -ed would make of ``word`` by lemminflect's rules: baked, studied, stopped."""
    from lemminflect.core.InflectionRules import InflectionRules

    return {InflectionRules.buildRegVerb(word)[1], InflectionRules.buildDoubledVerb(word)[1]}


@functools.lru_cache(maxsize=4096)
def _lexicon_stems(word: str) -> dict[str, str] | None:
    """The four stems of a verb the lexicon (or extra_verbs.tsv) knows in full, else None."""
    lib = library()
    if word in _extra_verbs():
        oov = lib.getAllInflectionsOOV(word, "VERB")  # lemminflect's rules for unknown words
        spellings = {stem: oov.get(tag, ()) for stem, tag in TAGS.items()}
    else:
        spellings = {stem: lib.getInflection(word, tag, inflect_oov=False) for stem, tag in TAGS.items()}
    if not all(spellings.values()):
        return None  # not a verb, or one with no full conjugation (modals, beware)
    stems = {stem: _pick(found, word) for stem, found in spellings.items()}
    # A regular verb has one past form, so its participle is its past (spelled,
    # has spelled); irregular ones keep their own participle (showed, has shown).
    if stems["past"] in _regular_pasts(word) and stems["participle"] in spellings["past"]:
        stems["participle"] = stems["past"]
    # Where the lexicon's first form is a typo or not the one a learner expects (lain, lit, programmed).
    stems.update(_chosen_forms().get(word, {}))
    return stems


# Words that may follow a verb to make a phrasal verb: give up, look after, put up with.
PARTICLES = frozenset(
    "about across after ahead along apart around aside away back behind by down for forth "
    "forward in into off on onto out over past round through to together under up upon with "
    "without".split()
)
# Prefixes that make new verbs from old ones; a word the lexicon lacks that is
# one of these plus a known verb inflects like that verb: mishear -> misheard.
_PREFIXES = ("counter", "under", "over", "fore", "out", "mis", "dis", "pre", "re", "un", "co", "de")


@functools.lru_cache(maxsize=4096)
def stems_of(word: str) -> dict[str, str] | None:
    """Stems of one word (letters and hyphens), or None when it is not a verb the engine knows."""
    found = _lexicon_stems(word)
    if found:
        return found
    if "-" not in word:  # mishear = mis + hear
        for prefix in _PREFIXES:
            rest = word[len(prefix):]
            if word.startswith(prefix) and len(rest) >= 3 and (inner := _lexicon_stems(rest)):
                return {stem: prefix + form for stem, form in inner.items()}
        return None
    # Hyphenated and not in the lexicon.  The joined word first: co-operate -> co-operated.
    joined = _lexicon_stems(word.replace("-", ""))
    if joined:
        return {stem: _rehyphenate(form, word) for stem, form in joined.items()}
    # Then the last part: dry-clean -> dry-cleaned.
    head, _, last = word.rpartition("-")
    inner = _lexicon_stems(last)
    return {stem: f"{head}-{form}" for stem, form in inner.items()} if inner else None


def _rehyphenate(form: str, like: str) -> str:
    """Put the input's hyphens back into a form of the joined word, if the letters before each still match."""
    for i, char in enumerate(like):
        if char == "-":
            if form[:i] != like[:i]:
                return form
            form = form[:i] + "-" + form[i:]
    return form


def irregular_verbs() -> dict[str, tuple[str, str]]:
    """base -> (past simple, past participle) for every verb of the lexicon that is irregular.

    Irregular: the past or the participle is not what -ed makes of the base
    (baked, studied, stopped).  A new dict on every call.
    """
    from lemminflect.core.Inflections import Inflections  # the lexicon's word list has no public API

    library()
    table = {}
    for word, tags in sorted(Inflections()._getInflDict().items()):
        if "VBD" not in tags or not re.fullmatch(r"[a-z]+(?:-[a-z]+)*", word):
            continue
        stems = stems_of(word)
        if stems and not {stems["past"], stems["participle"]} <= _regular_pasts(word):
            table[word] = (stems["past"], stems["participle"])
    return table
