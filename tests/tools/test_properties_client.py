"""The MCP client, on generated calls to a real server that wedges on one verb.

The loop cuts every tool call to the time it has left, but only the client can make that time a limit: it
waits for the server's answer on a future, and that wait needs a timeout.  Each example starts a real server
(about a second), so there are few of them.
"""

from __future__ import annotations

import json
import time

from hypothesis import given, note, settings
from hypothesis import strategies as st

from miniagent.agent.errors import ToolError, ToolTimeout
from miniagent.tools.mcp_client import MCPClient

from helpers import returns_within

GRACE_S = 0.5  # a timed-out call cancels its request and returns; this is its margin on a busy machine
ARGS = {"eat": {"verb": "eat", "tense": "past simple", "person": "I"},
        "go": {"verb": "go", "tense": "past simple", "person": "she"},
        "lovingly": {"verb": "lovingly", "tense": "past simple", "person": "she"}}

calls = st.lists(st.tuples(st.sampled_from(("eat", "go", "lovingly")), st.sampled_from((0.25, 0.5))),
                 min_size=1, max_size=3)


def describe(sequence: list[tuple[str, float]]) -> dict[str, str]:
    en = "; ".join(f"conjugate({verb}) with a {t:g} s timeout" for verb, t in sequence)
    es = "; ".join(f"conjugate({verb}) con un plazo de {t:g} s".replace(".", ",") for verb, t in sequence)
    return {"en": f"A tool server that wedges on the verb eat, called in turn: {en}.",
            "es": f"Un servidor de herramientas que se atasca con el verbo eat, al que se llama por orden: {es}."}


@settings(max_examples=3)
@given(sequence=calls)
def test_a_tool_call_returns_within_its_timeout_whatever_the_server_does(sequence):
    """Every tool call returns (a result, a tool error or a timeout) within its timeout, even from a wedged server.

    (es) Toda llamada a una herramienta vuelve (con un resultado, un error o un plazo vencido) dentro de su plazo,
    aunque el servidor esté atascado.
    """
    note("counterexample-json: " + json.dumps(describe(sequence), ensure_ascii=False))
    with MCPClient(hang_on="eat", timeout=30.0) as client:
        for verb, timeout in sequence:
            started = time.monotonic()
            try:  # a call that never returns fails the test at timeout + GRACE_S, not pytest's timeout
                outcome = returns_within(timeout + GRACE_S, client.call, "conjugate", ARGS[verb], timeout=timeout,
                                         what=f"conjugate({verb})")
            except (ToolError, ToolTimeout) as err:
                outcome = err
            assert time.monotonic() - started <= timeout + GRACE_S
            if verb == "eat":
                assert isinstance(outcome, ToolTimeout)
