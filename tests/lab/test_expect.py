"""What the maintainer check asks of a break's run (``catalogue.Expect``), bound by bound, on hand-made records.

``Expect.failures`` is the judge of ``check-breaks``: a bound it reads the wrong way round, a field it reads
from the wrong key, or a message that names the wrong figure would let a break pass its check without
showing its symptom (or fail one that shows it). Each bound gets a record exactly at it (passes), one just
past it (fails, with the message the maintainer reads), and the field left out of the expectation (ignored).
"""

from __future__ import annotations

import pytest

from miniagent.lab.catalogue import BUSY_SHARE, JUDGEABLE_FLOOR, Expect, busy_cpu_floor, cpu_disturbed, left_for_run

RUN = {"outcome": "answer", "stop_reason": "answered", "cpu_mean": 50.0, "tool_calls": 2, "identical_calls": 1,
       "turns": 3, "processes_left": [], "answer": "She went.", "final_answer": "", "wall_s": 4.0, "cpus": 2,
       "other_cpu_mean": 0.0, "machine_busy": False}


def record(**changes) -> dict:
    return {**RUN, **changes}


def test_an_empty_expectation_asks_nothing_and_describes_nothing():
    assert Expect().failures(record()) == [] and Expect().describe() == ""


@pytest.mark.parametrize("expect, at, past, message", [
    (Expect(outcome="answer"), {}, {"outcome": "timeout"}, "outcome 'timeout' != 'answer'"),
    (Expect(stop_reason="answered"), {}, {"stop_reason": "max_turns"}, "stop_reason 'max_turns' != 'answered'"),
    (Expect(cpu_mean_min=50), {"cpu_mean": 50.0}, {"cpu_mean": 49.4}, "cpu_mean 49 < 50"),
    (Expect(cpu_mean_max=50), {"cpu_mean": 50.0}, {"cpu_mean": 50.6}, "cpu_mean 51 > 50"),
    (Expect(tool_calls_min=2), {"tool_calls": 2}, {"tool_calls": 1}, "tool_calls 1 < 2"),
    (Expect(tool_calls_max=2), {"tool_calls": 2}, {"tool_calls": 3}, "tool_calls 3 > 2"),
    (Expect(identical_calls_min=1), {"identical_calls": 1}, {"identical_calls": 0}, "identical_calls 0 < 1"),
    (Expect(turns_min=3), {"turns": 3}, {"turns": 2}, "turns 2 < 3"),
    (Expect(processes_left_min=1), {"processes_left": [{"pid": 7}]}, {"processes_left": []}, "processes_left 0 < 1"),
    (Expect(answer_empty=True), {"answer": "  "}, {"answer": "She went."}, "answer empty is False, expected True"),
    (Expect(answer_empty=False), {"answer": "x"}, {"answer": None}, "answer empty is True, expected False"),
    (Expect(final_answer_given=True), {"final_answer": "She went."}, {"final_answer": " "},
     "final answer given is False, expected True"),
    (Expect(final_answer_given=False), {"final_answer": None}, {"final_answer": "She went."},
     "final answer given is True, expected False"),
    (Expect(answer_not="she went"), {"answer": "she goes"}, {"answer": "  She   WENT. "},
     "the answer is 'she went', the right one"),
    (Expect(wall_s_min=4), {"wall_s": 4.0}, {"wall_s": 3.94}, "wall_s 3.9 < 4"),
])
def test_each_bound_passes_at_its_value_and_fails_past_it_saying_which(expect, at, past, message):
    assert expect.failures(record(**at)) == []
    assert expect.failures(record(**past)) == [message]


def test_a_record_without_the_optional_fields_reads_them_as_missing():
    bare = {k: v for k, v in RUN.items() if k not in ("stop_reason", "answer", "final_answer")}
    assert Expect(stop_reason="answered").failures(bare) == ["stop_reason None != 'answered'"]
    assert Expect(answer_empty=True, final_answer_given=False, answer_not="x").failures(bare) == []


def test_every_failing_bound_is_reported_in_declaration_order():
    expect = Expect(outcome="timeout", cpu_mean_min=90, tool_calls_max=0, turns_min=9, wall_s_min=10)
    assert expect.failures(record()) == ["outcome 'answer' != 'timeout'", "cpu_mean 50 < 90", "tool_calls 2 > 0",
                                         "turns 3 < 9", "wall_s 4.0 < 10"]


def test_the_description_names_each_bound_with_its_comparison():
    expect = Expect(outcome="timeout", cpu_mean_min=80, cpu_mean_max=250, tool_calls_max=4, turns_min=2,
                    processes_left_min=1, answer_empty=False, wall_s_min=2.5)
    assert expect.describe() == ("outcome timeout, cpu_mean >= 80, cpu_mean <= 250, tool_calls <= 4, turns >= 2, "
                                 "processes_left >= 1, answer_empty False, wall_s >= 2.5")


# On a machine other programs keep busy, a busy loop gets what they leave it: the CPU floor follows.

def test_what_the_others_left_is_every_core_less_their_mean():
    assert left_for_run({"cpus": 2, "other_cpu_mean": 130.0}) == 70.0
    assert left_for_run({"cpus": 1, "other_cpu_mean": 150.0}) == 0.0  # never below nothing
    assert left_for_run({}) == 100.0  # one core, nobody else
    assert left_for_run({"cpus": 0, "other_cpu_mean": None}) == 100.0


def test_the_cpu_floor_is_lowered_only_on_a_busy_machine_and_only_to_a_share_of_one_core_at_most():
    assert busy_cpu_floor(90, {"machine_busy": False, "cpus": 2, "other_cpu_mean": 180.0}) == 90
    assert busy_cpu_floor(90, {"machine_busy": True, "cpus": 2, "other_cpu_mean": 150.0}) == pytest.approx(25.0)
    assert busy_cpu_floor(90, {"machine_busy": True, "cpus": 4, "other_cpu_mean": 60.0}) == pytest.approx(50.0)
    assert busy_cpu_floor(40, {"machine_busy": True, "cpus": 4, "other_cpu_mean": 60.0}) == 40  # never raised
    assert (BUSY_SHARE, JUDGEABLE_FLOOR) == (0.5, 10.0)


def test_the_run_that_failed_on_a_busy_ci_machine_is_judged_busy():
    """Seen in CI: no-cap's busy loop got 44.7 % of a core while other programs took 143 % of two."""
    busy = record(machine_busy=True, other_cpu_mean=143.0, cpu_mean=44.7)
    assert Expect(cpu_mean_min=50).failures(busy) == []
    assert Expect(cpu_mean_min=50).failures({**busy, "cpu_mean": 2.0}) == \
        ["cpu_mean 2 < 28 (of the 57 % other programs left)"]  # an idle hang still fails


def test_a_busy_machine_is_named_in_the_cpu_message():
    busy = record(machine_busy=True, other_cpu_mean=150.0, cpu_mean=20.0)  # others left 50 %: the floor is 25
    assert Expect(cpu_mean_min=90).failures(busy) == ["cpu_mean 20 < 25 (of the 50 % other programs left)"]
    assert Expect(cpu_mean_min=90).failures(record(machine_busy=True, other_cpu_mean=150.0, cpu_mean=25.0)) == []
    assert Expect(cpu_mean_min=20).failures(record(machine_busy=True, other_cpu_mean=150.0, cpu_mean=19.0)) == \
        ["cpu_mean 19 < 20"]  # the floor was not lowered: the message shows the bound itself


@pytest.mark.parametrize("others, disturbed", [(180.0, False), (180.5, True), (200.0, True), (150.0, False)])
def test_where_the_others_left_too_little_the_cpu_is_not_judged_and_says_so(others, disturbed):
    """Half of what is left under 10 % of a core: a busy loop and an idle hang look alike, so neither passes."""
    busy = record(machine_busy=True, other_cpu_mean=others, cpu_mean=95.0)
    said = cpu_disturbed(50, busy)
    assert (said is not None) == disturbed
    if disturbed:
        assert Expect(cpu_mean_min=50).failures(busy) == [said]
        assert said.startswith("cpu_mean not judged: other programs left the run ") and "quieter machine" in said
    assert cpu_disturbed(50, {**busy, "machine_busy": False}) is None  # an idle machine is always judged
    assert cpu_disturbed(8, record(machine_busy=True, other_cpu_mean=150.0)) is None  # a floor under 10 kept whole
