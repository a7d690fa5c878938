"""The live panel and the scratchpad tail, line by line: what a learner watches while a run goes on.

Written after the lab wing's mutation run (2026-11-26) found that the tests only looked for a word or two in the
panel: a wrong count, a wrong row or a lost warning colour went unseen.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from miniagent.lab.harness.follow import Progress, TraceFollower, describe
from miniagent.lab.harness import panel as panel_module
from miniagent.lab.harness.panel import render_panel, sparkline
from miniagent.lab.harness.record import CORES

EVENTS = [{"event": "run_start", "llm": "llama"},
          {"event": "model_action", "turn": 1, "text": '{"tool": "conjugate", "verb": "go"}'},
          {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}},
          {"event": "tool_error", "tool": "conjugate", "error": "boom"},
          {"event": "model_action", "turn": 2, "text": '{"tool": "conjugate", "verb": "go"}'},
          {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}},
          {"event": "model_action", "turn": 3, "text": '{"tool": "list_tenses"}'},
          {"event": "tool_call", "tool": "list_tenses", "args": {}}]


def progress_of(events) -> Progress:
    progress = Progress()
    for event in events:
        progress.add(event, 0.5)
    return progress


def text_of(panel, width: int = 130) -> list[str]:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(panel)
    return [line.rstrip() for line in console.export_text().splitlines()]


def cells(panel) -> list[tuple[str, object]]:
    grid = panel.renderable
    return list(zip(grid.columns[0]._cells, grid.columns[1]._cells))


SAMPLES = [[0.2 * i, 50.0 * (i % 5), 300.0 + i, 2, 10.0 * i] for i in range(1, 36)]
SAMPLES[-1] = [7.0, 75.0, 335.0, 3, 350.0]  # the last sample is the one the figures show


def test_the_panel_of_a_killed_run_on_a_busy_machine_line_by_line(monkeypatch):
    monkeypatch.setattr(panel_module, "CORES", 2)  # the scale line names the machine's cores: this one has two
    panel = render_panel(elapsed=7.25, timeout=6.0, progress=progress_of(EVENTS), samples=SAMPLES, status="timeout",
                         counted=6.5, clock="counted from the loop's start")
    lines = [line.strip("│ ").rstrip() for line in text_of(panel)[1:-1]]
    assert lines == [
        "time          6.5 / 6.0 s ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━",
        "counted from the loop's start · 7.2 s since launch",
        "loop        turn 3 · tool calls 3 · identical 1 · tool errors 1",
        'last action {"tool": "list_tenses"}',
        # the last 30 samples: 50, 100, 150, 200, 0 % of a 200 % scale, again and again; the last one is 75 %
        "cpu         ▃▅▆█▁▃▅▆█▁▃▅▆█▁▃▅▆█▁▃▅▆█▁▃▅▆█▄   75 % · rss 335 MB · processes 3",
        "(tree total; 100 % = one core busy, 200 % = all 2)",
        "other work  ▃▃▄▄▅▅▅▆▆▆▇▇▇█████████████████  350 % used by other programs · busy machine: figures disturbed"]
    assert "miniagent run: timeout" in text_of(panel)[0]
    assert panel.border_style == "red"
    assert str(cells(panel)[-1][1].style) == "yellow"  # the warning stands out


def test_a_running_panel_is_blue_and_a_quiet_machine_is_not_flagged():
    quiet = [[*s[:4], 5.0] for s in SAMPLES]
    panel = render_panel(elapsed=1.0, timeout=6.0, progress=progress_of(EVENTS[:2]), samples=quiet)
    assert panel.title == "miniagent run: running" and panel.border_style == "blue"
    label, other = cells(panel)[-1]
    assert label == "other work" and str(other.style) == "" and str(other).endswith("5 % used by other programs")
    rows = [label for label, _ in cells(panel)]
    assert rows == ["time", "loop", "last action", "cpu", "", "other work"]  # no clock line unless one is given
    assert "1.0 / 6.0 s" in text_of(panel)[1]  # counted = elapsed when the clock runs from launch


def test_the_panel_before_any_sample_or_action_shows_zeros_and_a_dash():
    panel = render_panel(elapsed=0.0, timeout=3.0, progress=Progress(), samples=[])
    lines = " ".join(text_of(panel))
    assert "turn 0 · tool calls 0 · identical 0 · tool errors 0" in lines
    assert "last action -" in lines and "0 % · rss 0 MB · processes 0" in lines
    assert "other work" not in lines  # no sample says what other programs used


def test_the_panel_keeps_each_row_on_one_line_whatever_it_holds():
    grid = render_panel(elapsed=0.0, timeout=3.0, progress=Progress(), samples=[]).renderable
    label, value = grid.columns
    assert (label.style, label.no_wrap, label.min_width) == ("bold", True, 11)
    assert (value.no_wrap, value.overflow) == (True, "ellipsis")


def test_the_time_bar_fills_up_to_the_timeout_and_no_further():
    panel = render_panel(elapsed=9.0, timeout=6.0, progress=Progress(), samples=[])
    bar = cells(panel)[0][1].columns[1]._cells[0]
    assert (bar.total, bar.completed, bar.width) == (6.0, 6.0, 30)
    panel = render_panel(elapsed=9.0, timeout=6.0, progress=Progress(), samples=[], counted=1.5)
    assert cells(panel)[0][1].columns[1]._cells[0].completed == 1.5


def test_a_sample_without_the_other_programs_figure_draws_no_other_work_row():
    panel = render_panel(elapsed=1.0, timeout=6.0, progress=Progress(), samples=[[0.2, 50.0, 300.0, 2]])
    assert [label for label, _ in cells(panel)] == ["time", "loop", "last action", "cpu", ""]


def test_other_programs_at_the_busy_mark_exactly_make_a_busy_machine():
    from miniagent.lab.harness.record import BUSY_OTHERS

    panel = render_panel(elapsed=1.0, timeout=6.0, progress=Progress(),
                         samples=[[0.2, 50.0, 300.0, 2, BUSY_OTHERS]] * 3)
    assert "busy machine" in str(cells(panel)[-1][1])


@pytest.mark.parametrize("values, top, line", [
    ([0, 100, 200], 200, "▁▅█"),
    ([-50, 250], 200, "▁█"),  # below 0 and above the top are drawn at the edges
    ([100, 100], 0, "▁▁"),    # no scale: nothing to draw but the floor
    ([25], 200, "▂"),         # 25/200 x 7 = 0.875, the second block
    ([0, 1, 0.5], 1, "▁█▅"),  # a scale of one: 0 is the floor, 1 the top
])
def test_sparkline_levels(values, top, line):
    assert sparkline(values, top=top) == line


def test_sparkline_scale_is_the_whole_machine_by_default():
    assert sparkline([100.0 * CORES, 0.0]) == "█▁"


@pytest.mark.parametrize("event, line", [
    ({"event": "model_action", "turn": 2, "text": '{"answer": "x"}'}, 'turn 2 action {"answer": "x"}'),
    ({"event": "model_action", "turn": 4, "final": True, "text": "a"}, "final round action a"),
    ({"event": "tool_call", "tool": "conjugate", "args": {"verb": "go", "person": "she"}},
     "call conjugate(verb=go, person=she)"),
    ({"event": "tool_call", "tool": "conjugate", "args": {}, "forced": True}, "call conjugate() [forced]"),
    ({"event": "tool_call", "tool": "list_tenses"}, "call list_tenses()"),
    ({"event": "tool_result", "tool": "conjugate", "result": "she went"}, "tool conjugate -> she went"),
    ({"event": "tool_error", "tool": "conjugate", "error": "no\nsuch verb"}, "tool conjugate !! no such verb"),
    ({"event": "guard", "name": "dedup"}, "guard dedup"),
    ({"event": "stop", "stop_reason": "answered", "answer": "She went."}, "stop answered: She went."),
    ({"event": "run_start", "llm": "scripted:oracle"}, "run_start scripted:oracle"),
    ({"event": "run_start"}, "run_start"),
    ({"event": "final_round"}, "final_round"),
    ({"event": "model_action", "turn": 1}, "turn 1 action"),  # no text: nothing after the word
    ({}, "?"),
])
def test_each_trace_event_in_one_line(event, line):
    assert describe(event) == line


def test_a_long_event_is_cut_to_the_width_with_an_ellipsis():
    event = {"event": "tool_result", "tool": "t", "result": "x" * 200}
    assert describe(event, width=20) == "tool t -> xxxxxxxxx…" and len(describe(event, width=20)) == 20
    exact = {"event": "tool_result", "tool": "t", "result": "x" * 10}  # "tool t -> " + 10 = 20 characters
    assert describe(exact, width=20) == "tool t -> " + "x" * 10
    assert len(describe(event)) == 90


def test_the_counts_a_breaks_needs_are_written_in():
    progress = progress_of(EVENTS)
    assert [progress.count(key) for key in ("turns", "tool_calls", "tool_errors")] == [3, 3, 1]
    with pytest.raises(KeyError):
        progress.count("identical_calls")


def test_a_repeat_is_the_same_tool_with_the_same_arguments_in_any_order():
    progress = progress_of([
        {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go", "person": "she"}},
        {"event": "tool_call", "tool": "conjugate", "args": {"person": "she", "verb": "go"}},  # the same call
        {"event": "tool_call", "tool": "other", "args": {"verb": "go", "person": "she"}},     # another tool
        {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}},                  # other arguments
    ])
    assert progress.identical_calls == 1 and progress.count("tool_calls") == 4


def test_the_follower_skips_blank_lines_and_json_that_is_not_an_event(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('\n[1, 2]\n"text"\n{"event": "run_start"}\n   \n')
    follower = TraceFollower(path)
    assert follower.poll() == [{"event": "run_start"}]
    assert follower.bad_lines == 0  # valid JSON of another shape is not a torn line


def test_the_follower_counts_each_torn_line_and_keeps_a_last_line_that_parses(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"event": "a"}\n{"torn\n{"also torn\n{"event": "b"}')  # the writer died before its newline
    follower = TraceFollower(path)
    assert follower.poll() == [{"event": "a"}] and follower.bad_lines == 2
    assert follower.finish() == [{"event": "b"}] and follower.bad_lines == 2
    assert follower.finish() == [] and follower.poll() == []  # a finished trace is not read a second time
    follower.close()  # closing again is harmless


def test_a_turn_is_counted_once_whatever_its_pieces_and_the_final_round_is_not_a_turn():
    progress = progress_of([
        {"event": "model_action", "turn": 1, "text": '{"answer": "she'},
        {"event": "model_action", "turn": 1, "text": ' went"}'},
        {"event": "model_action", "turn": 2, "final": True, "text": '{"answer": "she went"}'}])
    assert progress.turns == 1 and progress.last_action == '{"answer": "she went"}'
    assert progress_of([{"event": "model_action", "text": "x"}]).turns == 0  # no turn number: no turn


def refused(*pieces: str, first: str = '{"tool": "conjugate", "verb": "go", "tense": "past simple", '
                                      '"person": "she"}') -> Progress:
    """Turn 1 calls ``first``; turn 2 writes ``pieces`` and a cap refuses it (no tool_call event follows)."""
    events = [{"event": "model_action", "turn": 1, "text": first},
              {"event": "tool_call", "tool": "conjugate",
               "args": {"verb": "go", "tense": "past simple", "person": "she"}}]
    events += [{"event": "model_action", "turn": 2, "text": piece} for piece in pieces]
    events.append({"event": "guard", "name": "max_tool_calls"})
    return progress_of(events)


def test_a_call_a_cap_refused_counts_as_a_repeat_when_it_is_one():
    same = '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'
    assert refused(same).identical_calls == 1
    assert refused(same[:30], same[30:]).identical_calls == 1  # a reply continued: its pieces joined
    assert refused(same.replace("go", "eat")).identical_calls == 0  # another call
    other_guard = progress_of([{"event": "model_action", "turn": 1, "text": same},
                               {"event": "tool_call", "tool": "conjugate",
                                "args": {"verb": "go", "tense": "past simple", "person": "she"}},
                               {"event": "model_action", "turn": 2, "text": same},
                               {"event": "guard", "name": "stuck"}])
    assert other_guard.identical_calls == 0  # only a cap that refuses a call reads the turn's action


def test_a_forced_call_is_no_repeat_of_the_models():
    call = {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}}
    progress = progress_of([call, {**call, "forced": True}])
    assert progress.identical_calls == 0 and progress.count("tool_calls") == 2


def test_a_fresh_progress_and_its_tail_of_the_last_events():
    progress = Progress()
    assert (progress.last_action, progress.stop, progress.turns) == ("", None, 0)
    for n in range(12):
        progress.add({"event": "guard", "name": f"g{n}"}, 0.1 * n)
    assert list(progress.tail) == [f"guard g{n}" for n in range(4, 12)] and progress.first_event_at == 0.0


def test_the_live_view_draws_only_on_a_terminal_or_when_forced(monkeypatch, capsys):
    from miniagent.lab.harness.panel import LiveView

    assert LiveView(enabled=False, force=True).live is None
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert LiveView(enabled=True, force=False).live is None  # a pipe or a test: no panel
    live = LiveView(enabled=True, force=True).live
    assert live.console.is_terminal and live.refresh_per_second == 4
    assert (live._redirect_stdout, live._redirect_stderr) == (False, False)  # the agent's output is not captured
    with LiveView(enabled=True, force=True) as view:
        view.update(elapsed=1.0, timeout=6.0, progress=Progress(), samples=[], status="running")
        assert view.live._renderable.title == "miniagent run: running"
    LiveView(enabled=False, force=False).update(elapsed=1.0)  # no view: nothing drawn, nothing raised


def test_a_refused_repeat_adds_to_the_repeats_already_counted():
    same = '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'
    call = {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go", "tense": "past simple", "person": "she"}}
    progress = progress_of([{"event": "model_action", "turn": 1, "text": same}, call,
                            {"event": "model_action", "turn": 2, "text": same}, call,  # a repeat the loop ran
                            {"event": "model_action", "turn": 3, "text": same},
                            {"event": "guard", "name": "call_budget"}])              # one a cap refused
    assert progress.identical_calls == 2


def test_a_piece_without_text_adds_nothing_to_the_turn_or_the_last_action():
    same = '{"tool": "conjugate", "verb": "go", "tense": "past simple", "person": "she"}'
    progress = progress_of([{"event": "model_action", "turn": 1, "text": same},
                            {"event": "tool_call", "tool": "conjugate",
                             "args": {"verb": "go", "tense": "past simple", "person": "she"}},
                            {"event": "model_action", "turn": 2}])
    assert progress.last_action == ""
    progress.add({"event": "model_action", "turn": 2, "text": same}, 0.2)
    progress.add({"event": "guard", "name": "max_tool_calls"}, 0.3)
    assert progress.identical_calls == 1  # the text-less piece added nothing to the turn's action


def test_the_stop_event_is_kept_as_it_came():
    stop = {"event": "stop", "stop_reason": "answered", "answer": "She went."}
    progress = progress_of([{"event": "run_start"}, stop, {"event": "guard", "name": "x"}])
    assert progress.stop == stop
