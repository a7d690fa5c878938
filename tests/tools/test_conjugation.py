"""Conjugation engine: expected forms, input validation, the irregular verbs and the data files."""

from __future__ import annotations

import re
import time
from importlib import resources

import pytest

from miniagent.tools.conjugation import (
    PERSONS,
    PRONOUNS,
    TENSES,
    ConjugationError,
    conjugate,
    irregular_verbs,
    normalize_person,
    normalize_tense,
    subject_for,
    validate_verb,
)

# (verb, tense, person, expected phrase).  Persons are given both as labels
# and as pronouns so both paths are exercised.
EXPECTED = [
    # --- the examples from the spec ---
    ("see", "present perfect", "she", "has seen"),
    ("go", "past simple", "1st plural", "went"),
    ("be", "past simple", "I", "was"),
    ("be", "present simple", "you", "are"),
    ("study", "present simple", "he", "studies"),
    ("lie", "present continuous", "they", "are lying"),
    ("go", "future simple", "I", "will go"),
    ("go", "future continuous", "we", "will be going"),
    ("go", "future perfect", "they", "will have gone"),
    ("go", "future perfect continuous", "it", "will have been going"),
    # --- be: all 12 tenses, agreement across persons ---
    ("be", "present simple", "1st singular", "am"),
    ("be", "present simple", "2nd singular", "are"),
    ("be", "present simple", "3rd singular", "is"),
    ("be", "present simple", "1st plural", "are"),
    ("be", "present simple", "2nd plural", "are"),
    ("be", "present simple", "3rd plural", "are"),
    ("be", "present continuous", "I", "am being"),
    ("be", "present perfect", "he", "has been"),
    ("be", "present perfect", "we", "have been"),
    ("be", "present perfect continuous", "you", "have been being"),
    ("be", "past simple", "2nd singular", "were"),
    ("be", "past simple", "3rd singular", "was"),
    ("be", "past simple", "1st plural", "were"),
    ("be", "past simple", "you (plural)", "were"),
    ("be", "past simple", "they", "were"),
    ("be", "past continuous", "she", "was being"),
    ("be", "past continuous", "they", "were being"),
    ("be", "past perfect", "I", "had been"),
    ("be", "past perfect continuous", "it", "had been being"),
    ("be", "future simple", "we", "will be"),
    ("be", "future continuous", "you", "will be being"),
    ("be", "future perfect", "they", "will have been"),
    ("be", "future perfect continuous", "he", "will have been being"),
    # --- have and do ---
    ("have", "present simple", "I", "have"),
    ("have", "present simple", "she", "has"),
    ("have", "past simple", "we", "had"),
    ("have", "present perfect", "he", "has had"),
    ("have", "present continuous", "I", "am having"),
    ("have", "past perfect continuous", "they", "had been having"),
    ("have", "future perfect", "you", "will have had"),
    ("do", "present simple", "it", "does"),
    ("do", "present simple", "they", "do"),
    ("do", "past simple", "I", "did"),
    ("do", "present perfect", "we", "have done"),
    ("do", "past continuous", "he", "was doing"),
    ("do", "future perfect continuous", "I", "will have been doing"),
    # --- irregulars across tenses and persons ---
    ("go", "present simple", "he", "goes"),
    ("go", "present simple", "2nd plural", "go"),
    ("eat", "past perfect", "she", "had eaten"),
    ("write", "present perfect", "I", "have written"),
    ("write", "present continuous", "she", "is writing"),
    ("take", "past continuous", "we", "were taking"),
    ("run", "present continuous", "I", "am running"),
    ("run", "present perfect", "they", "have run"),
    ("swim", "past simple", "you", "swam"),
    ("swim", "present perfect continuous", "she", "has been swimming"),
    ("begin", "past simple", "he", "began"),
    ("begin", "present continuous", "we", "are beginning"),
    ("forget", "present continuous", "you", "are forgetting"),
    ("forget", "present perfect", "he", "has forgotten"),
    ("get", "present perfect", "I", "have gotten"),
    ("read", "past simple", "she", "read"),
    ("put", "present continuous", "it", "is putting"),
    ("lie", "past simple", "he", "lay"),
    ("lie", "present perfect", "I", "have lain"),
    ("lay", "past simple", "I", "laid"),
    ("lay", "present simple", "she", "lays"),
    ("fly", "present simple", "it", "flies"),
    ("fly", "past perfect", "we", "had flown"),
    ("think", "past perfect continuous", "I", "had been thinking"),
    ("understand", "future perfect", "she", "will have understood"),
    ("quit", "present continuous", "he", "is quitting"),
    ("see", "present continuous", "they", "are seeing"),
    ("flee", "present continuous", "I", "am fleeing"),
    ("flee", "past simple", "they", "fled"),
    ("make", "present continuous", "we", "are making"),
    ("make", "past simple", "he", "made"),
    ("upset", "present continuous", "it", "is upsetting"),
    ("wind", "past simple", "I", "wound"),
    # --- third person -s / -es / -ies ---
    ("play", "present simple", "she", "plays"),
    ("watch", "present simple", "he", "watches"),
    ("fix", "present simple", "she", "fixes"),
    ("buzz", "present simple", "it", "buzzes"),
    ("wash", "present simple", "he", "washes"),
    ("miss", "present simple", "she", "misses"),
    ("quiz", "present simple", "he", "quizzes"),
    ("cry", "present simple", "he", "cries"),
    ("echo", "present simple", "it", "echoes"),
    ("work", "present simple", "3rd singular", "works"),
    ("work", "present simple", "3rd plural", "work"),
    # --- -ed: e-final, consonant+y, doubling, c-final ---
    ("bake", "past simple", "I", "baked"),
    ("agree", "past simple", "we", "agreed"),
    ("die", "past simple", "he", "died"),
    ("study", "past simple", "they", "studied"),
    ("play", "past simple", "you", "played"),
    ("stop", "past simple", "I", "stopped"),
    ("plan", "past perfect", "we", "had planned"),
    ("snow", "past simple", "it", "snowed"),
    ("fix", "present perfect", "he", "has fixed"),
    ("rain", "past simple", "it", "rained"),
    ("prefer", "past simple", "she", "preferred"),
    ("refer", "present perfect", "I", "have referred"),
    ("admit", "past simple", "he", "admitted"),
    ("commit", "present perfect", "they", "have committed"),
    ("occur", "past simple", "it", "occurred"),
    ("permit", "past perfect", "we", "had permitted"),
    ("regret", "past simple", "I", "regretted"),
    ("control", "past simple", "she", "controlled"),
    ("equip", "past simple", "they", "equipped"),
    ("transfer", "present perfect", "he", "has transferred"),
    ("visit", "past simple", "I", "visited"),
    ("open", "past simple", "she", "opened"),
    ("listen", "past simple", "we", "listened"),
    ("happen", "present perfect", "it", "has happened"),
    ("travel", "past simple", "I", "traveled"),
    ("panic", "past simple", "he", "panicked"),
    ("picnic", "past simple", "we", "picnicked"),
    ("mimic", "present perfect", "she", "has mimicked"),
    ("traffic", "past simple", "they", "trafficked"),
    ("learn", "past simple", "I", "learned"),
    ("dream", "present perfect", "she", "has dreamed"),
    # --- -ing ---
    ("lie", "past continuous", "I", "was lying"),
    ("die", "present continuous", "it", "is dying"),
    ("tie", "present continuous", "he", "is tying"),
    ("agree", "present continuous", "we", "are agreeing"),
    ("dye", "present continuous", "she", "is dyeing"),
    ("stop", "present continuous", "they", "are stopping"),
    ("panic", "past continuous", "we", "were panicking"),
    ("study", "present perfect continuous", "I", "have been studying"),
    ("visit", "present continuous", "you", "are visiting"),
    ("open", "future continuous", "it", "will be opening"),
    ("admit", "present continuous", "he", "is admitting"),
    ("snow", "present continuous", "it", "is snowing"),
    ("play", "future perfect continuous", "they", "will have been playing"),
    # --- every tense once more for a plain regular verb ---
    ("work", "present continuous", "I", "am working"),
    ("work", "present perfect", "you", "have worked"),
    ("work", "present perfect continuous", "he", "has been working"),
    ("work", "past simple", "we", "worked"),
    ("work", "past continuous", "you (plural)", "were working"),
    ("work", "past perfect", "they", "had worked"),
    ("work", "past perfect continuous", "I", "had been working"),
    ("work", "future simple", "she", "will work"),
    ("work", "future continuous", "we", "will be working"),
    ("work", "future perfect", "you", "will have worked"),
    ("work", "future perfect continuous", "they", "will have been working"),
    # --- hyphenated verbs: the lexicon's own entry, else the last part inflects ---
    ("dry-clean", "present simple", "she", "dry-cleans"),
    ("spoon-feed", "past simple", "they", "spoon-fed"),
    ("re-read", "past simple", "I", "re-read"),
    ("high-light", "past simple", "I", "high-lighted"),
    # --- phrasal verbs: the first word inflects, the particles stay ---
    ("give up", "present perfect", "she", "has given up"),
    ("give-up", "present perfect", "she", "has given up"),
    ("look after", "present simple", "he", "looks after"),
    ("put up with", "past continuous", "I", "was putting up with"),
    ("be over", "present simple", "it", "is over"),
    ("be over", "past simple", "they", "were over"),
    # --- verbs the lexicon lacks: a prefix plus a known verb, or extra_verbs.tsv ---
    ("mishear", "past simple", "I", "misheard"),
    ("oversupply", "present simple", "it", "oversupplies"),
    ("text", "past simple", "she", "texted"),
    ("dare", "present perfect", "he", "has dared"),
]


@pytest.mark.parametrize(("verb", "tense", "person", "expected"), EXPECTED)
def test_expected_forms(verb, tense, person, expected):
    assert conjugate(verb, tense, person) == expected


def test_table_covers_every_tense_and_person():
    tenses = {normalize_tense(t) for _, t, _, _ in EXPECTED}
    persons = {normalize_person(p) for _, _, p, _ in EXPECTED}
    assert tenses == set(TENSES)
    assert persons == set(PERSONS)


def test_every_tense_and_person_works_for_every_irregular_verb():
    # A smoke test over the whole table: no crash, non-empty, no subject leaked in.
    for verb in irregular_verbs():
        for tense in TENSES:
            for person in PERSONS:
                phrase = conjugate(verb, tense, person)
                assert phrase and not phrase.startswith(("I ", "he ", "you "))


# --------------------------------------------------------------------------
# Public constants
# --------------------------------------------------------------------------


def test_constants_are_exact():
    assert TENSES == (
        "present simple", "present continuous", "present perfect", "present perfect continuous",
        "past simple", "past continuous", "past perfect", "past perfect continuous",
        "future simple", "future continuous", "future perfect", "future perfect continuous",
    )
    assert PERSONS == (
        "1st singular", "2nd singular", "3rd singular", "1st plural", "2nd plural", "3rd plural",
    )
    assert PRONOUNS == {
        "I": "1st singular", "you": "2nd singular", "he": "3rd singular", "she": "3rd singular",
        "it": "3rd singular", "we": "1st plural", "you (plural)": "2nd plural",
        "they": "3rd plural",
    }
    assert issubclass(ConjugationError, ValueError)


# --------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Past  Simple", "past simple"),
        ("  present perfect  ", "present perfect"),
        ("simple past", "past simple"),
        ("simple present", "present simple"),
        ("Simple Future", "future simple"),
        ("present progressive", "present continuous"),
        ("FUTURE PERFECT CONTINUOUS", "future perfect continuous"),
        ("past-perfect", "past perfect"),
    ],
)
def test_normalize_tense(raw, expected):
    assert normalize_tense(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1st singular", "1st singular"),
        ("3RD PLURAL", "3rd plural"),
        ("first person singular", "1st singular"),
        ("3rd person singular", "3rd singular"),
        ("third singular", "3rd singular"),
        ("second person plural", "2nd plural"),
        ("I", "1st singular"),
        ("i", "1st singular"),
        ("You", "2nd singular"),
        ("she", "3rd singular"),
        ("It", "3rd singular"),
        ("we", "1st plural"),
        ("you (plural)", "2nd plural"),
        ("they", "3rd plural"),
    ],
)
def test_normalize_person(raw, expected):
    assert normalize_person(raw) == expected


@pytest.mark.parametrize(
    ("person", "subject"),
    [
        ("I", "I"), ("i", "I"), ("you", "you"), ("she", "she"), ("It", "it"),
        ("you (plural)", "you"), ("they", "they"),
        ("1st singular", "I"), ("2nd singular", "you"), ("3rd singular", "he"),
        ("1st plural", "we"), ("2nd plural", "you"), ("3rd plural", "they"),
    ],
)
def test_subject_for(person, subject):
    assert subject_for(person) == subject


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["past", "pluperfect", "present present", "", "x" * 10_240])
def test_bad_tense_names_the_valid_tenses(bad):
    with pytest.raises(ConjugationError) as err:
        conjugate("go", bad, "I")
    message = str(err.value)
    assert all(t in message for t in TENSES)
    assert len(message) < 400  # a 10 KB input is not echoed back


@pytest.mark.parametrize("bad", ["4th singular", "me", "them", "", "x" * 10_240])
def test_bad_person_names_the_valid_persons_and_pronouns(bad):
    with pytest.raises(ConjugationError) as err:
        conjugate("go", "past simple", bad)
    message = str(err.value)
    assert all(p in message for p in PERSONS)
    assert all(p in message for p in PRONOUNS)
    assert len(message) < 400


@pytest.mark.parametrize("bad", [None, 3])
def test_non_string_arguments_are_rejected(bad):
    with pytest.raises(ConjugationError):
        validate_verb(bad)
    with pytest.raises(ConjugationError):
        normalize_tense(bad)
    with pytest.raises(ConjugationError):
        normalize_person(bad)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("go", "go"), ("  Go ", "go"), ("to go", "go"), ("To  Be", "be"), ("dry-clean", "dry-clean"),
     ("fly", "fly"), ("apply", "apply"), ("rely", "rely"), ("reply", "reply"), ("supply", "supply"),
     ("bully", "bully"), ("rally", "rally"), ("multiply", "multiply"),
     # real verbs the old stoplists refused: a pronoun, an -ly word, a preposition
     ("mine", "mine"), ("belly", "belly"), ("dolly", "dolly"), ("over", "over"),
     # phrasal verbs, spaced or hyphenated; a word the lexicon lacks but a prefix explains
     ("give up", "give up"), ("Give  Up", "give up"), ("give-up", "give up"), ("to look after", "look after"),
     ("put up with", "put up with"), ("mishear", "mishear"), ("text", "text"), ("dare", "dare")],
)
def test_validate_verb_accepts(raw, expected):
    assert validate_verb(raw) == expected


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a" * 31, "too long"),
        ("go home", "single word"),
        ("go2", "single word"),
        ("-go", "single word"),
        ("go-", "single word"),
        ("don't", "single word"),
        ("the", "article"),
        ("they", "pronoun"),
        ("with", "preposition"),
        ("because", "conjunction"),
        ("every", "determiner"),
        ("quickly", "adverb"),
        ("slowly", "adverb"),
        ("is", "'be'"),
        ("has", "'have'"),
        ("should", "modal"),
        ("would", "modal"),
        ("can", "modal"),
        ("must", "modal"),
        ("to", "preposition"),
        ("went", "'went' is the past of 'go'"),
        ("goes", "'goes' is the he/she/it form of 'go'"),
        ("given", "the past participle of 'give'"),
        ("made", "the past and the past participle of 'make'"),
        ("lying", "the -ing form of 'lie'"),
        ("lain", "the past participle of 'lie'"),
        ("am", "a present form of 'be'"),
        ("gave up", "give the base form 'give up'"),
        ("asdfgh", "not an English verb"),
        ("happy", "adjective"),
        ("beware", "no full conjugation"),
        ("give home", "single word"),
    ],
)
def test_validate_verb_rejects(bad, hint):
    with pytest.raises(ConjugationError) as err:
        validate_verb(bad)
    assert hint in str(err.value)


@pytest.mark.timing
@pytest.mark.parametrize("blob", ["a" * 10_240, "go " * 3_414, "to " * 3_414, "\n" * 10_240 + "go"])
def test_ten_kilobyte_verb_is_rejected_quickly(blob):
    start = time.perf_counter()
    with pytest.raises(ConjugationError) as err:
        validate_verb(blob)
    assert time.perf_counter() - start < 0.05
    assert len(str(err.value)) < 200


# --------------------------------------------------------------------------
# Irregular verb table
# --------------------------------------------------------------------------


def test_table_has_at_least_150_verbs():
    assert len(irregular_verbs()) >= 150


def test_table_contains_the_core_verbs():
    table = irregular_verbs()
    for base, past, participle in [
        ("go", "went", "gone"), ("be", "was", "been"), ("have", "had", "had"),
        ("do", "did", "done"), ("lie", "lay", "lain"), ("lay", "laid", "laid"),
        ("swim", "swam", "swum"), ("wind", "wound", "wound"),
    ]:
        assert table[base] == (past, participle)
    # Variants resolved to American English by leaving them to the regular rules.
    for regular in ("learn", "dream", "burn", "spell"):
        assert regular not in table


def test_irregular_verbs_returns_a_copy():
    irregular_verbs()["go"] = ("goed", "goed")
    assert conjugate("go", "past simple", "I") == "went"


@pytest.mark.parametrize(
    ("name", "header"),
    [("chosen_forms.tsv", ["verb", "stem", "form", "why"]), ("extra_verbs.tsv", ["verb", "why"])],
)
def test_every_data_row_is_well_formed(name, header):
    data_dir = resources.files("miniagent.tools").joinpath("data")
    lines = data_dir.joinpath(name).read_text("utf-8").splitlines()
    assert lines[0].split("\t") == header
    seen = set()
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        assert len(fields) == len(header), f"line {lineno}: {line!r}"
        key = tuple(fields[:-1])
        assert key not in seen, f"line {lineno}: repeated {key}"
        seen.add(key)
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", fields[0]), f"line {lineno}: {fields[0]!r}"
        assert len(fields[-1].split()) >= 3, f"line {lineno}: give the reason in words"
        if name == "chosen_forms.tsv":
            assert fields[1] in ("third", "past", "participle", "ing"), f"line {lineno}: {fields[1]!r}"
            assert re.fullmatch(r"[a-z]+(-[a-z]+)*", fields[2]), f"line {lineno}: {fields[2]!r}"


# --------------------------------------------------------------------------
# The exact words of a refusal, at its limits (found by `invoke mutants --wing tools`)
# --------------------------------------------------------------------------


def refusal(verb) -> str:
    with pytest.raises(ConjugationError) as err:
        validate_verb(verb)
    return str(err.value)


def test_a_verb_that_is_not_text_is_named_by_its_type():
    assert refusal(3) == "The verb must be text, not int."
    assert refusal(None) == "The verb must be text, not NoneType."


def test_an_empty_verb_is_told_to_give_one_word():
    assert refusal("  ") == "The verb is empty; give one word like 'go'."


def test_the_length_limits_are_inclusive():
    from miniagent.tools.conjugation import _MAX_RAW_LEN, MAX_VERB_LEN

    too_long = f"The verb is too long (max {MAX_VERB_LEN} letters); give one word like 'go'."
    # exactly at each limit: judged as a word (here: not in the lexicon), not refused for its length
    assert refusal("z" * MAX_VERB_LEN) == (f"'{'z' * MAX_VERB_LEN}' is not an English verb I know "
                                           "(it is not in the verb lexicon).")
    assert refusal("z" * (MAX_VERB_LEN + 1)) == too_long
    spaced = "go" + " " * (_MAX_RAW_LEN - 2)  # spaces count towards the raw limit, not the word's
    assert validate_verb(spaced) == "go" and len(spaced) == _MAX_RAW_LEN
    assert refusal(spaced + " ") == too_long


def test_more_than_one_verb_is_refused_with_the_words_it_was_given():
    assert refusal("go home") == ("'go home' is not a single word; give one verb in letters only, like 'go', "
                                  "or a phrasal verb, like 'give up'.")


def test_a_refusal_quotes_at_most_forty_characters_of_what_it_was_given():
    tail = "is not a single word; give one verb in letters only, like 'go', or a phrasal verb, like 'give up'."
    forty = "go" + " " * 37 + "2"  # words in it are short; the spaces make it long
    assert refusal(forty) == f"'{forty}' {tail}"
    assert refusal(forty + "3") == f"'{forty[:40]}...' {tail}"


@pytest.mark.parametrize(("word", "message"), [
    ("gave up on", "'gave' is the past of 'give'; give the base form 'give up on'."),
    ("axes", "'axes' is the he/she/it form of 'ax' or the he/she/it form of 'axe'; give the base form 'ax' or 'axe'."),
    ("left", "'left' is the past and the past participle of 'leave'; give the base form 'leave'."),
])
def test_an_inflected_form_is_told_every_base_form_it_comes_from(word, message):
    assert refusal(word) == message
