"""The llama.cpp runtime the local backend decodes with, read against the model itself.

Every figure a decision rests on (an option's log-probability, the next token's logits, what a cache holds) is
computed here a second, plainer way (one token at a time, one sequence, no trie, no batch) and compared. The
model is the real Gemma 3 270M, loaded once for the file.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from helpers import THREADS

from miniagent.agent.errors import ContextFull, ModelTimeout
from miniagent.models import llama_runtime, model_file
from miniagent.models.llama_runtime import (MAX_SEQUENCES, KVRuntime, close_quietly, common_prefix, load_weights,
                                            log_softmax)

PROMPT = "Question: What is the past simple of go for she?\nAnswer:"


# --- the plain helpers -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b, shared", [([], [], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2),
                                          ([1, 2], [1, 2, 3], 2), ([1, 2, 3], [1, 9, 3], 1), ([4], [5], 0)])
def test_common_prefix_counts_the_tokens_shared_from_the_start(a, b, shared):
    assert common_prefix(a, b) == shared


def test_close_quietly_closes_each_in_order_even_after_a_failure():
    closed = []

    def fails():
        closed.append("ctx")
        raise RuntimeError("already closed")

    close_quietly(lambda: closed.append("batch"), fails, lambda: closed.append("model"))
    assert closed == ["batch", "ctx", "model"]


def test_log_softmax_is_the_log_of_probabilities_that_sum_to_one():
    logits = np.array([1000.0, 999.0, 990.0])  # large: a naive exp overflows
    got = log_softmax(logits)
    assert np.isclose(np.exp(got).sum(), 1.0)
    assert np.allclose(got, [-0.31326, -1.31326, -10.31326], atol=1e-4)
    assert np.allclose(log_softmax(logits - 1000.0), got)


@pytest.mark.real_model
def test_the_weights_say_where_they_came_from_and_load_quietly(capfd):
    from miniagent.models.llama_params import choose_amx

    """Which buffers llama.cpp puts the weights in is the CPU's business (one mapped buffer; or, where its
    kernels want another layout, 12.66 MiB repacked beside it on an AMD EPYC with AVX-512): whatever they are,
    they are read from its log, each named and sized, and together they hold the packaged file's weights."""
    loaded = load_weights()
    try:
        assert loaded.path == model_file.default_model_path() and loaded.amx == choose_amx()
        file_mib = os.path.getsize(loaded.path) / 2**20
        assert loaded.buffers and all(name.startswith("CPU") or name == "AMX" for name in loaded.buffers)
        assert all(mib > 0 for mib in loaded.buffers.values()), loaded.buffers
        assert sum(loaded.buffers.values()) > 0.9 * file_mib, (loaded.buffers, file_mib)
        assert capfd.readouterr().err == "", "llama.cpp's log reached stderr"
    finally:
        loaded.model.close()


def _load_weights():
    return load_weights().model


def _load_the_servers_tokenizer():
    from miniagent.models.openai_compat import ServerRuntime

    return ServerRuntime(server=None).model


@pytest.mark.real_model
@pytest.mark.parametrize("load", [_load_weights, _load_the_servers_tokenizer], ids=["local", "openai"])
def test_the_load_leaves_the_processs_stdout_and_stderr_where_they_were(monkeypatch, load):
    """The load runs in a thread beside the MCP server's start: a server spawned meanwhile inherits fds 1 and 2,
    and with llama-cpp-python's quiet load they pointed at /dev/null (the server's fault lines were lost). The
    openai backend loads the model file too, for its tokenizer, at the same moment."""
    import llama_cpp.llama_cpp as capi

    def identity(fd: int) -> tuple[int, int]:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    before, during = (identity(1), identity(2)), []
    real = capi.llama_model_load_from_file

    def spy(*args):
        during.append((identity(1), identity(2)))
        return real(*args)

    monkeypatch.setattr(capi, "llama_model_load_from_file", spy)
    load().close()
    assert during == [before]


def test_a_missing_model_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"^model file not found: {tmp_path / 'none.gguf'}$"):
        load_weights(str(tmp_path / "none.gguf"))


# --- the runtime, on the real model ----------------------------------------------------------------------------



@pytest.fixture(scope="module")
def weights():
    return load_weights()


@pytest.fixture
def rt(weights):
    runtime = KVRuntime(n_ctx=1024, n_threads=THREADS, weights=weights)
    yield runtime
    runtime.ctx.close()
    runtime.batch.close()


def same_logits(a: np.ndarray, b: np.ndarray) -> bool:
    """The same next-token logits up to llama.cpp's arithmetic: a quantized model's figures shift by a few tenths
    with how the tokens were batched (one chunk or two, one sequence or sixteen), while a wrong position, a token
    left out or another sequence's cells shift them by whole units and change the likeliest token."""
    return int(np.argmax(a)) == int(np.argmax(b)) and float(np.abs(a - b).max()) < LOGIT_TOLERANCE


LOGIT_TOLERANCE = 1.0  # measured here: up to 0.7 (a prefix evaluated again after a rollback)
LOGP_TOLERANCE = 0.15  # an option's log-probability, the same way


def plain_logits(weights, tokens: list[int]) -> np.ndarray:
    """The next token's logits after ``tokens``, from a fresh context evaluating them in one go."""
    fresh = KVRuntime(n_ctx=1024, n_threads=THREADS, weights=weights)
    try:
        return fresh.feed(list(tokens))
    finally:
        fresh.ctx.close()
        fresh.batch.close()


@pytest.mark.real_model
def test_feeding_evaluates_after_what_the_cache_holds_and_counts_it(rt, weights):
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    first = rt.feed(tokens[:5])
    assert rt.tokens == tokens[:5] and rt.evaluated == 5
    after = rt.feed(tokens[5:])
    assert rt.tokens == tokens and rt.evaluated == len(tokens)
    assert same_logits(after, plain_logits(weights, tokens))
    assert same_logits(first, plain_logits(weights, tokens[:5]))


@pytest.mark.real_model
def test_a_long_prompt_is_fed_in_chunks_of_the_batch_size(rt, weights):
    tokens = (rt.vocab.tokenize(PROMPT * 40, bos=True))[:600]
    assert len(tokens) > rt.n_batch
    assert same_logits(rt.feed(tokens), plain_logits(weights, tokens))
    assert rt.evaluated == 600 and len(rt.tokens) == 600


@pytest.mark.real_model
def test_what_does_not_fit_the_context_is_refused_before_anything_is_evaluated(rt):
    rt.feed([2] * 1000)
    with pytest.raises(ContextFull, match=r"^1025 tokens do not fit in n_ctx=1024$"):
        rt.feed([2] * 25)
    assert rt.evaluated == 1000 and len(rt.tokens) == 1000
    rt.feed([2] * 24)  # exactly full is allowed
    assert len(rt.tokens) == 1024


@pytest.mark.real_model
def test_sync_evaluates_only_what_is_new_and_nothing_for_the_same_prompt(rt, weights):
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    rt.sync(tokens[:8])
    before = rt.evaluated
    logits = rt.sync(tokens)
    assert rt.evaluated - before == len(tokens) - 8
    again = rt.sync(tokens)
    assert rt.evaluated - before == len(tokens) - 8 and again is logits, "the same prompt was evaluated again"
    shorter = rt.sync(tokens[:6])  # a prefix of what the cache holds: its last token is evaluated afresh
    assert rt.tokens == tokens[:6] and rt.evaluated - before == len(tokens) - 8 + 1
    assert same_logits(shorter, plain_logits(weights, tokens[:6]))
    other = tokens[:4] + rt.vocab.tokenize(" Tell me a story")
    assert same_logits(rt.sync(other), plain_logits(weights, other))
    assert rt.tokens == other


@pytest.mark.real_model
def test_rollback_forgets_the_tokens_and_the_logits_after_its_length(rt):
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    rt.sync(tokens[:5])
    rt.sync(tokens[:9])
    rt.rollback(7)
    assert rt.tokens == tokens[:7] and 9 not in rt._next_logits and 5 in rt._next_logits
    rt.rollback(5)
    assert 5 in rt._next_logits, "the logits at the kept length are still right"
    rt.rollback(20)  # longer than what it holds: nothing to do
    assert rt.tokens == tokens[:5]
    before = rt.evaluated
    rt.sync(tokens[:5])
    assert rt.evaluated == before, "the cache still holds the kept tokens and their logits"


def token_logp(weights, prompt: list[int], path: list[int], token: int, among: list[int] | None) -> float:
    """log p(token | prompt + path), over ``among`` (a grammar's choice) or the whole vocabulary."""
    logits = plain_logits(weights, prompt + path).astype(np.float64)
    if among is None:
        return float(log_softmax(logits)[token])
    allowed = logits[among]
    return float(logits[token] - allowed.max() - np.log(np.exp(allowed - allowed.max()).sum()))


@pytest.mark.real_model
def test_an_options_score_is_its_log_probability_where_the_grammar_leaves_a_choice(rt, weights):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    she, he, went, goes = (rt.vocab.tokenize(w)[0] for w in (" she", " he", " went", " goes"))
    options = [[she, went], [she, goes], [he, went]]
    got = rt.score(prompt, options)
    first = [she, he]
    expected = [token_logp(weights, prompt, [], she, first) + token_logp(weights, prompt, [she], went, [went, goes]),
                token_logp(weights, prompt, [], she, first) + token_logp(weights, prompt, [she], goes, [went, goes]),
                token_logp(weights, prompt, [], he, first)]  # after " he" only " went": no choice, no cost
    assert np.allclose(got, expected, atol=LOGP_TOLERANCE)
    assert rt.tokens == prompt, "the options' sequences were left in the cache"


@pytest.mark.real_model
def test_a_node_where_the_grammar_leaves_no_choice_costs_no_evaluation(rt):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    she, he, went = (rt.vocab.tokenize(w)[0] for w in (" she", " he", " went"))
    rt.sync(prompt)
    before = rt.evaluated
    rt.score(prompt, [[she, went], [he, went]])
    assert rt.evaluated == before, "a node with one allowed token was evaluated"
    rt.score(prompt, [[she, went], [she, he], [he, went]])
    assert rt.evaluated == before + 1, "the one branching node after the prompt is one token"
    rt.score(prompt, [[she, went], [he, went]], renormalise=False)
    assert rt.evaluated == before + 3, "without renormalising, every node is evaluated"


@pytest.mark.real_model
def test_a_branching_node_deep_in_the_trie_is_scored_at_its_own_position(rt, weights):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    she, has, went, gone, been = (rt.vocab.tokenize(w)[0] for w in (" she", " has", " went", " gone", " been"))
    options = [[she, has, gone], [she, has, been]]
    got = rt.score(prompt, options)
    expected = [token_logp(weights, prompt, [she, has], t, [gone, been]) for t in (gone, been)]
    assert np.allclose(got, expected, atol=LOGP_TOLERANCE)
    assert rt.evaluated == len(prompt) + 2, "the path to the branching node is two tokens"


def counting_decodes(rt, monkeypatch) -> list[int]:
    """The number of tokens of each llama.cpp decode the runtime makes from now on."""
    sizes, real = [], rt._decode
    monkeypatch.setattr(rt, "_decode", lambda: sizes.append(rt.batch.batch.n_tokens) or real())
    return sizes


@pytest.mark.real_model
def test_a_prompts_new_tokens_are_decoded_with_the_first_options_in_one_decode(rt, weights, monkeypatch):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    rt.sync(prompt[:6])
    she, he, went, goes = (rt.vocab.tokenize(w)[0] for w in (" she", " he", " went", " goes"))
    decodes = counting_decodes(rt, monkeypatch)
    got = rt.score(prompt, [[she, went], [she, goes], [he, went]])
    assert decodes == [len(prompt) - 6 + 1], "the prompt's new tokens and the one branching path: one decode"
    expected = [token_logp(weights, prompt, [], she, [she, he]) + token_logp(weights, prompt, [she], t, [went, goes])
                for t in (went, goes)] + [token_logp(weights, prompt, [], he, [she, he])]
    assert np.allclose(got, expected, atol=LOGP_TOLERANCE)
    assert rt.tokens == prompt and same_logits(rt.sync(prompt), plain_logits(weights, prompt))
    assert len(decodes) == 1, "the prompt's logits were kept: syncing it again decodes nothing"
    rt.score(prompt + [she], [[went], [goes]])
    assert decodes[1:] == [1], "a prompt one token longer and no path to walk: that token alone"


@pytest.mark.real_model
def test_a_prompt_too_long_to_share_a_decode_with_the_options_is_decoded_first(rt, weights, monkeypatch):
    filler = rt.vocab.tokenize(" and so on" * 200)[:rt.n_batch]
    prompt = rt.vocab.tokenize(PROMPT, bos=True) + filler
    she, he, went, goes = (rt.vocab.tokenize(w)[0] for w in (" she", " he", " went", " goes"))
    decodes = counting_decodes(rt, monkeypatch)
    got = rt.score(prompt, [[she, went], [she, goes], [he, went]])
    assert decodes == [rt.n_batch, len(prompt) - rt.n_batch, 1]
    expected = [token_logp(weights, prompt, [], she, [she, he]) + token_logp(weights, prompt, [she], t, [went, goes])
                for t in (went, goes)] + [token_logp(weights, prompt, [], he, [she, he])]
    assert np.allclose(got, expected, atol=LOGP_TOLERANCE) and rt.tokens == prompt


@pytest.mark.real_model
@pytest.mark.parametrize("nodes, batches", [(15, 1), (16, 2)])
def test_up_to_fifteen_branching_nodes_are_scored_in_one_batch(rt, monkeypatch, nodes, batches):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    firsts = [rt.vocab.tokenize(f" {w}")[0] for w in "abcdefghijklmnop"[:nodes]]
    yes, no = rt.vocab.tokenize(" yes")[0], rt.vocab.tokenize(" no")[0]
    calls = []
    real = rt._eval_paths
    monkeypatch.setattr(rt, "_eval_paths", lambda paths, new: calls.append(len(paths)) or real(paths, new))
    rt.score(prompt, [[first, answer] for first in firsts for answer in (yes, no)])
    assert len(calls) == batches and sum(calls) == nodes


@pytest.mark.real_model
def test_without_renormalising_every_token_is_scored_against_the_whole_vocabulary(rt, weights):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    she, he, went = (rt.vocab.tokenize(w)[0] for w in (" she", " he", " went"))
    got = rt.score(prompt, [[she, went], [he, went]], renormalise=False)
    expected = [token_logp(weights, prompt, [], she, None) + token_logp(weights, prompt, [she], went, None),
                token_logp(weights, prompt, [], he, None) + token_logp(weights, prompt, [he], went, None)]
    assert np.allclose(got, expected, atol=LOGP_TOLERANCE)


@pytest.mark.real_model
def test_more_branching_options_than_sequences_are_scored_in_several_batches_alike(rt, weights):
    prompt = rt.vocab.tokenize(PROMPT, bos=True)
    words = [rt.vocab.tokenize(f" {w}")[0] for w in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l",
                                                     "m", "n", "o", "p", "q", "r")]
    yes, no = rt.vocab.tokenize(" yes")[0], rt.vocab.tokenize(" no")[0]
    options = [[w, t] for w in words for t in (yes, no)]  # 18 branching nodes: more than MAX_SEQUENCES - 1
    assert len(words) > MAX_SEQUENCES - 1
    got = rt.score(prompt, options)
    again = rt.score(prompt, options)  # the sequences of the first scoring were emptied: the same figures
    assert np.allclose(again, got, atol=1e-4)
    for (w, t), score in zip(options[:4] + options[-4:], list(got[:4]) + list(got[-4:])):
        expected = token_logp(weights, prompt, [], w, words) + token_logp(weights, prompt, [w], t, [yes, no])
        assert np.isclose(score, expected, atol=LOGP_TOLERANCE), (w, t)
    assert rt.tokens == prompt


@pytest.mark.real_model
def test_a_run_out_of_time_stops_between_two_decodes(rt, monkeypatch):
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    monkeypatch.setattr(llama_runtime.time, "monotonic", lambda: 0.0)
    rt.deadline = 100.0  # the flag llama.cpp reads would rise 100 s from now: only the look before a decode acts
    monkeypatch.setattr(llama_runtime.time, "monotonic", lambda: 99.99)
    rt.feed(tokens[:3])
    monkeypatch.setattr(llama_runtime.time, "monotonic", lambda: 100.0)
    with pytest.raises(ModelTimeout, match="^the model ran out of time between two decodes$"):
        rt.feed(tokens[3:])
    with pytest.raises(ModelTimeout):
        rt.score(tokens[:3], [[5, 6], [5, 7]])
    assert rt.tokens == tokens[:3]
    rt.deadline = None
    rt.feed(tokens[3:])


@pytest.mark.real_model
def test_a_decode_that_reaches_the_deadline_midway_stops_there_and_leaves_the_cache_as_it_was(rt, weights):
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    rt.feed(tokens[:3])
    rt.deadline = time.monotonic() + 3600  # the look before the decode finds time left...
    rt.deadline_flag.set(0.0)  # ...and the flag llama.cpp reads inside it has risen, as its timer does
    with pytest.raises(ModelTimeout, match="^the model ran out of time in the middle of a decode$"):
        rt.feed(tokens[3:])
    assert rt.tokens == tokens[:3] and rt.evaluated == 3
    assert rt._lib.llama_memory_seq_pos_max(rt.memory, 0) == 2  # nothing of the cut decode
    with pytest.raises(ModelTimeout, match="in the middle of a decode"):
        rt.score(tokens[:3], [[5, 6], [5, 7]])  # the options' decode, cut: their sequences are emptied all the same
    assert [rt._lib.llama_memory_seq_pos_max(rt.memory, k) for k in range(3)] == [2, -1, -1]
    with pytest.raises(ModelTimeout, match="in the middle of a decode"):
        rt.score(tokens, [[5, 6], [5, 7]])  # the prompt's new tokens cut with the options': none is kept
    assert rt.tokens == tokens[:3] and [rt._lib.llama_memory_seq_pos_max(rt.memory, k) for k in range(3)] == [2, -1, -1]
    rt.deadline = None  # lowers the flag
    assert not rt.deadline_flag.raised and same_logits(rt.feed(tokens[3:]), plain_logits(weights, tokens))


@pytest.mark.timing
@pytest.mark.real_model
def test_the_deadline_overtakes_a_long_decode_on_any_cpu(weights):
    """One thread and a whole 512-token piece of prompt: one decode long on every CPU. It is timed whole, then
    cut at a quarter of that time, and must stop before half of it: a bound in the decode's own length, so it
    holds however fast the CPU, and it fails wherever the deadline is only looked at between decodes."""
    rt = KVRuntime(n_ctx=1024, n_threads=1, weights=weights)
    try:
        head = rt.vocab.tokenize(PROMPT, bos=True)
        piece = (rt.vocab.tokenize(" the cat sat on the mat." * 200))[:rt.n_batch]
        rt.feed(head)
        started = time.monotonic()
        whole = rt.feed(piece)
        whole_s = time.monotonic() - started
        rt.rollback(len(head))
        rt.deadline = time.monotonic() + whole_s / 4
        with pytest.raises(ModelTimeout, match="in the middle of a decode"):
            rt.feed(piece)
        cut_s = time.monotonic() - (rt.deadline - whole_s / 4)
        assert cut_s < whole_s / 2, f"stopped after {cut_s:.3f} s of a {whole_s:.3f} s decode"
        rt.deadline = None
        assert rt.tokens == head and same_logits(rt.feed(piece), whole)
    finally:
        rt.ctx.close()
        rt.batch.close()


@pytest.mark.real_model
def test_masked_decoding_takes_the_likeliest_allowed_token_each_step_until_the_quote(rt, weights):
    prompt = rt.vocab.tokenize('{"answer": "She', bos=True)
    quote = rt.vocab.tokenize('"')[0]
    allowed = np.zeros(rt.n_vocab, dtype=bool)
    letters = rt.vocab.tokenize(" went") + rt.vocab.tokenize(" goes") + rt.vocab.tokenize(".")
    allowed[letters] = True
    decoded = rt.decode_masked(prompt, allowed, quote, max_tokens=6)
    # by hand: the likeliest allowed token at each step; the quote may end the string once it is not empty
    out, context = [], list(prompt)
    for _ in range(6):
        logits = plain_logits(weights, context)
        masked = np.where(allowed, logits, -np.inf)
        if out:
            masked[quote] = logits[quote]
        token = int(np.argmax(masked))
        context.append(token)
        if token == quote:
            break
        out.append(token)
    assert decoded.tokens[:len(out)] == out and decoded.tokens[0] != quote
    if decoded.finished:
        assert decoded.tokens == out + [quote] and decoded.text == rt.vocab.detokenize(out) + '"'
    else:
        assert decoded.tokens == out and decoded.text == rt.vocab.detokenize(out) and len(out) == 6


@pytest.mark.real_model
def test_masked_decoding_ends_at_the_quote_and_gives_the_string_with_its_closing_quote(rt, weights):
    prompt = rt.vocab.tokenize('{"answer": "She went', bos=True)
    quote, stop = rt.vocab.tokenize('"')[0], rt.vocab.tokenize(".")[0]
    allowed = np.zeros(rt.n_vocab, dtype=bool)
    allowed[stop] = True
    logits = plain_logits(weights, prompt + [stop])
    assert logits[quote] > logits[stop], "the model must prefer to close the string here"
    rt.sync(prompt)
    evaluated = rt.evaluated
    decoded = rt.decode_masked(prompt, allowed, quote, max_tokens=4)
    assert decoded == llama_runtime.Decoded('."', [stop, quote], True)
    # the quote is chosen but not evaluated: nothing reads the logits after it, and the next prompt brings it
    assert rt.tokens == prompt + [stop] and rt.evaluated == evaluated + 1
    after = rt.vocab.tokenize('", "tense": "')
    rt.sync(prompt + [stop] + after)
    assert rt.tokens == prompt + [stop] + after and rt.evaluated == evaluated + 1 + len(after)


@pytest.mark.real_model
def test_masked_decoding_cut_at_max_tokens_is_not_finished(rt):
    prompt = rt.vocab.tokenize('{"answer": "', bos=True)
    quote = rt.vocab.tokenize('"')[0]
    allowed = np.zeros(rt.n_vocab, dtype=bool)
    allowed[rt.vocab.tokenize(" la")] = True  # the quote is never likelier than an endless " la la la"?
    rt.sync(prompt)
    evaluated = rt.evaluated
    decoded = rt.decode_masked(prompt, allowed, quote, max_tokens=1)
    assert decoded.finished is False and len(decoded.tokens) == 1 and decoded.tokens[0] != quote
    assert decoded.text == rt.vocab.detokenize(decoded.tokens)
    assert rt.tokens == prompt and rt.evaluated == evaluated, "the last token allowed: nothing reads what follows"


@pytest.mark.real_model
def test_grammar_decoding_keeps_to_the_grammar_and_stops_when_done(rt):
    prompt = rt.vocab.tokenize("Is the sky blue? Answer yes or no:", bos=True)
    decoded = rt.decode_greedy(prompt, 'root ::= " yes" | " no"', max_tokens=5, done=lambda text: False)
    assert decoded.text in (" yes", " no") and decoded.finished is True  # the grammar's end is an end of text
    cut = rt.decode_greedy(prompt, 'root ::= " yes" [a-z]*', max_tokens=1, done=lambda text: False)
    assert cut.finished is False and len(cut.tokens) == 1 and cut.text == rt.vocab.detokenize(cut.tokens)
    done = rt.decode_greedy(prompt, 'root ::= " yes" [a-z]*', max_tokens=8, done=lambda text: text.startswith(" yes"))
    assert done.finished is True and done.text.startswith(" yes") and rt.tokens[-len(done.tokens):] == done.tokens


@pytest.mark.real_model
def test_a_grammar_already_complete_ends_at_once_with_nothing_more(rt, capfd):
    prompt = rt.vocab.tokenize("Say it:", bos=True)
    emitted = rt.vocab.tokenize(" yes")
    decoded = rt.decode_greedy(prompt + emitted, 'root ::= " yes"', max_tokens=5, done=lambda t: False,
                               accept=emitted)
    assert decoded == llama_runtime.Decoded("", [], True)
    assert capfd.readouterr().err == "", "the grammar was printed"


@pytest.mark.real_model
def test_grammar_decoding_can_continue_a_text_already_emitted(rt):
    prompt = rt.vocab.tokenize("Say it:", bos=True)
    emitted = rt.vocab.tokenize(" yes")
    decoded = rt.decode_greedy(prompt + emitted, 'root ::= " yes" " please"', max_tokens=5, done=lambda t: False,
                               accept=emitted)
    assert decoded.text == " please" and decoded.finished is True


@pytest.mark.real_model
def test_the_header_is_saved_once_and_loaded_afterwards_giving_the_same_logits(rt, weights, tmp_path):
    prefix = rt.vocab.tokenize(PROMPT, bos=True)
    more = prefix + rt.vocab.tokenize(" She")
    assert rt.prime(prefix, tmp_path / "kv") is False  # evaluated, then saved
    [saved] = (tmp_path / "kv").glob("prefix-*.kv")
    assert rt.tokens == prefix and rt.evaluated == len(prefix)
    assert [p.name for p in (tmp_path / "kv").iterdir()] == [saved.name], "a scratch file was left"
    other = KVRuntime(n_ctx=1024, n_threads=THREADS, weights=weights)
    try:
        assert other.prime(prefix, tmp_path / "kv") is True and other.tokens == prefix and other.evaluated == 0
        assert same_logits(other.sync(more), plain_logits(weights, more))
        assert other.evaluated == 1
        assert other.prime(prefix[:-1], tmp_path / "kv") is False, "another header has another file"
        assert len(list((tmp_path / "kv").glob("prefix-*.kv"))) == 2
        assert other.prime(prefix, tmp_path / "deep" / "er") is False and (tmp_path / "deep" / "er").is_dir()
    finally:
        other.ctx.close()
        other.batch.close()


@pytest.mark.real_model
def test_a_damaged_or_foreign_cache_file_is_evaluated_again(rt, weights, tmp_path):
    prefix = rt.vocab.tokenize(PROMPT, bos=True)
    rt.prime(prefix, tmp_path)
    [saved] = tmp_path.glob("prefix-*.kv")
    saved.write_bytes(saved.read_bytes()[:100])
    assert rt.prime(prefix, tmp_path) is False and rt.tokens == prefix
    assert same_logits(rt.sync(prefix + [2]), plain_logits(weights, prefix + [2]))
    assert rt.prime(prefix, None) is False and rt.tokens == prefix


@pytest.mark.real_model
def test_a_cache_file_of_other_tokens_is_not_taken_for_this_header(rt, weights, tmp_path):
    prefix = rt.vocab.tokenize(PROMPT, bos=True)
    rt.prime(prefix, tmp_path)
    [saved] = tmp_path.glob("prefix-*.kv")
    other = list(prefix)
    other[3] = other[4]
    assert rt._load_prefix(saved, other) is False and rt.tokens == []
    assert same_logits(rt.sync(prefix + [2]), plain_logits(weights, prefix + [2])), "the foreign cells stayed"
    rt.rollback(0)
    assert rt._load_prefix(saved, prefix[:-1]) is False
    assert rt._load_prefix(saved, prefix) is True and rt.tokens == prefix


@pytest.mark.real_model
def test_work_done_aside_leaves_the_conversation_its_very_cells(rt, weights):
    """A first run computes the priors in the middle of a conversation: afterwards the conversation goes on from
    the cells it had, nothing evaluated again, to the last bit of a run that did no such work."""
    tokens = rt.vocab.tokenize(PROMPT, bos=True)
    untouched = KVRuntime(n_ctx=1024, n_threads=THREADS, weights=weights)
    try:
        untouched.feed(tokens[:8])
        expected = untouched.sync(tokens)
    finally:
        untouched.ctx.close()
        untouched.batch.close()
    rt.feed(tokens[:8])
    with rt.aside():
        rt.score(tokens[:3] + rt.vocab.tokenize(" Question: a content-free one"), [[2], [3]])
    assert rt.tokens == tokens[:8]
    before = rt.evaluated
    assert np.array_equal(rt.sync(tokens), expected) and rt.evaluated - before == len(tokens) - 8


@pytest.mark.real_model
def test_a_header_evaluated_here_lies_in_the_cells_a_load_gives_it(weights, tmp_path):
    """The prompt's header evaluated (a cold prompt cache) or loaded (a warm one): a question asked after another
    gets the same logits to the last bit. Before, they differed by up to 0.9 and a question could be answered
    otherwise on a first run."""
    from miniagent.models.prompt import HEADER

    def second_question() -> tuple[bool, np.ndarray]:
        runtime = KVRuntime(n_ctx=2048, n_threads=THREADS, weights=weights)
        try:
            header = runtime.vocab.tokenize(HEADER, bos=True)
            loaded = runtime.prime(header, tmp_path)
            first = header + runtime.vocab.tokenize("Q: The future continuous of shine, for it.\nA:")
            runtime.score(first, [runtime.vocab.tokenize(t) for t in (" past simple", " future continuous")])
            return loaded, runtime.sync(header + runtime.vocab.tokenize("Q: For they, the present of apply?\nA:"))
        finally:
            runtime.ctx.close()
            runtime.batch.close()

    (cold_loaded, cold), (warm_loaded, warm) = second_question(), second_question()
    assert (cold_loaded, warm_loaded) == (False, True) and np.array_equal(cold, warm)


@pytest.mark.real_model
def test_the_startup_line_says_threads_amx_and_weights(rt):
    line = rt.startup_line("2 free cores")
    assert line.startswith(f"llama.cpp threads: {THREADS} (2 free cores), {rt.amx.describe()}, weights in ")
    assert rt.startup_line().startswith(f"llama.cpp threads: {THREADS}, ")
    rt.weight_buffers = {}
    assert rt.startup_line().endswith("weights in unknown")
    rt.weight_buffers = {"CPU": 240.4, "CPU_REPACK": 12.6}
    assert rt.startup_line().endswith("weights in CPU 240 MiB, CPU_REPACK 13 MiB")


@pytest.mark.real_model
def test_close_frees_the_batch_the_context_and_the_model(weights, monkeypatch):
    runtime = KVRuntime(n_ctx=256, weights=load_weights())
    closed = []
    for part, name in ((runtime.batch, "batch"), (runtime.ctx, "ctx"), (runtime.model, "model")):
        real = part.close
        monkeypatch.setattr(part, "close", lambda real=real, name=name: closed.append(name) or real())
    runtime.close()
    assert closed == ["batch", "ctx", "model"]


@pytest.mark.real_model
def test_a_runtime_without_weights_loads_the_file_it_is_given_with_the_amx_choice_given(tmp_path):
    from miniagent.models.llama_params import AmxChoice

    with pytest.raises(FileNotFoundError, match=f"^model file not found: {tmp_path / 'none.gguf'}$"):
        KVRuntime(str(tmp_path / "none.gguf"), n_ctx=256)
    runtime = KVRuntime(model_file.default_model_path(), n_ctx=256, amx=AmxChoice(False, "given by the test"))
    try:
        assert runtime.amx == AmxChoice(False, "given by the test")
        assert runtime.model_path == model_file.default_model_path() and runtime.n_ctx == 256
    finally:
        runtime.close()


@pytest.mark.real_model
def test_the_vocabulary_keeps_its_masks_under_the_name_of_the_model_file_it_reads(rt, tmp_path):
    """The masks' cache file is keyed by the model file the vocabulary reads (its path and its size)."""
    assert rt.vocab.path == rt.model_path
    masks = rt.vocab.masks(tmp_path)
    [saved] = tmp_path.glob("masks-*.npz")
    again = rt.vocab.masks(tmp_path)
    assert sorted(again) == sorted(masks) == ["text", "word"]
    assert all(np.array_equal(again[name], masks[name]) for name in masks)
