"""A run's chart, rule by rule: the scales, where the lines go and how they are drawn, on a matplotlib axis read
back (not the SVG's bytes: ``test_harness.py`` compares those with the docs' charts)."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from miniagent.lab.harness import charts
from miniagent.lab.harness.record import RunRecord


def record(**given) -> RunRecord:
    values = dict(command=["x"], timeout=3.0, outcome="answer", wall_s=2.0, loop_start_s=1.0,
                  samples=[[0.5, 10.0, 60.0, 2, 5.0], [1.0, 90.0, 60.0, 2, 20.0], [1.5, 95.0, 60.0, 2, 30.0]])
    values.update(given)
    return RunRecord(**values)


@pytest.mark.parametrize("span, step", [
    (0.5, 0.1), (0.8, 0.1), (0.81, 0.2), (1.6, 0.2), (1.61, 0.5), (4, 0.5), (4.01, 1), (8, 1), (8.01, 2),
    (16, 2), (16.01, 5), (40, 5), (40.01, 10), (80, 10), (80.01, 20), (160, 20), (160.01, 30), (240, 30),
    (240.01, 60), (480, 60), (480.01, 120), (960, 120), (960.01, 300), (2400, 300), (2400.01, 600), (4800, 600),
])
def test_the_time_axis_takes_the_smallest_round_step_with_at_most_eight_ticks(span, step):
    assert charts._nice_step(span) == step


def test_a_run_longer_than_eighty_minutes_gets_eight_even_steps():
    assert charts._nice_step(9600) == 1200.0 and charts._nice_step(10, max_ticks=2) == 5


@pytest.mark.parametrize("given, end", [
    ({}, 2.0),                                                          # the wall time
    ({"wall_s": 1.2}, 1.5),                                             # the last sample came later
    ({"wall_s": 1.2, "samples": [[0.5, 1, 1, 1], [2.5, 1, 1, 1], [1.0, 1, 1, 1]]}, 1.2),  # the last, not the latest
    ({"wall_s": 0.2, "samples": []}, 0.5),                              # never shorter than half a second
    ({"wall_s": 0.2, "samples": [[0.3, 1, 1, 1]]}, 0.5),
    ({"wall_s": 0.0, "samples": [[0.4, 1, 1, 1], [0.8, 1, 1, 1]]}, 0.8),
])
def test_the_time_axis_ends_at_the_later_of_the_wall_time_and_the_last_sample(given, end):
    assert charts._x_end(record(**given)) == end


@pytest.mark.parametrize("cores, peaks, top", [
    (2, [95.0], 200.0), (4, [95.0], 400.0), (1, [95.0], 200.0), (1, [201.0], 250.0), (2, [450.0], 450.0),
    (1, [], 200.0), (3, [310.0, 99.0], 350.0),
])
def test_the_cpu_axis_shows_every_core_and_the_highest_sample(monkeypatch, cores, peaks, top):
    monkeypatch.setattr(charts, "CORES", cores)
    runs = [record(samples=[[1.0, peak, 1, 1]]) for peak in peaks] or [record(samples=[])]
    assert charts._y_top(runs) == top


@pytest.mark.parametrize("given, at", [
    ({"outcome": "timeout", "deadline_s": 4.5}, 4.5), ({"outcome": "timeout"}, 3.0),
    ({"outcome": "interrupted", "wall_s": 1.7}, 1.7), ({"outcome": "answer"}, None), ({"outcome": "crash"}, None),
])
def test_the_kill_line_is_where_the_harness_ended_the_run(given, at):
    assert charts._kill_at(record(**given)) == at


def drawn(rec: RunRecord, *, x_max: float = 4.0, y_max: float = 200.0):
    figure = Figure()
    ax = figure.subplots()
    charts._draw(ax, rec, x_max=x_max, y_max=y_max, title="t", lang="en", gid="g-")
    lines = {line.get_gid(): line for line in ax.get_lines()}
    return ax, lines


def test_the_axes_start_at_zero_and_end_at_the_scales_given():
    ax, _ = drawn(record(samples=[[-0.5, 10.0, 1, 1], [1.0, -5.0, 1, 1]]))
    assert ax.get_xlim() == (0.0, 4.0) and ax.get_ylim() == (0.0, 200.0)


@pytest.mark.parametrize("y_max, step", [(200.0, 50), (250.0, 50), (300.0, 100), (400.0, 100)])
def test_the_cpu_ticks_are_every_fifty_percent_up_to_two_and_a_half_cores_then_every_hundred(y_max, step):
    ax, _ = drawn(record(), y_max=y_max)
    ticks = [t for t in ax.get_yticks() if 0 <= t <= y_max]
    assert ticks[:3] == [0, step, 2 * step]


def test_the_lines_are_drawn_as_the_legend_of_the_docs_says():
    _, lines = drawn(record(outcome="timeout", deadline_s=3.0))
    assert set(lines) == {"g-core", "g-start", "g-kill", "g-others", "g-cpu"}
    assert lines["g-cpu"].get_linewidth() == 2.2 and lines["g-cpu"].get_solid_joinstyle() == "round"
    assert lines["g-others"].get_linewidth() == 1.5
    assert list(lines["g-cpu"].get_ydata()) == [10.0, 90.0, 95.0] and list(lines["g-others"].get_ydata()) == [5, 20, 30]
    assert lines["g-kill"].get_linewidth() == 2 and list(lines["g-kill"].get_xdata()) == [3.0, 3.0]
    assert list(lines["g-start"].get_xdata()) == [1.0, 1.0]


def test_a_run_whose_loop_never_started_has_no_start_line():
    _, lines = drawn(record(loop_start_s=None))
    assert "g-start" not in lines and "g-cpu" in lines


def test_a_loop_that_started_at_the_axis_end_is_still_marked_and_one_after_it_is_not():
    _, lines = drawn(record(loop_start_s=4.0))
    assert list(lines["g-start"].get_xdata()) == [4.0, 4.0]
    _, lines = drawn(record(loop_start_s=4.01))
    assert "g-start" not in lines


def test_a_record_is_saved_in_a_folder_made_for_it(tmp_path):
    json_path, svg_path = charts.save_record(record(started_at="2026-11-27T01:02:03"), tmp_path / "runs" / "00")
    assert json_path == tmp_path / "runs" / "00" / "20261127T010203-answer.json" and svg_path.is_file()


def test_a_second_and_third_run_of_the_same_second_get_their_own_files(tmp_path):
    rec = record(started_at="2026-11-27T01:02:03")
    saved = [charts.save_record(rec, tmp_path)[0].name for _ in range(3)]
    assert saved == ["20261127T010203-answer.json", "20261127T010203-answer-2.json", "20261127T010203-answer-3.json"]
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == sorted(name.replace(".json", ".svg") for name in saved)


def test_a_record_without_its_start_time_is_named_by_the_time_it_is_saved(tmp_path, monkeypatch):
    import datetime as dt

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 11, 27, 1, 2, 3, 456789)

    monkeypatch.setattr(charts, "datetime", Frozen)
    json_path, _ = charts.save_record(record(started_at=""), tmp_path)
    assert json_path.name == "20261127T010203-answer.json"
    assert json_path.read_text(encoding="utf-8") == record(started_at="").to_json()


def test_the_chart_carries_the_title_it_is_given_else_the_runs_start(tmp_path):
    _, svg = charts.save_record(record(started_at="2026-11-27T01:02:03"), tmp_path, title="03-no-dedup — llama")
    assert ">03-no-dedup — llama</text>" in svg.read_text(encoding="utf-8")
    _, svg = charts.save_record(record(started_at="2026-11-27T01:02:03"), tmp_path)
    assert ">miniagent run 2026-11-27T01:02:03</text>" in svg.read_text(encoding="utf-8")
