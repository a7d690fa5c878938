"""Reading a run back from its trace, as the property tests do: the calls, the turns, the steps the stuck
detector is told, and where a stuck pattern completes (worked out here independently of the loop's own code)."""

from __future__ import annotations

import json

def call_key(tool: str, args: dict) -> str:
    """The loop's identity of a call (``Action.call_key``), rebuilt from a trace event."""
    return tool + json.dumps(args or {}, sort_keys=True)


def is_final_piece(events: list[dict], i: int) -> bool:
    """The model_action at ``i`` is the final-answer round's reply: a final_round event follows it."""
    return events[i]["event"] == "model_action" and i + 1 < len(events) and events[i + 1]["event"] == "final_round"


def turns(events: list[dict]) -> list[list[dict]]:
    """The model_action events grouped by turn (a turn ends with a piece not cut off); the final round left out.

    The last group may be a turn that never ended (its pieces all cut off)."""
    groups: list[list[dict]] = []
    open_turn: list[dict] | None = None
    for i, event in enumerate(events):
        if event["event"] != "model_action" or is_final_piece(events, i):
            continue
        if open_turn is None:
            open_turn = []
            groups.append(open_turn)
        open_turn.append(event)
        if event["finish_reason"] != "length":
            open_turn = None
    return groups


def steps(events: list[dict]) -> list[tuple[str, str]]:
    """What the stuck detector is told: (call, result or error) for every call the model made, run or deduped."""
    out, results, pending = [], {}, None
    for event in events:
        kind = event["event"]
        if kind == "tool_call" and not event.get("forced"):
            pending = call_key(event["tool"], event["args"])
        elif kind == "tool_result" and pending is not None:
            results[pending] = event["result"]
            out.append((pending, event["result"]))
            pending = None
        elif kind == "tool_error" and pending is not None:
            out.append((pending, "error: " + event["error"].split(": ", 1)[-1]))
            pending = None
        elif kind == "guard" and event["name"] == "dedup":
            key = call_key(event["tool"], event["args"])
            out.append((key, results[key]))
    return out


def stuck_at(steps_: list[tuple[str, str]], repeats: int, alternation: int = 6) -> int | None:
    """The index of the first step that completes a stuck pattern (repeats in a row, or A/B alternation)."""
    if repeats <= 0:
        return None
    for i in range(len(steps_)):
        last = steps_[max(0, i + 1 - repeats):i + 1]
        if len(last) == repeats and len(set(last)) == 1:
            return i
        window = steps_[max(0, i + 1 - alternation):i + 1]
        if (len(window) == alternation and window[0] != window[1]
                and set(window[0::2]) == {window[0]} and set(window[1::2]) == {window[1]}):
            return i
    return None
