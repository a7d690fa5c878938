"""The class server's runtime (models/slots.py) on the real model: which slot a prompt goes to, what it
evaluates, and that its numbers are llama.cpp's, as the local runtime computes them."""

from __future__ import annotations

import numpy as np
import pytest

from miniagent.models.llama_runtime import KVRuntime, load_weights, log_softmax
from miniagent.models.prompt import HEADER
from miniagent.models.slots import KEEP_IF_DROPPING_AT_MOST, Slots

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def slots():
    s = Slots(load_weights(), slots=3, n_ctx=4096, n_threads=2)
    yield s
    s.close()


def fresh(s: Slots) -> None:
    for slot in range(len(s.held)):
        s._clear(slot)
    s.used_at = [0.0] * len(s.held)
    s.owners.clear()


# The start every learner's prompt shares: a part of the real header (the slots do not care how long it is,
# and each test evaluates it again).
SHARED = HEADER[:600]


def question(s: Slots, text: str) -> list[int]:
    return s.vocab.tokenize(SHARED + f"\n\nQ: {text}\nA: ", bos=True)


def test_a_learner_going_on_stays_in_its_slot_and_evaluates_only_what_is_new(slots):
    fresh(slots)
    first = question(slots, "What is the past simple of go for she?")
    slot, _ = slots.logits_after(first)
    before = slots.evaluated
    longer = first + slots.vocab.tokenize('{"tool": "conjugate"')
    again, _ = slots.logits_after(longer)
    assert again == slot
    assert slots.evaluated - before == len(longer) - len(first)
    before = slots.evaluated
    other = first + slots.vocab.tokenize('{"answer": "she went')  # the walk backtracks a few tokens
    common = next(i for i, (x, y) in enumerate(zip(longer, other)) if x != y)
    assert common > len(first)  # '{"' is one token, held already
    assert slots.logits_after(other)[0] == slot
    assert slots.held[slot] == other
    assert slots.evaluated - before == len(other) - common


def test_another_learner_gets_a_slot_of_its_own_sharing_the_header(slots):
    fresh(slots)
    she = question(slots, "What is the past simple of go for she?" + " Please." * 40)
    they = question(slots, "What is the future continuous of swim for they?" + " Thanks." * 40)
    header = len(slots.vocab.tokenize(SHARED, bos=True))
    a, _ = slots.logits_after(she)
    before, shared = slots.evaluated, slots.shared
    b, _ = slots.logits_after(they)
    assert b != a
    common = next(i for i, (x, y) in enumerate(zip(she, they)) if x != y)
    assert common >= header - 1
    assert slots.shared - shared == common  # the header's cells are shared, not evaluated again
    assert slots.evaluated - before == len(they) - common
    assert slots.held[a] == she  # the first learner's slot is untouched
    before = slots.evaluated
    slots.logits_after(she + slots.vocab.tokenize(' {"'))
    assert slots.evaluated - before == len(slots.vocab.tokenize(' {"'))


def test_a_prompt_that_drops_little_of_a_slot_reuses_it_and_one_that_drops_more_does_not(slots):
    fresh(slots)
    base = question(slots, "What is the past simple of go for she?")
    tail = slots.vocab.tokenize(" word" * (KEEP_IF_DROPPING_AT_MOST + 1))
    slot, _ = slots.logits_after(base + tail[:KEEP_IF_DROPPING_AT_MOST])
    assert slots.pick(base)[0] == slot  # dropping exactly the limit: the same learner backtracking
    slots.logits_after(base + tail)
    assert slots.pick(base)[0] != slot  # one more: another learner's prompt


def test_the_oldest_slot_is_the_one_given_away(slots):
    fresh(slots)
    prompts = [question(slots, f"Question number {n}?" + " More." * 80) for n in range(4)]
    used = [slots.logits_after(p)[0] for p in prompts[:3]]
    assert sorted(used) == [0, 1, 2]
    assert slots.logits_after(prompts[3])[0] == used[0]
    assert slots.held[used[1]] == prompts[1] and slots.held[used[2]] == prompts[2]


def test_the_same_prompt_twice_evaluates_nothing_the_second_time(slots):
    fresh(slots)
    prompt = question(slots, "What is the past simple of go for she?")
    _, logits = slots.logits_after(prompt)
    before = slots.evaluated
    _, again = slots.logits_after(prompt)
    assert slots.evaluated == before
    np.testing.assert_array_equal(logits, again)


def test_its_top_log_probabilities_are_the_local_runtimes(slots):
    fresh(slots)
    prompt = question(slots, "What is the past simple of go for she?")
    rt = KVRuntime(n_ctx=2048)
    try:
        local = log_softmax(rt.sync(prompt).astype(np.float64))
    finally:
        rt.close()
    _, logits = slots.logits_after(prompt)
    top = slots.top(logits, 20)
    assert len(top) <= 20 and list(top.values()) == sorted(top.values(), reverse=True)
    order = np.argsort(-local)[:20]
    assert list(top)[:5] == [slots.vocab.piece(int(t)) for t in order[:5]]
    for token in order[:5]:
        assert top[slots.vocab.piece(int(token))] == pytest.approx(local[token], abs=1e-3)
    assert sum(np.exp(list(top.values()))) <= 1.0 + 1e-9


def test_greedy_completion_stops_before_a_stop_string_or_at_max_tokens(slots):
    fresh(slots)
    prompt = question(slots, "What is the past simple of go for she?") + slots.vocab.tokenize('{"tool": "conjugate", "verb": "')
    done = slots.complete(prompt, 8, ['"'], logprobs=3)
    assert done.finish_reason == "stop" and done.text == "go"
    assert len(done.top_logprobs) == len(done.tokens) and all(len(t) <= 3 for t in done.top_logprobs)
    assert done.token_logprobs == [max(t.values()) for t in done.top_logprobs]  # greedy: each the likeliest
    assert '"' in slots.vocab.detokenize(done.tokens)  # the token that held the quote was generated, not returned
    cut = slots.complete(prompt, 1, ['"'], logprobs=None)
    assert (cut.finish_reason, len(cut.tokens), cut.top_logprobs, cut.token_logprobs) == ("length", 1, [], [])
    assert slots.complete(prompt, 0, [], logprobs=None).tokens == []


def test_a_full_cache_gives_the_oldest_slots_cells_back(slots):
    small = Slots(load_weights(), slots=2, n_ctx=1024, n_threads=2)
    try:
        first = small.vocab.tokenize(" alpha" * 600, bos=True)
        second = small.vocab.tokenize(" beta" * 600, bos=True)
        a, _ = small.logits_after(first)
        b, _ = small.logits_after(second)  # 1200 cells wanted, 1024 there: the first slot's go
        assert small.held[b] == second and small.held[a] == []
        with pytest.raises(Exception, match="n_ctx=1024"):
            small.logits_after(small.vocab.tokenize(" gamma" * 1100, bos=True))
    finally:
        small.close()


def test_each_owner_keeps_a_slot_of_its_own_however_alike_the_prompts(slots):
    fresh(slots)
    she = question(slots, "What is the past simple of go for she?")
    he = question(slots, "What is the past simple of go for he?")  # a few tokens apart: no owner would share
    a, _ = slots.logits_after(she, "learner-a")
    shared = slots.shared
    b, _ = slots.logits_after(he, "learner-b")
    assert b != a and slots.held[a] == she and slots.held[b] == he
    assert slots.shared - shared == next(i for i, (x, y) in enumerate(zip(she, he)) if x != y)
    before = slots.evaluated
    assert slots.logits_after(she + slots.vocab.tokenize('{"'), "learner-a")[0] == a
    assert slots.evaluated - before == 1
    other = question(slots, "Something else entirely, a new question?")
    assert slots.logits_after(other, "learner-a")[0] == a  # a new question: the same learner, the same slot
    assert slots.held[b] == he


def test_more_owners_than_slots_take_over_the_slot_used_longest_ago(slots):
    fresh(slots)
    prompts = {f"learner-{n}": question(slots, f"Question number {n}?") for n in range(4)}
    used = {owner: slots.logits_after(p, owner)[0] for owner, p in list(prompts.items())[:3]}
    assert sorted(used.values()) == [0, 1, 2]
    assert slots.logits_after(prompts["learner-3"], "learner-3")[0] == used["learner-0"]
    assert "learner-0" not in slots.owners and slots.owners["learner-3"] == used["learner-0"]
    assert slots.logits_after(prompts["learner-0"], "learner-0")[0] == used["learner-1"]  # back: the next oldest
