"""A class on one model server, without the server: the scoring from log-probabilities, the masked
strings, the model's own clock, and the model options on every invoke task."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import FakeTools, config

from miniagent.agent.errors import ModelTimeout
from miniagent.agent.loop import grammar_tutor
from miniagent.agent.ports import ModelReply
from miniagent.models.openai_compat import ServerRuntime
from miniagent.models.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the past simple of go for she?"


class StubServer:
    """Answers top_logprobs by the prompt's ending and greedy completions from a list."""

    where = "the model server at http://stub/v1"

    def __init__(self, tops: dict[str, dict[str, float]], completions: list[tuple[str, str]] = ()):
        self.tops, self.completions = tops, list(completions)
        self.asked: list[str] = []

    def top_logprobs(self, prompt, deadline):
        self.asked.append(prompt)
        for ending, top in self.tops.items():
            if prompt.endswith(ending):
                return top
        raise AssertionError(f"unexpected prompt ending {prompt[-30:]!r}")

    def complete(self, prompt, max_tokens, stop, deadline):
        text, finish = self.completions.pop(0)
        return text, finish, {}

    def close(self):
        pass


@pytest.fixture(scope="module")
def runtime():
    rt = ServerRuntime(StubServer({}))
    yield rt
    rt.close()


def _lse(*values: float) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def test_options_are_scored_from_the_servers_top_logprobs_renormalised_where_they_part(runtime):
    prefix = 'Q: x\nA: {"tense": "'
    runtime.server = StubServer({
        '"tense": "': {"past": -0.5, "present": -1.0, "future": -2.0, "the": -0.1},
        '"past': {" simple": -0.1, " perfect": -2.5, " continuous": -3.0},
    })
    options = ['past simple",', 'past perfect",', 'present simple",']
    scores = runtime.score(runtime.vocab.tokenize(prefix, bos=True), [runtime.vocab.tokenize(o) for o in options])
    root = _lse(-0.5, -1.0)  # only the options' own tokens count: "the" and "future" are not options
    after_past = _lse(-0.1, -2.5)
    expected = [-0.5 - root + (-0.1 - after_past), -0.5 - root + (-2.5 - after_past), -1.0 - root]
    assert np.allclose(scores, expected)
    # one request where the options part ('"' + past/present, then simple/perfect); none where only one goes on
    assert len(runtime.server.asked) == 2 and runtime.server.asked[0].endswith('"tense": "')
    assert not runtime.server.asked[0].startswith("<bos>"), "the server adds BOS itself"


def test_an_option_missing_from_the_top_gets_the_lowest_listed_value_and_is_counted(runtime):
    runtime.server = StubServer({'"person": "': {"she": -0.2, "he": -1.5, "it": -4.0}})
    before = runtime.unseen_options
    scores = runtime.score(runtime.vocab.tokenize('A: {"person": "', bos=True), [runtime.vocab.tokenize(o) for o in ("she", "we")])
    assert runtime.unseen_options == before + 1
    assert scores[0] > scores[1] and np.isclose(scores[1] - scores[0], -4.0 - (-0.2))


def test_a_string_the_mask_allows_is_the_servers_greedy_text(runtime):
    masks = runtime.vocab.masks(None)
    quote = runtime.vocab.tokenize('"')[0]
    runtime.server = StubServer({'"verb": "swim': {'",': -0.05, '"': -3.0, "s": -4.0}}, completions=[("swim", "stop")])
    out = runtime.decode_masked(runtime.vocab.tokenize('A: {"verb": "', bos=True), masks["word"], quote, max_tokens=8)
    assert out.text == 'swim"' and out.finished
    assert len(runtime.server.asked) == 1, "one look at where the server stopped: was it the quote alone?"


def test_a_stop_inside_a_token_the_mask_refuses_does_not_end_the_string(runtime):
    """The server stops at the quote of '",' (the model's likeliest token after "clim"); the local backend's
    mask refuses '",' and takes the likeliest token it allows, "bed": the server path must write "climbed" too."""
    masks = runtime.vocab.masks(None)
    quote = runtime.vocab.tokenize('"')[0]
    runtime.server = StubServer(
        {'"verb": "clim': {'",': -0.2, "bed": -1.2, "b": -1.5, '"': -4.0},
         '"verb": "climbed': {'",': -0.01, '"': -3.0, "s": -6.0}},
        completions=[("clim", "stop"), ("", "stop")])
    out = runtime.decode_masked(runtime.vocab.tokenize('A: {"verb": "', bos=True), masks["word"], quote, max_tokens=8)
    assert out.text == 'climbed"' and out.finished


def test_a_token_the_mask_refuses_is_replaced_by_the_likeliest_one_it_allows(runtime):
    masks = runtime.vocab.masks(None)
    quote = runtime.vocab.tokenize('"')[0]
    runtime.server = StubServer(
        {'"verb": "': {"Go": -0.1, " go": -0.3, "go": -0.9, '"': -5.0},  # "Go" and " go" are not lowercase words
         '"verb": "go': {'",': -0.01, '"': -0.5, "es": -2.0}},  # '",' is not the closing quote alone
        completions=[("Go", "stop"), ("", "stop")])
    out = runtime.decode_masked(runtime.vocab.tokenize('A: {"verb": "', bos=True), masks["word"], quote, max_tokens=8)
    assert out.text == 'go"' and out.finished


def test_a_string_cut_at_max_tokens_is_not_finished(runtime):
    masks = runtime.vocab.masks(None)
    quote = runtime.vocab.tokenize('"')[0]
    runtime.server = StubServer({}, completions=[("she has been swimming", "length")])
    out = runtime.decode_masked(runtime.vocab.tokenize('A: {"answer": "', bos=True), masks["text"], quote, max_tokens=4)
    assert not out.finished and out.text == "she has been swimming"


class SlowOracle(ScriptedBackend):
    """The oracle, each reply ``delay`` s late (a turn queued on a shared server); it honours timeout_s."""

    def __init__(self, delay: float):
        super().__init__("oracle")
        self.delay = delay
        self.timeouts: list[float | None] = []

    def next_action(self, scratchpad, *, timeout_s=None, **kwargs) -> ModelReply:
        self.timeouts.append(timeout_s)
        if timeout_s is not None and timeout_s < self.delay:
            time.sleep(timeout_s)
            raise ModelTimeout("still queued")
        time.sleep(self.delay)
        return super().next_action(scratchpad, timeout_s=timeout_s, **kwargs)


def test_without_a_model_clock_a_queued_model_spends_the_wall_clock():
    outcome = grammar_tutor(QUESTION, model=SlowOracle(0.7), tools=FakeTools(), config=config(wall_clock_s=1.0))
    assert outcome.stop_reason == "wall_clock"


def test_a_model_clock_gives_queued_turns_their_own_budget_and_leaves_the_tools_theirs():
    model, tools = SlowOracle(0.7), FakeTools()
    started = time.monotonic()
    outcome = grammar_tutor(QUESTION, model=model, tools=tools,
                            config=config(wall_clock_s=1.0, tool_timeout_s=2.0, model_wall_clock_s=5.0))
    elapsed = time.monotonic() - started
    assert outcome.stop_reason == "answered" and outcome.answer == "she went"
    assert elapsed > 1.0 and outcome.stats.seconds > 1.0, "the run's real time is reported, not the wall clock's count"
    assert model.timeouts[0] == pytest.approx(5.0, abs=0.05) and model.timeouts[1] == pytest.approx(4.3, abs=0.1)
    (_, _, tool_timeout), = tools.calls
    assert tool_timeout > 0.9, "the tool's timeout is not eaten by the time the model spent queued"


@pytest.mark.timing
def test_the_model_clock_still_ends_a_model_that_never_answers():
    started = time.monotonic()
    outcome = grammar_tutor(QUESTION, model=SlowOracle(60), tools=FakeTools(),
                            config=config(wall_clock_s=20, model_wall_clock_s=1.0))
    assert outcome.stop_reason == "wall_clock" and "model_wall_clock_s=1" in outcome.answer
    assert time.monotonic() - started < 1.0 + 0.5


@pytest.mark.parametrize("task", ["ask", "eval", "exp"])
def test_every_model_option_of_the_cli_is_on_the_invoke_task(task):
    from dataclasses import fields

    from miniagent.models.settings import ModelSettings

    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    model_fields = {"llm", "model", "decode", "max_action_tokens", "n_ctx", "n_threads", "cache_dir",
                    "model_wall_clock_s", "llama_amx", "traces", "traces_file"} | {
                        f.name for f in fields(ModelSettings) if f.name.startswith("openai_")}
    assert set(tasks.kit.MODEL_HELP) == model_fields, "MODEL_HELP lists the CLI's model options"
    shown = subprocess.run([sys.executable, "-m", "invoke", "--help", task], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    missing = [name for name in model_fields if "--" + name.replace("_", "-") not in shown]
    assert not missing, f"invoke {task} lacks {missing}"
