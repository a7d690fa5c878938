"""The lab's figures, computed from the trace, agree with what the loop itself counted, in every generated world.

The harness follows a run only through its trace (the agent is another process), and the class-load
report reads each turn's latency from the trace too. A figure computed from the wrong events, or from the
right ones counted wrongly, would still look plausible; the loop's own ``Stats`` say what the truth was.
"""

from __future__ import annotations

from collections import defaultdict

from generated import run_world, worlds
from world_words import describe_world
from hypothesis import given, note

from miniagent.lab.maintainers.classload import turn_latencies
from miniagent.lab.harness.follow import Progress
from miniagent.lab.harness.record import RunRecord
from miniagent.lab.harness.run import _fill_from_trace


def record_of(events: list[dict]) -> RunRecord:
    progress = Progress()
    for i, event in enumerate(events):
        progress.add(event, float(i))
    record = RunRecord(command=["x"], timeout=1.0)
    _fill_from_trace(record, progress)
    return record


@given(worlds())
def test_the_run_records_counts_are_the_loops_own(world):
    """(es) Las cifras del registro de la ejecución son las que contó el propio bucle."""
    run = run_world(world)
    note(describe_world(world))
    stats = run.outcome.stats
    record = record_of(run.events)
    # The record counts the turns the loop reached, the loop the turns it finished: they differ by the one turn
    # whose reply was still being continued (finish_reason "length") when the run ended.
    pieces = [e for e in run.events if e["event"] == "model_action" and not e.get("final")]
    unfinished = bool(pieces) and pieces[-1]["finish_reason"] == "length"
    assert record.turns == stats.turns + unfinished
    assert record.tool_calls == sum(stats.tool_calls.values())
    assert record.tool_calls_by_tool == {tool: n for tool, n in stats.tool_calls.items() if n}
    assert record.tool_errors == stats.tool_errors
    assert record.identical_calls == stats.identical_calls
    assert record.loop_start_s == 0.0


@given(worlds())
def test_class_load_reads_one_latency_per_model_turn(world):
    """(es) La carga de clase lee una latencia por turno del modelo, con sus continuaciones sumadas."""
    run = run_world(world)
    per_turn: dict[object, float] = defaultdict(float)
    for event in run.events:
        if event["event"] == "model_action":
            per_turn["final" if event.get("final") else event["turn"]] += event["latency_s"]
    assert sorted(turn_latencies(run.events)) == sorted(per_turn.values())
