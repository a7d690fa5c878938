"""The experiment harness: real agent processes (scripted models, real MCP server), killed, measured, cleaned up.

Each run is a real ``python -m miniagent ask`` process tree, so these tests
take seconds, not milliseconds; the scripted models keep them exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest
from helpers import start_foreign_spinner

from miniagent.lab.harness.record import deadline_note, load_record, machine_note, RunRecord
from miniagent.lab.harness.follow import describe, Progress, TraceFollower
from miniagent.lab.harness.panel import render_panel, sparkline
from miniagent.lab.harness.run import run_experiment
from miniagent.lab.harness.charts import save_record, write_svg, write_svg_pair

ROOT = Path(__file__).resolve().parents[3]
ADVERSARIAL = "Please conjugate the verb eat lovingly in the dreaming tense"
NO_CAPS = ["--max-turns", "100000", "--max-tool-calls", "100000", "--wall-clock-s", "100000",
           "--max-run-tokens", "1000000000", "--decline-out-of-grammar", "false"]  # nor the no to the dreaming tense


def ask(question: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "miniagent", "ask", question, "--cache-dir", "", *flags]


def run(command: list[str], tmp_path: Path, timeout: float, name: str = "trace.jsonl", **kw) -> RunRecord:
    # No MINIAGENT_* variables from the developer's shell: the flags alone decide.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIAGENT_")}
    return run_experiment(command, timeout=timeout, trace_path=tmp_path / name, live=False, cwd=ROOT, env=env, **kw)


def still_alive(record: RunRecord) -> list[dict]:
    """Processes of the run's tree alive now (same pid *and* same start time: not a reused pid)."""
    alive = []
    for seen in record.pids_seen:
        try:
            proc = psutil.Process(seen["pid"])
            if abs(proc.create_time() - seen["create_time"]) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(seen)
        except psutil.Error:
            continue
    return alive


@pytest.mark.serial
def test_a_busy_loop_is_killed_at_the_timeout(tmp_path):
    # The timeout counts from the loop's start: on two busy cores the imports alone can take 3 s and more
    record = run(ask(ADVERSARIAL, "--llm", "scripted:wanderer", *NO_CAPS), tmp_path, timeout=2.0, clock="loop")
    assert record.outcome == "timeout" and record.stop_reason is None
    assert record.kill_latency_s is not None and 0 <= record.kill_latency_s < 0.5, record.kill_latency_s
    assert record.deadline_s == pytest.approx(record.loop_start_s + 2.0, abs=0.3)
    assert record.wall_s >= record.loop_start_s + 2.0 and not record.hard_capped
    assert record.cpu_loop_samples >= 3, (record.loop_start_s, record.samples)
    # Busy means most of a core; when other programs hold the machine (the record says so), most of what they left
    left = 100.0 * record.cpus - record.other_cpu_mean
    assert record.cpu_mean > (min(50.0, left / 2) if record.machine_busy else 50.0), record.samples
    assert record.tool_calls > 5 and record.turns > 5
    assert record.tool_calls_by_tool["conjugate"] > 5
    assert any("miniagent.tools.server" in p["cmdline"] for p in record.pids_seen), "the MCP server is part of the tree"
    assert max(s[3] for s in record.samples) >= 2
    assert record.processes_left == [] and record.cleanup_ok
    assert still_alive(record) == []
    assert record.scratchpad_tail and len(record.scratchpad_tail) <= 8
    print(f"\nbusy: cpu_mean {record.cpu_mean} % (whole run {record.cpu_mean_total} %), "
          f"kill latency {record.kill_latency_s} s, {record.tool_calls} tool calls")


@pytest.mark.serial
def test_an_idle_hang_is_killed_and_shows_low_cpu(tmp_path):
    # guess_call() reads the verb "eat" here (in ADVERSARIAL it reads "the": no hang, a busy loop of errors)
    question = "What is the past simple of eat for she?"
    flags = ["--llm", "scripted:stubborn", "--fault-hang-on", "eat", "--tool-timeout-s", "100000", *NO_CAPS]
    record = run(ask(question, *flags), tmp_path, timeout=2.5, clock="loop", needs={"tool_calls": 1})
    assert record.outcome == "timeout" and record.needs_met
    assert record.cpu_loop_samples >= 3, (record.loop_start_s, record.samples)  # the hang itself was measured
    assert record.kill_latency_s is not None and record.kill_latency_s < 0.5
    assert record.tool_calls == 1, record.scratchpad_tail  # one call into the wedged server, then nothing
    assert record.cpu_mean < 20, record.samples
    assert still_alive(record) == [] and record.cleanup_ok
    print(f"\nidle: cpu_mean {record.cpu_mean} % (whole run {record.cpu_mean_total} %), "
          f"kill latency {record.kill_latency_s} s, processes left {record.processes_left}")


@pytest.mark.serial
def test_a_launch_clock_counts_the_imports(tmp_path):
    record = run(ask(ADVERSARIAL, "--llm", "scripted:wanderer", *NO_CAPS), tmp_path, timeout=1.0)
    assert record.outcome == "timeout" and record.clock == "launch"
    assert record.deadline_s == pytest.approx(1.0, abs=0.01) and record.wall_s < 1.5
    assert record.needs_met is None and record.hard_cap_s is None


@pytest.mark.serial
def test_needs_keep_the_run_going_past_its_timeout(tmp_path):
    # Each call takes 0.3 s, so 0.1 s of loop would end it before the second; it needs 4 tool calls to count
    slow = ["--fault-delay-s", "0.3", "--tool-timeout-s", "100000"]
    record = run(ask(ADVERSARIAL, "--llm", "scripted:wanderer", *NO_CAPS, *slow), tmp_path, timeout=0.1,
                 clock="loop", needs={"tool_calls": 4})
    assert record.outcome == "timeout" and record.needs_met is True and not record.hard_capped
    assert record.tool_calls >= 4 and record.waited_for_needs_s > 0 and record.kill_latency_s < 0.5
    assert record.deadline_s == pytest.approx(record.loop_start_s + 0.1 + record.waited_for_needs_s, abs=0.01)


@pytest.mark.serial
def test_the_hard_cap_ends_a_run_that_never_shows_what_it_needs(tmp_path):
    question = "What is the past simple of eat for she?"
    flags = ["--llm", "scripted:stubborn", "--fault-hang-on", "eat", "--tool-timeout-s", "100000", *NO_CAPS]
    record = run(ask(question, *flags), tmp_path, timeout=0.5, clock="loop", needs={"tool_calls": 2}, hard_cap=6.0)
    assert record.outcome == "timeout" and record.hard_capped and record.needs_met is False
    assert record.tool_calls == 1 and record.deadline_s == pytest.approx(6.0, abs=0.01)
    assert record.kill_latency_s < 0.5 and still_alive(record) == []


def test_needs_name_known_counters_only(tmp_path):
    with pytest.raises(ValueError, match="unknown counter"):
        run(ask("x"), tmp_path, timeout=1.0, needs={"answers": 1})


@pytest.mark.serial
def test_other_programs_cpu_is_recorded_and_makes_a_busy_machine(tmp_path):
    """A busy loop outside the run's tree (its parent has exited) is the other work the record must show."""
    spinner = start_foreign_spinner()
    try:
        record = run([sys.executable, "-c", "import time; time.sleep(2)"], tmp_path, timeout=10.0)
    finally:
        spinner.kill()
        psutil.wait_procs([spinner], timeout=5)
    assert record.outcome == "crash" and record.cpu_mean < 20  # the sleeper itself is idle
    assert record.other_cpu_mean >= 60 and record.machine_busy, record.samples
    assert all(len(s) == 5 for s in record.samples)
    assert record.cpus >= 1 and record.load_avg_start is not None
    assert "machine was busy" in machine_note(record)


def test_a_quiet_machine_gets_no_note():
    assert machine_note(RunRecord(command=["x"], timeout=1.0, other_cpu_mean=10.0)) is None


def test_a_normal_run_answers(tmp_path):
    record = run(ask("What is the past simple of go for she?", "--llm", "scripted:oracle"), tmp_path, timeout=15)
    assert record.outcome == "answer" and record.stop_reason == "answered"
    assert record.answer == "she went"
    assert record.exit_code == 0 and record.kill_latency_s is None
    assert record.tool_calls == 1 and record.turns == 2
    assert record.processes_left == [] and still_alive(record) == []
    assert record.scratchpad_tail[-1].startswith("stop answered")


def test_a_capped_run_falls_back(tmp_path):
    question = "What is the past simple of go for she?"
    record = run(ask(question, "--llm", "scripted:stubborn", "--max-turns", "2"), tmp_path, timeout=15)
    assert record.outcome == "fallback" and record.stop_reason == "max_turns"
    assert record.exit_code == 1 and record.turns == 2
    assert record.identical_calls == 1  # stubborn repeats its call; dedup answers the second one
    assert record.processes_left == [] and still_alive(record) == []


# A stand-in for break 09: a parent that starts a server in its own process
# group and dies on SIGTERM without stopping it.  The server's stdin is a pipe
# whose write end the server itself holds, so it never sees EOF: like a
# wedged server, it outlives its parent.
ORPHAN_MAKER = textwrap.dedent("""
    import os, subprocess, sys, time
    r, w = os.pipe()
    subprocess.Popen([sys.executable, "-m", "miniagent.tools.server", "--hang-on", "eat"], stdin=r,
                     stdout=subprocess.DEVNULL, pass_fds=(w,), start_new_session=True)
    time.sleep(60)
""")


def test_an_orphaned_server_is_reported_then_killed(tmp_path):
    record = run([sys.executable, "-c", ORPHAN_MAKER], tmp_path, timeout=2.0)
    assert record.outcome == "timeout"
    assert [p["cmdline"] for p in record.processes_left] == [f"{sys.executable} -m miniagent.tools.server --hang-on eat"]
    assert record.cleanup_ok
    assert still_alive(record) == []


# A process that changes parent before the harness ever sees it: the agent's child starts it in a process
# group of its own (so the agent's group signal misses it) and exits at once, so it is re-parented before
# the first sample. It is nobody's descendant any more; only its session still ties it to the run. It says
# so on the pipe once it is running, and the harness must find it, report it left behind, and kill it.
REPARENTED = textwrap.dedent("""
    import os, subprocess, sys, time
    r, w = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys\\n"
        "subprocess.Popen([sys.executable, '-c', 'import os, time; os.write(%d, b\\"up\\"); time.sleep(60.123)'],"
        " pass_fds=(%d,), process_group=0)" % (w, w))], pass_fds=(w,))
    child.wait()  # the middle process is gone: the grandchild was re-parented
    os.close(w)
    assert os.read(r, 2) == b"up"
    print("reparented", flush=True)
    time.sleep(60)
""")


def test_a_process_that_changed_parent_before_it_was_seen_is_found_by_its_session(tmp_path):
    record = run([sys.executable, "-c", REPARENTED], tmp_path, timeout=2.0)
    assert record.outcome == "timeout"
    left = [p["cmdline"] for p in record.processes_left]
    assert len(left) == 1 and "60.123" in left[0], record.processes_left
    assert record.cleanup_ok and still_alive(record) == []


@pytest.mark.serial
@pytest.mark.slow  # ~25 s: 30 x (timeout + SIGTERM grace)
def test_thirty_killed_runs_leave_nothing_behind(tmp_path):
    command = ask(ADVERSARIAL, "--llm", "scripted:wanderer", *NO_CAPS)
    started, with_server, in_loop, outlived, left = time.monotonic(), 0, 0, 0, 0
    for i in range(30):
        # 0.15 .. 0.95 s, six times each: kills land in the start-up (the imports, the server's) and in the busy
        # loop, which starts at about 0.7 s on an idle machine
        record = run(command, tmp_path, timeout=0.15 + (i % 5) * 0.2, name=f"run-{i}.jsonl")
        assert record.outcome == "timeout" and record.kill_latency_s < 0.5
        assert still_alive(record) == [], f"run {i}: {still_alive(record)}"
        with_server += any("miniagent.tools.server" in p["cmdline"] for p in record.pids_seen)
        in_loop += record.loop_start_s is not None
        outlived += len(record.outlived_agent)
        left += len(record.processes_left)
    elapsed = time.monotonic() - started
    print(f"\n30 killed runs in {elapsed:.1f} s ({with_server} with a server up, {in_loop} killed in the loop): "
          f"{outlived} processes outlived the agent briefly, {left} reported left (then killed), "
          f"0 alive afterwards")


def test_the_trace_follower_tolerates_a_partial_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    follower = TraceFollower(path)
    assert follower.poll() == []  # no file yet
    line = json.dumps({"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}})
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "run_start"}) + "\n" + line[:20])
        fh.flush()
        assert [e["event"] for e in follower.poll()] == ["run_start"]
        assert follower.poll() == []
        fh.write(line[20:] + "\n" + '{"event": "stop", "stop_re')
        fh.flush()
        assert [e["event"] for e in follower.poll()] == ["tool_call"]
    assert follower.finish() == []  # a torn last line (the writer was killed) is dropped, and counted
    assert follower.bad_lines == 1


def fake_record(outcome: str, cpu: float) -> RunRecord:
    samples = [[round(0.2 * i, 1), cpu if i > 5 else 90.0, 60.0, 2] for i in range(1, 16)]
    return RunRecord(command=["x"], timeout=3.0, outcome=outcome, wall_s=3.2, loop_start_s=1.2, samples=samples,
                     cpu_mean=cpu, tool_calls=12, started_at="2025-01-01T10:00:00")


def _line_points(root, gid: str) -> int:
    """How many points the SVG line named ``gid`` joins (matplotlib draws a line as one path: M, then L per point)."""
    group = next(el for el in root.iter() if el.get("id") == gid)
    d = next(el for el in group.iter() if el.tag.endswith("path")).get("d")
    return d.count("M") + d.count("L")


def test_the_svg_is_well_formed_and_draws_every_sample(tmp_path):
    path = write_svg(fake_record("timeout", 98.0), tmp_path / "one.svg", title="busy <loop> & co at $5 and $6")
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    assert _line_points(root, "cpu") == 15 and _line_points(root, "kill") == 2
    texts = " ".join(el.text or "" for el in root.iter() if el.tag.endswith("text"))
    assert "one core" in texts and "timeout: killed" in texts and "busy <loop> & co at $5 and $6" in texts
    assert "loop starts" in texts and "other programs" not in texts  # no sample says what other programs used
    pair = write_svg_pair(fake_record("timeout", 98.0), fake_record("fallback", 2.0), tmp_path / "pair.svg")
    root = ET.parse(pair).getroot()
    assert _line_points(root, "broken-cpu") == _line_points(root, "fixed-cpu") == 15
    ids = {el.get("id") for el in root.iter()}
    assert "broken-kill" in ids and "fixed-kill" not in ids  # only the run the harness ended shows the kill
    assert path.read_bytes() == write_svg(fake_record("timeout", 98.0), tmp_path / "again.svg",
                                          title="busy <loop> & co at $5 and $6").read_bytes()


def test_save_record_round_trips(tmp_path):
    record = fake_record("fallback", 3.0)
    json_path, svg_path = save_record(record, tmp_path / "runs")
    again, _ = save_record(record, tmp_path / "runs")
    assert json_path != again, "a second save never overwrites the first"
    assert load_record(json_path) == record
    ET.parse(svg_path)


def test_the_panel_and_the_scratchpad_lines_render():
    from rich.console import Console

    progress = Progress()
    for event in [{"event": "run_start", "llm": "scripted:oracle"},
                  {"event": "model_action", "turn": 1, "text": '{"tool": "conjugate"}'},
                  {"event": "tool_call", "tool": "conjugate", "args": {"verb": "go"}},
                  {"event": "tool_result", "tool": "conjugate", "result": "she went"},
                  {"event": "guard", "name": "dedup"}]:
        progress.add(event, 0.1)
    assert list(progress.tail)[-2:] == ["tool conjugate -> she went", "guard dedup"]
    assert progress.turns == 1 and progress.identical_calls == 1
    console = Console(record=True, width=100, file=open(os.devnull, "w"))
    console.print(render_panel(elapsed=1.0, timeout=3.0, progress=progress, samples=[[0.2, 150.0, 60.0, 2]]))
    text = console.export_text()
    assert "turn 1" in text and "tool calls 1" in text and "processes 2" in text
    assert sparkline([0, 100, 200], top=200) == "▁▅█"
    assert describe({"event": "stop", "stop_reason": "answered", "answer": "she\nwent"}) == "stop answered: she went"


def test_a_forced_discovery_is_not_counted_among_the_models_tool_errors():
    """The loop counts the model's failed calls only (stats.tool_errors); the harness counts as the loop does."""
    progress = Progress()
    for event in [{"event": "tool_call", "tool": "conjugate", "args": {"verb": "would"}},
                  {"event": "tool_error", "tool": "conjugate", "error": "ToolError: not a verb"},
                  {"event": "tool_call", "tool": "list_tenses", "args": {}, "forced": True},
                  {"event": "tool_error", "tool": "list_tenses", "error": "ToolTimeout: late", "forced": True}]:
        progress.add(event, 0.1)
    assert progress.tool_errors == 1 and progress.tool_calls == {"conjugate": 1, "list_tenses": 1}
    assert list(progress.tail)[-1] == "tool list_tenses !! ToolTimeout: late"


def test_the_deadline_note_says_how_the_deadline_was_counted():
    record = RunRecord(command=["x"], timeout=6.0, clock="loop", loop_start_s=3.04, needs={"tool_calls": 1},
                       needs_met=True, waited_for_needs_s=2.5)
    assert deadline_note(record) == ("The 6 s timeout counted from the loop's start, 3.0 s after launch (imports and "
                                     "model load before it); the run went on 2.5 s past its timeout until it had "
                                     "shown 1 tool calls.")
    assert deadline_note(RunRecord(command=["x"], timeout=6.0)) is None  # plain: from launch, nothing waited for
    capped = RunRecord(command=["x"], timeout=6.0, clock="loop", hard_capped=True, hard_cap_s=60.0)
    assert deadline_note(capped) == ("The loop never started, so its timeout never began; it was ended by the hard "
                                     "cap of 60 s after launch.")


# --------------------------------------------------------------------------
# The docs' charts: drawn from the measured JSON, readable at the page's width, in the page's language
# --------------------------------------------------------------------------

DOCS_COLUMN_PX = 690  # the text column of a docs page on a desktop screen (mkdocs-material)
RESULTS = Path(__file__).resolve().parents[3] / "docs_results"
CHARTS = Path(__file__).resolve().parents[3] / "docs" / "assets" / "results"


def _measured() -> list[Path]:
    return sorted(p for p in RESULTS.glob("[0-9][0-9]-*.json") if "samples" in json.loads(p.read_text())["broken"])


def test_every_docs_chart_is_drawn_from_its_measured_json(tmp_path):
    from miniagent.lab.maintainers.checks import docs_charts

    written = docs_charts(RESULTS, tmp_path)
    assert len(written) == 2 * len(_measured()) >= 30
    for path in written:
        assert path.read_bytes() == (CHARTS / path.name).read_bytes(), \
            f"{path.name} is not what its JSON draws: run `invoke docs-charts`"


def test_every_measured_result_is_of_the_run_its_break_describes_today():
    """Break 07's run changed (grounding off, another question) and its page would have kept the old figures:
    a break's question, model, flags or timeout changed without `invoke docs-results --only ALIAS` fails here."""
    from miniagent.lab.catalogue import catalogue

    stale = []
    for brk in catalogue():
        data = json.loads((RESULTS / f"{brk.id}.json").read_text(encoding="utf-8"))
        measured = (data["input"], data["llm"], list(data["flags"]), data["timeout_s"])
        runs = (brk.input, brk.llm, list(brk.flags), brk.timeout_s)
        if measured != runs:
            stale.append(f"{brk.id}: measured {measured}, the break runs {runs}")
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("name", ["00-no-cap.svg", "00-no-cap.es.svg"])
def test_a_docs_chart_is_readable_at_the_page_width_and_speaks_the_page_language(name):
    import re

    svg = (CHARTS / name).read_text(encoding="utf-8")
    width, unit = re.search(r'<svg[^>]* width="([\d.]+)(pt|px)?"', svg).groups()
    css_px = float(width) * (4 / 3 if unit == "pt" else 1)  # the browser's 96 px per inch, 72 pt per inch
    per_unit = css_px / float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))  # text sizes are in user units
    sizes = [float(size) for size in re.findall(r"font-size: ([\d.]+)px", svg)]
    scale = per_unit * min(1.0, DOCS_COLUMN_PX / css_px)
    assert sizes and min(sizes) * scale >= 12, f"text renders at {min(sizes) * scale:.1f} px on the page"
    texts = " ".join(re.findall(r">([^<>]+)</text>", svg))
    assert f"<dc:language>{'es' if name.endswith('.es.svg') else 'en'}</dc:language>" in svg
    if name.endswith(".es.svg"):
        for english in ("seconds", "one core", "loop starts", "killed", "other programs", "broken", "fixed"):
            assert english not in texts, english
        assert "segundos desde el arranque" in texts and "un núcleo" in texts
    else:
        assert "seconds since launch" in texts and "one core" in texts


def test_a_reply_continued_without_end_keeps_the_followers_memory_bounded():
    """Break 07 continues one reply for ever: the follower keeps a bounded piece of it, not every piece joined."""
    from miniagent.lab.harness.follow import ACTION_TEXT_MAX

    progress = Progress()
    for i in range(5000):
        progress.add({"event": "model_action", "turn": 2, "final": False, "text": "x" * 100,
                      "finish_reason": "length"}, float(i))
    assert progress.turns == 2 and len(progress._turn_text) < ACTION_TEXT_MAX + 100
