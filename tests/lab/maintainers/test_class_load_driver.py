"""``invoke class-load``'s driver and learner (lab/maintainers/classload.py) without a model: stand-in learners (a
small program started where the driver starts each learner) and a stand-in tutor session show what the driver
hands each learner, how it starts them together, what it counts from their lines, and that it reaps them. The
real class, with a real server, runs in tests/lab/maintainers/test_classload.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import psutil
import pytest

from miniagent.agent.config import TutorConfig
from miniagent.lab.maintainers import classload
from miniagent.lab.evaluation import DEFAULT_SET, load_eval_set, percentile

REAL_POPEN = subprocess.Popen  # the learners fixture replaces subprocess.Popen itself

STAND_IN_LEARNER = textwrap.dedent('''
    import argparse, json, os, sys, time
    parser = argparse.ArgumentParser()
    for flag in ("--set", "--items", "--settings"):
        parser.add_argument(flag)
    args = parser.parse_args()
    mode = os.environ.get("STAND_IN_MODE", "")  # how this learner misbehaves, if it does
    if mode == "never ready":
        print("Traceback: no MCP server", flush=True)
        sys.exit(1)
    print(json.dumps({"ready": True}), flush=True)
    assert sys.stdin.readline() == "go\\n"
    if mode == "hangs":
        time.sleep(60)
    if mode == "says nothing":
        sys.exit(0)
    if mode == "no answers":  # every run stopped by a guard
        for i in map(int, args.items.split(",")):
            print(json.dumps({"item": i, "stop_reason": "turn_cap", "correct": False, "seconds": 1.0,
                              "turn_latencies": [0.5]}), flush=True)
        print(json.dumps({"done_at": float(os.environ["STAND_IN_DONE_AT"]), "requests": 1}), flush=True)
        sys.exit(0)
    print("a learner's own log line", file=sys.stderr, flush=True)
    for i in map(int, args.items.split(",")):
        print(json.dumps({"item": i, "stop_reason": "answered" if i % 3 else "turn_cap", "correct": i % 2 == 0,
                          "seconds": 0.5 + 1.0003 * i, "turn_latencies": [0.1237 * i, 0.2037]}), flush=True)
    # the driver's clock reads 1000.0 at the go (a stand-in): the class lasts 7.123 s
    print(json.dumps({"done_at": 1007.123 - 0.1 * (args.items == "0,1,2"), "requests": 3}), flush=True)
''')


@pytest.fixture
def learners(monkeypatch):
    """Each learner the driver starts is the stand-in, started with the driver's own arguments and options."""
    started = []
    real_popen = subprocess.Popen

    def popen(argv, **how):
        assert argv[:3] == [sys.executable, "-m", "miniagent.lab.maintainers.classload"]
        proc = real_popen([sys.executable, "-c", STAND_IN_LEARNER, *argv[3:]], **how)
        started.append((argv, how, proc))
        return proc

    monkeypatch.setattr(classload.subprocess, "Popen", popen)
    monkeypatch.setenv("MINIAGENT_LLM", "scripted")  # the teacher's shell: no learner inherits it
    return started


def test_a_level_starts_each_learner_with_its_share_and_counts_what_they_said(learners, tmp_path, monkeypatch):
    monkeypatch.setattr(classload, "time", SimpleNamespace(time=lambda: 1000.0))
    level = classload.run_level(2, "http://class:8000/v1", questions_each=3, settings={"decode": "greedy"},
                                log_dir=tmp_path)
    settings = {"llm": "openai", "openai_base_url": "http://class:8000/v1", "decode": "greedy"}
    assert [argv[3:] for argv, _, _ in learners] == [
        ["--set", str(DEFAULT_SET), "--items", "0,1,2", "--settings", json.dumps(settings)],
        ["--set", str(DEFAULT_SET), "--items", "3,4,5", "--settings", json.dumps(settings)]]
    for _, how, proc in learners:
        assert how["stdin"] == how["stdout"] == subprocess.PIPE and how["text"] and how["start_new_session"]
        assert not [k for k in how["env"] if k.startswith("MINIAGENT_")] and how["env"]["PATH"] == os.environ["PATH"]
        assert not psutil.pid_exists(proc.pid), "each learner's group is killed and waited for"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learner-2-0.log", "learner-2-1.log"]
    assert (tmp_path / "learner-2-1.log").read_text(encoding="utf-8") == "a learner's own log line\n"
    turns = [t for i in range(6) for t in (0.1237 * i, 0.2037)]
    seconds = [0.5 + 1.0003 * i for i in range(6)]
    assert level == {**level, "learners": 2, "questions": 6, "questions_each": [3, 3], "turns": 12,
                     "turn_p50_s": round(percentile(turns, 0.5), 2), "turn_p95_s": round(percentile(turns, 0.95), 2),
                     "run_p50_s": round(percentile(seconds, 0.5), 2), "run_p95_s": round(percentile(seconds, 0.95), 2),
                     "answered": 4, "guard_stops": 2, "stop_reasons": {"turn_cap": 2, "answered": 4}, "correct": 3,
                     "requests": 6, "settings": settings}
    # from the go to the last learner's end: 7.123 s; 6 questions, 4 answers
    assert (level["wall_s"], level["questions_per_min"], level["answers_per_min"]) == (7.1, 50.54, 33.69)
    assert (level["turn_p50_s"], level["run_p95_s"]) == (0.2, 5.5)  # rounded to hundredths


def test_without_a_server_every_learner_runs_the_local_model_and_the_set_is_split(learners, tmp_path, monkeypatch):
    monkeypatch.setattr(classload.tempfile, "tempdir", str(tmp_path))  # the logs' own folder, made by the level
    level = classload.run_level(3, None)
    [log_dir] = tmp_path.glob("miniagent-class-*")
    assert sorted(p.name for p in log_dir.iterdir()) == [f"learner-3-{i}.log" for i in range(3)]
    n = len(load_eval_set(DEFAULT_SET))
    shares = [argv[argv.index("--items") + 1] for argv, _, _ in learners]
    assert shares == [",".join(map(str, range(i, n, 3))) for i in range(3)]
    assert all(json.loads(argv[-1]) == {"llm": "llama"} for argv, _, _ in learners)
    assert level["questions"] == n and level["questions_each"] == [len(s.split(",")) for s in shares]


def test_the_95th_percentile_of_the_runs_is_not_their_slowest(learners, tmp_path, monkeypatch):
    monkeypatch.setattr(classload, "time", SimpleNamespace(time=lambda: 1000.0))
    level = classload.run_level(2, "http://class:8000/v1", questions_each=7, log_dir=tmp_path)
    seconds = sorted(0.5 + 1.0003 * i for i in range(14))
    assert level["questions"] == 14 and level["run_p95_s"] == round(seconds[12], 2) != round(seconds[13], 2)


def test_a_class_without_an_answer_counts_none_and_a_class_that_took_no_time_has_no_rate(learners, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setattr(classload, "time", SimpleNamespace(time=lambda: 1000.0))
    monkeypatch.setenv("STAND_IN_MODE", "no answers")
    monkeypatch.setenv("STAND_IN_DONE_AT", "1030.0")
    level = classload.run_level(2, "http://class:8000/v1", questions_each=2, log_dir=tmp_path)
    assert (level["answered"], level["guard_stops"], level["stop_reasons"]) == (0, 4, {"turn_cap": 4})
    assert (level["wall_s"], level["questions_per_min"], level["answers_per_min"]) == (30.0, 8.0, 0.0)
    monkeypatch.setenv("STAND_IN_DONE_AT", "1000.0")  # over the moment it started
    level = classload.run_level(2, "http://class:8000/v1", questions_each=2, log_dir=tmp_path)
    assert (level["wall_s"], level["questions_per_min"], level["answers_per_min"]) == (0.0, 0.0, 0.0)


def test_learners_that_never_say_they_are_done_leave_the_wall_time_unknown(learners, tmp_path, monkeypatch):
    """Unknown, and said so: null in the saved JSON (NaN is no JSON), "?" in the tables and the printed line."""
    monkeypatch.setenv("STAND_IN_MODE", "says nothing")
    level = classload.run_level(2, "http://class:8000/v1", log_dir=tmp_path)
    assert (level["wall_s"], level["questions_per_min"], level["answers_per_min"]) == (None, None, None)
    assert level["questions"] == 0 and level["requests"] == 0
    assert classload.level_line(level).startswith("  2 learners: 0 questions in ? s (?/min, ? answers/min), ")
    report = {"server": "miniagent", "cpus": 2, "eval_set": "e.jsonl", "questions_each": None, "settings": {},
              "levels": [level], "load_before": 0.1, "others_cpu_mean": 1.0, "measured_at": "2026-11-27 09:00"}
    for lang in ("en", "es"):
        row = classload.markdown(report, lang).splitlines()[-1]
        assert row.startswith("| 2 | 0 | ? | ? | — | ") and "nan" not in row.lower(), row
    saved = classload.save(report, tmp_path / "docs_results", "unknown")
    assert json.loads(saved[0].read_text(encoding="utf-8"), parse_constant=lambda c: pytest.fail(c))["levels"][0][
        "wall_s"] is None


def test_a_level_is_printed_with_every_figure_it_measured():
    level = {"learners": 4, "questions": 8, "wall_s": 30.04, "questions_per_min": 16.0, "answers_per_min": 14.0,
             "turn_p50_s": 1.26, "turn_p95_s": 2.5, "run_p50_s": 3.14, "run_p95_s": 6.0, "answered": 7,
             "guard_stops": 1, "stop_reasons": {"answered": 7, "turn_cap": 1}, "correct": 6, "requests": 21}
    assert classload.level_line(level) == (
        "  4 learners: 8 questions in 30 s (16.0/min, 14.0 answers/min), turn p50/p95 1.3/2.5 s, "
        "run p50/p95 3.1/6.0 s, answered 7, guard stops 1 {'answered': 7, 'turn_cap': 1}, correct 6/8, 21 requests")


def test_a_learner_that_does_not_start_stops_the_level_and_names_its_log(learners, tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_MODE", "never ready")
    with pytest.raises(classload.ClassFailed) as err:
        classload.run_level(2, "http://class:8000/v1", log_dir=tmp_path)
    assert str(err.value) == f"a learner did not start (see {tmp_path}): 'Traceback: no MCP server\\n'"
    assert len(learners) == 1 and not psutil.pid_exists(learners[0][2].pid)


def test_a_level_past_its_bound_is_stopped_and_every_learner_reaped(learners, tmp_path, monkeypatch):
    """Each learner gets what is left of the level's bound, and at least a second."""
    clock = iter([1000.0, 1000.0 + classload.LEVEL_TIMEOUT_S - 0.25, 1000.0 + classload.LEVEL_TIMEOUT_S + 9])
    monkeypatch.setattr(classload, "time", SimpleNamespace(time=lambda: next(clock)))
    monkeypatch.setenv("STAND_IN_MODE", "hangs")
    waited = []
    real_communicate = REAL_POPEN.communicate

    def communicate(proc, timeout=None):
        waited.append(timeout)
        return real_communicate(proc, timeout=min(timeout, 0.25))  # the bound as given, but short for the test

    monkeypatch.setattr(REAL_POPEN, "communicate", communicate)
    with pytest.raises(classload.ClassFailed) as err:
        classload.run_level(2, "http://class:8000/v1", log_dir=tmp_path)
    assert str(err.value) == ("the class of 2 learner(s) ran past its bound of 3600 s and was stopped, every learner "
                              f"with it (their logs: {tmp_path})")
    assert waited == [1.0]
    assert all(not psutil.pid_exists(proc.pid) for _, _, proc in learners)


def test_a_level_waits_for_each_learner_only_what_is_left_of_its_bound(learners, tmp_path, monkeypatch):
    times = iter([1000.0, 1010.0, 1000.0 + classload.LEVEL_TIMEOUT_S + 9])
    monkeypatch.setattr(classload, "time", SimpleNamespace(time=lambda: next(times, 1000.0)))
    waited = []
    real_communicate = REAL_POPEN.communicate

    def communicate(proc, timeout=None):
        waited.append(timeout)
        return real_communicate(proc, timeout=60)

    monkeypatch.setattr(REAL_POPEN, "communicate", communicate)
    classload.run_level(2, "http://class:8000/v1", questions_each=1, log_dir=tmp_path)
    assert waited == [classload.LEVEL_TIMEOUT_S - 10, 1.0]  # at least a second, even past the bound


# --- one learner, in this process -----------------------------------------------------------------------------
class StandInSession:
    made: list = []

    def __init__(self, config, trace):
        self.config, self.trace = config, trace
        self.model = SimpleNamespace(server=SimpleNamespace(requests=7))
        StandInSession.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True

    def ask(self, question):
        for turn, latency in ((1, 0.25), (1, 0.5), (2, 0.125)):  # a turn continued once, then a second one
            self.trace.emit("model_action", turn=turn, latency_s=latency)
        self.trace.emit("model_action", turn=None, final=True, latency_s=1.0)  # the final round: no turn number
        answer = "she went" if "go for she" in question else "no idea"
        return SimpleNamespace(stop_reason="answered", answer=answer, stats=SimpleNamespace(seconds=1.5))


def test_a_learner_says_it_is_ready_waits_for_the_class_and_reports_each_question(monkeypatch, capsys):
    from miniagent.lab import session

    StandInSession.made = []
    monkeypatch.setattr(session, "TutorSession", StandInSession)
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    monkeypatch.setenv("MINIAGENT_MAX_TURNS", "1")  # the learner's settings are the driver's, not its shell's
    assert classload.learner_main(["--items", "0,1", "--settings", '{"llm": "scripted:oracle"}']) == 0
    [made] = StandInSession.made
    assert made.config.model.llm == "scripted:oracle" and made.config.tutor.max_turns == TutorConfig().max_turns
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert said[0] == {"ready": True} and made.closed
    assert said[1:3] == [
        {"item": 0, "stop_reason": "answered", "correct": True, "seconds": 1.5, "turn_latencies": [0.75, 0.125, 1.0]},
        {"item": 1, "stop_reason": "answered", "correct": False, "seconds": 1.5, "turn_latencies": [0.75, 0.125, 1.0]}]
    assert said[3]["requests"] == 7 and set(said[3]) == {"done_at", "requests"} and len(said) == 4


def test_a_learner_on_a_backend_without_a_server_reports_no_requests(monkeypatch, capsys):
    from miniagent.lab import session

    monkeypatch.setattr(session, "TutorSession", StandInSession)
    monkeypatch.setattr(StandInSession, "__init__", lambda self, config, trace: setattr(self, "trace", trace)
                        or setattr(self, "model", object()))
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    assert classload.learner_main(["--items", "", "--settings", "{}"]) == 0
    said = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert said[0] == {"ready": True} and said[1]["requests"] == 0 and len(said) == 2


# --- the class: levels against one server -------------------------------------------------------------------
@pytest.mark.parametrize("server, base_url, kind, url", [
    ("miniagent", None, "miniagent", "http://started/v1"), ("llama-cpp-python", None, "llama-cpp-python",
                                                               "http://started/v1"),
    ("local", None, "local", None), ("miniagent", "http://class:9/v1", "http://class:9/v1", "http://class:9/v1")])
def test_each_level_runs_against_the_server_the_class_shares(monkeypatch, server, base_url, kind, url):
    import contextlib

    from miniagent.serving import start as model_server

    levels, started, seen = [], [], []

    @contextlib.contextmanager
    def stand_in_server(name, model_path, log):
        started.append((name, model_path, log.name))
        yield "http://started/v1"

    monkeypatch.setattr(model_server, "model_server", stand_in_server)
    monkeypatch.setattr(classload, "run_level", lambda n, u, **how: levels.append((n, u, how)) or {"learners": n})
    report = classload.class_load([1, 4], server=server, base_url=base_url, questions_each=2,
                                  settings={"decode": "greedy"}, model_path="/m.gguf", on_level=seen.append)
    assert started == ([(server, "/m.gguf", "server.log")] if url == "http://started/v1" else [])
    assert [(n, u) for n, u, _ in levels] == [(1, url), (4, url)]
    assert levels[0][2] == {"eval_set": DEFAULT_SET, "questions_each": 2, "settings": {"decode": "greedy"},
                            "log_dir": levels[1][2]["log_dir"], "shown": False}
    log_dir = levels[0][2]["log_dir"]
    assert log_dir.name.startswith("miniagent-class-") and str(log_dir) == report["logs"]
    assert seen == [{"learners": 1}, {"learners": 4}] == report["levels"]
    assert report == {**report, "server": kind, "cpus": classload.machine_cores(), "eval_set": str(DEFAULT_SET),
                      "questions_each": 2, "settings": {"decode": "greedy"}, "busy_others": classload.BUSY_OTHERS}


# --- one learner's command line ------------------------------------------------------------------------------------
def test_a_learner_started_without_its_share_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        classload.learner_main(["--settings", "{}"])
    assert exit_.value.code == 2
    assert "miniagent.lab.maintainers.classload: error: the following arguments are required: --items" in \
        capsys.readouterr().err


def test_a_learners_flags_are_explained(capsys):
    with pytest.raises(SystemExit):
        classload.learner_main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert said.startswith("usage: miniagent.lab.maintainers.classload [-h] [--set EVAL_SET] --items ITEMS")
    assert "--items ITEMS comma-separated question indices" in said
    assert ("--settings SETTINGS settings (of any wing: the loop, the model, the server faults) as a JSON object"
            in said)


def test_a_learner_reads_the_set_it_is_given_with_the_default_settings_and_keeps_its_log_quiet(monkeypatch, capsys,
                                                                                             tmp_path):
    import logging

    from miniagent.lab import session
    from miniagent.settings import load_config

    StandInSession.made = []
    monkeypatch.setattr(session, "TutorSession", StandInSession)
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    own = tmp_path / "mine.jsonl"
    own.write_text(json.dumps({"question": "What is the past simple of go for she?", "accept": ["she went"]}) + "\n")
    quiet = logging.getLogger("miniagent")
    monkeypatch.setattr(quiet, "level", logging.INFO)
    assert classload.learner_main(["--set", str(own), "--items", "0"]) == 0
    assert StandInSession.made[0].config == load_config(cli={}, env={})
    assert json.loads(capsys.readouterr().out.splitlines()[1])["correct"] is True  # the set's one question
    assert quiet.level == logging.WARNING  # a learner's log is its errors, not every turn


# --- the class's report --------------------------------------------------------------------------------------------
def test_the_report_says_when_and_on_how_busy_a_machine_the_class_ran(monkeypatch):
    import contextlib
    import re

    from miniagent.serving import start as model_server

    started = []

    @contextlib.contextmanager
    def stand_in_server(name, model_path, log):
        started.append(name)
        yield "http://started/v1"

    class Others:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def mean(self):
            return 37.5

    monkeypatch.setattr(model_server, "model_server", stand_in_server)
    monkeypatch.setattr(classload, "run_level", lambda n, u, **how: {"learners": n})
    monkeypatch.setattr(classload, "OthersSampler", Others)
    monkeypatch.setattr(classload, "load_average", lambda: 1.25)
    report = classload.class_load([1])
    assert started == ["miniagent"] and report["server"] == "miniagent"  # the lab's own server by default
    assert (report["load_before"], report["others_cpu_mean"], report["busy_others"]) == (1.25, 37.5, 50.0)
    assert re.fullmatch(r"20\d\d-[01]\d-[0-3]\d [0-2]\d:[0-5]\d", report["measured_at"]), report["measured_at"]
    assert set(report) == {"server", "cpus", "eval_set", "questions_each", "settings", "levels", "logs",
                           "load_before", "others_cpu_mean", "busy_others", "measured_at"}


class StandInTree:
    def __init__(self, pid):
        assert pid == os.getpid()  # the class's whole tree: this driver and what it started
        self.n = 0

    def sample(self):
        self.n += 1
        if self.n == 2:
            raise psutil.NoSuchProcess(123)  # a learner gone between two readings
        return 10.0 * self.n, 0.0, 1


class StandInMachine:
    seen: list = []
    enough = None  # a threading.Event: set at the third reading

    def sample(self, tree_cpu):
        StandInMachine.seen.append(tree_cpu)
        if len(StandInMachine.seen) == 3:
            StandInMachine.enough.set()
        return 100.0 - tree_cpu


def test_other_programs_cpu_is_sampled_until_the_class_ends_and_a_lost_sample_is_skipped(monkeypatch):
    import threading

    StandInMachine.seen, StandInMachine.enough = [], threading.Event()
    monkeypatch.setattr(classload, "TreeSampler", StandInTree)
    monkeypatch.setattr(classload, "MachineLoad", StandInMachine)
    sampler = classload.OthersSampler(interval_s=0.01)
    assert sampler._thread.name == "others-cpu" and sampler._thread.daemon  # never keeps a stopped class alive
    with sampler:
        assert StandInMachine.enough.wait(timeout=60), "three samples"
    assert not sampler._thread.is_alive()
    assert sampler.samples[:3] == [90.0, 70.0, 60.0]  # the tree's 10, 30 and 40 %: the second reading was lost
    assert classload.OthersSampler().interval_s == 1.0


@pytest.mark.parametrize("samples, mean", [([], None), ([10.0], 10.0), ([10.0, 20.0, 40.0], 23.3),
                                           ([1.04, 1.05], 1.0), ([0.26, 0.25], 0.3)])
def test_the_mean_of_the_samples_has_one_decimal(samples, mean):
    sampler = classload.OthersSampler()
    sampler.samples = samples
    assert sampler.mean() == mean


def test_the_progress_bar_counts_the_questions_each_learner_of_the_level_logged(tmp_path):
    for name, done in (("learner-2-0.log", 3), ("learner-2-1.log", 1), ("learner-4-0.log", 5)):
        (tmp_path / name).write_text(f"warming up\n{classload.QUESTION_DONE}\n" * done, encoding="utf-8")
    assert classload.questions_done(tmp_path, 2) == 4  # another level's log is not this level's
    told = []
    with classload._counting(tmp_path, 2, lambda done, now="": told.append(done), shown=True):
        deadline = time.monotonic() + 10  # the counter's first look comes half a second in
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
    assert told[0] == 4
    with classload._counting(tmp_path, 2, lambda done, now="": pytest.fail("no bar: nothing counted"), shown=False):
        pass

