"""The scored walk of the action schema (``models.scored.ScoredDecoder``) over a runtime that is not llama.cpp.

Both backends hold one ``ScoredDecoder`` over a runtime of their own (llama.cpp in this process, a model server);
the walk only needs the small ``Runtime`` protocol. Here the runtime is a stand-in "model" that wants to write one
given action: it scores an option 0 when the action so far plus that option is still the start of what it wants,
and -10 otherwise, and its masked decoding writes the wanted string up to its closing quote. A walk that emits
anything but the wanted action (a wrong key, a missing quote or comma, the wrong option, a field skipped) fails
here in milliseconds, without a model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from miniagent.agent.actions import parse_action, schema_for_turn
from miniagent.agent.ports import Entry
from miniagent.models.llama_runtime import Decoded
from miniagent.models.prompt import NEXT_ACTION
from miniagent.models.scored import ScoredDecoder

BOS = 256


class Bytes:
    """One token per byte, and a BOS token after them."""

    size = 257

    def tokenize(self, text: str, *, bos: bool = False) -> list[int]:
        return ([BOS] if bos else []) + list(text.encode("utf-8"))

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(t for t in tokens if t != BOS).decode("utf-8", errors="replace")

    def masks(self, cache_dir) -> dict[str, np.ndarray]:
        chars = [chr(i) for i in range(256)]
        return {"word": np.array([c.isascii() and c.isalpha() and c.islower() for c in chars] + [False]),
                "text": np.array([c.isascii() and c.isprintable() and c not in '"\\' for c in chars] + [False])}


class Wants:
    """A runtime whose model wants to write ``target`` as its next action."""

    model_path, n_ctx, priors_tag = "/nowhere.gguf", 100_000, ""

    def __init__(self, target: str) -> None:
        self.vocab, self.target = Bytes(), target
        self.tokens: list[int] = []
        self.evaluated, self.deadline, self.scored = 0, None, []

    def written(self, prompt: list[int]) -> str:
        text = self.vocab.detokenize(prompt)
        return text[text.rindex(NEXT_ACTION) + len(NEXT_ACTION):]

    def prime(self, prefix, cache_dir) -> bool:
        self.sync(prefix)
        return False

    def sync(self, prompt: list[int]) -> None:
        common = 0
        while common < min(len(prompt), len(self.tokens)) and prompt[common] == self.tokens[common]:
            common += 1
        self.evaluated += len(prompt) - common
        self.tokens = list(prompt)

    def score(self, prompt: list[int], options: list[list[int]]) -> np.ndarray:
        self.sync(prompt)
        self.evaluated += sum(len(o) for o in options)
        so_far = self.written(prompt)
        texts = [self.vocab.detokenize(o) for o in options]
        self.scored.append(texts)
        return np.array([0.0 if self.target.startswith(so_far + t) else -10.0 for t in texts])

    def decode_masked(self, prompt, allowed, stop_token, *, max_tokens) -> Decoded:
        so_far = self.written(prompt)
        assert self.target.startswith(so_far), (so_far, self.target)
        rest = self.target[len(so_far):]
        wanted = rest[:rest.index('"')]
        tokens = self.vocab.tokenize(wanted)
        assert all(allowed[t] for t in tokens), f"the mask refuses part of {wanted!r}"
        self.evaluated += min(len(tokens) + 1, max_tokens)
        if len(tokens) > max_tokens:
            return Decoded(self.vocab.detokenize(tokens[:max_tokens]), tokens[:max_tokens], False)
        return Decoded(wanted + '"', tokens + [stop_token], True)

    def close(self) -> None:
        pass


PAD = [Entry("question", "What is the past simple of go for she?")]
SECOND = PAD + [Entry("action", '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'),
                Entry("observation", "she went")]


@pytest.mark.parametrize("target, pad, first_turn, may_answer", [
    ('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she", "steps": 1}', PAD, True, None),
    ('{"tool": "conjugate", "verb": "swim", "tense": "present perfect continuous", "person": "they", "steps": 3}',
     PAD, True, None),
    ('{"tool": "conjugate", "verb": "go", "tense": "present perfect", "person": "I"}', SECOND, False, True),
    ('{"tool": "list_tenses"}', PAD, True, None),
    ('{"answer": "She went."}', SECOND, False, True),
])
def test_the_walk_writes_exactly_the_action_the_model_wants(target, pad, first_turn, may_answer):
    rt = Wants(target)
    decoder = ScoredDecoder(rt)
    reply = decoder.reply(pad, schema_for_turn(first_turn, may_answer))
    assert reply.text == target and reply.finish_reason == "stop"
    assert parse_action(reply.text, first_turn=first_turn, may_answer=may_answer)  # the loop's parser takes it
    assert reply.completion_tokens == len(target.encode())


def test_a_longer_option_is_not_taken_for_its_shorter_prefix_because_the_close_mark_is_scored():
    rt = Wants('{"tool": "conjugate", "verb": "go", "tense": "present perfect", "person": "I"}')
    ScoredDecoder(rt).reply(SECOND, schema_for_turn(False, True))
    tenses = next(texts for texts in rt.scored if any(t.startswith("present perfect") for t in texts))
    assert 'present perfect",' in tenses and 'present perfect continuous",' in tenses


def test_an_answer_cut_off_is_reported_as_such_and_continued_from_where_it_stopped():
    target = '{"answer": "She went to the market yesterday."}'
    decoder = ScoredDecoder(Wants(target), max_action_tokens=8)
    cut = decoder.reply(SECOND, schema_for_turn(False, True))
    assert cut.finish_reason == "length" and target.startswith(cut.text) and len(cut.text) < len(target)
    decoder.max_action_tokens = 48
    rest = decoder.reply(SECOND, schema_for_turn(False, True), partial=cut.text)
    assert cut.text + rest.text == target and rest.finish_reason == "stop"


def test_a_grounded_field_with_one_option_is_written_without_scoring():
    target = '{"answer": "she went"}'
    rt = Wants(target)
    schema = schema_for_turn(False, True)
    answer = next(b for b in schema["anyOf"] if "answer" in b["properties"])
    answer["properties"]["answer"] = {"enum": ["she went"]}  # what grounding leaves: the one form the tool gave
    reply = ScoredDecoder(rt).reply(SECOND, {"anyOf": [answer]})
    assert reply.text == target
    assert all("she went" not in "".join(texts) for texts in rt.scored)  # only the branch was weighed


def test_a_turn_counts_the_prompt_it_evaluated_and_the_options_it_weighed_apart():
    rt = Wants('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she", "steps": 1}')
    decoder = ScoredDecoder(rt)
    primed = rt.evaluated
    assert primed == len(decoder.header_tokens)  # the header, once, at start-up
    reply = decoder.reply(PAD, schema_for_turn(True))
    assert reply.prompt_tokens == len(rt.vocab.tokenize(decoder.prompt_text(PAD)))  # the header was cached
    assert reply.scoring_tokens == rt.evaluated - primed - reply.prompt_tokens - reply.completion_tokens > 0
    assert rt.deadline is None  # the turn's deadline is cleared after it


def test_a_turns_deadline_is_set_on_the_runtime_while_it_decides():
    seen = []

    class Timed(Wants):
        def score(self, prompt, options):
            seen.append(self.deadline)
            return super().score(prompt, options)

    ScoredDecoder(Timed('{"tool": "list_tenses"}')).reply(PAD, schema_for_turn(True), timeout_s=30)
    assert seen and all(d is not None for d in seen)


def test_the_prompt_keeps_the_question_and_drops_the_oldest_steps_in_pairs_when_the_window_is_full():
    rt = Wants('{"tool": "list_tenses"}')
    decoder = ScoredDecoder(rt)
    steps = [Entry("action", json.dumps({"tool": "conjugate", "verb": f"v{i}"})) for i in range(6)]
    pad = [PAD[0]] + [e for step in steps for e in (step, Entry("observation", "x" * 200))]
    whole = decoder.prompt_text(pad)
    rt.n_ctx = len(decoder.header_tokens) + 160 + len(whole.encode()) - 300  # room for all but about one pair
    cut = decoder.prompt_text(pad)
    assert cut.startswith("Q: " + PAD[0].text) and "(earlier steps omitted)" in cut and '"v0"' not in cut
    assert '"v5"' in cut and len(cut) < len(whole)
