"""The paragraph an observed block opens with when its run scored nothing or was disturbed, word for word.

A run that crashed, never reached the broken code, or ran on a busy machine must say so in the learner's
notebook, and say which (a crash is not a slow machine; an unexercised run names what it lacked and the command
that runs it again). A clean run gets no such paragraph.
"""

from __future__ import annotations

import pytest

from miniagent.lab.learner.notebook import append_observation
from miniagent.lab.learner.scoring import compare

CLEAN = {"outcome": "timeout", "stop_reason": None, "wall_s": 30.4, "cpu_mean": 97.2, "tool_calls": 180,
         "turns": 181, "processes_left": [], "loop_start_s": 0.8}


def block(tmp_path, lang="en", **changes) -> str:
    observed = {**CLEAN, **changes}
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, compare({"outcome": "timeout"}, observed),
                              None, None, "now", lang)
    text = path.read_text(encoding="utf-8")
    return text[text.rindex("00-no-cap (now)"):]


def test_a_clean_run_opens_with_no_paragraph(tmp_path):
    text = block(tmp_path)
    assert "crashed" not in text and "never exercised" not in text and "was busy" not in text


@pytest.mark.parametrize("loop_start_s, turns, when", [(0.8, 3, "after 3 turn(s)"), (0.8, None, "after 0 turn(s)"),
                                                        (None, 3, "before its loop started")])
def test_a_crash_says_the_signal_and_when_it_came(tmp_path, loop_start_s, turns, when):
    text = block(tmp_path, signal="SIGSEGV", loop_start_s=loop_start_s, turns=turns)
    assert f"This run crashed: the agent died of SIGSEGV {when}. A crash says nothing about the break" in text
    assert "never exercised" not in text  # a crash is said once, as a crash


def test_a_crash_in_spanish(tmp_path):
    text = block(tmp_path, "es", signal="SIGABRT", loop_start_s=None)
    assert "Esta ejecución se rompió: el agente murió por SIGABRT antes de que empezara su bucle." in text


def test_an_unexercised_run_names_what_it_needed_and_how_to_run_it_again(tmp_path):
    text = block(tmp_path, needs_met=False, needs={"tool_calls": 1, "identical_calls": 2})
    assert ("This run never exercised the break (it needs 1 tool calls, 2 identical calls before its timeout may "
            "end it)") in text
    assert "Run it again: `invoke exp no-cap --learner bea`." in text


def test_an_unexercised_run_without_named_needs_asks_for_more_of_the_loop(tmp_path):
    text = block(tmp_path, needs_met=False)
    assert "(it needs more of the loop before its timeout may end it)" in text
    assert "(necesita recorrer más bucle antes" in block(tmp_path, "es", needs_met=False)


def test_a_busy_machine_is_said_only_when_the_run_was_scored(tmp_path):
    assert "The machine was busy during this run: wall time and CPU figures are disturbed." in \
        block(tmp_path, machine_busy=True)
    unexercised = block(tmp_path, machine_busy=True, needs_met=False)
    assert "never exercised" in unexercised and "was busy during this run" not in unexercised
