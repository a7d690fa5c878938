"""The few-shot prompt: every example is a run the loop could really have, with the engine's real forms.

A base model copies its examples. An example with a wrong form, an action the loop's parser would refuse,
a plan whose step count does not match its calls, or a question taken from an eval set would teach the
model something wrong or flatter its score; each of these fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from miniagent.agent.actions import parse_action
from miniagent.agent.grammar import TENSES
from miniagent.models import prompt
from miniagent.tools.server import ToolInputError, conjugate_text

ROOT = Path(__file__).resolve().parents[2]
EVAL_SETS = sorted((ROOT / "labs").rglob("*.jsonl"))
PERSONS = ("I", "you", "he", "she", "it", "we", "they")


def calls_and_results(conversation):
    """[(parsed action, the observation after it)] and the final answer of one example."""
    roles = [entry.role for entry in conversation]
    assert roles[0] == "question" and roles[-1] == "action"
    assert roles[1:-1] == ["action", "observation"] * ((len(roles) - 2) // 2), roles
    pairs = []
    for n, i in enumerate(range(1, len(conversation) - 1, 2)):
        pairs.append((parse_action(conversation[i].text, first_turn=n == 0), conversation[i + 1].text))
    answer = parse_action(conversation[-1].text, first_turn=False)
    assert answer.kind == "answer"
    return pairs, answer.answer


@pytest.mark.parametrize("n", range(len(prompt.EXAMPLES)))
def test_each_example_is_a_run_the_loop_accepts_with_the_engines_own_forms(n):
    pairs, answer = calls_and_results(prompt.examples()[n])
    assert pairs[0][0].plan_steps == len(pairs)  # the first call declares the plan: as many steps as calls
    assert all(action.plan_steps is None for action, _ in pairs[1:])
    results = []
    for action, observation in pairs:
        assert action.kind == "tool" and action.tool == "conjugate"
        args = action.args
        try:
            form = conjugate_text(args["verb"], args["tense"], args["person"])  # what the MCP server answers
        except ToolInputError as err:
            # the one error example: the server refuses the word too, and the answer names it (the example's
            # wording after "is not a verb" is shorter than the server's; the prompt keeps it as measured)
            assert str(err).startswith(f"'{args['verb']}' is not a verb")
            assert observation.startswith(f"error: '{args['verb']}' is not a verb")
            assert answer.startswith(f"'{args['verb']}' is not a verb")
            return
        assert observation == form
        results.append(form)
    assert answer == ", ".join(results)


def test_the_calls_cover_every_tense_and_the_single_calls_every_person():
    conversations = [calls_and_results(c)[0] for c in prompt.examples()]
    calls = [action.args for pairs in conversations for action, observation in pairs if not observation.startswith("error")]
    single = [pairs[0][0].args for pairs in conversations if len(pairs) == 1 and not pairs[0][1].startswith("error")]
    assert {args["tense"] for args in calls} == set(TENSES)
    assert {args["tense"] for args in single} == set(TENSES) - {"past simple"}  # past simple: the three-call example
    assert {args["person"] for args in single} == set(PERSONS)


def test_no_example_takes_a_question_or_a_verb_from_an_eval_set():
    assert EVAL_SETS  # the check needs the sets
    questions, verbs = set(), set()
    for path in EVAL_SETS:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                questions.add(item["question"].casefold())
                verbs.add((item["label"]["verb"] if "label" in item else item.get("decline", "")).casefold())
    for conversation in prompt.examples():
        assert conversation[0].text.casefold() not in questions
        pairs, _ = calls_and_results(conversation)
        assert not {action.args["verb"].casefold() for action, _ in pairs} & verbs


def test_the_intro_names_every_tense_and_person_and_the_header_is_its_examples_rendered():
    for tense in TENSES:
        assert tense in prompt.INTRO
    for person in PERSONS:
        assert f" {person}," in prompt.INTRO or f" {person}." in prompt.INTRO
    assert prompt.EXAMPLES == prompt.examples()  # built once at import, the same as built afresh here
    assert prompt.HEADER == prompt.INTRO + "".join(prompt.render(c) + "\n" for c in prompt.examples())
    assert prompt.NEXT_ACTION == "A: "


def test_render_writes_one_line_per_entry_with_its_role():
    from miniagent.agent.ports import Entry

    text = prompt.render([Entry("question", "q"), Entry("action", "a"), Entry("observation", "two\nlines")])
    assert text == "Q: q\nA: a\nO: two lines\n"


def test_render_changes_only_the_newlines_of_an_entry():
    """The model reads the text as the tool or the learner wrote it: runs of spaces and tabs stay as they are."""
    from miniagent.agent.ports import Entry

    text = prompt.render([Entry("question", "What  is\tthe past of  go?"), Entry("observation", "a  b\n\nc ")])
    assert text == "Q: What  is\tthe past of  go?\nO: a  b  c \n"
