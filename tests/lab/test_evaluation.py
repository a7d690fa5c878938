"""The eval scorer is strict (subject and whole verb phrase), and the eval files are labelled by the engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.lab.evaluation import EvalSetError, accepted_forms, is_correct, load_eval_set

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "labs" / "01-tutor-end-to-end"
SETS = ["eval.jsonl", "heldout.jsonl", "fresh.jsonl", "unseen.jsonl"]


@pytest.mark.parametrize(("answer", "accept"), [
    ("she went", ["she went"]),
    ("She went.", ["she went"]),
    ("  SHE   WENT!  ", ["she went"]),
    ('"she has seen"', ["she has seen"]),
    ("“they are running”.", ["they are running"]),
    ("Past simple: I flew", ["I flew"]),
    ("it studies", ["he studies", "she studies", "it studies"]),
    ("you will have been waiting", ["you will have been waiting"]),
])
def test_right_answers(answer, accept):
    assert is_correct(answer, accept)


@pytest.mark.parametrize(("answer", "accept"), [
    # the examples from issue 7: the old scorer counted every one of these as right
    ("it flew", ["I flew"]),
    ("you will have done", ["you have done"]),
    ("it will eat", ["I will eat"]),
    ("we were swimming", ["you were swimming"]),
    ("we bought", ["I bought"]),
    ("we went", ["he goes", "she goes", "it goes"]),
    # a second form or subject next to the right one
    ("she went, he went", ["she went"]),
    ("she went or she has gone", ["she went"]),
    ("she went\nhe went", ["she went"]),
    # missing subject, missing or extra words
    ("went", ["she went"]),
    ("she", ["she went"]),
    ("she has", ["she has seen"]),
    ("she had seen", ["she has seen"]),
    ("she has been seeing", ["she has seen"]),
    ("they will have been waiting", ["you will have been waiting"]),
    ("he studys", ["he studies", "she studies", "it studies"]),
    ("she wented", ["she went"]),
    ("", ["she went"]),
])
def test_wrong_answers(answer, accept):
    assert not is_correct(answer, accept)


def test_accepted_forms_come_from_the_engine():
    assert accepted_forms("fly", "past simple", "I") == ["I flew"]
    assert accepted_forms("see", "present perfect", "she") == ["she has seen"]
    assert accepted_forms("study", "present simple", "3rd singular") == ["he studies", "she studies", "it studies"]
    assert accepted_forms("wait", "future perfect continuous", "you (plural)") == ["you will have been waiting"]
    assert accepted_forms("be", "past simple", "2nd plural") == ["you were"]


@pytest.mark.parametrize("name", SETS)
def test_every_set_loads_and_matches_its_labels(name):
    items = load_eval_set(LAB / name)
    assert len(items) >= 30
    for item in items:
        assert set(item.label) == {"verb", "tense", "person"}, item.question
        assert item.accept == accepted_forms(item.label["verb"], item.label["tense"], item.label["person"])
    questions = [i.question for i in items]
    assert len(set(questions)) == len(questions), "duplicate question"


def test_the_sets_do_not_overlap():
    seen: dict[str, str] = {}
    for name in SETS:
        for item in load_eval_set(LAB / name):
            assert item.question not in seen, f"{item.question!r} in {seen.get(item.question)} and {name}"
            seen[item.question] = name


def test_the_fresh_set_covers_every_tense_and_person():
    from miniagent.tools.conjugation import PERSONS, TENSES, normalize_person

    items = load_eval_set(LAB / "fresh.jsonl")
    assert {i.label["tense"] for i in items} == set(TENSES)
    assert {normalize_person(i.label["person"]) for i in items} == set(PERSONS)


def test_no_prompt_example_comes_from_an_eval_set():
    from miniagent.models.prompt import EXAMPLES

    example_questions = {c[0].text for c in EXAMPLES}
    example_verbs = {json.loads(e.text)["verb"] for c in EXAMPLES for e in c if e.role == "action" and '"verb"' in e.text}
    for name in SETS:
        for item in load_eval_set(LAB / name):
            assert item.question not in example_questions
            assert item.label["verb"] not in example_verbs, (name, item.label["verb"])


def test_label_check_passes_on_the_committed_files():
    proc = subprocess.run([sys.executable, str(LAB / "label.py"), "--check", *(str(LAB / n) for n in SETS)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("line", "message"), [
    ('{"question": "Past simple of go for she?", "expected": "went"}', "old format"),
    ('{"question": "Past simple of go for she?", "accept": ["went"]}', "no subject"),
    ('{"question": "Past simple of go for she?", "accept": []}', "non-empty list"),
    ('{"question": "Past simple of go for she?", "accept": "she went"}', "non-empty list"),
    ('{"question": "", "accept": ["she went"]}', "question"),
    ('{"question": "Past simple of go for she?", "accept": ["she went"], "note": 1}', "unknown keys"),
    ('["she went"]', "JSON object"),
    ("{not json", "not JSON"),
])
def test_bad_files_are_a_clear_error(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "ok?", "accept": ["I went"]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(EvalSetError) as err:
        load_eval_set(path)
    assert message in str(err.value) and ":2:" in str(err.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(EvalSetError, match="not found"):
        load_eval_set(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(EvalSetError, match="no items"):
        load_eval_set(tmp_path / "empty.jsonl")


def test_eval_writes_every_runs_events_to_the_trace_it_is_given(tmp_path):
    # --trace is a flag of `eval` as of `ask`: it must not be parsed and dropped
    trace = tmp_path / "eval.jsonl"
    proc = subprocess.run([sys.executable, "-m", "miniagent", "eval", "--llm", "scripted:oracle", "--limit", "3",
                           "--json", "--trace", str(trace)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [e["event"] for e in events].count("run_start") == 3
    assert [e["stop_reason"] for e in events if e["event"] == "stop"] == ["answered"] * 3


@pytest.mark.parametrize(("answer", "accept", "right"), [
    ("'she' \u201cwent\u201d", ["she went"], True),              # quotes around each word
    ("Tense: past simple: she went", ["she went"], True),     # the last lead-in is skipped, however many
    ("Past simple: she went: he went", ["she went"], False),  # what follows the last colon is judged
    ("she went", ["SHE WENT."], True),
])
def test_the_scorer_reads_quotes_and_lead_ins_as_a_user_would(answer, accept, right):
    assert is_correct(answer, accept) is right


@pytest.mark.parametrize(("line", "message"), [
    ('["she went"]', "a line must be a JSON object"),
    ('{"question": "Past simple of go for she?", "expected": "went"}',
     '"expected" is the old format: list whole answers, subject included, under "accept"'),
    ('{"question": "Past simple of go for she?"}', '"accept" must be a non-empty list of strings'),
    ('{"question": "  ", "accept": ["she went"]}', '"question" must be a non-empty string'),
    ('{"question": "Q?", "accept": ["she went"], "label": "go"}',
     '"label" must be an object {"verb": ..., "tense": ..., "person": ...}'),
    ('{"question": "Q?", "accept": ["she went"], "note": 1, "extra": 2}', "unknown keys ['extra', 'note']"),
    ('{"question": "Q?", "accept": ["she went"], "expected": "went"}', "unknown keys ['expected']"),
    ('{"question": "Q?", "accept": ["went"]}',
     "accepted answer 'went' has no subject: write it whole, e.g. \"she went\""),
    ('{"question": "Q?", "decline": "dreaming", "accept": ["I ate"]}',
     'a declined item is {"question": ..., "decline": "<the word its no names>"}, with "decline_kind" (one of '
     "['no_tense', 'nothing', 'tense', 'verb']) if its kind matters, no more"),
    ('{"question": "Q?", "decline": 3}', 'a declined item is {"question": ..., "decline": "<the word its no '
     'names>"}, with "decline_kind" (one of [\'no_tense\', \'nothing\', \'tense\', \'verb\']) if its kind matters, no more'),
    ('{"question": "Q?", "decline_kind": "never"}',
     "\"decline_kind\" 'never' is no kind of no; the kinds: ['no_tense', 'nothing', 'tense', 'verb']"),
    ('{"question": "Q?", "decline": "France", "decline_kind": "nothing"}',
     'a no of kind \'nothing\' names no word: leave "decline" out'),
    ('{"question": "Q?", "decline_kind": "verb"}', '"decline" must name the word the no names'),
    ('{"question": "Q?", "decline": "  "}', '"decline" must name the word the no names'),
])
def test_each_bad_line_says_exactly_what_is_wrong_where_and_how_a_line_looks(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    with pytest.raises(EvalSetError) as err:
        load_eval_set(path)
    assert str(err.value) == (f'{path}:1: {message}; each line is '
                              '{"question": "...", "accept": ["she went", ...]} or '
                              '{"question": "...", "decline": "<the word>"} '
                              '(a no that names no word: {"question": "...", "decline_kind": "nothing"})')


def test_a_blank_line_between_items_is_skipped_not_the_end(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"question": "A?", "accept": ["I went"]}\n\n   \n{"question": "B?", "accept": ["we went"]}\n',
                    encoding="utf-8")
    assert [item.question for item in load_eval_set(path)] == ["A?", "B?"]


def test_a_declined_line_names_its_word_its_kind_or_both(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text('{"question": "A?", "decline": " dreaming "}\n{"question": "B?", "decline_kind": "nothing"}\n'
                    '{"question": "C?", "decline": "comer", "decline_kind": "verb"}\n', encoding="utf-8")
    assert [(i.accept, i.decline, i.decline_kind, i.declines) for i in load_eval_set(path)] == [
        ([], "dreaming", "", True), ([], "", "nothing", True), ([], "comer", "verb", True)]

