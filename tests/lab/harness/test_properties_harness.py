"""The harness, held to the loop's standard: generated process trees, killed or ending by themselves.

A generated tree is a shell that starts children (some with grandchildren), some in a session of their own
(as the SDK starts the MCP server), some ignoring SIGTERM, some short-lived; the shell itself either runs
until the harness kills it, ignoring SIGTERM or not, or exits by itself before the deadline, leaving its
children behind.  Every process sleeps for a marker number of seconds, so its command line says which node
of the tree it is.  The properties compare the record with what the tree really did.

The shell exits no earlier than 0.5 s, after the harness's first samples.  A process whose parent exits is
no one's descendant any more, but it stays in the session the harness started the agent in, and the harness
finds it there.  One that also left that session (setsid, then its parent exits: a double-fork daemon)
before the harness ever saw it cannot be found by anyone; the generated trees do not make those.

Then one real agent: killed while its MCP server is wedged on a call, it must leave no server behind.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from miniagent.lab.harness.record import RunRecord
from miniagent.lab.harness.run import run_experiment

ROOT = Path(__file__).resolve().parents[3]
LONG = 10  # seconds: a long-lived process outlives any run here unless it is killed
TIMEOUT = 0.8  # the harness's deadline, counted from launch
SETTLE, GRACE = 0.3, 0.2


@dataclass(frozen=True)
class Node:
    own_session: bool  # started with setsid, like the MCP server: the agent's group signal does not reach it
    ignores_term: bool
    short: bool  # exits by itself in 0.1 s
    grandchildren: tuple[bool, ...] = ()  # each one short-lived or not; they share their parent's session


@dataclass(frozen=True)
class Tree:
    children: tuple[Node, ...]
    root_ignores_term: bool
    root_exit: float | None  # None: runs until killed; else exits by itself after this many seconds, code 3

    def markers(self) -> dict[str, tuple[Node, bool]]:
        """Each long-lived process's sleep argument -> (its child node, whether it is the child itself)."""
        out = {}
        for i, node in enumerate(self.children):
            if not node.short:
                out[f"{LONG}.{i}0"] = (node, True)
            for j, short in enumerate(node.grandchildren):
                if not short:
                    out[f"{LONG}.{i}{j + 1}"] = (node, False)
        return out

    def script(self) -> str:
        parts = ["trap '' TERM" if self.root_ignores_term else ":"]
        for i, node in enumerate(self.children):
            inner = ["trap '' TERM" if node.ignores_term else ":"]
            inner += [f"sleep {'0.1' if short else f'{LONG}.{i}{j + 1}'} &" for j, short in
                      enumerate(node.grandchildren)]
            inner.append(f"exec sleep {'0.1' if node.short else f'{LONG}.{i}0'}")
            launcher = "setsid " if node.own_session else ""
            parts.append(f"{launcher}sh -c {shlex.quote(chr(10).join(inner))} &")
        parts.append(f"sleep {self.root_exit}; exit 3" if self.root_exit is not None else f"exec sleep {LONG}")
        return "\n".join(parts)

    def describe(self, lang: str) -> str:
        en = lang == "en"
        lines = []
        root = ("An agent that " if en else "Un agente que ") + (
            (f"exits by itself after {self.root_exit:g} s" if en
             else f"termina solo a los {self.root_exit:g} s".replace(".", ","))
            if self.root_exit is not None else ("runs until it is killed" if en else "sigue hasta que lo matan"))
        if self.root_ignores_term:
            root += ", ignoring SIGTERM" if en else ", sin hacer caso de SIGTERM"
        lines.append(root + ".")
        for node in self.children:
            words = [("a child" if en else "un hijo"),
                     ("in a session of its own" if en else "en una sesión propia") if node.own_session else
                     ("in the agent's group" if en else "en el grupo del agente")]
            if node.ignores_term:
                words.append("that ignores SIGTERM" if en else "que no hace caso de SIGTERM")
            words.append(("that exits after 0.1 s" if en else "que termina a los 0,1 s") if node.short else
                         ("that runs on" if en else "que sigue vivo"))
            if node.grandchildren:
                n = len(node.grandchildren)
                words.append(f"with {n} grandchild(ren)" if en else f"con {n} nieto(s)")
            lines.append(" ".join(words))
        return "\n".join(lines)


# A process in a session of its own is a server and runs on: one whose parent exits before the harness has
# seen it (a double-fork daemon) leaves the agent's tree and session at once, and no harness can find it.
nodes = st.builds(lambda own, ignores, short, grandchildren: Node(own, ignores, short and not own, grandchildren),
                  st.booleans(), st.booleans(), st.booleans(), st.lists(st.booleans(), max_size=2).map(tuple))
trees = st.builds(Tree, children=st.lists(nodes, max_size=3).map(tuple), root_ignores_term=st.booleans(),
                  root_exit=st.one_of(st.none(), st.sampled_from((0.5, 0.6))))


def alive_now(record: RunRecord) -> list[dict]:
    """Processes of the record's tree alive now: same pid and start time (not a reused pid), not a zombie."""
    out = []
    for seen in record.pids_seen:
        try:
            proc = psutil.Process(seen["pid"])
            if abs(proc.create_time() - seen["create_time"]) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(seen)
        except psutil.Error:
            continue
    return out


def run_tree(tree: Tree, tmp: Path) -> RunRecord:
    note("counterexample-json: " + json.dumps({"en": tree.describe("en"), "es": tree.describe("es")},
                                              ensure_ascii=False))
    return run_experiment(["sh", "-c", tree.script()], timeout=TIMEOUT, trace_path=tmp / "trace.jsonl",
                          live=False, settle=SETTLE, grace=GRACE, sample_interval=0.1)


def marker(cmdline: str) -> str | None:
    """The node a command line belongs to: the sleep it runs (or, seen before its exec, the one it will run)."""
    found = re.search(r"sleep (\d+\.\d+)$", cmdline)
    return found.group(1) if found else None


def left_markers(record: RunRecord) -> set[str]:
    return {marker(p["cmdline"]) for p in record.processes_left} - {None}


@pytest.mark.serial
@settings(max_examples=6)
@given(tree=trees)
def test_a_killed_or_finished_tree_leaves_nothing_and_the_record_says_what_happened(tree, tmp_path_factory):
    """Whatever the tree does, every process of it is gone when the harness returns, and the outcome is true.

    (es) Haga lo que haga el árbol, cuando el arnés termina no queda ningún proceso suyo, y el resultado es cierto.
    """
    record = run_tree(tree, tmp_path_factory.mktemp("tree"))
    assert alive_now(record) == [], "the harness returned with processes of the tree still running"
    assert record.cleanup_ok
    if tree.root_exit is None:
        assert record.outcome == "timeout" and record.kill_latency_s is not None and record.exit_code != 3
        assert record.kill_latency_s < GRACE + 0.5
    else:
        assert record.outcome == "crash" and record.exit_code == 3 and record.kill_latency_s is None


@settings(max_examples=6)
@given(tree=trees)
def test_every_survivor_is_reported_before_it_is_killed(tree, tmp_path_factory):
    """Every process that outlives the agent by more than the settle time is in processes_left, and no other.

    (es) Todo proceso que sobrevive al agente más allá del tiempo de asentamiento está en processes_left, y ninguno más.
    """
    record = run_tree(tree, tmp_path_factory.mktemp("tree"))
    killed = tree.root_exit is None
    # The agent's group gets SIGTERM, then SIGKILL: only a session of its own escapes it. An agent that exits by
    # itself is not signalled at all, so every long-lived process of its tree outlives it.
    expected = {name for name, (node, _) in tree.markers().items() if node.own_session or not killed}
    assert left_markers(record) == expected
    seen = {marker(p["cmdline"]) for p in record.pids_seen}
    assert set(tree.markers()) <= seen, "the harness never saw some processes of the tree"


# --- the real agent ------------------------------------------------------------------------------------------------
HUNG_AGENT = [sys.executable, "-m", "miniagent", "ask", "What is the past simple of eat for I?", "--cache-dir", "",
              "--llm", "scripted:stubborn", "--fault-hang-on", "eat", "--tool-timeout-s", "60", "--wall-clock-s", "60"]


@settings(max_examples=2)
@given(wait=st.sampled_from((1.0, 0.5)))
def test_an_agent_killed_while_its_server_is_wedged_leaves_no_server(wait, tmp_path_factory):
    """An agent killed by the harness while its MCP server is wedged on a call leaves no process behind.

    (es) Un agente al que el arnés mata mientras su servidor MCP está atascado en una llamada no deja ningún proceso vivo.
    """
    note("counterexample-json: " + json.dumps({
        "en": f"An agent whose tool server wedges on its first call; the harness kills the agent {wait:g} s "
              "after the loop started (once the call was sent).",
        "es": f"Un agente cuyo servidor de herramientas se atasca en la primera llamada; el arnés mata al agente "
              f"{str(wait).replace('.', ',')} s después de que empiece el bucle (una vez enviada la llamada)."}, ensure_ascii=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    record = run_experiment(HUNG_AGENT, timeout=wait, trace_path=tmp_path_factory.mktemp("agent") / "trace.jsonl",
                            live=False, cwd=ROOT, env=env, clock="loop", needs={"tool_calls": 1})
    assert record.outcome == "timeout" and record.tool_calls == 1
    # what is left is judged from what the harness saw: it must have seen the server
    assert any("miniagent.tools.server" in p["cmdline"] for p in record.pids_seen), record.pids_seen
    assert record.processes_left == [], f"left behind: {record.processes_left}"
    assert alive_now(record) == []
