"""``invoke bench`` (lab/maintainers/bench.py) without the model's minutes: stand-ins for the agent's processes, the
harness, the MCP client and the backend show what each figure is computed from, what the printed tables and the
docs' saved tables say, and which flag asks for which figure. The real runs are ``invoke bench`` itself; these
tests hold its arithmetic and its wiring to account (a figure computed from the wrong events reads as a fact)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import shell_script

from miniagent.agent.ports import ModelReply
from miniagent.lab.catalogue import ROOT
from miniagent.lab.maintainers import bench, classload
from test_classload import level, report as class_report


def outcome(stop_reason="answered", turns=2, calls=None) -> str:
    return json.dumps({"answer": "she went", "stop_reason": stop_reason, "final_answer": None,
                       "stats": {"turns": turns, "tool_calls": calls or {"conjugate": 1}}})


# --- the docs' tables --------------------------------------------------------------------------------------------

def test_the_docs_figures_saved_again_are_byte_for_byte_what_the_docs_hold(tmp_path):
    """One source of truth: saving a measurement's figures again must not touch the docs (the JSON as written, and
    both tables as c_markdown draws them today)."""
    measured = sorted((ROOT / "docs_results").glob("bench-*.json"))
    assert len(measured) >= 2
    for saved in measured:
        name = saved.stem.removeprefix("bench-")
        again = bench.save_c(json.loads(saved.read_text(encoding="utf-8")), tmp_path, name)
        for old, new in zip((saved, saved.with_suffix(".md"), saved.with_suffix(".es.md")), again, strict=True):
            assert new.read_bytes() == old.read_bytes(), old.name


SAVE_IN_ASCII_LOCALE = """
import json, sys
from pathlib import Path
from miniagent.lab.maintainers import bench, classload
bench_figures, class_report, folder = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
bench.save_c(bench_figures, folder, "a")
classload.save(class_report, folder, "b")
"""


def test_the_docs_tables_are_written_in_utf8_whatever_the_locale(tmp_path):
    """A maintainer's shell in the C locale (no UTF-8) still writes the Spanish tables as the docs expect."""
    import os

    ours = class_report(levels=[level(), level(turns=0)])  # a level with no turn shows a dash, in English too
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    proc = subprocess.run([sys.executable, "-X", "utf8=0", "-c", SAVE_IN_ASCII_LOCALE, json.dumps(figures(row())),
                           json.dumps(ours), str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for lang, suffix in (("en", ".md"), ("es", ".es.md")):
        text = (tmp_path / f"bench-a{suffix}").read_text(encoding="utf-8")
        assert text == bench.c_markdown(figures(row()), "a", lang) and not text.isascii()
        text = (tmp_path / f"class-load-b{suffix}").read_text(encoding="utf-8")
        assert text == classload.markdown(ours, lang) and not text.isascii()


def row(path="answer", load="idle", amx="auto", wall=1.234, goal=1.5, runs=5, **more):
    return {"path": path, "load": load, "amx": amx, "question": "q", "runs": runs, "goal_s": goal,
            "wall_p50_s": wall, "wall_min_s": wall - 0.1, "wall_max_s": wall + 0.1, "cpu_p50_s": 2.5,
            "others_pct": 3, "stop_reason": "answered", "turns": 2, "tool_calls": {}, **more}


def figures(*rows) -> dict:
    return {"cores": 2, "cpu": "Some CPU", "amx_cpu": False, "measured_at": "2026-11-27 06:00",
            "c_time_to_end": list(rows)}


def test_a_table_says_how_to_measure_it_again_and_whether_each_goal_was_met():
    text = bench.c_markdown(figures(row(wall=1.5), row(path="fallback", wall=2.01, goal=2.0),
                                    row(load="one core busy", goal=None)), "mine")
    intro, blank, head, rule, *rows = text.splitlines()
    assert intro == ("Measured by `invoke bench --only c --save mine` on 2026-11-27 06:00: 2 cores, Some CPU (no AMX). "
                     "Whole processes, from start to the end of the run, median of 5. CPU s ÷ free cores (the cores "
                     "less what other programs used) is the least wall time that CPU time could take, in any order: "
                     "a goal under it needs less CPU. Wall ÷ floor is the median wall time over that least time; on "
                     "an idle machine the budget is 1.15 at most. With one core busy, the goal is 2 times the same "
                     "path's idle time.")
    assert blank == "" and head.count("|") == 12 and rule == "|" + "---|" * 11
    assert head == ("| path | AMX path | machine | other programs, % CPU | wall s (median) | min–max s | CPU s | "
                    "CPU s ÷ free cores | wall ÷ floor | goal s | turns, stop |")
    # 2.5 s of CPU on 1.97 free cores: 1.27 s at least; 1.50 / 1.27 = 1.18 is over the idle budget, 1.23 / 1.27 is
    # under 1 (a median of walls over a median of CPU times), and a busy row's ratio is shown, not judged
    assert rows == [
        "| answer | `auto` | idle | 3 | 1.50 | 1.40–1.60 | 2.50 | 1.27 | 1.18 (missed) | 1.5 (met) | 2, `answered` |",
        "| fallback | `auto` | idle | 3 | 2.01 | 1.91–2.11 | 2.50 | 1.27 | 1.58 (missed) | 2 (missed) | 2, `answered` |",
        "| answer | `auto` | one core busy | 3 | 1.23 | 1.13–1.33 | 2.50 | 1.27 | 0.97 |  | 2, `answered` |"]
    met = bench.c_markdown(figures(row(wall=1.46)), "mine").splitlines()[-1]
    assert "| 1.27 | 1.15 (met) | 1.5 (met) |" in met  # 1.46 / 1.2690 = 1.1505: judged as shown
    assert "| 1.27 | 1.16 (missed) |" in bench.c_markdown(figures(row(wall=1.4725)), "mine")  # 1.1604
    assert text.endswith("|\n")


def test_the_least_wall_time_spreads_the_cpu_time_over_the_cores_the_other_programs_left():
    """The xeon table's busy fallback: 4.23 s of CPU while others used 87 % of a core needs 3.74 s at least, so its
    3 s goal is out of reach by CPU alone (4.23 / 2 = 2.11 would have said it was not)."""
    busy = row(path="fallback", load="one core busy", wall=3.77, goal=3.0, cpu_p50_s=4.23, others_pct=87)
    assert "| 3.77 | 3.67–3.87 | 4.23 | 3.74 | 1.01 | 3 (missed) |" in bench.c_markdown(figures(busy), "x")
    four = {**figures(row(cpu_p50_s=4.63, others_pct=100)), "cores": 4}
    assert "| 4.63 | 1.54 |" in bench.c_markdown(four, "x")
    assert "| 2.50 | 5.00 |" in bench.c_markdown(figures(row(others_pct=150)), "x"), "half a core left"
    assert "| 2.50 | – | – |" in bench.c_markdown(figures(row(others_pct=200)), "x"), "nothing left: no bound"
    assert "| 2.50 | – | – |" in bench.c_markdown(figures(row(others_pct=250)), "x")


def test_a_spanish_table_writes_its_numbers_and_words_in_spanish():
    text = bench.c_markdown(figures(row(wall=1.25, load="one core busy", goal=1.0)), "mine", "es")
    assert "| respuesta | `auto` | un núcleo ocupado | 3 | 1,25 | 1,15–1,35 | 2,50 | 1,27 | 0,98 | 1 (no cumplida) |" \
        in text
    assert "| s de CPU | s de CPU ÷ núcleos libres | reloj ÷ mínimo | meta s |" in text and "en cualquier orden" in text
    assert "el presupuesto es de 1,15 como mucho. Con un núcleo ocupado, la meta es 2 veces" in text
    assert text.startswith("Medido con `invoke bench --only c --load busy --save mine` el 2026-11-27 06:00: "
                           "2 núcleos, Some CPU (sin AMX).")


@pytest.mark.parametrize("rows, flags", [
    ([row(amx="on"), row(amx="off")], " --amx on,off --load idle"),
    ([row(amx="on"), row(amx="on", load="one core busy")], " --amx on"),
    ([row(load="idle")], " --load idle"),
    ([row(load="one core busy")], " --load busy"),
    ([row(load="idle"), row(load="one core busy")], ""),
    ([row(runs=3)], " --load idle --runs 3"),
    ([row(amx="off", runs=7, load="one core busy")], " --amx off --load busy --runs 7"),
])
def test_the_command_in_a_table_is_the_one_that_measured_it(rows, flags):
    assert f"`invoke bench --only c{flags} --save x`" in bench.c_markdown(figures(*rows), "x")


def test_save_writes_the_figures_of_c_and_both_tables_from_them(tmp_path):
    got = {**figures(row()), "a_turn_latency": {"rows": []}, "e_killed_runs": {}}
    paths = bench.save_c(got, tmp_path / "new" / "folder", "mine")
    assert [p.name for p in paths] == ["bench-mine.json", "bench-mine.md", "bench-mine.es.md"]
    data = json.loads(paths[0].read_text(encoding="utf-8"))
    assert data == figures(row())  # only what the tables are made of
    assert paths[1].read_text(encoding="utf-8") == bench.c_markdown(data, "mine", "en")
    assert paths[2].read_text(encoding="utf-8") == bench.c_markdown(data, "mine", "es")


# --- (c): whole processes ----------------------------------------------------------------------------------------

def test_one_process_counts_the_cpu_of_the_agent_and_what_it_started(monkeypatch):
    """A stand-in agent that burns CPU in a child of its own: the figure is the kernel's account of both."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    seen = {}

    def agent(argv, env, timeout):
        seen.update(argv=argv, env=env, timeout=timeout)
        script = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {burn!r}])\n{burn}" \
                 f"print({outcome('stuck', 4, {'conjugate': 4})!r})"
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)

    monkeypatch.setattr(bench, "_agent", agent)
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "1")  # the maintainer's shell: no run inherits it
    monkeypatch.setenv("MINIAGENT_TRACES", "file")  # but traces, measured on purpose: the runs get it
    got = bench.one_process("the question?", "off")
    assert seen["argv"] == ["ask", "the question?", "--json"] and seen["timeout"] == 120
    assert seen["env"]["MINIAGENT_LLAMA_AMX"] == "off"
    assert sorted(k for k in seen["env"] if k.startswith("MINIAGENT_")) == ["MINIAGENT_LLAMA_AMX", "MINIAGENT_TRACES"]
    assert seen["env"]["MINIAGENT_TRACES"] == "file"
    assert 0.6 <= got["cpu_s"] < 0.6 + 1.0  # the agent's 0.3 s and its child's 0.3 s, and start-up
    assert 0.3 <= got["wall_s"] < 60  # the two burned one after the other
    assert (got["stop_reason"], got["turns"], got["tool_calls"]) == ("stuck", 4, {"conjugate": 4})
    assert got["others_pct"] >= 0
    bench.one_process("again?")
    assert seen["env"]["MINIAGENT_LLAMA_AMX"] == "auto"  # llama.cpp decides, as in a learner's run
    bench.one_process("capped?", env=bench.CAPPED_PATH_ENV)  # the capped path: the out-of-grammar guard off
    assert seen["env"]["MINIAGENT_DECLINE_OUT_OF_GRAMMAR"] == "false"


@pytest.mark.parametrize("cores, others_pct", [(0.25, 25.0), (None, 0.0), (0.0, 0.0)])
def test_one_process_is_timed_and_its_cpu_counted_between_its_start_and_its_end(monkeypatch, cores, others_pct):
    """The figures come from the readings around the run: the clock, the kernel's account of reaped children,
    other programs' CPU given ours (None: the machine could not be read, so nobody else is counted)."""
    usage = iter([SimpleNamespace(ru_utime=10.0, ru_stime=20.0), SimpleNamespace(ru_utime=10.5, ru_stime=20.25)])
    clock = iter([100.0, 101.5])
    told = []

    class Others:
        def cores(self, *, ours_s):
            told.append(ours_s)
            return cores

    monkeypatch.setattr(bench.resource, "getrusage", lambda who: next(usage))
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(bench, "OtherPrograms", Others)
    monkeypatch.setattr(bench, "_agent", lambda argv, env, timeout: SimpleNamespace(stdout="log\n" + outcome()))
    got = bench.one_process("q?")
    assert (got["wall_s"], got["cpu_s"], got["others_pct"]) == (1.5, 0.75, others_pct) and told == [0.75]


def test_an_agent_killed_by_a_signal_is_a_crash_report_not_a_figure(monkeypatch, tmp_path):
    fake = shell_script(tmp_path / "python", "echo 'Fatal Python error: Segmentation fault' >&2\nkill -SEGV $$\n")
    monkeypatch.setattr(bench.sys, "executable", str(fake))
    with pytest.raises(bench.AgentCrashed) as err:
        bench._agent(["ask", "q"], {}, timeout=30)
    assert "SIGSEGV" in str(err.value) and "Fatal Python error: Segmentation fault" in str(err.value)
    from miniagent.lab.harness import crash

    assert str(err.value) == "\n".join(crash.describe("SIGSEGV", loop_started=None, turns=0, stderr_lines=[
        "Fatal Python error: Segmentation fault"]))
    fake.write_text("#!/bin/sh\necho \"$@\" \"$MINE\"\nexit $CODE\n")  # an exit status is the caller's to read
    for code in (0, 3):
        proc = bench._agent(["eval", "--json"], {"MINE": "given", "CODE": str(code)}, timeout=30)
        assert (proc.returncode, proc.stdout) == (code, "-m miniagent eval --json given\n")
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    with pytest.raises(subprocess.TimeoutExpired):
        bench._agent(["ask", "q"], {}, timeout=0.2)


def test_the_settings_take_turns_run_by_run_and_each_row_is_its_own_runs_median(monkeypatch):
    calls, spinning = [], []
    walls = iter([1.0, 5.0, 3.0, 6.0, 2.0, 4.0] * 4)  # auto then off, run by run

    def one(question, amx, env=None):
        calls.append((question, amx, bool(spinning)))
        assert env == (bench.CAPPED_PATH_ENV if question == bench.UNANSWERABLE else None)
        wall = next(walls)
        return {"wall_s": wall, "cpu_s": wall * 2, "others_pct": wall * 10, "stop_reason": f"s{wall}",
                "turns": int(wall), "tool_calls": {"conjugate": int(wall)}}

    class Spinner:
        def __enter__(self):
            spinning.append(1)

        def __exit__(self, *exc):
            spinning.clear()

    monkeypatch.setattr(bench, "one_process", one)
    monkeypatch.setattr("miniagent.lab.harness.process_tree.spinning_core", Spinner)
    rows = bench.start_to_end(["auto", "off"], ("idle", "one core busy"), runs=3)
    assert calls == [(q, amx, busy) for busy in (False, True) for q in (bench.ANSWERABLE, bench.UNANSWERABLE)
                     for _ in range(3) for amx in ("auto", "off")]
    assert [(r["path"], r["load"], r["amx"], r["goal_s"]) for r in rows] == [
        ("answer", "idle", "auto", 1.5), ("answer", "idle", "off", 1.5),
        ("fallback", "idle", "auto", 2.0), ("fallback", "idle", "off", 2.0),
        # with one core busy: twice the idle median of the same path and setting
        ("answer", "one core busy", "auto", 2 * rows[0]["wall_p50_s"]), ("answer", "one core busy", "off", 10.0),
        ("fallback", "one core busy", "auto", 2 * rows[2]["wall_p50_s"]),
        ("fallback", "one core busy", "off", 2 * rows[3]["wall_p50_s"])]
    assert rows[1]["wall_p50_s"] == 5.0
    auto = rows[0]
    assert auto == {"path": "answer", "load": "idle", "amx": "auto", "question": bench.ANSWERABLE, "runs": 3,
                    "goal_s": 1.5, "wall_p50_s": 2.0, "wall_min_s": 1.0, "wall_max_s": 3.0, "cpu_p50_s": 4.0,
                    "others_pct": 20, "stop_reason": "s2.0", "turns": 2, "tool_calls": {"conjugate": 2}}
    assert (rows[1]["wall_p50_s"], rows[1]["wall_min_s"], rows[1]["wall_max_s"]) == (5.0, 4.0, 6.0)
    assert rows[1]["others_pct"] == 50 and rows[1]["stop_reason"] == "s4.0"


def test_the_medians_are_rounded_to_the_millisecond(monkeypatch):
    walls = iter([1.23456, 0.9994, 1.1, 2.0004, 2.9994, 3.0])
    monkeypatch.setattr(bench, "one_process", lambda q, amx, env=None: {
        "wall_s": (w := next(walls)), "cpu_s": w / 3, "others_pct": 10.5, "stop_reason": "x", "turns": 1,
        "tool_calls": {}})
    answer, fallback = bench.start_to_end(["auto"], ("idle",), runs=3)
    assert (answer["wall_p50_s"], answer["wall_min_s"], answer["wall_max_s"], answer["cpu_p50_s"]) == \
        (1.1, 0.999, 1.235, 0.367)
    assert (fallback["wall_p50_s"], fallback["wall_min_s"], fallback["wall_max_s"]) == (2.999, 2.0, 3.0)
    assert answer["others_pct"] == 10  # rounded half to even, as round() does
    runs = []
    monkeypatch.setattr(bench, "one_process", lambda q, amx, env=None: runs.append(q) or {
        "wall_s": 1.0, "cpu_s": 1.0, "others_pct": 0, "stop_reason": "x", "turns": 1, "tool_calls": {}})
    bench.start_to_end(["auto"], ("idle",))
    assert len(runs) == 2 * 5  # five processes a figure unless told


# --- (d), (e), (f) -----------------------------------------------------------------------------------------------

def test_eval_time_reports_the_eval_and_the_whole_process(monkeypatch):
    report = {"total_s": 12.5, "accuracy": 0.875, "n": 8, "latency_p50_s": 1.2, "latency_p95_s": 2.5}
    seen = {}

    def agent(argv, env, timeout):
        seen.update(argv=argv, timeout=timeout, env=env)
        return SimpleNamespace(stdout=json.dumps(report), returncode=0)

    monkeypatch.setattr(bench, "_agent", agent)
    monkeypatch.setenv("MINIAGENT_LLM", "scripted")
    clock = iter([100.0, 113.4567])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    got = bench.eval_time()
    assert seen["argv"] == ["eval", "--json"] and seen["timeout"] == 600 and "MINIAGENT_LLM" not in seen["env"]
    assert {k: got[k] for k in report} == report and got["process_wall_s"] == 13.46


def test_killed_runs_count_every_process_left_at_timeouts_from_half_a_second_to_two(monkeypatch, tmp_path):
    runs = []

    def run_experiment(command, *, timeout, trace_path, live):
        runs.append((command, timeout, trace_path, live))
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        trace_path.write_text("{}\n")
        return SimpleNamespace(processes_left=["p"] * (len(runs) % 3 == 0))

    monkeypatch.setattr("miniagent.lab.harness.run.run_experiment", run_experiment)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    got = bench.killed_runs(12)
    assert got["runs"] == 12 and got["processes_left"] == 4 and got["seconds"] >= 0
    assert [t for _, t, _, _ in runs] == pytest.approx([0.5 + i / 6 for i in range(10)] + [0.5, 0.5 + 1 / 6])
    command = runs[0][0]
    assert command[:4] == [sys.executable, "-m", "miniagent", "ask"] and command[4] == bench.ADVERSARIAL
    assert " ".join(command[5:]) == ("--llm scripted:wanderer --max-turns 1000000 --max-tool-calls 1000000 "
                                     "--wall-clock-s 1000000 --decline-out-of-grammar false")
    assert not any(live for *_, live in runs)
    assert len({path for _, _, path, _ in runs}) == 12 and all(p.parent.parent == tmp_path for _, _, p, _ in runs)
    assert not list(tmp_path.iterdir())  # the traces went with the folder


def test_killed_runs_are_fifty_unless_told_timed_to_a_tenth_and_their_folder_is_in_tmp(monkeypatch):
    runs = []
    monkeypatch.setattr("miniagent.lab.harness.run.run_experiment", lambda command, **how: runs.append(how) or
                        SimpleNamespace(processes_left=[]))  # a harness that wrote no trace: nothing to remove
    monkeypatch.delenv("TMPDIR", raising=False)
    clock = iter([100.0, 112.345])
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    got = bench.killed_runs()
    assert got == {"runs": 50, "processes_left": 0, "seconds": 12.3} and len(runs) == 50
    assert all(how["live"] is False for how in runs)
    assert runs[0]["trace_path"].parent.parent == Path("/tmp")


def test_server_startup_times_the_handshake_and_the_first_answer_of_fresh_servers(monkeypatch):
    clock = iter([0.0, 0.4444, 0.5, 10.0, 10.6, 10.7055, 20.0, 20.2, 20.9])
    started, asked = [], []

    class Client:
        def __init__(self, timeout):
            started.append(timeout)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def call(self, tool, arguments, timeout):
            asked.append((tool, arguments, timeout))

    monkeypatch.setattr("miniagent.tools.mcp_client.MCPClient", Client)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    got = bench.server_startup(runs=3)
    assert got == {"runs": 3, "ready_p50_s": 0.44, "first_answer_p50_s": 0.71}
    assert started == [30] * 3
    assert asked == [("conjugate", {"verb": "overpay", "tense": "present perfect", "person": "she"}, 30)] * 3
    clock = iter(range(100))
    assert bench.server_startup()["runs"] == 5 and len(started) == 3 + 5


# --- (a), (b): the backend in this process ------------------------------------------------------------------------

class StandInRuntime:
    """Words are tokens; each token fed costs one tick of a clock the test reads."""

    def __init__(self, clock):
        self.clock, self.tokens, self.fed = clock, ["<bos>"], []
        self.vocab = SimpleNamespace(tokenize=lambda text: text.split())

    def feed(self, tokens):
        self.clock.now += 0.010003 * len(tokens)
        self.tokens += tokens
        self.fed += tokens

    def rollback(self, length):
        del self.tokens[length:]


class StandInBackend:
    def __init__(self, clock):
        self.clock, self.rt, self.asked = clock, StandInRuntime(clock), []

    def next_action(self, pad, *, first_turn):
        self.asked.append((list(pad), first_turn))
        self.clock.now += 0.05
        return ModelReply(text=f'{{"answer": "{len(self.asked)}"}}', finish_reason="stop", prompt_tokens=3 + len(pad),
                          completion_tokens=2, latency_s=0.05 * len(self.asked) + 0.000042)


@pytest.fixture
def clock(monkeypatch):
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock.now)
    return clock


def test_turn_latency_is_set_against_decoding_as_many_tokens_one_by_one(clock):
    backend = StandInBackend(clock)
    got = bench.turn_latency_ratio(backend)
    assert [(pad[0].text, first) for pad, first in backend.asked] == [(q, True) for q in bench.QUESTIONS]
    assert all(len(pad) == 1 and pad[0].role == "question" for pad, _ in backend.asked)
    assert [r["tokens"] for r in got["rows"]] == [6, 6, 6]
    assert backend.rt.fed == ["the"] * 18 and backend.rt.tokens == ["<bos>"]  # probed, then rolled back
    assert [(r["turn_s"], r["pure_decode_s"], r["ratio"]) for r in got["rows"]] == [
        (0.05, 0.06, 0.834), (0.1, 0.06, 1.667), (0.15, 0.06, 2.5)]  # to the 0.1 ms; the ratio to the thousandth
    assert [r["question"] for r in got["rows"]] == bench.QUESTIONS
    assert got["ratio_mean"] == 1.667


def test_kv_reuse_grows_one_scratchpad_and_counts_what_each_turn_evaluated(clock):
    backend = StandInBackend(clock)
    rows = bench.kv_reuse(backend, turns=3)
    assert [first for _, first in backend.asked] == [True, False, False]
    pads = [pad for pad, _ in backend.asked]
    assert [len(p) for p in pads] == [1, 3, 5] and pads[0][0].text == bench.ADVERSARIAL
    assert [(e.role, e.text) for e in pads[2][1:]] == [
        ("action", '{"answer": "1"}'), ("observation", "we ate (1)"),
        ("action", '{"answer": "2"}'), ("observation", "we ate (2)")]
    assert [r["turn"] for r in rows] == [1, 2, 3]
    assert [r["prompt_tokens_evaluated"] for r in rows] == [4, 6, 8]
    assert len(bench.kv_reuse(StandInBackend(clock))) == 10  # ten turns unless told
    from miniagent.models.prompt import render
    assert [r["scratchpad_tokens"] for r in rows] == [len(render(p).split()) for p in pads]


# --- the command ---------------------------------------------------------------------------------------------------

@pytest.fixture
def measured(monkeypatch):
    """Every figure a stand-in that says what it was asked; the backend a stand-in that says it was closed."""
    asked = []
    monkeypatch.setattr(bench, "turn_latency_ratio", lambda b: asked.append(("a", b)) or {"rows": [
        {"question": "q?", "tokens": 7, "turn_s": 0.1, "pure_decode_s": 0.2, "ratio": 0.5}], "ratio_mean": 0.5})
    monkeypatch.setattr(bench, "kv_reuse", lambda b: asked.append(("b", b)) or [
        {"turn": 1, "scratchpad_tokens": 40, "prompt_tokens_evaluated": 41}])
    monkeypatch.setattr(bench, "start_to_end", lambda amx, loads, runs, shown=False: asked.append(("c", amx, loads, runs)) or [
        row(wall=1.6), row(path="fallback", wall=1.9, goal=2.0, load="one core busy")])
    monkeypatch.setattr(bench, "eval_time", lambda: asked.append(("d",)) or {
        "n": 8, "total_s": 12.34, "process_wall_s": 13.5, "accuracy": 0.875, "latency_p50_s": 1.2,
        "latency_p95_s": 2.5})
    monkeypatch.setattr(bench, "killed_runs", lambda n: asked.append(("e", n)) or {
        "runs": n, "processes_left": 0, "seconds": 4.5})
    monkeypatch.setattr(bench, "server_startup", lambda: asked.append(("f",)) or {
        "runs": 5, "ready_p50_s": 0.64, "first_answer_p50_s": 0.71})
    monkeypatch.setattr(bench, "overruns", lambda: asked.append(("g",)) or [
        {"decode": "scored", "wall_clock_s": 0.4, "runs": 20, "overrun_p50_ms": 12.5, "overrun_max_ms": 31.0,
         "stop_reasons": ["wall_clock"]}])

    class Backend:
        def __init__(self, cache_dir):
            asked.append(("backend", cache_dir))

        def close(self):
            asked.append(("closed",))

    monkeypatch.setattr("miniagent.models.llama.LlamaBackend", Backend)
    monkeypatch.setattr(bench, "ROOT", None)  # a figure saved where it should not be fails loudly
    return asked


def test_every_figure_by_default_each_once_and_the_backend_closed(measured, capsys):
    from miniagent.models.settings import ModelSettings

    assert bench.main([]) == 0
    names = [a[0] for a in measured]
    assert names == ["backend", "a", "b", "closed", "c", "d", "e", "f", "g"]
    assert measured[0] == ("backend", ModelSettings().cache_dir)
    assert measured[1][1] is measured[2][1]  # (a) and (b) share one backend
    assert measured[4] == ("c", ["auto"], ("idle", "one core busy"), 5) and measured[6] == ("e", 50)
    out = capsys.readouterr().out
    assert "miniagent bench on" in out
    assert "(a) turn latency" in out and "mean ratio: 0.50" in out and "0.100" in out and "0.200" in out
    assert "(b) prompt tokens evaluated" in out and "41" in out
    assert "| answer   | auto | idle    | 3        | 1.60   | 1.50-1.70 | 2.50  | 1.27     | 1.26 MISSED | " \
           "1.5 MISSED |" in out.replace("│", "|")
    assert "1.90   | 1.80-2.00 | 2.50  | 1.27     | 1.50        | 2 ok" in out.replace("│", "|") and "busy" in out
    assert "(d) eval: 8 questions in 12.3 s in-process, 13.5 s with start-up (goal <= 45 s); accuracy 87.5%; " \
           "p50 1.20 s, p95 2.50 s" in out
    assert "(e) 50 killed runs in a row left 0 processes (4.5 s)" in out
    assert "(f) conjugation server, median of 5 starts: handshake done in 0.64 s, first answer at 0.71 s" in out
    assert f"fallback: {bench.UNANSWERABLE!r} (the capped path, decline_out_of_grammar off)" in out \
        and "above 50 on an idle row, the machine was not idle" in " ".join(out.split())


def cells(out: str) -> list[list[str]]:
    """A rich table's rows as cell texts, whatever its box characters."""
    import re

    return [[c.strip() for c in re.split(r"[│┃]", line)[1:-1]] for line in out.splitlines()
            if line.strip().startswith(("│", "┃"))]


def test_the_printed_tables_have_a_column_for_each_figure(capsys):
    bench.print_figures({
        "cores": 2,
        "a_turn_latency": {"rows": [{"question": "Q?", "tokens": 7, "turn_s": 0.1234, "pure_decode_s": 0.25,
                                     "ratio": 0.4936}], "ratio_mean": 0.4936},
        "b_kv_reuse": [{"turn": 1, "scratchpad_tokens": 40, "prompt_tokens_evaluated": 41},
                       {"turn": 2, "scratchpad_tokens": 80, "prompt_tokens_evaluated": 12}],
        "c_time_to_end": [row(wall=1.5), row(path="fallback", load="one core busy", amx="off", wall=3.2, goal=3.0),
                          row(goal=None)]})
    out = capsys.readouterr().out
    assert cells(out) == [
        ["question", "tokens", "turn s", "pure decode s", "ratio"], ["Q?", "7", "0.123", "0.250", "0.49"],
        ["turn", "scratchpad tokens", "prompt tokens evaluated"], ["1", "40", "41"], ["2", "80", "12"],
        ["path", "AMX", "machine", "others %", "wall s", "min-max", "CPU s", "CPU/free", "wall/floor", "goal s",
         "turns, stop"],
        ["answer", "auto", "idle", "3", "1.50", "1.40-1.60", "2.50", "1.27", "1.18 MISSED", "1.5 ok", "2, answered"],
        ["fallback", "off", "busy", "3", "3.20", "3.10-3.30", "2.50", "1.27", "2.52", "3 MISSED", "2, answered"],
        ["answer", "auto", "idle", "3", "1.23", "1.13-1.33", "2.50", "1.27", "0.97 ok", "", "2, answered"]]
    said = " ".join(out.split())
    import re

    for title in ("(a) turn latency / pure decode of the same number of tokens (goal <= 1.2)",
                  "(b) prompt tokens evaluated per turn vs scratchpad length (flat = KV reuse)",
                  "(c) start -> end of the run, whole process, median of 5"):
        assert re.search(r"(?<!\S)" + re.escape(title) + r"(?!\S)", said), title
    assert said.endswith("busy: another program keeps one core busy; others %: CPU that other programs used meanwhile "
                         "(100 = one core; above 50 on an idle row, the machine was not idle) CPU/free: the least wall "
                         "time that CPU time could take on the 2 cores less what other programs used, in any order (a "
                         "goal under it needs less CPU) wall/floor: wall s over CPU/free, at most 1.15 when idle; goal "
                         "s with one core busy: 2 times the idle wall s")


def test_on_a_narrow_terminal_each_run_stays_on_one_line_and_the_notes_are_plain(monkeypatch, capsys):
    """A row cut short is still one row (a wrapped cell would split one run over several lines); the notes under
    the figures are not coloured like Python values."""
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    monkeypatch.setattr(bench.sys, "stdout", screen)
    monkeypatch.setenv("COLUMNS", "70")
    monkeypatch.setenv("TERM", "xterm-256color")
    bench.print_figures({"cores": 2, "c_time_to_end": [row(), row(path="fallback", load="one core busy")],
                         "f_server_startup": {"runs": 5, "ready_p50_s": 0.64, "first_answer_p50_s": 0.71}})
    out = screen.getvalue()
    rows = cells(out)
    assert len(rows) == 3 and [r[0][:3] for r in rows[1:]] == ["ans", "fal"], out
    assert "\x1b[" in out  # a terminal: the title and the headers are styled
    notes = [line for line in out.splitlines()
             if line.lstrip().startswith(("answer:", "fallback:", "busy:", "CPU/free:", "wall/floor:", "(f)"))]
    assert len(notes) == 6 and not any("\x1b" in line for line in notes), notes


def test_a_table_of_one_row_prints(capsys):
    bench.print_figures({"cores": 2, "c_time_to_end": [row(runs=3)]})
    assert "median of 3" in capsys.readouterr().out


@pytest.mark.parametrize("tty, width", [(True, None), (False, 120)])
def test_a_log_gets_tables_120_columns_wide_and_a_terminal_its_own_width(monkeypatch, tty, width):
    import rich.console

    made = []

    class Console:
        def __init__(self, **how):
            made.append(how)

        def print(self, *a, **k):
            pass

    monkeypatch.setattr(rich.console, "Console", Console)
    monkeypatch.setattr(bench.sys, "stdout", SimpleNamespace(isatty=lambda: tty))
    bench.print_figures({"cores": 2})
    assert made == [{"width": width} if width else {}]


def test_the_backend_is_closed_even_when_a_figure_fails(measured, monkeypatch):
    def broken(backend):
        raise RuntimeError("decode failed")

    monkeypatch.setattr(bench, "kv_reuse", broken)
    with pytest.raises(RuntimeError):
        bench.main(["--only", "b"])
    assert [a[0] for a in measured] == ["backend", "closed"]


@pytest.mark.parametrize("argv, figures", [
    (["--only", "a"], ["backend", "a", "closed"]),
    (["--only", "b"], ["backend", "b", "closed"]),
    (["--only", "c"], ["c"]),
    (["--only", "d", "--only", "f"], ["d", "f"]),
    (["--only", "e", "--kills", "3"], ["e"]),
    (["--only", "g"], ["g"]),
])
def test_only_asks_for_the_figures_named(measured, argv, figures, capsys):
    assert bench.main(argv) == 0
    assert [a[0] for a in measured] == figures
    if "--kills" in argv:
        assert measured[0] == ("e", 3)
    out = capsys.readouterr().out
    assert ("(c) start -> end" in out) == ("c" in figures)
    assert ("(a) turn latency" in out) == ("a" in figures) and ("(b) prompt" in out) == ("b" in figures)
    assert ("(g) a run's end past its wall clock" in out) == ("g" in figures)
    if "g" in figures:
        assert "│ scored │ 0.4          │ 12.5           │ 31.0           │ wall_clock   │" in out


def test_the_c_flags_reach_the_measurement(measured):
    bench.main(["--only", "c", "--amx", "on", "--amx", "off", "--load", "one core busy", "--runs", "3"])
    assert measured == [("c", ["on", "off"], ("one core busy",), 3)]


def test_json_prints_every_figure_asked_for_as_one_object(measured, capsys):
    bench.main(["--only", "c", "--only", "e", "--json"])
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {"cores", "cpu", "amx_cpu", "measured_at", "c_time_to_end", "e_killed_runs"}
    assert got["e_killed_runs"]["runs"] == 50 and got["c_time_to_end"][0]["wall_p50_s"] == 1.6
    assert isinstance(got["cores"], int) and isinstance(got["amx_cpu"], bool) and len(got["measured_at"]) == 16


def test_save_writes_the_docs_tables_and_says_where(measured, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    bench.main(["--only", "c", "--save", "mine"])
    out = capsys.readouterr().out
    for name in ("bench-mine.json", "bench-mine.md", "bench-mine.es.md"):
        assert f"saved: docs_results/{name}" in out and (tmp_path / "docs_results" / name).is_file()
    bench.main(["--only", "c", "--save", "again", "--json"])  # the JSON on stdout stays one object
    captured = capsys.readouterr()
    assert json.loads(captured.out)["c_time_to_end"] and "saved: docs_results/bench-again.md" in captured.err
    bench.main(["--only", "d", "--save", "none"])  # no (c): nothing to save
    assert not (tmp_path / "docs_results" / "bench-none.json").exists()


def test_a_crashed_agent_ends_the_command_with_its_report(monkeypatch, capsys):
    def crash(argv):
        raise bench.AgentCrashed("the agent died of SIGSEGV")

    monkeypatch.setattr(bench, "main", crash)
    assert bench.cli(["--only", "c"]) == 1
    assert capsys.readouterr().err == "miniagent bench: the agent died of SIGSEGV\n"
    given = []
    monkeypatch.setattr(bench, "main", lambda argv: given.append(argv) or 0)
    assert bench.cli(["--only", "f"]) == 0 and given == [["--only", "f"]]


@pytest.mark.parametrize("bad", [["--only", "h"], ["--amx", "maybe"], ["--load", "busy"], ["--runs", "x"]])
def test_a_bad_flag_is_refused_before_anything_runs(measured, bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(bad)
    assert exit_.value.code == 2 and measured == []
    assert "miniagent.lab.maintainers.bench: error: argument" in capsys.readouterr().err


def test_every_flag_is_explained(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("usage: miniagent.lab.maintainers.bench [-h] [--json]")
    for flag, help_ in [
        ("--runs RUNS", "(c): processes per figure (median)"),
        ("--amx {auto,on,off}", "(c): llama.cpp's AMX path for the runs (repeatable; default auto)"),
        ("--save NAME", "(c): also write docs_results/bench-NAME.json and its tables (.md, .es.md) for the docs"),
        ("--load {idle,one core busy}",
         "(c): idle, or with one core kept busy by another program (repeatable; default both)"),
        ("--only {a,b,c,d,e,f,g}", "only these figures (repeatable), e.g. --only b: KV reuse, a few seconds")]:
        assert f"{flag} {help_}" in said, flag


def test_each_amx_setting_is_a_choice(measured):
    bench.main(["--only", "c", "--amx", "auto", "--amx", "on", "--amx", "off"])
    assert measured == [("c", ["auto", "on", "off"], bench.LOADS, 5)]


def test_the_figures_say_which_cpu_measured_them(measured, monkeypatch, capsys):
    from miniagent.models import llama_params

    for reports, amx in ((["amx_tile"], True), ([], False)):
        monkeypatch.setattr(llama_params, "cpu_reports_amx", lambda reports=reports: reports)
        monkeypatch.setattr(llama_params, "cpu_model_name", lambda: "Stand-in CPU")
        bench.main(["--only", "f", "--json"])
        out = capsys.readouterr().out
        got = json.loads(out)
        assert (got["cpu"], got["amx_cpu"]) == ("Stand-in CPU", amx)
        assert out == json.dumps(got, indent=2) + "\n"  # one object, indented for a reader


def test_the_module_runs_as_a_command():
    proc = subprocess.run([sys.executable, "-m", "miniagent.lab.maintainers.bench", "--only", "h"],
                          capture_output=True, text=True, cwd=Path(ROOT), timeout=60)
    assert proc.returncode == 2 and "invalid choice: 'h'" in proc.stderr
