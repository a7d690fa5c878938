"""The tutor session (``invoke ask`` and the eval open one): what it hands the loop, the backend and the MCP
client, and that it closes what it opened, also when its start fails. The model and the server are stood in here;
``test_tutor_e2e.py`` and the harness tests open real ones."""

from __future__ import annotations

import threading

import pytest

from miniagent.agent.errors import ServerFailed
from miniagent.agent.trace import Trace
from miniagent.lab import session as session_module
from miniagent.lab.session import TutorSession
from miniagent.settings import load_config


class StandInTools:
    made: list["StandInTools"] = []

    def __init__(self, *, delay, hang_on, timeout, env):
        self.given = {"delay": delay, "hang_on": hang_on, "timeout": timeout}
        assert env == {}, "an untraced session (the suite's MINIAGENT_TRACES=off) tells its server nothing of traces"
        self.started = self.closed = False
        self.release = threading.Event()  # set by the test: a start that waits for it is still under way
        self.wait_in_start = False
        StandInTools.made.append(self)

    def start(self):
        if self.wait_in_start:
            self.release.wait(timeout=3)
        self.started = True

    def close(self):
        self.closed = True


class StandInModel:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


@pytest.fixture
def parts(monkeypatch):
    StandInTools.made = []
    made = {"threads": [], "models": []}

    def make_backend(settings, threads, weights):
        if made.get("fail"):
            raise RuntimeError("the model failed to load")
        made["threads"].append((threads, weights))
        made["models"].append(StandInModel())
        return made["models"][-1]

    monkeypatch.setattr(session_module, "MCPClient", StandInTools)
    monkeypatch.setattr(session_module, "make_backend", make_backend)
    monkeypatch.setattr(session_module, "threads_for", lambda settings: (3, "measured"))
    monkeypatch.setattr(session_module, "start_loading", lambda settings: None)
    yield made
    for tools in StandInTools.made:
        tools.release.set()


def test_the_session_hands_the_client_its_faults_and_the_backend_its_threads(parts):
    settings = load_config({"llm": "scripted:oracle", "fault_delay_s": 0.5, "fault_hang_on": "eat",
                            "tool_timeout_s": 7.0})
    with TutorSession(settings) as opened:
        [tools] = StandInTools.made
        assert tools.given == {"delay": 0.5, "hang_on": "eat", "timeout": 7.0} and tools.started
        assert parts["threads"] == [((3, "measured"), None)] and opened.model is parts["models"][0]
    assert tools.closed and parts["models"][0].closed


def test_no_hang_word_reaches_the_client_as_none(parts):
    with TutorSession(load_config({"llm": "scripted:oracle", "fault_hang_on": ""})):
        assert StandInTools.made[0].given["hang_on"] is None


def test_a_session_asks_the_loop_with_its_own_parts(parts, monkeypatch):
    asked = []
    monkeypatch.setattr(session_module, "grammar_tutor", lambda question, **kw: asked.append((question, kw)) or "done")
    trace = Trace.memory()
    settings = load_config({"llm": "scripted:oracle"})

    def cancel():
        return False

    with TutorSession(settings, trace) as opened:
        assert opened.ask("Q?", cancel) == "done"
    assert asked == [("Q?", {"model": opened.model, "tools": opened.tools, "config": settings.tutor, "trace": trace,
                             "cancel": cancel})]


def test_without_a_trace_the_session_keeps_its_events_in_memory():
    opened = TutorSession(load_config({"llm": "scripted:oracle"}))
    assert isinstance(opened.trace, Trace) and opened.trace.events == [] and opened.trace._stream is None


def test_a_session_not_opened_refuses_to_ask_and_closes_nothing():
    unopened = TutorSession(load_config({"llm": "scripted:oracle"}))
    unopened.close()  # nothing was opened: nothing to close, and no error
    with pytest.raises(AssertionError, match="^use TutorSession as a context manager$"):
        unopened.ask("Q?")
    unopened.model = StandInModel()
    with pytest.raises(AssertionError):
        unopened.ask("Q?")  # a model alone is not a session


def test_a_failed_start_closes_the_client_and_does_not_wait_for_its_start(parts, monkeypatch):
    """The server's start is still under way when the model fails: the session unwinds at once, and the
    client is closed (which stops a server that is still starting)."""
    parts["fail"] = True

    def waiting_tools(**given):
        tools = StandInTools(**given)
        tools.wait_in_start = True
        return tools

    monkeypatch.setattr(session_module, "MCPClient", waiting_tools)
    with pytest.raises(RuntimeError, match="the model failed to load"):
        with TutorSession(load_config({"llm": "scripted:oracle"})):
            pass
    [tools] = StandInTools.made
    assert tools.closed and not tools.started, "the session waited for a start it had given up on"


@pytest.mark.parametrize("failure", [ServerFailed("could not start the MCP server (stand-in)"), KeyboardInterrupt()],
                         ids=["server failed", "ctrl-c"])
def test_a_server_start_that_fails_or_is_interrupted_ends_the_session_and_closes_both(parts, monkeypatch, failure):
    """The command reports a server that did not start (cli.main: exit 2) and Ctrl-C (130): the session raises what
    the start raised, once the model is made, and closes the client and the model."""
    def failing_tools(**given):
        tools = StandInTools(**given)
        tools.start = lambda: (_ for _ in ()).throw(failure)
        return tools

    monkeypatch.setattr(session_module, "MCPClient", failing_tools)
    with pytest.raises(type(failure)) as raised:
        with TutorSession(load_config({"llm": "scripted:oracle"})):
            pytest.fail("the session opened without its server")
    [tools] = StandInTools.made
    assert raised.value is failure and tools.closed and parts["models"][0].closed
