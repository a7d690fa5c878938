"""invoke class-load: how a class is split, how the report reads in each language, and a real small class."""

from __future__ import annotations

import json

import psutil
import pytest

from miniagent.agent import errors
from miniagent.lab.maintainers import classload


def _subclasses(cls) -> set:
    return {cls} | {s for sub in cls.__subclasses__() for s in _subclasses(sub)}


def level(**over) -> dict:
    base = {"learners": 4, "questions": 30, "wall_s": 181.0, "questions_per_min": 9.9, "turn_p50_s": 3.2,
            "turn_p95_s": 9.8, "turns": 60, "run_p50_s": 12.0, "run_p95_s": 20.1, "answered": 27, "guard_stops": 3,
            "stop_reasons": {"answered": 27, "wall_clock": 3}, "correct": 24}
    return {**base, **over}


def report(**over) -> dict:
    base = {"server": "llama-cpp-python (defaults, started here)", "cpus": 2,
            "eval_set": "labs/01-tutor-end-to-end/eval.jsonl", "questions_each": None, "settings": {},
            "levels": [level()], "measured_at": "2026-11-24 02:00", "load_before": 0.1, "others_cpu_mean": 12.0,
            "busy_others": 50.0}
    return {**base, **over}


def test_the_set_is_split_so_each_question_is_asked_once():
    shares = classload.assign(30, 4)
    asked = sorted(i for share in shares for i in share)
    assert asked == list(range(30))
    assert [len(s) for s in shares] == [8, 8, 7, 7]


def test_questions_each_gives_every_learner_its_own_count():
    shares = classload.assign(30, 3, questions_each=2)
    assert shares == [[0, 1], [2, 3], [4, 5]]


@pytest.mark.parametrize("lang, words, foreign", [
    ("en", ["learners", "stopped by a guard", "strict accuracy", "12 % of one core", "the class's own"],
     ["alumnos", "·"]),
    ("es", ["alumnos", "paradas por una guarda", "acierto estricto", "12 % de un núcleo", "las de la clase"],
     ["learners", "·"]),
])
def test_the_table_speaks_one_language(lang, words, foreign):
    text = classload.markdown(report(), lang)
    for word in words:
        assert word in text
    for word in foreign:
        assert word not in text, f"{word!r} in the {lang} table"
    row = "| 4 | 30 | 181 | 9.0 | 3.2 / 9.8 | 12.0 / 20.1 | 27 | `wall_clock` 3 | 24/30 |"
    assert (row if lang == "en" else row.replace(".", ",")) in text  # a decimal comma in Spanish


@pytest.mark.parametrize("server, en, es", [
    ("miniagent", "the lab's class server", "el servidor de clase del laboratorio"),
    ("llama-cpp-python", "llama-cpp-python's server", "el servidor de llama-cpp-python"),
    ("llama-cpp-python (defaults, started here)", "llama-cpp-python's server", "el servidor de llama-cpp-python"),
    ("local", "no server: each learner runs the local backend", "sin servidor: cada alumno ejecuta el backend local"),
    ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"),
])
def test_the_table_names_the_server_in_each_language(server, en, es):
    assert f"2 cores, {en}" in classload.markdown(report(server=server), "en")
    assert f"2 núcleos, {es}" in classload.markdown(report(server=server), "es")


def test_an_unknown_server_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match="choose miniagent, llama-cpp-python, local"):
        classload.class_load([1], server="vllm")


def test_a_level_where_no_turn_finished_shows_no_latency_and_no_answers():
    r = report(levels=[level(turns=0, turn_p50_s=0.0, turn_p95_s=0.0, answered=0, guard_stops=30,
                             stop_reasons={"wall_clock": 30}, correct=0, wall_s=80.0)])
    assert "| 4 | 30 | 80 | 0.0 | — | 12.0 / 20.1 | 0 | `wall_clock` 30 | 0/30 |" in classload.markdown(r)


@pytest.mark.parametrize("before, others, busy", [(0.1, 12.0, False), (1.6, 12.0, False), (0.2, 75.0, True),
                                                   (1.6, None, True), (0.3, None, False), (None, None, False)])
def test_a_busy_machine_is_said_plainly(before, others, busy):
    """Other programs' CPU during the class decides; only a report without it falls back on the load before."""
    r = report(load_before=before, others_cpu_mean=others)
    assert classload.disturbed(r) is busy
    assert ("disturbed" in classload.markdown(r, "en")) is busy
    assert ("alteradas" in classload.markdown(r, "es")) is busy
    assert ("not sampled" in classload.markdown(r, "en")) is (others is None)


@pytest.mark.parametrize("others, busy_others, busy", [(50.0, 50.0, False), (50.1, 50.0, True), (20.0, 10.0, True),
                                                      (9.0, 10.0, False)])
def test_other_programs_disturb_a_class_only_above_the_reports_own_threshold(others, busy_others, busy):
    assert classload.disturbed(report(others_cpu_mean=others, busy_others=busy_others)) is busy


def test_a_report_without_a_threshold_uses_the_labs():
    r = report(others_cpu_mean=classload.BUSY_OTHERS + 1)
    del r["busy_others"]
    assert classload.disturbed(r) is True
    r["others_cpu_mean"] = classload.BUSY_OTHERS
    assert classload.disturbed(r) is False


@pytest.mark.parametrize("before, cpus, busy", [(1.0, 2, False), (1.01, 2, True), (3.0, 8, False), (4.5, 8, True),
                                                (0.75, None, True), (0.5, None, False), (0.8, 2, False)])
def test_an_unsampled_report_is_disturbed_when_the_load_before_passed_half_its_cores(before, cpus, busy):
    assert classload.disturbed(report(others_cpu_mean=None, load_before=before, cpus=cpus)) is busy


@pytest.mark.parametrize("lang, others, before, line", [
    ("en", 12.0, 0.1, "Other programs used 12 % of one core on average during the class (1-minute load average "
                      "before it: 0.1): these figures are the class's own."),
    ("en", 75.5, 1.6, "**The machine was busy**: other programs used 75.5 % of one core on average during the class "
                      "(1-minute load average before it: 1.6, on 4 cores). They took CPU from the class (its "
                      "learners, and its server if it had one), so these figures are disturbed."),
    ("en", None, 0.3, "Other programs' CPU was not sampled during this class; the 1-minute load average before it "
                      "was 0.3 on 4 cores."),
    ("en", None, 2.5, "Other programs' CPU was not sampled during this class; the 1-minute load average before it "
                      "was 2.5 on 4 cores, so these figures may be disturbed."),
    ("es", None, 2.5, "No se midió la CPU de otros programas durante esta clase; la carga media de 1 minuto antes de "
                      "empezar era 2,5 con 4 núcleos, así que estas cifras pueden estar alteradas."),
])
def test_the_machine_line_says_what_was_measured_and_what_it_means(lang, others, before, line):
    assert classload.markdown(report(others_cpu_mean=others, load_before=before, cpus=4), lang).splitlines()[1] == line


def test_the_settings_the_share_and_the_guards_are_listed_in_full():
    r = report(settings={"decode": "greedy", "max_turns": 4}, questions_each=3,
               levels=[level(stop_reasons={"answered": 27, "wall_clock": 2, "turn_cap": 1})])
    intro, _, _, _, _, row = classload.markdown(r).splitlines()
    assert "`decode=greedy`, `max_turns=4`" in intro and intro.endswith(", 3 questions per learner; `decode=greedy`, `max_turns=4`."), intro
    assert row == "| 4 | 30 | 181 | 9.0 | 3.2 / 9.8 | 12.0 / 20.1 | 27 | `turn_cap` 1, `wall_clock` 2 | 24/30 |"


def test_a_report_from_before_turns_were_counted_still_shows_its_latencies():
    old = level()
    del old["turns"]
    assert "| 3.2 / 9.8 |" in classload.markdown(report(levels=[old]))


def test_a_level_that_took_no_time_has_no_rate():
    """A level every learner of which failed at once (its wall time rounds to 0 s): no answers per minute."""
    assert "| 4 | 30 | 0 | 0.0 | 3.2 / 9.8 |" in classload.markdown(report(levels=[level(wall_s=0.0)]))


def test_a_class_saved_again_is_byte_for_byte_what_the_docs_hold(tmp_path):
    """One source of truth: saving a report again must not touch the docs (the JSON as it was written, and both tables
    as markdown draws them today)."""
    from miniagent.lab.catalogue import ROOT

    saved = sorted((ROOT / "docs_results").glob("class-load-*.json"))
    assert len(saved) >= 5
    for path in saved:
        name = path.stem.removeprefix("class-load-")
        again = classload.save(json.loads(path.read_text(encoding="utf-8")), tmp_path / "new" / "folder", name)
        for old, new in zip((path, path.with_suffix(".md"), path.with_suffix(".es.md")), again, strict=True):
            assert new.read_bytes() == old.read_bytes(), old.name


def test_a_path_outside_the_project_is_shown_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sets").mkdir()
    assert classload._shown(tmp_path / "sets" / "mine.jsonl") == "sets/mine.jsonl"
    assert classload._shown("/somewhere/else.jsonl") == "/somewhere/else.jsonl"


def test_a_learner_line_is_flushed_at_once(monkeypatch):
    """The driver waits for each line on a pipe: a line left in the learner's buffer would never arrive."""
    import io

    class Pipe(io.StringIO):
        flushed = 0

        def flush(self):
            self.flushed += 1

    pipe = Pipe()
    monkeypatch.setattr("sys.stdout", pipe)
    classload._say({"ready": True})
    assert pipe.getvalue() == '{"ready": true}\n' and pipe.flushed == 1


def test_save_writes_the_report_and_a_table_per_language(tmp_path):
    paths = classload.save(report(), tmp_path, "demo")
    assert [p.name for p in paths] == ["class-load-demo.json", "class-load-demo.md", "class-load-demo.es.md"]
    assert json.loads(paths[0].read_text())["levels"][0]["correct"] == 24
    assert "learners" in paths[1].read_text() and "alumnos" in paths[2].read_text()


@pytest.mark.real_model
@pytest.mark.parametrize("server", ["miniagent", "llama-cpp-python", "local"])
def test_a_small_class_reaps_every_learner(server):
    pytest.importorskip("uvicorn", reason="pip install 'llama-cpp-python[server]'")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = classload.class_load([2], server=server, questions_each=1, settings={"model_wall_clock_s": 300.0})
    (only,) = result["levels"]
    assert only["learners"] == 2 and only["questions"] == 2
    assert result["server"] == server
    assert only["settings"]["llm"] == ("llama" if server == "local" else "openai")
    typed = {"answered"} | {cls.stop_reason for cls in _subclasses(errors.Terminal)}
    assert set(only["stop_reasons"]) <= typed, "every run ends with a typed stop reason"
    assert only["turns"] >= 2
    if server == "local":
        assert only["requests"] == 0 and "openai_base_url" not in only["settings"]
    else:
        assert only["requests"] >= 2, "each learner asked the server at least once"
    assert result["others_cpu_mean"] is not None and result["others_cpu_mean"] >= 0
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"left behind: {[p.cmdline() for p in left]}"


@pytest.mark.parametrize("script, bound, says", [
    ("import time; time.sleep(3600)", 0.5, "was not ready within 0.5 s (see {dir}): ''"),
    # a learner that speaks or exits is judged by what it did, however long its start took on a busy machine
    ("print('Traceback: the MCP server did not start', flush=True)", 60,
     "did not start (see {dir}): 'Traceback: the MCP server did not start\\n'"),
    ("pass", 60, "did not start (see {dir}): ''"),
])
def test_a_learner_that_does_not_get_ready_is_named_within_its_bound(tmp_path, script, bound, says):
    """A learner that says nothing is given up on at the bound, not waited for until it speaks or exits."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        waiting = pool.submit(classload._wait_until_ready, proc, tmp_path, timeout_s=bound)
        with pytest.raises(classload.ClassFailed) as err:
            waiting.result(timeout=120)  # far past the bound: only a wait that ignores it gets here
        assert str(err.value) == "a learner " + says.format(dir=tmp_path)
    finally:
        proc.kill()  # also ends a wait that ignored its bound
        proc.wait()
        pool.shutdown()


def test_a_learner_that_says_it_is_ready_is_waited_for_no_longer(tmp_path):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import json; print(json.dumps({'ready': True}), flush=True)"],
                            stdout=subprocess.PIPE, text=True)
    classload._wait_until_ready(proc, tmp_path, timeout_s=60)
    assert proc.wait(timeout=60) == 0
