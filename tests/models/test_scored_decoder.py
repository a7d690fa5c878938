"""The scored walk of the action schema (``models.scored.ScoredDecoder``) over a runtime that is not llama.cpp.

Both backends hold one ``ScoredDecoder`` over a runtime of their own (llama.cpp in this process, a model server);
the walk only needs the small ``Runtime`` protocol. Here the runtime is a stand-in "model" that wants to write one
given action: it scores an option 0 when the action so far plus that option is still the start of what it wants,
and -10 otherwise, and its masked decoding writes the wanted string up to its closing quote. A walk that emits
anything but the wanted action (a wrong key, a missing quote or comma, the wrong option, a field skipped) fails
here in milliseconds, without a model.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from miniagent.agent.actions import parse_action, schema_for_turn
from miniagent.agent.ports import Entry
from miniagent.models.llama_runtime import Decoded
from miniagent.models.prompt import NEXT_ACTION, render
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

    @contextlib.contextmanager
    def aside(self):
        """As the real runtime's: afterwards the conversation's tokens are those it had."""
        kept = list(self.tokens)
        yield
        self.tokens = kept

    def pending(self, prompt: list[int]) -> int:
        common = 0
        while common < min(len(prompt), len(self.tokens)) and prompt[common] == self.tokens[common]:
            common += 1
        return len(prompt) - common

    def sync(self, prompt: list[int]) -> None:
        self.evaluated += self.pending(prompt)
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


# What the models wing's run of these tests alone (2026-11-26) showed they left to the real-model tests.

def test_a_verb_longer_than_its_eight_tokens_is_cut_and_closed():
    rt = Wants('{"tool": "conjugate", "verb": "understand", "tense": "past simple", "person": "she"}')
    reply = ScoredDecoder(rt).reply(SECOND, schema_for_turn(False, True))
    assert reply.text.startswith('{"tool": "conjugate", "verb": "understa", "tense": ')  # 8 byte-tokens, then '"'


def test_grounded_options_are_scored_as_the_characters_they_are():
    target = '{"answer": "él fue"}'
    rt = Wants(target)
    schema = schema_for_turn(False, True)
    answer = next(b for b in schema["anyOf"] if "answer" in b["properties"])
    answer["properties"]["answer"] = {"enum": ["él fue", "ella fue"]}
    assert ScoredDecoder(rt).reply(SECOND, {"anyOf": [answer]}).text == target  # not "\\u00e9l fue"


def first_call_with_steps(low: int, high: int) -> dict:
    """Turn 1's schema with only its conjugate branch, whose plan steps may be ``low`` .. ``high``."""
    call = next(b for b in schema_for_turn(True)["anyOf"] if b["properties"].get("tool", {}).get("const") == "conjugate")
    call["properties"]["steps"] = {"type": "integer", "minimum": low, "maximum": high}
    return {"anyOf": [call]}


def test_a_number_field_left_with_one_option_is_written_bare():
    rt = Wants('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she", "steps": 1}')
    assert ScoredDecoder(rt).reply(PAD, first_call_with_steps(1, 1)).text == rt.target


class Primed(Wants):
    """Remembers what the decoder hands the runtime's cache and how often it scores."""

    def __init__(self, target: str, model_path: str) -> None:
        super().__init__(target)
        self.model_path, self.primed_with, self.calls = model_path, [], 0

    def prime(self, prefix, cache_dir):
        self.primed_with.append(cache_dir)
        return super().prime(prefix, cache_dir)

    def score(self, prompt, options):
        self.calls += 1
        return super().score(prompt, options)


def test_the_priors_are_kept_in_the_cache_and_read_back_by_the_next_process(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    target = '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she", "steps": 1}'
    first = Primed(target, str(model))
    decoder = ScoredDecoder(first, cache_dir=tmp_path / "cache")
    assert first.primed_with == [tmp_path / "cache"]
    decoder.reply(PAD, schema_for_turn(True))
    saved = sorted((tmp_path / "cache").glob("priors-*.npz"))
    assert len(saved) == 1 and not list((tmp_path / "cache").glob("*.tmp.npz"))  # written whole, then renamed
    second = Primed(target, str(model))
    again = ScoredDecoder(second, cache_dir=str(tmp_path / "cache"))
    assert set(again._calibration) == set(decoder._calibration) and again._calibration
    again.reply(PAD, schema_for_turn(True))
    assert second.calls < first.calls  # the priors came from the file, not from scoring the neutral question
    other = Primed(target, str(model))
    other.priors_tag = "another server"
    assert ScoredDecoder(other, cache_dir=tmp_path / "cache")._priors_file != saved[0]  # its own priors
    assert ScoredDecoder(Primed(target, str(model)))._priors_file is None  # no cache, no file


def test_a_damaged_priors_file_is_computed_again(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    target = '{"tool": "list_tenses"}'
    decoder = ScoredDecoder(Primed(target, str(model)), cache_dir=tmp_path)
    decoder._priors_file.write_bytes(b"not numpy")
    assert ScoredDecoder(Primed(target, str(model)), cache_dir=tmp_path)._calibration == {}


class Prejudiced(Wants):
    """A model that prefers "past simple" in any context, a little less after a real question than after none."""

    def score(self, prompt, options):
        self.sync(prompt)
        texts = [self.vocab.detokenize(o) for o in options]
        if not any(t.startswith(("past simple", "present simple")) for t in texts):
            return super().score(prompt, options)
        neutral = "Q: N/A" in self.vocab.detokenize(prompt)
        prior = {"past simple": 0.0, "present simple": -2.0}
        content = {"past simple": -1.0, "present simple": -1.2}
        table = prior if neutral else content
        return np.array([table.get(t.split('"')[0], -10.0) for t in texts])


def test_calibration_subtracts_half_of_the_prior_from_a_tense():
    # after the question: past -1.0, present -1.2; after no question: past 0, present -2.
    # calibrated: past -1.0 - 0.5 x 0 = -1.0; present -1.2 - 0.5 x -2 = -0.2: the present wins.
    rt = Prejudiced('{"tool": "conjugate", "verb": "go", "tense": "present simple", "person": "she"}')
    reply = ScoredDecoder(rt).reply(SECOND, schema_for_turn(False, True))
    assert '"tense": "present simple"' in reply.text


def test_a_greedy_backend_gets_the_prompt_the_schema_and_the_partial_and_its_text_is_counted():
    seen = []

    def greedy(prompt, schema, partial):
        seen.append((prompt, schema, partial))
        return "", False

    decoder = ScoredDecoder(Wants('{"tool": "list_tenses"}'))
    schema = schema_for_turn(True)
    reply = decoder.reply(PAD, schema, partial="{", greedy=greedy)
    assert seen == [(decoder.prompt_text(PAD), schema, "{")]
    assert (reply.text, reply.finish_reason, reply.completion_tokens) == ("", "length", 0)
    assert 0 <= reply.latency_s < 5


def test_the_deadline_is_the_time_left_from_now():
    import time

    seen = []

    class Timed(Wants):
        def score(self, prompt, options):
            seen.append(self.deadline - time.monotonic())
            return super().score(prompt, options)

    ScoredDecoder(Timed('{"tool": "list_tenses"}')).reply(PAD, schema_for_turn(True), timeout_s=30)
    assert seen and all(25 < left <= 30 for left in seen)


def test_the_window_keeps_every_step_while_they_fit_and_two_steps_always():
    rt = Wants('{"tool": "list_tenses"}')
    decoder = ScoredDecoder(rt)
    pad = [PAD[0]] + [Entry("action", '{"tool": "list_tenses"}'), Entry("observation", "x" * 300)] * 2
    whole = decoder.prompt_text(pad)
    rt.n_ctx = len(decoder.header_tokens) + 160 + len(whole.encode())  # exactly room for it all
    assert decoder.prompt_text(pad) == whole
    rt.n_ctx -= 1  # one token short: the oldest pair goes, the newest stays
    cut = decoder.prompt_text(pad)
    assert cut.count("x" * 300) == 1 and "(earlier steps omitted)" in cut
    rt.n_ctx = 10  # no room at all: the question and the last step are kept whatever the window
    assert decoder.prompt_text(pad) == cut
    assert "(earlier steps omitted)" not in decoder.prompt_text(pad[:3])  # one step: nothing to drop


# The walk's details that only a model would notice (the models wing's run against these tests alone, 2026-11-26,
# left them to the real-model tests): each written so that a changed detail changes what a stand-in sees.

def test_the_decoders_own_token_limit_is_the_settings_default():
    from miniagent.models.settings import ModelSettings

    assert ScoredDecoder(Wants('{"tool": "list_tenses"}')).max_action_tokens == ModelSettings().max_action_tokens


def test_the_header_starts_with_one_bos_token_and_the_masks_share_the_cache(tmp_path):
    asked = []

    class Vocab(Bytes):
        def masks(self, cache_dir):
            asked.append(cache_dir)
            return super().masks(cache_dir)

    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    rt = Primed('{"tool": "list_tenses"}', str(model))
    rt.vocab = Vocab()
    decoder = ScoredDecoder(rt, cache_dir=tmp_path)
    assert decoder.header_tokens[0] == BOS and decoder.header_tokens.count(BOS) == 1
    assert asked == [tmp_path]


def test_the_prompt_is_the_whole_scratchpad_then_the_action_mark_while_it_fits():
    decoder = ScoredDecoder(Wants('{"tool": "list_tenses"}'))
    assert decoder.prompt_text(SECOND) == render(SECOND) + NEXT_ACTION


def test_a_full_window_drops_whole_pairs_from_the_oldest_and_says_so():
    decoder = ScoredDecoder(Wants('{"tool": "list_tenses"}'))
    pairs = [(Entry("action", f'{{"tool": "conjugate", "verb": "v{i}"}}'), Entry("observation", f"o{i} " * 40))
             for i in range(3)]
    pad = [PAD[0]] + [e for pair in pairs for e in pair]
    kept = [PAD[0], Entry("observation", "(earlier steps omitted)"), *pairs[1], *pairs[2]]
    decoder.rt.n_ctx = len(decoder.header_tokens) + 160 + len((render(kept) + NEXT_ACTION).encode())
    assert decoder.prompt_text(pad) == render(kept) + NEXT_ACTION


def test_an_odd_step_left_over_is_dropped_with_the_pair_before_it_when_nothing_fits():
    decoder = ScoredDecoder(Wants('{"tool": "list_tenses"}'))
    pad = [PAD[0], Entry("action", '{"tool": "list_tenses"}'), Entry("observation", "x" * 300),
           Entry("action", '{"tool": "list_tenses"}')]
    decoder.rt.n_ctx = 10
    assert decoder.prompt_text(pad) == render([PAD[0], Entry("observation", "(earlier steps omitted)"),
                                               pad[3]]) + NEXT_ACTION


def test_a_continued_answer_weighs_no_option_and_a_second_cut_is_still_a_cut():
    target = '{"answer": "She went to the market yesterday with her two brothers."}'
    decoder = ScoredDecoder(Wants(target), max_action_tokens=8)
    cut = decoder.reply(SECOND, schema_for_turn(False, True))
    again = decoder.reply(SECOND, schema_for_turn(False, True), partial=cut.text)
    assert again.finish_reason == "length" and not again.text.endswith("}") and len(again.text) == 8
    decoder.max_action_tokens = 80
    rest = decoder.reply(SECOND, schema_for_turn(False, True), partial=cut.text + again.text)
    assert cut.text + again.text + rest.text == target and rest.finish_reason == "stop"
    assert again.scoring_tokens == rest.scoring_tokens == 0  # decoding, not weighing


def test_a_free_string_stops_at_the_quote_token():
    stops = []

    class Stops(Wants):
        def decode_masked(self, prompt, allowed, stop_token, *, max_tokens):
            stops.append(stop_token)
            return super().decode_masked(prompt, allowed, stop_token, max_tokens=max_tokens)

    decoder = ScoredDecoder(Stops('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'))
    decoder.reply(SECOND, schema_for_turn(False, True))
    assert stops == [ord('"')] == [decoder.quote_token]


class Priors(Wants):
    """A model with given log-probabilities for the tenses after a real question and after none; it records the
    neutral prompts it is asked."""

    prior = {"past simple": 0.0, "present simple": -2.0}
    content = {"past simple": -1.0, "present simple": -1.2}

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.neutral: list[str] = []

    def score(self, prompt, options):
        self.sync(prompt)
        text = self.vocab.detokenize(prompt)
        if "Q: N/A" in text:
            self.neutral.append(text)
        texts = [self.vocab.detokenize(o) for o in options]
        if not any(t.startswith(("past simple", "present simple")) for t in texts):
            return super().score(prompt, options)
        table = self.prior if "Q: N/A" in text else self.content
        return np.array([table.get(t.split('"')[0], -10.0) for t in texts])


def test_calibration_subtracts_the_prior_times_its_weight_not_divided_by_it():
    class Steep(Priors):  # after no question: past -1, present -4; after the question: past -1, present -2
        prior = {"past simple": -1.0, "present simple": -4.0}
        content = {"past simple": -1.0, "present simple": -2.0}

    # times 0.5: past -1 + 0.5 = -0.5, present -2 + 2 = 0 (present wins); divided: past -0.5, present -1.875
    rt = Steep('{"tool": "conjugate", "verb": "go", "tense": "present simple", "person": "she"}')
    assert '"tense": "present simple"' in ScoredDecoder(rt).reply(SECOND, schema_for_turn(False, True)).text


def test_the_prior_is_asked_after_a_content_free_question_and_this_action_only_with_its_choices_fixed():
    class Flat(Priors):  # no prior between the two, so the question decides: the past simple
        prior = {"past simple": 0.0, "present simple": 0.0}
        content = {"past simple": -1.0, "present simple": -3.0}

    rt = Flat('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}')
    assert '"tense": "past simple"' in ScoredDecoder(rt).reply(SECOND, schema_for_turn(False, True)).text
    head = render([Entry("question", "N/A")]) + NEXT_ACTION
    written = [text[text.index(head):] for text in rt.neutral]
    assert written == [head + '{"tool": "conjugate", "verb": "do", "tense": "',
                       head + '{"tool": "conjugate", "verb": "do", "tense": "present simple", "person": "']


def test_the_priors_file_is_written_where_the_cache_folder_does_not_exist_yet(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    decoder = ScoredDecoder(Primed('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}',
                                   str(model)), cache_dir=tmp_path / "not" / "yet")
    decoder.reply(SECOND, schema_for_turn(False, True))
    assert len(list((tmp_path / "not" / "yet").glob("priors-*.npz"))) == 1


def test_a_number_field_weighs_exactly_its_range():
    rt = Wants('{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she", "steps": 2}')
    assert ScoredDecoder(rt).reply(PAD, first_call_with_steps(2, 4)).text == rt.target
    assert rt.scored[-1] == ["2}", "3}", "4}"]


def test_any_schema_of_the_same_shape_is_walked_two_constants_and_a_free_string_after_an_enum():
    target = '{"kind": "call", "mode": "plain", "tense": "past simple", "note": "fine"}'
    schema = {"anyOf": [{"type": "object", "properties": {
        "kind": {"const": "call"}, "mode": {"const": "plain"}, "tense": {"enum": ["present simple", "past simple"]},
        "note": {"type": "string"}}}]}
    assert ScoredDecoder(Wants(target)).reply(PAD, schema).text == target
