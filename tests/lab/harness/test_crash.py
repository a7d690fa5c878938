"""A run that dies of a signal is named a crash, with its signal, how far the loop got, its stderr and the
next step: never "not exercised", never blamed on a busy machine.

The crashes are real: a hook makes the agent process read address 0 (SIGSEGV) inside the llama backend's
first decode, or in the scripted model's second turn.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import crash_env, start_foreign_spinner

from miniagent.lab.harness import crash

from miniagent.lab.learner import progress
from miniagent.lab.commands import experiment
from miniagent.lab.catalogue import find
from miniagent.lab.harness.record import crash_note, machine_note, summary
from miniagent.lab.harness.run import run_experiment
from miniagent.lab.learner.scoring import compare

ROOT = Path(__file__).resolve().parents[3]
QUESTION = "What is the past simple of go for she?"


def agent(*flags: str) -> list[str]:
    return [sys.executable, "-m", "miniagent", "ask", QUESTION, "--cache-dir", "", *flags]


def test_a_signal_is_named_and_an_exit_code_is_not():
    assert crash.signal_name(-11) == "SIGSEGV" and crash.signal_name(-4) == "SIGILL"
    assert crash.signal_name(1) is None and crash.signal_name(0) is None and crash.signal_name(None) is None


@pytest.mark.parametrize("lang,died,nxt", [("en", "CRASHED: the agent died of SIGSEGV (signal 11, a segmentation "
                                                  "fault) before its loop started.", "Next: the model crashed inside"),
                                           ("es", "SE HA ROTO: el agente murió por SIGSEGV (señal 11, un fallo de "
                                                  "segmentación) antes de que empezara su bucle.", "Siguiente paso: el modelo")])
def test_the_report_names_the_signal_the_loop_the_stderr_and_the_next_step(lang, died, nxt):
    tail = ["Fatal Python error: Segmentation fault", "", "Current thread 0x1 (most recent call first):",
            '  File "/x/llama_cpp/_internals.py", line 321 in decode']
    lines = crash.describe("SIGSEGV", loop_started=False, turns=0, stderr_lines=tail, lang=lang)
    assert lines[0] == died
    assert lines[2:5] == ["    Fatal Python error: Segmentation fault", "    Current thread 0x1 (most recent call first):",
                          '    File "/x/llama_cpp/_internals.py", line 321 in decode']
    assert lines[-1].startswith(nxt)
    assert "--llama-amx off" in lines[-1] and crash.LAB_02 in lines[-1]
    after = crash.describe("SIGABRT", loop_started=True, turns=3, stderr_lines=["boom"], lang="en")
    assert after[1:3] == ["Its last lines on stderr:", "    boom"]
    assert after[0].endswith("after its loop started, with 3 turn(s) done.") and after[-1].startswith("Next: this is not a busy")
    assert crash.describe("SIGSEGV", loop_started=None, turns=0, stderr_lines=[])[0].endswith("fault).")


def test_faulthandlers_report_quotes_the_thread_that_died_up_to_five_frames():
    """The current thread is the one that died, unless a C thread of llama.cpp died: then the thread that was in
    the model. A report with no thread at all is its first line alone; the blank line after it is optional."""
    frames = [f'  File "/x/app.py", line {n} in f{n}' for n in range(8)]
    app = ["Fatal Python error: Aborted", "Current thread 0x1 (most recent call first):", *frames, "",
           "Thread 0x2 (most recent call first):", frames[0]]
    assert crash.fatal_error(app) == ["Fatal Python error: Aborted", app[1], *frames[:5]]
    model = ['  File "/x/llama_cpp/llama.py", line 1 in eval']
    both = ["Fatal Python error: Segmentation fault", "", "Thread 0x2 (most recent call first):", *model, "",
            "Current thread 0x1 (most recent call first):", *model, frames[0]]
    assert crash.fatal_error(both) == [both[0], both[5], *model, frames[0]]
    assert crash.fatal_error(["Fatal Python error: Aborted", "", "Extension modules: x"]) == \
        ["Fatal Python error: Aborted"]


def test_the_report_says_where_it_died_or_that_it_said_nothing():
    """The header over the quoted lines says whether they are faulthandler's report or just the last lines; no
    stderr at all is said so; llama.cpp frames on stderr without a report still point at the model."""
    report = ["Fatal Python error: Segmentation fault", "", "Current thread 0x1 (most recent call first):",
              '  File "/x/app.py", line 3 in main']
    assert crash.describe("SIGSEGV", loop_started=False, turns=0, stderr_lines=report)[1] == \
        "Where it died (Python's faulthandler, on stderr):"
    silent = crash.describe("SIGSEGV", loop_started=False, turns=0, stderr_lines=["", "  "])
    assert silent[1:] == ["It wrote nothing to stderr.", silent[-1]] and silent[-1].startswith("Next: this is not")
    frames = crash.describe("SIGSEGV", loop_started=False, turns=0,
                            stderr_lines=['  File "/x/llama_cpp/_internals.py", line 321 in decode'])
    assert frames[1] == "Its last lines on stderr:" and "--llama-amx off" in frames[-1]


def test_a_signal_without_a_name_or_a_meaning_is_still_reported_plainly():
    assert crash.signal_name(-99) == "signal 99" and crash.signal_number("SIGNOPE") is None
    assert crash.describe("signal 99", loop_started=None, turns=0, stderr_lines=[])[0] == \
        "CRASHED: the agent died of signal 99 (signal ?)."


def test_a_language_the_lab_does_not_speak_gets_the_english_report():
    """Found by mutation testing: the words fell back to English, the signal's meaning did not (a KeyError)."""
    args = dict(loop_started=True, turns=2, stderr_lines=["boom"])
    assert crash.describe("SIGSEGV", lang="fr", **args) == crash.describe("SIGSEGV", lang="en", **args)
    assert crash.short("SIGSEGV") == "crashed (SIGSEGV)" == crash.short("SIGSEGV", lang="fr")
    assert crash.short("SIGSEGV", lang="es") != crash.short("SIGSEGV") and "SIGSEGV" in crash.short("SIGSEGV", "es")


def test_the_frames_quoted_are_the_ones_that_died_in_the_model():
    """A C thread of llama.cpp died (no Python frames of its own): the Python thread inside the model is quoted,
    not the MCP client's thread or the lines the MCP server wrote after the agent was gone."""
    stderr = ["[miniagent] llama.cpp threads: 2", "Fatal Python error: Segmentation fault", "",
              "Thread 0x2 (most recent call first):", '  File "/x/miniagent/tools/mcp_client.py", line 352 in _run_loop',
              "", "Thread 0x3 (most recent call first):", '  File "/x/llama_cpp/_internals.py", line 321 in decode',
              '  File "/x/miniagent/models/llama_runtime.py", line 99 in feed', "",
              "Extension modules: numpy (total: 1)", "Traceback (most recent call last):", "BrokenPipeError"]
    assert crash.fatal_error(stderr) == ["Fatal Python error: Segmentation fault", stderr[6], stderr[7], stderr[8]]
    assert crash.fatal_error(["no report here"]) == []


def test_a_thread_with_a_stack_too_deep_to_print_does_not_hide_the_thread_that_died():
    """faulthandler ends a stack of over 100 frames with "  ...": seen for the MCP client's event loop while the
    model crashed in the main thread, and the report then lost where it died (1 run in 3)."""
    stderr = ["Fatal Python error: Segmentation fault", "",
              "Thread 0x2 (most recent call first):", '  File "/x/asyncio/base_events.py", line 607 in run_forever',
              "  ...", "", "Thread 0x4 (most recent call first):", "  <no Python frame>", "",
              "Current thread 0x3 (most recent call first):", '  File "/x/ctypes/__init__.py", line 519 in string_at',
              '  File "/x/miniagent/models/llama_runtime.py", line 186 in sync', "",
              "Extension modules: numpy (total: 1)"]
    assert crash.fatal_error(stderr) == ["Fatal Python error: Segmentation fault", *stderr[9:12]]
    assert "--llama-amx off" in crash.describe("SIGSEGV", loop_started=False, turns=0, stderr_lines=stderr)[-1]


@pytest.mark.real_model
def test_a_model_crash_before_the_loop_is_a_crash_even_on_a_busy_machine(tmp_path):
    """The llama backend dies of SIGSEGV in its first decode while another program holds a core: the record,
    the summary and the verdict name the crash; nothing says "not exercised" or blames the machine."""
    spinner = start_foreign_spinner()
    try:
        record = run_experiment(agent(), timeout=5, trace_path=tmp_path / "trace.jsonl", live=False, cwd=ROOT,
                                env=crash_env(tmp_path, "model"), clock="loop", needs={"tool_calls": 5},
                                hard_cap=60)
    finally:
        spinner.kill()
        psutil.wait_procs([spinner], timeout=5)
    assert record.outcome == "crash" and record.signal == "SIGSEGV" and record.exit_code == -11
    assert record.loop_start_s is None and record.needs_met is False and not record.hard_capped
    assert record.fatal_error[0] == "Fatal Python error: Segmentation fault", record.stderr_tail
    assert any("llama_runtime.py" in line for line in record.fatal_error), record.fatal_error
    assert not any("Traceback" in line for line in record.stderr_tail), "\n".join(record.stderr_tail)
    assert "crash of SIGSEGV" in summary(record)
    assert not record.processes_left and record.cleanup_ok  # its MCP server went with it
    lines = [sentence for _, sentence in experiment.verdict(find("no-cap"), record)]
    assert lines[0].startswith("CRASHED: the agent died of SIGSEGV") and "before its loop started" in lines[0]
    assert lines[-1].startswith("Next: the model crashed inside llama.cpp")
    assert not any(blame in line for line in lines for blame in ("NOT EXERCISED", "quieter", "The machine was busy"))
    assert record.machine_busy and machine_note(record) is None  # busy, and the load is not offered as a cause
    rows = compare({"outcome": "timeout", "tool_calls": 5}, record.to_dict())
    assert {r.note for r in rows if r.predicted is not None} == {"crashed"}  # nothing scored


def test_a_crash_inside_the_loop_says_how_far_it_got(tmp_path):
    record = run_experiment(agent("--llm", "scripted:oracle"), timeout=20, trace_path=tmp_path / "trace.jsonl",
                            live=False, cwd=ROOT, env=crash_env(tmp_path, "turn2"), clock="loop")
    assert record.outcome == "crash" and record.signal == "SIGSEGV"
    assert record.loop_start_s is not None and record.turns == 1 and record.tool_calls == 1
    lines = crash_note(record, "es")
    assert lines[0].endswith("con su bucle ya en marcha y 1 turno(s) hechos.") and lines[-1].startswith("Siguiente paso: no es que")


def test_an_agent_that_exits_with_an_error_is_not_named_a_signal(tmp_path):
    record = run_experiment([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=20,
                            trace_path=tmp_path / "t.jsonl", live=False)
    assert record.outcome == "crash" and record.signal is None and crash_note(record) == []


@pytest.mark.real_model
@pytest.mark.parametrize("lang", ["en", "es"])
def test_invoke_ask_turns_a_death_by_signal_into_a_clear_report(tmp_path, learner, lang):
    progress.remember_learner(ROOT, learner)
    progress.learner_lang(ROOT, learner, lang)  # the learner chose this language once
    proc = subprocess.run([str(Path(sys.executable).parent / "invoke"), "ask", QUESTION, "--cache-dir", ""], cwd=ROOT,
                          capture_output=True, text=True, env=crash_env(tmp_path, "model"), timeout=120)
    assert proc.returncode == 128 + 11, (proc.returncode, proc.stderr)
    first = {"en": "miniagent: CRASHED: the agent died of SIGSEGV (signal 11, a segmentation fault) before its "
                   "loop started.",
             "es": "miniagent: SE HA ROTO: el agente murió por SIGSEGV (señal 11, un fallo de segmentación) antes "
                   "de que empezara su bucle."}[lang]
    assert first in proc.stderr.splitlines(), proc.stderr
    assert ("--llama-amx off" in proc.stderr) and "Traceback" not in proc.stderr
