"""models/llama.py, the local backend: what it hands its runtime and its decoder (with recorders: no model), and
both decoding modes on the real model in this process (the end-to-end tests run it in subprocesses)."""

from __future__ import annotations

import json

import pytest
from helpers import THREADS, FakeTools, config

from miniagent.agent.actions import schema_for_turn
from miniagent.agent.config import ConfigError
from miniagent.agent.grounding import Grounds
from miniagent.agent.loop import grammar_tutor
from miniagent.agent.ports import Entry
from miniagent.models import llama
from miniagent.models.llama_params import AmxChoice

QUESTION = "What is the past simple of go for she?"


class Runtime:
    def __init__(self, model_path, **kwargs):
        self.made = dict(model_path=model_path, **kwargs)
        self.closed = 0

    def close(self):
        self.closed += 1


class Decoder:
    def __init__(self, rt, **kwargs):
        self.rt, self.made, self.asked = rt, kwargs, []

    def reply(self, scratchpad, schema, **how):
        self.asked.append((scratchpad, schema, how))
        return "a reply"


@pytest.fixture
def parts(monkeypatch):
    monkeypatch.setattr(llama, "KVRuntime", Runtime)
    monkeypatch.setattr(llama, "ScoredDecoder", Decoder)


def test_the_settings_reach_the_runtime_and_the_decoder(parts):
    amx, weights = AmxChoice(False, "forced"), object()
    backend = llama.LlamaBackend("/m.gguf", n_ctx=1024, n_threads=3, max_action_tokens=40, decode="greedy",
                                 cache_dir="/cache", amx=amx, weights=weights)
    assert backend.rt.made == dict(model_path="/m.gguf", n_ctx=1024, n_threads=3, amx=amx, weights=weights)
    assert backend.decoder.rt is backend.rt and backend.decoder.made == dict(max_action_tokens=40, cache_dir="/cache")
    assert (backend.name, backend.decode) == ("llama:greedy", "greedy")


def test_the_defaults(parts):
    backend = llama.LlamaBackend()
    assert backend.rt.made == dict(model_path=None, n_ctx=2048, n_threads=2, amx=None, weights=None)
    assert backend.decoder.made == dict(max_action_tokens=48, cache_dir=None)
    assert (backend.name, backend.decode) == ("llama:scored", "scored")


def test_a_decoding_mode_it_does_not_have_is_refused_before_the_model_loads(monkeypatch):
    monkeypatch.setattr(llama, "KVRuntime", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(ConfigError, match="decode must be scored or greedy, not 'beam'"):
        llama.LlamaBackend(decode="beam")


@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_each_turn_hands_the_decoder_that_turns_schema_and_the_run_s_clock(parts, decode):
    backend = llama.LlamaBackend(decode=decode)
    pad, grounds = [Entry("question", QUESTION)], Grounds(persons=("she",), answer="she went")
    assert backend.next_action(pad, first_turn=False, may_answer=True, partial='{"answer": "she', timeout_s=2.5,
                               final=True, grounds=grounds) == "a reply"
    backend.next_action(pad, first_turn=True)
    (pad1, schema1, how1), (_, schema2, how2) = backend.decoder.asked
    assert pad1 is pad
    assert schema1 == schema_for_turn(False, True, True, grounds)
    assert schema2 == schema_for_turn(True, None, False, None) != schema1
    greedy = backend._greedy if decode == "greedy" else None
    assert how1 == dict(partial='{"answer": "she', timeout_s=2.5, greedy=greedy)
    assert how2 == dict(partial="", timeout_s=None, greedy=greedy)
    backend.close()
    assert backend.rt.closed == 1


@pytest.mark.parametrize("text, whole", [('{"tool": "list_tenses"}', True), ('{}', True), ('[1]', False),
                                         ('"text"', False), ('{"tool": "list_', False), ('', False)])
def test_a_greedy_action_is_done_at_a_whole_json_object(text, whole):
    assert llama._is_json_object(text) is whole


# --- the real model --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    cache = tmp_path_factory.mktemp("prompt-cache")  # the header is evaluated once, then read back by the second
    made = {decode: llama.LlamaBackend(decode=decode, cache_dir=cache, n_threads=THREADS)
            for decode in ("scored", "greedy")}
    yield made
    for backend in made.values():
        backend.close()


@pytest.mark.real_model
@pytest.mark.parametrize("decode", ["scored", "greedy"])
def test_each_mode_answers_a_question_through_the_tool(backends, decode, monkeypatch):
    backend = backends[decode]
    greedy_calls = []
    decode_greedy = backend.rt.decode_greedy
    monkeypatch.setattr(backend.rt, "decode_greedy", lambda *a, **k: greedy_calls.append(a) or decode_greedy(*a, **k))
    tools = FakeTools()
    outcome = grammar_tutor(QUESTION, model=backend, tools=tools, config=config())
    assert (outcome.stop_reason, outcome.answer.lower()) == ("answered", "she went")
    assert [call[0] for call in tools.calls] == ["conjugate"]
    assert len(greedy_calls) == (outcome.stats.turns if decode == "greedy" else 0)  # greedy: every action, whole


@pytest.mark.real_model
def test_greedy_continues_a_cut_off_answer_where_it_stopped(backends):
    """The grammar is walked through the text already given first: the continuation closes that answer, it does
    not start an action of its own."""
    pad = [Entry("question", QUESTION),
           Entry("action", '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'),
           Entry("observation", "she went")]
    partial = '{"answer": "she'
    reply = backends["greedy"].next_action(pad, first_turn=False, final=True, partial=partial)
    action = json.loads(partial + reply.text)
    assert reply.finish_reason == "stop" and list(action) == ["answer"] and action["answer"].startswith("she")
