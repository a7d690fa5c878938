"""The predictions notebook: append-only, tolerant when reading, strict about bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from miniagent.lab.learner.notebook import PredictionError, add_prediction, append_observation, how_to_predict, read_prediction
from miniagent.lab.learner.paths import notebook_path
from miniagent.lab.learner.scoring import compare, render_comparison

ROOT = Path(__file__).resolve().parents[3]

OBSERVED = {
    "outcome": "timeout",
    "stop_reason": "killed by harness after 30 s",
    "wall_s": 30.4,
    "cpu_mean": 97.2,
    "cpu_max": 104.0,
    "tool_calls": 180,
    "identical_calls": 179,
    "tool_errors": 0,
    "turns": 181,
    "processes_left": [],
}


def fill(path: Path, **values: str) -> None:
    """Edit the block the way a learner would: replace 'key: ?' by 'key: value'."""
    text = path.read_text(encoding="utf-8")
    for key, value in values.items():
        assert f"{key}: ?" in text
        text = text.replace(f"{key}: ?", f"{key}: {value}", 1)
    path.write_text(text, encoding="utf-8")


def test_add_then_read_empty_prediction_is_none(tmp_path):
    path, created = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    assert created and path == notebook_path(tmp_path, "bea") and path.exists()
    text = path.read_text(encoding="utf-8")
    assert "## 00-no-cap — no caps" in text
    assert "```prediction\noutcome: ?          # answer | declined | fallback | timeout | crash\n" in text
    assert "### Why I think so" in text
    assert read_prediction(tmp_path, "bea", "00-no-cap") is None
    assert read_prediction(tmp_path, "bea", "03-no-dedup") is None  # no section
    assert read_prediction(tmp_path, "nobody", "00-no-cap") is None  # no notebook


def test_filled_values_are_read_back(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    fill(path, outcome="Timeout", wall_s="30", cpu_percent="100", tool_calls="200")
    pred = read_prediction(tmp_path, "bea", "00-no-cap")
    assert pred == {"outcome": "timeout", "wall_s": 30.0, "cpu_percent": 100.0,
                    "tool_calls": 200.0, "processes_left": None}
    # The alias finds the same section.
    assert read_prediction(tmp_path, "bea", "no-cap") == pred


def test_second_add_changes_nothing(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    before = path.read_bytes()
    again, created = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    assert (again, created) == (path, False)
    assert path.read_bytes() == before
    assert before.count(b"## 00-no-cap") == 1


def test_learner_text_survives_byte_for_byte(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    fill(path, outcome="timeout", wall_s="30")
    # Free text with odd spacing, a trailing line without newline, and non-ASCII.
    with path.open("a", encoding="utf-8", newline="") as f:
        f.write("I think it loops — forever?   \n\n  * my own list\n\t<tab> no newline at end")
    old = path.read_bytes()

    add_prediction(tmp_path, "bea", "03-no-dedup", "no dedup")
    mid = path.read_bytes()
    assert mid.startswith(old) and len(mid) > len(old)
    assert mid[len(old):].startswith(b"\n\n## 03-no-dedup")  # the last line was ended first

    rows = compare(read_prediction(tmp_path, "bea", "00-no-cap"), OBSERVED)
    append_observation(tmp_path, "bea", "00-no-cap", OBSERVED, rows,
                       tmp_path / "runs" / "a.json", tmp_path / "runs" / "a.svg", "2025-01-01 10:00")
    new = path.read_bytes()
    assert new.startswith(mid)
    # 00-no-cap is not the last section any more, so the block names it.
    assert "### Observed — 00-no-cap (2025-01-01 10:00)" in new[len(mid):].decode()
    # The learner's prediction still reads the same.
    assert read_prediction(tmp_path, "bea", "00-no-cap")["wall_s"] == 30.0


def test_new_notebook_starts_from_template(tmp_path):
    template = tmp_path / "learners" / "_template" / "notebook.md"
    template.parent.mkdir(parents=True)
    template.write_text("# Template heading\n\nHow to use it.\n", encoding="utf-8")
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    assert path.read_text(encoding="utf-8").startswith("# Template heading\n\nHow to use it.\n\n## 00-no-cap")
    assert template.read_text(encoding="utf-8") == "# Template heading\n\nHow to use it.\n"


def test_bad_learner_names_are_refused(tmp_path):
    for bad in ("../x", "a/b", "_template", "", ".hidden"):
        with pytest.raises(ValueError):
            notebook_path(tmp_path, bad)


@pytest.mark.parametrize("field,predicted,observed,hit", [
    # wall_s: ±50 % or ±3 s, whichever is larger
    ("wall_s", 30, 45.0, True), ("wall_s", 30, 45.1, False), ("wall_s", 30, 15.0, True),
    ("wall_s", 30, 14.9, False), ("wall_s", 2, 5.0, True), ("wall_s", 2, 5.1, False),
    # cpu_percent: ±25 points
    ("cpu_percent", 100, 75.0, True), ("cpu_percent", 100, 74.9, False), ("cpu_percent", 0, 25.0, True),
    # tool_calls: a factor of 2 or ±2, whichever is larger
    ("tool_calls", 200, 400, True), ("tool_calls", 200, 401, False), ("tool_calls", 200, 100, True),
    ("tool_calls", 200, 99, False), ("tool_calls", 1, 3, True), ("tool_calls", 1, 4, False),
    ("tool_calls", 0, 2, True), ("tool_calls", 0, 3, False),
    # processes_left and outcome: exact
    ("processes_left", 0, 0, True), ("processes_left", 0, 1, False),
    ("outcome", "timeout", "timeout", True), ("outcome", "answer", "fallback", False),
])
def test_compare_tolerance_edges(field, predicted, observed, hit):
    record = {"outcome": "answer", "wall_s": 1.0, "cpu_mean": 1.0, "tool_calls": 1, "processes_left": []}
    key = {"cpu_percent": "cpu_mean"}.get(field, field)
    record[key] = ["pid"] * observed if field == "processes_left" else observed
    rows = {r.field: r for r in compare({field: predicted}, record)}
    assert rows[field].hit is hit
    others = [r for f, r in rows.items() if f != field]
    assert all(r.hit is None and r.predicted is None for r in others)  # not predicted


def test_compare_maps_harness_keys():
    rows = {r.field: r for r in compare({"cpu_percent": 100, "processes_left": 1},
                                        {**OBSERVED, "processes_left": [{"pid": 7}]})}
    assert rows["cpu_percent"].observed == 97.2 and rows["cpu_percent"].hit is True
    assert rows["processes_left"].observed == 1 and rows["processes_left"].hit is True


@pytest.mark.parametrize("line,needle", [
    ("wall_s: thirty", "wall_s must be a number"),
    ("wall_s: 1,5", "use a dot"),
    ("outcome: hangs", "outcome must be one of"),
    ("tool_calls: -3", "tool_calls must be a number"),
    ("wal_s: 30", "unknown key"),
    ("just some words", "expected 'key: value'"),
])
def test_malformed_value_names_the_line(tmp_path, line, needle):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    # Replace the whole line of that key (or of cpu_percent) by the bad line.
    key = line.split(":")[0] if line.split(":")[0] in ("wall_s", "outcome", "tool_calls") else "cpu_percent"
    lines = path.read_text(encoding="utf-8").split("\n")
    lineno = next(i for i, l in enumerate(lines) if l.startswith(f"{key}: ?")) + 1
    lines[lineno - 1] = line
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(PredictionError) as err:
        read_prediction(tmp_path, "bea", "00-no-cap")
    message = str(err.value)
    assert needle in message and f"notebook.md:{lineno}:" in message and line.strip() in message


def test_unclosed_block_is_an_error(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.rindex("```")], encoding="utf-8")
    with pytest.raises(PredictionError, match="never closed"):
        read_prediction(tmp_path, "bea", "00-no-cap")


def test_tolerant_reading_and_crlf(tmp_path):
    path = notebook_path(tmp_path, "bea")
    path.parent.mkdir(parents=True)
    text = (
        "# notes\r\n\r\n## 00-no-cap — edited by hand\r\n\r\n"
        "```prediction\r\n"
        "  OUTCOME :   CRASH     # I changed my mind twice\r\n"
        "# a comment line\r\n"
        "wall_s:~12s\r\n"
        "cpu_percent: 80%\r\n"
        "tool_calls:\r\n"          # empty = not predicted; processes_left missing entirely
        "```\r\n\r\n### Why I think so\r\n\r\nbecause\r\n"
    )
    path.write_bytes(text.encode("utf-8"))
    assert read_prediction(tmp_path, "bea", "00-no-cap") == {
        "outcome": "crash", "wall_s": 12.0, "cpu_percent": 80.0, "tool_calls": None, "processes_left": None}

    old = path.read_bytes()
    add_prediction(tmp_path, "bea", "03-no-dedup", "no dedup")
    new = path.read_bytes()
    assert new.startswith(old)
    added = new[len(old):]
    assert b"\r\n" in added and b"\n" not in added.replace(b"\r\n", b"")  # same line endings
    assert read_prediction(tmp_path, "bea", "03-no-dedup") is None


def test_observations_append_in_order(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    fill(path, outcome="timeout", wall_s="30", cpu_percent="100", tool_calls="200", processes_left="0")
    pred = read_prediction(tmp_path, "bea", "00-no-cap")
    snapshots = [path.read_bytes()]
    for n, when in enumerate(["2025-01-01 10:00", "2025-01-01 10:05", "2025-01-01 10:09"]):
        observed = {**OBSERVED, "tool_calls": 100 + n}
        out = append_observation(tmp_path, "bea", "00-no-cap", observed, compare(pred, observed),
                                 tmp_path / "runs" / f"{n}.json", Path("runs") / f"{n}.svg", when)
        assert out == path
        snapshots.append(path.read_bytes())
        assert snapshots[-1].startswith(snapshots[-2])

    text = path.read_text(encoding="utf-8")
    heads = [line for line in text.split("\n") if line.startswith("### Observed")]
    assert heads == ["### Observed — 00-no-cap (2025-01-01 10:00)", "### Observed — 00-no-cap (2025-01-01 10:05)",
                     "### Observed — 00-no-cap (2025-01-01 10:09)"], "every observed block names its break"
    first = text[text.index(heads[0]):text.index(heads[1])]
    assert "```observed\noutcome: timeout\nstop_reason: killed by harness after 30 s\n" in first
    assert "cpu_percent: 97.2\ntool_calls: 100\nprocesses_left: 0\n```" in first
    assert "| tool_calls | 200 | 100 | hit |" in first
    assert "| wall_s | 30 | 30.4 | hit |" in first
    # Links are relative to the notebook: learners/bea -> ROOT/runs
    assert "[0.json](../../runs/0.json)" in first and "[0.svg](../../runs/0.svg)" in first
    # The prediction is untouched by all of this.
    assert read_prediction(tmp_path, "bea", "00-no-cap") == pred


def test_observation_without_prediction(tmp_path):
    path = append_observation(tmp_path, "bea", "00-no-cap", OBSERVED, [], None, None, "now")
    text = path.read_text(encoding="utf-8")
    assert "### Observed — 00-no-cap (now)" in text and "No prediction was written" in text


def test_render_and_how_to():
    rows = compare({"outcome": "timeout", "wall_s": 5}, OBSERVED)
    console = Console(record=True, width=120, color_system="truecolor")
    console.print(render_comparison(rows))
    plain = console.export_text()
    assert "hit" in plain and "miss" in plain and "not predicted" in plain
    message = how_to_predict("00-no-cap", "bea")
    assert "invoke predict no-cap --learner bea" in message
    assert "learners/bea/notebook.md" in message
    assert "invoke exp no-cap --learner bea" in message


def test_worked_example_reads():
    """learners/ada is what a filled prediction looks like; it must stay readable."""
    assert read_prediction(ROOT, "ada", "00-no-cap") == {
        "outcome": "timeout", "wall_s": 30.0, "cpu_percent": 100.0, "tool_calls": 200.0, "processes_left": 0.0}


def test_a_run_that_never_exercised_the_break_scores_nothing(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "09-orphan-server", "orphan")
    fill(path, outcome="timeout", tool_calls="1", processes_left="1")
    pred = read_prediction(tmp_path, "bea", "09-orphan-server")
    observed = {**OBSERVED, "tool_calls": 0, "processes_left": [], "needs": {"tool_calls": 1}, "needs_met": False,
                "machine_busy": True, "other_cpu_mean": 101.3}
    rows = compare(pred, observed)
    assert [r.note for r in rows if r.predicted is not None] == ["not exercised"] * 3
    assert all(r.hit is None for r in rows)  # no miss, no hit
    append_observation(tmp_path, "bea", "09-orphan-server", observed, rows, None, None, "now")
    text = path.read_text(encoding="utf-8")
    assert "| processes_left | 1 | 0 | not exercised |" in text and "| miss |" not in text
    assert "machine: busy (other programs 101.3 % CPU)\nexercised: no\n```" in text
    assert "never exercised the break (it needs 1 tool calls" in text
    assert "invoke exp orphan-server --learner bea" in text
    console = Console(record=True, width=120)
    console.print(render_comparison(rows))
    assert "not exercised" in console.export_text() and "miss" not in console.export_text()


def test_an_exercised_run_is_scored_even_on_a_busy_machine(tmp_path):
    observed = {**OBSERVED, "needs": {"tool_calls": 5}, "needs_met": True, "machine_busy": True,
                "other_cpu_mean": 99.0}
    rows = compare({"outcome": "fallback"}, observed)
    assert rows[0].hit is False and rows[0].note is None
    path = append_observation(tmp_path, "bea", "00-no-cap", observed, rows, None, None, "now")
    text = path.read_text(encoding="utf-8")
    assert "| outcome | fallback | timeout | miss |" in text
    assert "The machine was busy during this run" in text and "exercised: no" not in text


def test_on_a_busy_machine_the_figures_it_disturbed_are_shown_not_scored(tmp_path):
    """Other programs took the CPU: the run's wall time, CPU and call count are theirs as much as the break's."""
    observed = {**OBSERVED, "needs": {"tool_calls": 5}, "needs_met": True, "machine_busy": True,
                "other_cpu_mean": 150.0}
    prediction = {"outcome": "timeout", "wall_s": 1.0, "cpu_percent": 5.0, "tool_calls": 1.0, "processes_left": 0.0}
    rows = {r.field: r for r in compare(prediction, observed)}
    assert {f for f, r in rows.items() if r.note == "disturbed"} == {"wall_s", "cpu_percent", "tool_calls"}
    assert all(rows[f].hit is None and rows[f].observed is not None for f in ("wall_s", "cpu_percent", "tool_calls"))
    assert rows["outcome"].hit is True and rows["processes_left"].hit is True  # the run's own: scored
    quiet = {r.field: r for r in compare(prediction, {**observed, "machine_busy": False})}
    assert quiet["cpu_percent"].hit is False and quiet["cpu_percent"].note is None
    console = Console(record=True, width=160)
    console.print(render_comparison(list(rows.values()), "es"))
    assert console.export_text().count("alterada: sin puntuar") == 3


@pytest.mark.parametrize("outcome", ["fallback", "answer", "declined", "crash"])
def test_on_a_busy_machine_a_run_that_ended_by_itself_has_its_call_count_scored(outcome):
    """Issue 65: the tool calls of a run that was not cut short are the run's own, whatever the machine did;
    only its times are disturbed."""
    observed = {**OBSERVED, "outcome": outcome, "tool_calls": 2, "needs_met": True, "machine_busy": True}
    rows = {r.field: r for r in compare({"tool_calls": 2.0, "wall_s": 30.0, "processes_left": 0.0}, observed)}
    assert (rows["tool_calls"].hit, rows["tool_calls"].note) == (True, None)
    assert rows["wall_s"].note == "disturbed" and rows["processes_left"].hit is True


# --------------------------------------------------------------------------
# The layout, and moving notebooks kept at the first one
# --------------------------------------------------------------------------

def test_a_notebook_at_the_first_layout_moves_byte_for_byte(tmp_path):
    from miniagent.lab.learner.paths import MigrationError, OLD_RELPATH, migrate

    folder = tmp_path / "learners" / "bea"
    old = folder / OLD_RELPATH
    old.parent.mkdir(parents=True)
    # a byte-order mark, CRLF, trailing spaces, non-ASCII, a tab, no final newline, and a stray byte
    original = ("\ufeff# mis notas\r\n\r\n## 00-no-cap — x\r\n\r\n```prediction\r\noutcome: timeout  \r\n```\r\n"
                "\tñandú — «sí»").encode("utf-8") + b"\xff"
    old.write_bytes(original)
    (old.parent.parent / "my-sketch.txt").write_text("kept where it is")
    assert migrate(tmp_path, "bea") == old
    new = notebook_path(tmp_path, "bea")
    assert new == folder / "notebook.md" and new.read_bytes() == original
    assert not old.exists() and not old.parent.exists(), "the emptied notes/ folder is removed"
    assert (folder / "phase-32" / "my-sketch.txt").read_text() == "kept where it is", "other files stay"
    assert migrate(tmp_path, "bea") is None  # nothing left to move
    # both present: nothing moves, nothing is overwritten
    old.parent.mkdir(parents=True)
    old.write_bytes(b"older notes")
    with pytest.raises(MigrationError, match="both exist"):
        migrate(tmp_path, "bea")
    assert new.read_bytes() == original and old.read_bytes() == b"older notes"


def test_the_lab_reads_a_notebook_from_the_first_layout(tmp_path):
    """Any command moves it first, so a learner's old predictions are found where they were."""
    from miniagent.lab.learner.paths import OLD_RELPATH

    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    fill(path, outcome="timeout")
    old = tmp_path / "learners" / "bea" / OLD_RELPATH
    old.parent.mkdir(parents=True)
    path.rename(old)
    before = old.read_bytes()
    assert read_prediction(tmp_path, "bea", "00-no-cap")["outcome"] == "timeout"
    assert notebook_path(tmp_path, "bea").read_bytes() == before and not old.exists()


def test_ada_moved_without_losing_a_byte():
    """learners/ada's notebook is at the new place, and (where git history is at hand) byte for byte
    the file it was at the first layout."""
    import subprocess

    new = ROOT / "learners" / "ada" / "notebook.md"
    assert new.is_file() and not (ROOT / "learners" / "ada" / "phase-32").exists()
    old_path = "learners/ada/phase-32/notes/breaks.md"
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("no whole git history here (not a git checkout, or a shallow clone)")
    log = subprocess.run(["git", "log", "--format=%H", "--diff-filter=D", "-1", "--", old_path], cwd=ROOT,
                         capture_output=True, text=True)
    assert log.returncode == 0 and log.stdout.strip(), "a whole history holds the commit that moved the notebook"
    before = subprocess.run(["git", "show", f"{log.stdout.strip()}^:{old_path}"], cwd=ROOT, capture_output=True)
    assert before.returncode == 0 and new.read_bytes() == before.stdout


# --------------------------------------------------------------------------
# Bilingual notebooks, and what the observed blocks say
# --------------------------------------------------------------------------

def test_a_spanish_notebook_from_its_template_to_its_observed_block(tmp_path):
    template = ROOT / "learners" / "_template" / "notebook.es.md"
    (tmp_path / "learners" / "_template").mkdir(parents=True)
    (tmp_path / "learners" / "_template" / "notebook.es.md").write_bytes(template.read_bytes())
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "Agente sin terminación", lang="es")
    text = path.read_text(encoding="utf-8")
    assert text.startswith(template.read_text(encoding="utf-8"))
    assert "# segundos hasta que acaba o lo matan" in text and "### Por qué lo creo" in text
    assert "Before you run it" not in text and "Why I think so" not in text
    fill(path, outcome="fallback", wall_s="30", processes_left="0")
    pred = read_prediction(tmp_path, "bea", "00-no-cap")
    assert pred["outcome"] == "fallback" and pred["wall_s"] == 30.0
    rows = compare(pred, OBSERVED)
    append_observation(tmp_path, "bea", "00-no-cap", OBSERVED, rows, None, None, "ahora", lang="es")
    text = path.read_text(encoding="utf-8")
    assert "### Observado — 00-no-cap (ahora)" in text
    assert "| | predicho | observado | acierto/fallo | tolerancia |" in text
    assert "| outcome | fallback | timeout | fallo | exact" in text and "| wall_s | 30 | 30.4 | acierto |" in text
    assert "| cpu_percent | ? | 97.2 | sin predecir |" in text
    assert "**¿Qué te ha sorprendido?** Han fallado 1 de tus 3 predicciones" in text
    assert "`invoke hint no-cap`" in text
    for english in ("Observed", "predicted", "hit", "miss", "not predicted", "surprised"):
        assert english not in text[len(template.read_text(encoding="utf-8")):], english


def test_a_run_with_misses_asks_what_surprised_you_and_one_without_does_not(tmp_path):
    path, _ = add_prediction(tmp_path, "bea", "00-no-cap", "no caps")
    append_observation(tmp_path, "bea", "00-no-cap", OBSERVED, compare({"outcome": "timeout"}, OBSERVED),
                       None, None, "1")
    assert "surprised" not in path.read_text(encoding="utf-8"), "every prediction hit: nothing to ask"
    append_observation(tmp_path, "bea", "00-no-cap", OBSERVED,
                       compare({"outcome": "answer", "tool_calls": 1}, OBSERVED), None, None, "2")
    text = path.read_text(encoding="utf-8")
    assert "**What surprised you?** 2 of your 2 predictions missed." in text
    assert "Stuck? `invoke hint no-cap` gives hint 1" in text
    assert "machine was busy" not in text


def test_a_miss_on_a_busy_machine_offers_a_rerun_before_an_explanation(tmp_path):
    busy = {**OBSERVED, "machine_busy": True, "other_cpu_mean": 150.0}
    path = append_observation(tmp_path, "bea", "00-no-cap", busy, compare({"outcome": "answer"}, busy), None, None,
                              "1", lang="es")
    text = path.read_text(encoding="utf-8")
    assert "**¿Qué te ha sorprendido?** Han fallado 1 de tus 1 predicciones." in text
    assert "vuelve a ejecutar `invoke exp no-cap` cuando esté más tranquila" in text


def test_a_missing_stop_reason_is_written_none(tmp_path):
    path = append_observation(tmp_path, "bea", "00-no-cap", {**OBSERVED, "stop_reason": None}, [], None, None, "x")
    assert "stop_reason: none\n" in path.read_text(encoding="utf-8")
    assert "stop_reason: ?" not in path.read_text(encoding="utf-8"), "'?' means not predicted, nothing else"


def test_crash_means_the_same_in_the_templates_and_in_the_harness():
    from miniagent.lab.harness.follow import Progress
    from miniagent.lab.harness.record import RunRecord
    from miniagent.lab.harness.run import _fill_outcome

    record = RunRecord(command=["x"], timeout=1.0)
    _fill_outcome(record, Progress(), {}, timed_out=False, interrupted=False)
    assert record.outcome == "crash" and record.stop_reason is None  # ended without reporting a stop reason
    en = (ROOT / "learners" / "_template" / "notebook.md").read_text(encoding="utf-8")
    es = (ROOT / "learners" / "_template" / "notebook.es.md").read_text(encoding="utf-8")
    assert "`crash` (the process ends without reporting any stop reason" in " ".join(en.split())
    assert "`crash` (el proceso termina sin informar de ningún motivo de parada" in " ".join(es.split())
    for text in (en, es):
        assert "`stop_reason: none`" in text and "at the end" in text or "al final" in text
