"""The whole agent, killed from outside while its MCP server is wedged, leaves nothing behind.

The SDK starts the server in a process group of its own, so killing the
agent's group does not reach it: only the agent's own clean-up does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import LineWatch, wait_for_server, wait_for_tool_call

ROOT = Path(__file__).resolve().parents[1]
HUNG_AGENT = [sys.executable, "-m", "miniagent", "ask", "What is the past simple of eat for I?",
              "--llm", "scripted:stubborn", "--fault-hang-on", "eat", "--tool-timeout-s", "60", "--wall-clock-s", "60"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_agent_group_leaves_no_server(sig, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    trace = tmp_path / "trace.jsonl"
    agent = subprocess.Popen([*HUNG_AGENT, "--trace", str(trace)], cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wedged = LineWatch(agent.stderr)  # the server shares the agent's stderr and says when the call wedged it
    server = wait_for_server(agent)
    try:
        wait_for_tool_call(trace)
        wedged.wait()
        # The server leads a group of its own: the signal reaches it only through the agent's cleanup
        assert os.getpgid(server.pid) != agent.pid
        os.killpg(agent.pid, sig)  # what a harness or a terminal's Ctrl-C does
        agent.wait(timeout=60)  # at once: the bound only keeps a broken agent from hanging the suite
        gone, alive = psutil.wait_procs([server], timeout=3)
        assert not alive, f"orphan MCP server left behind: pid {server.pid}"
    finally:
        for proc in (server,):
            if proc.is_running():
                proc.kill()
        if agent.poll() is None:
            agent.kill()
