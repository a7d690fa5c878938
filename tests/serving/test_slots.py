"""The class server's runtime (serving/slots.py) on the real model: which slot a prompt goes to, what it
evaluates, and that its numbers are llama.cpp's, as the local runtime computes them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import THREADS

from miniagent.models.llama_runtime import KVRuntime, load_weights, log_softmax
from miniagent.models.prompt import HEADER
from miniagent.serving.slots import KEEP_IF_DROPPING_AT_MOST, Slots

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def slots():
    s = Slots(load_weights(), slots=3, n_ctx=4096, n_threads=THREADS)
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
    rt = KVRuntime(n_ctx=2048, n_threads=THREADS)
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
    small = Slots(load_weights(), slots=2, n_ctx=1024, n_threads=THREADS)
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


# --- the numbers a slot gives, whichever way its cells got there -------------------------------------------
@pytest.fixture(scope="module")
def local():
    rt = KVRuntime(n_ctx=2048, n_threads=THREADS)
    yield rt
    rt.close()


def same_top(logits: np.ndarray, reference: np.ndarray, n: int = 5) -> None:
    """The same likeliest token, at about the same log-probabilities (llama.cpp's numbers move by up to a few tenths
    with how a prompt is cut into batches; a slot that lost its cells gives another ranking altogether)."""
    ours, theirs = log_softmax(logits.astype(np.float64)), log_softmax(reference.astype(np.float64))
    assert np.argmax(ours) == np.argmax(theirs)
    assert len(set(np.argsort(-ours)[:n]) & set(np.argsort(-theirs)[:n])) >= n - 1  # near-ties may swap
    np.testing.assert_allclose(np.sort(ours)[-n:], np.sort(theirs)[-n:], atol=0.5)


def test_a_slot_that_shares_anothers_cells_gives_a_fresh_evaluations_numbers(slots, local):
    fresh(slots)
    she = question(slots, "What is the past simple of go for she?" + " Please." * 40)
    they = question(slots, "What is the future continuous of swim for they?" + " Thanks." * 40)
    slots.logits_after(she, "learner-a")
    _, shared = slots.logits_after(they, "learner-b")  # the header's cells borrowed from learner a's slot
    local.rollback(0)
    same_top(shared, local.sync(they))


def test_a_learner_going_on_in_its_slot_gets_a_fresh_evaluations_numbers(slots, local):
    fresh(slots)
    first = question(slots, "What is the past simple of go for she?")
    slots.logits_after(first, "learner-a")
    slots.logits_after(question(slots, "Another learner entirely?" + " Yes." * 30), "learner-b")
    on = first + slots.vocab.tokenize('{"tool": "conjugate", "verb": "go"')
    _, logits = slots.logits_after(on, "learner-a")
    local.rollback(0)
    same_top(logits, local.sync(on))


def test_a_new_server_has_counted_nothing_and_then_counts_exactly():
    s = Slots(load_weights(), slots=2, n_ctx=256, n_threads=THREADS)
    try:
        assert (s.requests, s.evaluated, s.shared) == (0, 0, 0)
        assert s.model_path.endswith(".gguf") and s.vocab.size > 200_000
        prompt = s.vocab.tokenize("The capital of France is", bos=True)
        done = s.complete(prompt, 3, [], None, "learner-a")
        assert s.owners == {"learner-a": 0}, "complete() hands the owner on"
        # the prompt, then each generated token but the last (nothing reads the logits after it)
        assert (s.requests, s.evaluated, s.shared) == (1, len(prompt) + 2, 0)
        assert (done.finish_reason, len(done.tokens)) == ("length", 3)
        s.complete(prompt, 1, [], None, "learner-b")
        # a slot of its own with the prompt's cells borrowed, its last token evaluated again for fresh logits
        assert (s.requests, s.evaluated, s.shared) == (2, len(prompt) + 3, len(prompt))
    finally:
        s.close()


def test_a_completion_stops_where_the_slot_is_full():
    s = Slots(load_weights(), slots=1, n_ctx=32, n_threads=THREADS)
    try:
        prompt = s.vocab.tokenize(" word" * 28, bos=True)[:29]
        done = s.complete(prompt, 10, [], None)
        assert len(s.held[0]) == 32 and (done.finish_reason, len(done.tokens)) == ("length", 4)
        whole = s.vocab.tokenize(" other" * 40, bos=True)[:32]
        assert s.logits_after(whole)[1].shape == (s.vocab.size,)  # a prompt exactly as long as the cache fits
    finally:
        s.close()


def test_an_empty_stop_string_stops_nothing_and_a_stop_at_the_start_stops_at_once(slots):
    fresh(slots)
    prompt = question(slots, "What is the past simple of go for she?")
    first = slots.complete(prompt, 1, [], None)
    assert slots.complete(prompt, 2, [""], None).finish_reason == "length"
    stopped = slots.complete(prompt, 5, [first.text], None)
    assert (stopped.text, stopped.finish_reason, stopped.tokens) == ("", "stop", first.tokens)


def test_the_end_of_text_ends_a_completion_without_a_token(slots, monkeypatch):
    fresh(slots)
    prompt = question(slots, "What is the past simple of go for she?")

    lib = slots._lib

    class EndsAtOnce:  # llama.cpp, but every token is the end of text
        def __getattr__(self, name):
            return getattr(lib, name)

        def llama_vocab_is_eog(self, vocab, token):
            return True

    monkeypatch.setattr(slots, "_lib", EndsAtOnce())
    done = slots.complete(prompt, 5, ['"'], 3)
    assert (done.text, done.tokens, done.finish_reason, done.top_logprobs, done.token_logprobs) == \
        ("", [], "stop", [], [])


def test_the_likeliest_one_is_the_top_one(slots):
    fresh(slots)
    _, logits = slots.logits_after(question(slots, "What is the past simple of go for she?"))
    (piece, value), = slots.top(logits, 1).items()
    assert piece == slots.vocab.piece(int(np.argmax(logits)))
    assert value == pytest.approx(float(log_softmax(logits.astype(np.float64)).max()))
    assert len(slots.top(logits, 2)) == 2
    every = np.sort(log_softmax(logits.astype(np.float64)))[::-1]
    top20 = list(slots.top(logits, 20).values())  # two tokens with the same text count once
    assert len(top20) >= 19 and min(top20) >= every[19] - 1e-9, "only the 20 likeliest, none further down"
    with pytest.raises(ValueError, match="^an empty prompt$"):
        slots.logits_after([])


def test_the_top_k_are_exactly_the_k_likeliest_tokens(slots):
    logits = np.random.default_rng(7).normal(size=slots.vocab.size).astype(np.float32)
    for k in (1, 2, 5, 20):
        likeliest = np.argsort(-logits)[:k]
        assert set(slots.top(logits, k)) == {slots.vocab.piece(int(t)) for t in likeliest}, k
