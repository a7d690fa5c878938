"""The class server's backend in this process, rule by rule, on a stand-in server (no HTTP, no model weights):
what the start-up checks ask and conclude, what each request is given, what a turn's prompt and format are on
the chat endpoint, how the masked string walk ends, and what it counts as evaluated.

The real-model tests (test_openai_backend.py) prove the whole path against llama-cpp-python's server; they
take minutes and say little about a branch a server rarely takes. Found by mutation testing: of the first 400
changes to ``openai_compat.py`` tried against the fast tests, 180 went unnoticed.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from miniagent.agent.actions import schema_for_turn
from miniagent.agent.config import ConfigError
from miniagent.agent.errors import ModelFailed, ModelTimeout
from miniagent.agent.grounding import Grounds
from miniagent.agent.ports import Entry
from miniagent.models import openai_compat
from miniagent.models.openai_compat import SYSTEM, OpenAIBackend, ServerRuntime
from miniagent.models.server_client import RequestRefused
from miniagent.models.prompt import render

WHERE = "the model server at http://stub/v1"


class Clock:
    def __init__(self) -> None:
        self.now, self.perf = 100.0, 0.0

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        self.perf += 0.25  # each reading a quarter of a second later: a latency is two readings apart
        return self.perf


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(openai_compat, "time", fake)
    return fake


class Server:
    """A ModelServerClient stand-in: every request is kept; each answers from its list, or raises what is there."""

    where = WHERE
    base_url = "http://stub/v1"
    model = "local"

    def __init__(self, *, models=("gemma",), completions=(), tops=None, chats=()) -> None:
        self.models, self.completions, self.tops, self.chats = models, list(completions), tops or {}, list(chats)
        self.asked: list[tuple] = []

    @staticmethod
    def _answer(value):
        if isinstance(value, Exception):
            raise value
        return value

    def model_ids(self, deadline):
        self.asked.append(("models", deadline))
        return list(self._answer(self.models))

    def complete(self, prompt, max_tokens, stop, deadline):
        self.asked.append(("complete", prompt, max_tokens, stop, deadline))
        return self._answer(self.completions.pop(0))

    def top_logprobs(self, prompt, deadline):
        self.asked.append(("top", prompt, deadline))
        for ending, top in self.tops.items():
            if prompt.endswith(ending):
                return self._answer(top)
        raise AssertionError(f"no top log-probabilities for a prompt ending {prompt[-30:]!r}")

    def chat(self, messages, max_tokens, response_format, deadline):
        self.asked.append(("chat", messages, max_tokens, response_format, deadline))
        return self._answer(self.chats.pop(0))

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def shared_runtime():
    rt = ServerRuntime(Server())
    yield rt
    rt.close()


@pytest.fixture
def runtime(shared_runtime):
    """The module's runtime (its tokenizer is read once), every counter back to a fresh one's."""
    rt = shared_runtime
    rt.server, rt.tokens, rt.evaluated, rt.deadline, rt.startup_s = Server(), [], 0, 55.0, 2.5
    rt.startup_failure, rt.logprobs_ok, rt.server_models, rt.unseen_options = None, None, [], 0
    return rt


def tokens(rt: ServerRuntime, text: str, bos: bool = False) -> list[int]:
    return rt.vocab.tokenize(text, bos=bos)


def test_the_priors_are_kept_apart_by_server_by_model_asked_for_and_by_what_the_server_serves(runtime):
    """The options' priors are cached on disk under a key that holds this tag: two servers, two model names or two
    served models must never share priors."""
    def tag(served=("gemma",), **server) -> str:
        runtime.server = Server()
        vars(runtime.server).update(server)
        runtime.server_models = list(served)
        return runtime.priors_tag

    tags = [tag(), tag(base_url="http://other/v1"), tag(model="other"), tag(served=("other",)), tag(served=())]
    assert len(set(tags)) == len(tags)
    assert tag() == tags[0]  # the same server, model and served list: the same priors


# --------------------------------------------------------------------------- what a request carries


def test_the_text_sent_leaves_out_one_leading_bos_the_server_adds_itself(runtime):
    text = 'Q: x\nA: {"verb": "'
    assert runtime._text(tokens(runtime, text, bos=True)) == text
    assert runtime._text(tokens(runtime, text)) == text
    assert runtime._text([runtime.model.token_bos()]) == ""


def test_evaluated_counts_the_tokens_a_lone_client_makes_the_server_read(runtime):
    first = tokens(runtime, "Q: one two three", bos=True)
    runtime.sync(first)
    assert runtime.evaluated == len(first) and runtime.tokens == first and runtime.tokens is not first
    runtime.sync(first + [runtime.model.token_bos()])  # one more token after what the server already holds
    assert runtime.evaluated == len(first) + 1
    other = first[:2] + tokens(runtime, " four five")
    runtime.sync(other)
    assert runtime.evaluated == len(first) + 1 + len(other) - 2


def test_each_top_request_is_one_token_more_and_keeps_the_runs_deadline(runtime):
    runtime.server = Server(tops={"x": {"a": -1.0}})
    assert runtime._top(tokens(runtime, "Q: x", bos=True)) == {"a": -1.0}
    assert runtime.evaluated == 1 and runtime.server.asked == [("top", "Q: x", 55.0)]


def test_scoring_asks_only_where_the_options_part_and_counts_each_paths_tokens(runtime):
    """Both options start with the same token: nothing to ask there; they part after it (one request, whose
    path is that one token: 1 + 1 evaluated, after the prompt's own)."""
    prompt = tokens(runtime, 'A: {"verb": "', bos=True)
    go, gone = tokens(runtime, "go"), tokens(runtime, "go") + tokens(runtime, "ne")
    options = [go + tokens(runtime, '"'), gone + tokens(runtime, '"')]
    assert options[0][0] == options[1][0] and options[0][1] != options[1][1]
    runtime.server = Server(tops={'"go': {'"': -0.5, "ne": -2.0}})
    scores = runtime.score(prompt, options)
    assert len(runtime.server.asked) == 1 and runtime.evaluated == len(prompt) + 1 + 1
    assert scores[0] > scores[1] and np.isclose(np.exp(scores).sum(), 1.0)


def test_every_option_the_servers_top_leaves_out_is_counted(runtime):
    runtime.server = Server(tops={'"': {"she": -0.2, "it": -4.0}})
    runtime.score(tokens(runtime, 'A: {"person": "', bos=True), [tokens(runtime, w) for w in ("she", "we", "they")])
    assert runtime.unseen_options == 2


# --------------------------------------------------------------------------- the masked string walk


@pytest.fixture(scope="module")
def word(shared_runtime):
    """The word field's mask (1.5 s to build: once) and the closing quote."""
    return shared_runtime.vocab.masks(None)["word"], tokens(shared_runtime, '"')[0]


PROMPT = 'A: {"verb": "'


def test_each_completion_asks_for_what_is_left_stopping_at_a_quote_by_the_runs_deadline(runtime, word):
    allowed, quote = word
    runtime.server = Server(completions=[("Go", "stop", {}), ("", "stop", {})],
                            tops={PROMPT: {"go": -0.9, "Go": -0.1}, PROMPT + "go": {'"': -0.1}})
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=8)
    assert out.text == 'go"' and out.tokens == tokens(runtime, "go") + [quote] and out.finished is True
    completes = [a for a in runtime.server.asked if a[0] == "complete"]
    assert completes == [("complete", PROMPT, 8, ['"'], 55.0), ("complete", PROMPT + "go", 7, ['"'], 55.0)]
    # each completion: its tokens and one more (the stop); each top request: one
    got = len(tokens(runtime, "Go"))
    assert runtime.evaluated == len(tokens(runtime, PROMPT, bos=True)) + (got + 1) + 1 + (0 + 1) + 1


def test_a_token_refused_after_good_ones_is_found_whatever_its_place(runtime, word):
    """'swim' is allowed, the '",' after it is not: two tokens, the second refused."""
    allowed, quote = word
    runtime.server = Server(completions=[('swim",', "stop", {})], tops={PROMPT + "swim": {'"': -0.1, '",': -0.01}})
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=8)
    assert out.text == 'swim"' and out.finished


def test_a_server_stopped_by_its_length_before_ours_is_cut_off_where_it_stopped(runtime, word):
    """The server counts its tokens, we count ours: "length" means it stopped, whatever our count says."""
    allowed, quote = word
    runtime.server = Server(completions=[("swimming", "length", {})])
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=8)
    assert (out.text, out.tokens, out.finished) == ("swimming", tokens(runtime, "swimming"), False)
    assert len(tokens(runtime, "swimming")) < 8 and len(runtime.server.asked) == 1


def test_a_string_of_exactly_max_tokens_is_cut_off_without_another_request(runtime, word):
    allowed, quote = word
    text = "swimming"
    n = len(tokens(runtime, text))
    runtime.server = Server(completions=[(text, "stop", {})])
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=n)
    assert (out.text, out.finished, len(runtime.server.asked)) == (text, False, 1)


def test_a_string_filled_to_max_tokens_by_chosen_tokens_is_cut_off(runtime, word):
    allowed, quote = word
    runtime.server = Server(completions=[("Go", "stop", {})], tops={PROMPT: {"go": -0.9, "Go": -0.1}})
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=1)
    assert (out.text, out.tokens, out.finished) == ("go", tokens(runtime, "go"), False)
    assert len(runtime.server.asked) == 2


def test_nothing_allowed_among_the_likeliest_closes_a_begun_string(runtime, word):
    allowed, quote = word
    runtime.server = Server(completions=[("swim", "stop", {})], tops={PROMPT + "swim": {"!": -0.1, "?": -0.2}})
    out = runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=8)
    assert (out.text, out.tokens, out.finished) == ('swim"', tokens(runtime, "swim") + [quote], True)


def test_nothing_allowed_for_an_empty_string_is_a_model_failure_naming_the_server(runtime, word):
    allowed, quote = word
    runtime.server = Server(completions=[("", "stop", {})], tops={PROMPT: {"!": -0.1, '"': -0.2}})
    with pytest.raises(ModelFailed, match=r"^the model server at http://stub/v1: none of the 20 likeliest tokens"
                                          r" fits the field$"):
        runtime.decode_masked(tokens(runtime, PROMPT, bos=True), allowed, quote, max_tokens=8)


# --------------------------------------------------------------------------- the start-up checks


def warm(runtime, caplog, **server) -> list[str]:
    runtime.server = Server(**server)
    with caplog.at_level(logging.INFO, logger="miniagent"):
        runtime._warm_up(tokens(runtime, "HEADER TEXT", bos=True))
    return [record.getMessage() for record in caplog.records]


CHECKING = f"checking {WHERE} (each start-up request may take up to 2.5 s: openai_startup_s)"


def test_a_healthy_server_is_asked_three_things_each_within_the_startup_bound(runtime, caplog, clock):
    said = warm(runtime, caplog, completions=[("x", "length", {"prompt_tokens": len(tokens(runtime, "HEADER TEXT",
                                                                                          bos=True))})],
                tops={"TEXT": {"a": -1.0}})
    assert said == [CHECKING]
    assert runtime.server.asked == [("models", 102.5), ("complete", "HEADER TEXT", 1, [], 102.5),
                                    ("top", "HEADER TEXT", 102.5)]
    assert runtime.server_models == ["gemma"] and runtime.logprobs_ok is True and runtime.startup_failure is None


def test_a_server_without_a_models_list_still_completes(runtime, caplog, clock):
    said = warm(runtime, caplog, models=ModelFailed("404"), completions=[("x", "length", {})],
                tops={"TEXT": {"a": -1.0}})
    assert said == [CHECKING] and runtime.server_models == [] and runtime.logprobs_ok is True


def test_a_server_that_does_not_answer_its_models_list_is_wedged_and_no_run_starts(runtime, caplog, clock):
    said = warm(runtime, caplog, models=ModelTimeout("no answer"))
    failure = (f"{WHERE} took the connection but did not answer GET http://stub/v1/models within 2.5 s "
               "(openai_startup_s): it is wedged, or too busy")
    assert runtime.startup_failure == failure and said == [CHECKING, failure]
    assert [a[0] for a in runtime.server.asked] == ["models"] and runtime.logprobs_ok is None


def test_a_server_that_counts_the_header_otherwise_serves_another_model(runtime, caplog, clock):
    n = len(tokens(runtime, "HEADER TEXT", bos=True))
    said = warm(runtime, caplog, completions=[("x", "length", {"prompt_tokens": n + 3})], tops={"TEXT": {"a": -1.0}})
    assert said == [CHECKING, f"{WHERE} counts {n + 3} tokens in the prompt header, the tokenizer of "
                              f"{runtime.model_path} counts {n}: it serves another model, and scored decoding "
                              "will be off"]
    assert runtime.logprobs_ok is True


@pytest.mark.parametrize("error, logprobs_ok", [
    (ModelFailed("the reply has no log-probabilities"), False), (RequestRefused("HTTP 400", 400), False),
    (ModelFailed("HTTP 503 busy"), None)])
def test_a_server_that_gives_no_log_probabilities_is_known_before_the_first_turn(runtime, caplog, clock, error,
                                                                                 logprobs_ok):
    said = warm(runtime, caplog, completions=[("x", "length", {})], tops={"TEXT": error})
    assert runtime.logprobs_ok is logprobs_ok and said == [CHECKING, f"warming up {WHERE}: {error}"]


def test_a_busy_server_that_answered_its_models_list_is_warmed_up_by_the_first_turn(runtime, caplog, clock):
    said = warm(runtime, caplog, completions=[ModelTimeout("slow")])
    assert said == [CHECKING, f"warming up {WHERE}: no answer within 2.5 s (openai_startup_s); the first turn will "
                              "wait for it"]
    assert runtime.logprobs_ok is None and runtime.startup_failure is None


# --------------------------------------------------------------------------- greedy: the chat endpoint


@pytest.fixture
def backend(clock):
    """The greedy path's state alone (a whole backend reads the tokenizer and the priors: 4 s)."""
    backend = OpenAIBackend.__new__(OpenAIBackend)
    backend.format_in_use, backend.response_format, backend.decode = "json_schema", "auto", "greedy"
    backend.decoder = SimpleNamespace(max_action_tokens=37)
    return backend


SCRATCHPAD = [Entry("question", "What is the past simple of go for she?")]
GROUNDS = Grounds(persons=("she",), verbs=("go",))


def chat(backend, *replies, partial="", timeout_s=4.0, **turn):
    backend.server = Server(chats=replies)
    turn = {"first_turn": False, "may_answer": True, "final": False, "grounds": GROUNDS} | turn
    reply = backend._chat_action(SCRATCHPAD, turn["first_turn"], turn["may_answer"], partial, timeout_s,
                                 turn["final"], turn["grounds"])
    return reply, backend.server.asked


def test_a_turn_on_the_chat_endpoint_is_the_header_and_the_scratchpad_with_the_turns_schema(backend):
    reply, asked = chat(backend, ('{"x": 1}', "length", {"prompt_tokens": 40, "completion_tokens": 9}))
    user = render(SCRATCHPAD) + "What is the next action (A:)?"
    schema = schema_for_turn(False, True, False, GROUNDS)
    assert asked == [("chat", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                      backend.decoder.max_action_tokens,
                      {"type": "json_schema", "json_schema": {"name": "next_action", "schema": schema, "strict": True}},
                      104.0)]
    assert (reply.text, reply.finish_reason, reply.prompt_tokens, reply.completion_tokens, reply.latency_s) == (
        '{"x": 1}', "length", 40, 9, 0.25)


@pytest.mark.parametrize("turn", [{"first_turn": True}, {"may_answer": False}, {"final": True},
                                  {"grounds": None}])
def test_each_part_of_the_turn_reaches_the_schema_sent(backend, turn):
    _, asked = chat(backend, ("{}", "stop", {}), **turn)
    whole = {"first_turn": False, "may_answer": True, "final": False, "grounds": GROUNDS} | turn
    schema = schema_for_turn(whole["first_turn"], whole["may_answer"], whole["final"], whole["grounds"])
    assert asked[0][3]["json_schema"]["schema"] == schema != schema_for_turn(False, True, False, GROUNDS)


def test_a_continuation_asks_for_the_rest_with_no_format_and_no_time_limit(backend):
    reply, asked = chat(backend, ('go"}', "stop", {}), partial='{"verb": "', timeout_s=None)
    user = (render(SCRATCHPAD) + "What is the next action (A:)?\nYour reply was cut off after: "
            '{"verb": "\nWrite only the rest of it.')
    assert asked[0][1][1] == {"role": "user", "content": user} and asked[0][3] is None and asked[0][4] is None
    assert reply.finish_reason == "stop" and reply.prompt_tokens == 0


def test_a_server_that_refuses_json_schema_gets_json_object_from_then_on(backend, caplog):
    refused = RequestRefused("HTTP 500: unsupported", 500)
    with caplog.at_level(logging.WARNING, logger="miniagent"):
        reply, asked = chat(backend, refused, ("{}", "stop", {}))
    assert [a[3]["type"] for a in asked] == ["json_schema", "json_object"]
    assert asked[1][3] == {"type": "json_object", "schema": schema_for_turn(False, True, False, GROUNDS)}
    assert backend.format_in_use == "json_object" and reply.text == "{}"
    assert [r.getMessage() for r in caplog.records] == [
        f"{WHERE} refused response_format json_schema ({refused}) and took json_object with the schema "
        "(llama-cpp-python's dialect): using that from now on"]
    _, asked = chat(backend, ("{}", "stop", {}))
    assert [a[3]["type"] for a in asked] == ["json_object"]


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refusal_that_is_not_about_the_format_is_not_retried(backend, status):
    with pytest.raises(RequestRefused):
        chat(backend, RequestRefused(f"HTTP {status}", status))
    assert backend.format_in_use == "json_schema"


def test_an_explicit_format_is_not_changed_behind_the_learners_back(backend):
    backend.response_format = "json_schema"
    with pytest.raises(RequestRefused):
        chat(backend, RequestRefused("HTTP 500", 500), ("{}", "stop", {}))
    assert backend.format_in_use == "json_schema"


def test_json_object_refused_as_well_names_both_refusals(backend):
    with pytest.raises(ModelFailed, match=r"^HTTP 500: no schema; with response_format json_object instead: "
                                          r"HTTP 500: no object$") as caught:
        chat(backend, RequestRefused("HTTP 500: no schema", 500), RequestRefused("HTTP 500: no object", 500))
    assert caught.value.__cause__ is None and backend.format_in_use == "json_schema"


def test_a_format_already_fallen_back_is_not_tried_again(backend):
    backend.format_in_use = "json_object"
    with pytest.raises(RequestRefused):
        chat(backend, RequestRefused("HTTP 500", 500), ("{}", "stop", {}))


# --------------------------------------------------------------------------- a turn, and the end


class Decoder:
    max_action_tokens = 37

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def reply(self, scratchpad, schema, *, partial, timeout_s):
        self.asked.append((scratchpad, schema, partial, timeout_s))
        return "scored reply"


def test_a_scored_turn_is_the_decoders_walk_of_the_turns_schema(backend):
    backend.decode, backend.decoder, backend.rt = "scored", Decoder(), SimpleNamespace(startup_failure=None)
    assert backend.next_action(SCRATCHPAD, first_turn=True) == "scored reply"
    assert backend.next_action(SCRATCHPAD, first_turn=False, may_answer=False, partial='{"', timeout_s=0.5,
                               final=False, grounds=GROUNDS) == "scored reply"  # half a second is time left
    backend.next_action(SCRATCHPAD, first_turn=False, may_answer=True, final=True)
    assert backend.decoder.asked == [(SCRATCHPAD, schema_for_turn(True, None, False, None), "", None),
                                     (SCRATCHPAD, TOOL_TURN, '{"', 0.5),
                                     (SCRATCHPAD, schema_for_turn(False, True, True, None), "", None)]


# A turn whose schema each of its parts changes: may_answer, final and grounds each make another schema.
TOOL_TURN = schema_for_turn(False, False, False, GROUNDS)
assert TOOL_TURN not in (schema_for_turn(False, True, False, GROUNDS), schema_for_turn(False, False, True, GROUNDS),
                         schema_for_turn(False, False, False, None), schema_for_turn(True, False, False, GROUNDS))


def test_a_greedy_turn_hands_every_part_of_the_turn_to_the_chat_endpoint(backend):
    backend.rt = SimpleNamespace(startup_failure=None)
    backend.server = Server(chats=[("{}", "stop", {})] * 2)
    backend.next_action(SCRATCHPAD, first_turn=True)
    backend.next_action(SCRATCHPAD, first_turn=False, may_answer=False, partial="", timeout_s=3.0, final=False,
                        grounds=GROUNDS)
    formats = [asked[3]["json_schema"]["schema"] for asked in backend.server.asked]
    assert formats == [schema_for_turn(True, None, False, None), TOOL_TURN]
    assert [asked[4] for asked in backend.server.asked] == [None, 103.0]
    backend.server = Server(chats=[("rest", "stop", {})])
    backend.next_action(SCRATCHPAD, first_turn=False, partial='{"verb": "')
    assert "Your reply was cut off after: {\"verb\": \"" in backend.server.asked[0][1][1]["content"]


def test_no_turn_starts_on_a_server_that_failed_its_start_up_check(backend):
    backend.rt = SimpleNamespace(startup_failure="the model server at http://stub/v1 took the connection but ...")
    with pytest.raises(ModelFailed, match=r"^the model server at http://stub/v1 took the connection but \.\.\.$"):
        backend.next_action(SCRATCHPAD, first_turn=True, timeout_s=5.0)


@pytest.mark.parametrize("timeout_s", [0.0, -1.0])
def test_no_turn_starts_without_time_left(backend, timeout_s):
    backend.rt = SimpleNamespace(startup_failure=None)
    backend.server = Server()
    with pytest.raises(ModelTimeout, match=r"^no time left for a model call$"):
        backend.next_action(SCRATCHPAD, first_turn=True, timeout_s=timeout_s)
    assert backend.server.asked == []


def test_priming_warms_the_server_up_only_when_asked_and_never_claims_a_cached_header(runtime, monkeypatch):
    warmed = []
    monkeypatch.setattr(runtime, "_warm_up", warmed.append)
    runtime.warm_up = False
    assert runtime.prime([1, 2], None) is False and warmed == []
    runtime.warm_up = True
    assert runtime.prime([1, 2], None) is False and warmed == [[1, 2]]


def test_closing_closes_the_server_and_frees_the_tokenizer():
    closed = []
    rt = ServerRuntime.__new__(ServerRuntime)
    rt.server = SimpleNamespace(close=lambda: closed.append("server"))
    rt.model = SimpleNamespace(close=lambda: closed.append("tokenizer"))
    rt.close()
    assert closed == ["server", "tokenizer"]


# --------------------------------------------------------------------------- what each setting reaches


def recording(made: dict, name: str, **attrs):
    """A stand-in for one of the backend's parts: what it was made with goes into ``made[name]``."""

    def make(*args, **kwargs):
        made[name] = (args, kwargs)
        return SimpleNamespace(base_url="http://10.0.0.1:9000/v1", where="the class server", **attrs)

    return make


def backend_parts(monkeypatch, logprobs_ok=None) -> dict:
    made: dict = {}
    monkeypatch.setattr(openai_compat, "ModelServerClient", recording(made, "server"))
    monkeypatch.setattr(openai_compat, "ServerRuntime", recording(made, "runtime", logprobs_ok=logprobs_ok))
    monkeypatch.setattr(openai_compat, "ScoredDecoder", recording(made, "decoder"))
    return made


def test_every_argument_of_the_backend_reaches_the_part_it_configures(monkeypatch, caplog):
    made = backend_parts(monkeypatch)
    backend = OpenAIBackend("http://10.0.0.1:9000/v1", "class-model", max_action_tokens=33, decode="scored",
                            response_format="json_object", model_path="/models/g.gguf", n_ctx=1536,
                            cache_dir="/tmp/c", max_retries=4, warm_up=True, startup_s=3.5)
    assert made["server"] == (("http://10.0.0.1:9000/v1", "class-model"), {"max_retries": 4})
    assert made["runtime"][1] == {"n_ctx": 1536, "warm_up": True, "startup_s": 3.5}
    assert made["runtime"][0][1] == "/models/g.gguf" and made["runtime"][0][0] is backend.server
    assert made["decoder"] == ((backend.rt,), {"max_action_tokens": 33, "cache_dir": "/tmp/c"})
    assert (backend.response_format, backend.format_in_use, backend.decode, backend.name, backend.url) == (
        "json_object", "json_object", "scored", "openai:scored", "http://10.0.0.1:9000/v1")
    assert caplog.records == []


def test_the_backends_defaults(monkeypatch):
    made = backend_parts(monkeypatch, logprobs_ok=True)
    backend = OpenAIBackend("http://h/v1")
    assert made["server"] == (("http://h/v1", "local"), {"max_retries": 2})
    assert made["runtime"][0][1] is None
    assert made["runtime"][1] == {"n_ctx": 2048, "warm_up": False, "startup_s": openai_compat.STARTUP_S}
    assert made["decoder"][1] == {"max_action_tokens": 48, "cache_dir": None}
    assert (backend.response_format, backend.format_in_use, backend.decode, backend.name) == (
        "auto", "json_schema", "scored", "openai:scored")
    assert openai_compat.STARTUP_S == 10.0


def test_a_server_without_log_probabilities_is_decoded_greedily_and_the_learner_is_told(monkeypatch, caplog):
    backend_parts(monkeypatch, logprobs_ok=False)
    with caplog.at_level(logging.WARNING, logger="miniagent"):
        backend = OpenAIBackend("http://h/v1")
    assert (backend.decode, backend.name) == ("greedy", "openai:greedy")
    assert [r.getMessage() for r in caplog.records] == [
        "the class server gives no token log-probabilities on its completions endpoint: decoding greedily through "
        "its chat endpoint instead (expect lower accuracy)"]
    assert OpenAIBackend("http://h/v1", decode="greedy").name == "openai:greedy"
    backend_parts(monkeypatch, logprobs_ok=None)  # not known yet (no warm-up): scored, as asked
    assert OpenAIBackend("http://h/v1").decode == "scored"


def test_a_fresh_runtime_reads_the_tokenizer_alone_and_has_counted_nothing(monkeypatch, tmp_path):
    from llama_cpp import _internals

    loaded = []
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(_internals, "LlamaModel", lambda **kwargs: loaded.append(kwargs) or SimpleNamespace())
    monkeypatch.setattr(openai_compat, "Vocabulary", lambda model, path: ("vocab", model, path))
    server = Server()
    rt = ServerRuntime(server, str(gguf), n_ctx=1024, warm_up=True, startup_s=4.0)
    # verbose=True: a quiet load would silence the MCP server starting beside it (test_llama_runtime's fd test)
    assert loaded == [{"path_model": str(gguf), "params": loaded[0]["params"], "verbose": True}]
    assert loaded[0]["params"].vocab_only is True
    assert rt.vocab == ("vocab", rt.model, str(gguf)) and rt.model_path == str(gguf)
    assert (rt.server, rt.n_ctx, rt.warm_up, rt.startup_s) == (server, 1024, True, 4.0)
    assert (rt.tokens, rt.evaluated, rt.deadline, rt.startup_failure, rt.logprobs_ok, rt.server_models,
            rt.unseen_options) == ([], 0, None, None, None, [], 0)
    default = ServerRuntime(server, str(gguf))
    assert (default.n_ctx, default.warm_up, default.startup_s) == (2048, False, openai_compat.STARTUP_S)
    monkeypatch.setattr(openai_compat, "default_model_path", lambda: str(gguf))
    assert ServerRuntime(server).model_path == str(gguf)
    with pytest.raises(FileNotFoundError, match=r"^model file not found: /nowhere/m\.gguf$"):
        ServerRuntime(server, "/nowhere/m.gguf")


def test_a_decode_mode_or_format_it_has_not_is_refused_by_the_settings_name_before_anything_is_made(monkeypatch):
    made = backend_parts(monkeypatch)
    with pytest.raises(ConfigError, match=r"^decode must be scored or greedy, not 'beam'$"):
        OpenAIBackend("http://h/v1", decode="beam")
    with pytest.raises(ConfigError, match=r"^openai_response_format must be .* or json_object, not 'xml'$"):
        OpenAIBackend("http://h/v1", response_format="xml")
    assert made == {}
