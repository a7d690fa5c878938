"""A run record's words and its JSON, exactly: the one-line summary, the busy-machine sentence, the deadline's
note, a crash's note, and the record read back from its file or from a break's docs results.

Written after the lab wing's mutation run (2026-11-26): the tests looked for a phrase in each, so a wrong figure
beside the phrase went unseen.
"""

from __future__ import annotations

import json

from miniagent.lab.harness.record import (RunRecord, crash_note, deadline_note, load_record, machine_note,
                                          records_from_results, summary)


def record(**values) -> RunRecord:
    return RunRecord(command=["python", "-m", "miniagent"], timeout=6.0, **values)


def test_the_summary_line_of_a_killed_run():
    killed = record(outcome="timeout", wall_s=6.44, kill_latency_s=0.1234, turns=5,
                    tool_calls_by_tool={"list_tenses": 1, "conjugate": 4}, cpu_mean=98.4, cpu_max=120.6,
                    rss_max_mb=512.4, processes_left=[{"pid": 7}], other_cpu_mean=61.2, machine_busy=True)
    assert summary(killed) == ("timeout (stop_reason None) after 6.4 s, killed +0.12 s after the deadline; 5 turns, "
                               "conjugate x4, list_tenses x1; cpu mean 98 % max 121 %; rss max 512 MB; "
                               "processes left: 1; other programs 61 % (busy machine)")


def test_the_summary_line_of_a_run_that_ended_by_itself_or_died():
    calm = record(outcome="fallback", stop_reason="max_turns", wall_s=1.96)
    assert summary(calm) == ("fallback (stop_reason max_turns) after 2.0 s; 0 turns, no tool calls; cpu mean 0 % "
                             "max 0 %; rss max 0 MB; processes left: 0; other programs 0 %")
    died = record(outcome="crash", signal="SIGSEGV", wall_s=0.5)
    assert summary(died).startswith("crash of SIGSEGV (stop_reason None) after 0.5 s; ")


def test_the_busy_machine_sentence_with_and_without_the_load_average():
    busy = record(machine_busy=True, other_cpu_mean=123.4, cpus=2, load_avg_start=1.5, load_avg_end=2.25)
    assert machine_note(busy) == (
        "The machine was busy: other programs used 123 % CPU on average during this run (100 % = one core; 2 "
        "usable CPUs, load average 1.5 -> 2.25).  The run competed with them for the CPU, so its wall time, its CPU "
        "figures and how far the loop got are disturbed.")
    for start, end in ((None, 2.0), (1.0, None)):  # the load average is given only when both ends were read
        note = machine_note(record(machine_busy=True, other_cpu_mean=80.0, cpus=4, load_avg_start=start,
                                   load_avg_end=end))
        assert "(100 % = one core; 4 usable CPUs)." in note and "load average" not in note
    assert machine_note(record(machine_busy=False, other_cpu_mean=300.0)) is None  # the flag decides, not the mean


def test_the_deadline_note_joins_what_happened_in_one_sentence():
    waited = record(clock="loop", loop_start_s=2.04, waited_for_needs_s=1.25, needs={"tool_calls": 1, "turns": 2},
                    hard_capped=True, hard_cap_s=30.0)
    assert deadline_note(waited) == (
        "The 6 s timeout counted from the loop's start, 2.0 s after launch (imports and model load before it); "
        "the run went on 1.2 s past its timeout until it had shown 1 tool calls, 2 turns; "
        "it was ended by the hard cap of 30 s after launch.")
    assert deadline_note(record(waited_for_needs_s=0.5, needs={"tool_errors": 1})) == (
        "The run went on 0.5 s past its timeout until it had shown 1 tool errors.")


def test_a_crash_note_reads_the_fatal_error_first_then_the_stderr_tail():
    died = record(outcome="crash", signal="SIGSEGV", loop_start_s=1.0, turns=2, fatal_error=["Fatal Python error"],
                  stderr_tail=["other"])
    text = "\n".join(crash_note(died))
    assert "Fatal Python error" in text and "other" not in text
    from_tail = "\n".join(crash_note(record(outcome="crash", signal="SIGSEGV", stderr_tail=["the tail"])))
    assert "the tail" in from_tail
    assert crash_note(died, "es") != crash_note(died, "en")  # the language reaches the report


def test_the_json_is_indented_utf8_and_ends_with_a_newline(tmp_path):
    run = record(answer="él fue", samples=[[0.2, 50.0, 300.0, 2]])
    text = run.to_json()
    assert text.endswith("}\n") and '\n  "answer": "él fue",' in text  # two spaces, the accent as it is
    path = tmp_path / "run.json"
    path.write_bytes(text.encode("utf-8"))
    assert load_record(path) == run


def test_a_record_written_by_a_newer_harness_is_read_without_its_unknown_fields(tmp_path):
    data = {**record(outcome="answer").to_dict(), "a_future_field": 1}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_record(path).outcome == "answer"


def test_a_breaks_docs_results_are_its_two_runs_with_the_pairs_timeout():
    data = {"timeout_s": 8.0, "broken": {"outcome": "timeout", "wall_s": 8.2, "samples": [[0.2, 90.0, 1.0, 1]]},
            "fixed": {"outcome": "fallback", "wall_s": 1.5}}
    broken, fixed = records_from_results(data)
    assert (broken.outcome, broken.timeout, broken.wall_s, broken.samples) == ("timeout", 8.0, 8.2, [[0.2, 90.0, 1.0, 1]])
    assert (fixed.outcome, fixed.timeout, fixed.command) == ("fallback", 8.0, [])
    assert records_from_results({"broken": {}, "fixed": {}})[0].timeout == 0.0


def test_the_deadline_note_of_a_loop_that_never_started():
    assert deadline_note(record(clock="loop")) == "The loop never started, so its timeout never began."
