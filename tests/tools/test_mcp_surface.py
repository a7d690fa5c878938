"""What the conjugation server shows any MCP client, read through the SDK's own client session.

Not through ``MCPClient``: these checks are about the protocol surface (serverInfo,
capabilities, tool schemas and annotations), as an independent client sees it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import miniagent

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_session(steps):
    """Start the server over stdio, initialize, run ``await steps(session, init)``, close."""

    async def main():
        env = {"PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
        params = StdioServerParameters(command=sys.executable, args=["-m", "miniagent.tools.server"], env=env)
        # errlog named here: the SDK's default is the sys.stderr of when it was imported, which a test runner
        # that captures output may have closed since (mutmut does)
        async with stdio_client(params, errlog=sys.stderr) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            return await steps(session, init)

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


@pytest.fixture(scope="module")
def surface():
    async def steps(session, init):
        return init, await session.list_tools()

    return run_session(steps)


def test_server_info_names_the_package_version(surface):
    init, _ = surface
    assert init.server_info.name == "miniagent-conjugation"
    assert init.server_info.version == version("miniagent") == miniagent.__version__


def test_only_tools_are_advertised(surface):
    init, _ = surface
    capabilities = init.capabilities
    assert capabilities.tools is not None
    assert capabilities.prompts is None and capabilities.resources is None


def test_both_tools_are_read_only_and_closed_to_other_arguments(surface):
    _, listed = surface
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"conjugate", "list_tenses"}
    for tool in tools.values():
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False
    assert set(tools["conjugate"].input_schema["required"]) == {"verb", "tense", "person"}


def test_an_unknown_argument_is_a_tool_error_and_the_server_stays_up():
    see = {"verb": "see", "tense": "present perfect", "person": "she"}

    async def steps(session, init):
        return [
            await session.call_tool("conjugate", {**see, "mood": "subjunctive"}),
            await session.call_tool("list_tenses", {"verbose": True}),
            await session.call_tool("conjugate", {**{f"x{i}": 1 for i in range(100)}, **see}),
            await session.call_tool("conjugate", see),
        ]

    extra, extra_on_list, many, fine = run_session(steps)
    assert extra.is_error and "'mood'" in extra.content[0].text and "verb, tense, person" in extra.content[0].text
    assert extra_on_list.is_error and "'verbose'" in extra_on_list.content[0].text
    assert many.is_error and len(many.content[0].text) < 200  # 100 unknown names are not all echoed
    assert not fine.is_error and fine.content[0].text == "she has seen"


def test_inflected_and_phrasal_verbs_over_mcp():
    async def steps(session, init):
        return [
            await session.call_tool("conjugate", {"verb": "went", "tense": "past simple", "person": "he"}),
            await session.call_tool("conjugate", {"verb": "give up", "tense": "present perfect", "person": "she"}),
        ]

    went, give_up = run_session(steps)
    assert went.is_error and went.content[0].text == "'went' is the past of 'go'; give the base form 'go'."
    assert not give_up.is_error and give_up.content[0].text == "she has given up"


# --- the server's command line, parsed in the test process (found by `invoke mutants --wing tools`) ---------------
def test_the_servers_faults_come_from_flags_first_then_the_environment():
    from miniagent.tools.server import DELAY_ENV, HANG_ON_ENV, parse_faults

    env = {DELAY_ENV: " 0.25 ", HANG_ON_ENV: " go "}
    assert parse_faults([], {}) == (0.0, None)
    assert parse_faults([], env) == (0.25, "go")
    assert parse_faults(["--delay", "1.5", "--hang-on", "see"], env) == (1.5, "see")
    assert parse_faults(["--delay", "0"], env) == (0.0, "go")
    assert parse_faults(["--hang-on", " "], env) == (0.25, None), "a blank flag means no hang, not the env's"


def test_the_servers_faults_are_read_from_its_own_environment_when_none_is_given(monkeypatch):
    from miniagent.tools.server import DELAY_ENV, HANG_ON_ENV, parse_faults

    monkeypatch.setenv(DELAY_ENV, "0.5")
    monkeypatch.setenv(HANG_ON_ENV, "see")
    assert parse_faults([]) == (0.5, "see")


@pytest.mark.parametrize("argv, env, says", [
    (["--delay", "-1"], {}, "delay must be >= 0, got -1.0"),
    (["--delay", "nan"], {}, "delay must be >= 0, got nan"),
    ([], {"MINIAGENT_FAULT_DELAY": "nan"}, "delay must be >= 0, got nan"),
    ([], {"MINIAGENT_FAULT_DELAY": "soon"}, "MINIAGENT_FAULT_DELAY='soon' is not a number of seconds"),
    (["--delay", "soon"], {}, "argument --delay: invalid float value: 'soon'"),
])
def test_a_bad_fault_setting_is_refused_with_usage(argv, env, says, capsys):
    from miniagent.tools.server import parse_faults

    with pytest.raises(SystemExit) as stopped:
        parse_faults(argv, env)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("usage: python -m miniagent.tools.server ") and says in err, err


def test_the_servers_help_names_each_fault_and_its_environment_variable():
    from miniagent.tools import server

    parser = server._parser()
    assert parser.description == server.__doc__.split("\n\n")[0] == \
        "The conjugation MCP server: two tools over stdio, with lab faults on demand."
    (delay,) = [a for a in parser._actions if "--delay" in a.option_strings]
    (hang,) = [a for a in parser._actions if "--hang-on" in a.option_strings]
    assert (delay.metavar, delay.default, hang.metavar, hang.default) == ("SECONDS", None, "VERB", None)
    assert server.DELAY_ENV in delay.help and server.HANG_ON_ENV in hang.help
