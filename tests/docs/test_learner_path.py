"""A break page's run box, pasted and run as a learner would, in order, on a fresh learner name and a fresh copy.

The box is the one the page shows (the generated fragment the page includes), in each language: predict, exp
(the break's own model, the real one for break 00), break, watch, hint, progress.  ``invoke watch`` runs until
Ctrl-C, so the test does what a learner does there: it waits for the red line, saves the fix (the patch
reversed, as a learner's editor would save it), waits for the green line, presses Ctrl-C.  Then the rest of the
box runs, and the progress table must say the break was fixed and verified.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import LineWatch

from miniagent.lab.catalogue import find

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # docs_hooks


def fresh_clone(dest: Path) -> Path:
    """The checkout as a learner's clone has it (tracked and new files, nothing ignored), committed: ``reset``
    reads the last commit."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        someones_notes = rel.startswith("learners/") and not rel.startswith(("learners/_template/",
                                                                             "learners/README.md"))
        if (ROOT / rel).is_file() and not someones_notes:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    git = ["git", "-c", "user.name=learner", "-c", "user.email=learner@example.org"]
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=dest, check=True)
    return dest


def run_boxes(break_id: str, lang: str) -> tuple[list[list[str]], str]:
    """The page's three run boxes (predict; exp; break and watch), each as its lines, and the text around them."""
    from docs_hooks.generate import generate

    generate(ROOT)
    text = (ROOT / "build" / "generated" / "breaks" / break_id / f"run.{lang}.md").read_text(encoding="utf-8")
    boxes = re.findall(r"```bash\n(.*?)```", text, re.S)[:3]
    return [box.splitlines() for box in boxes], text.split("```bash")[2]  # from the second box to the third


def bash(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -e\n" + script], cwd=cwd, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def predict(notebook: Path, outcome: str) -> None:
    """What the page asks between the first two boxes: a guess for each ``?`` (here only the outcome; the
    other fields stay "not predicted", which the lab allows) and a line of why."""
    text = notebook.read_text(encoding="utf-8")
    assert "outcome: ?" in text, text
    notebook.write_text(text.replace("outcome: ?", f"outcome: {outcome}", 1) + "\nThe guard is gone.\n",
                        encoding="utf-8")


@pytest.mark.slow  # about a minute each: break 00's exp runs the real model to its 15 s timeout
@pytest.mark.parametrize("break_id, lang, name", [("00-no-cap", "en", "path-en"),
                                                  ("03-no-dedup", "es", "camino-es")])
def test_a_break_pages_run_boxes_run_as_written_from_prediction_to_a_verified_fix(tmp_path, break_id, lang, name):
    clone = fresh_clone(tmp_path / "clone")
    bin_dir = str(Path(sys.executable).parent)  # the lab's venv: `invoke` and `python`, as after the README's install
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(clone / "src"),
           "COLUMNS": "100"}
    env.pop("CI", None)
    (first, second, third), prose = run_boxes(break_id, lang)
    # the learner writes their own name where the box says so, and nothing else
    assert re.match(r"(me|nombre)=", first[0]), first
    first[0] = re.sub(r"=\S+", f"={name}", first[0], count=1)
    named = first[0]

    said = bash("\n".join(first), clone, env)
    assert said.returncode == 0, said.stdout + said.stderr
    notebook = clone / "learners" / name / "notebook.md"
    predict(notebook, find(break_id).expect.outcome)
    said = bash("\n".join([named, *second]), clone, env)
    assert said.returncode == 0, said.stdout + said.stderr
    assert list((clone / "runs" / break_id).glob("*-trace.jsonl")), "exp keeps the run's trace"
    assert "| outcome |" in notebook.read_text(encoding="utf-8"), "exp compared the run with the prediction"

    [watch] = [i for i, line in enumerate(third) if line.startswith("invoke watch ")]
    assert watch == len(third) - 1, "watch runs until Ctrl-C: nothing after it in the box would run"
    said = bash("\n".join([named, *third[:watch]]), clone, env)
    assert said.returncode == 0, said.stdout + said.stderr
    assert subprocess.run(["git", "diff", "--quiet", "src/"], cwd=clone).returncode == 1, "the box broke src/"
    red, verified = ("RED", "fixed and verified by you") if lang == "en" else ("ROJO", "arreglada por ti y comprobada")
    watcher = subprocess.Popen(["bash", "-c", f"{named}\n{third[watch]}"], cwd=clone, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        shown = LineWatch(watcher.stdout, needle=red)
        shown.wait(120)  # its first run, on the broken source
        shown.needle, shown.event = verified, threading.Event()  # said after the green line, once recorded
        subprocess.run(["git", "apply", "--reverse", str(clone / "breaks" / break_id / "break.patch")], cwd=clone,
                       check=True)  # the learner's fix, saved from an editor
        shown.wait(120)
        os.killpg(watcher.pid, signal.SIGINT)  # Ctrl-C in the learner's terminal
        assert watcher.wait(30) == 0, "".join(shown.lines)
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()

    # what the prose offers in another terminal: a hint, then where the learner stands
    offered = re.findall(r"`(invoke (?:hint|progress)[^`]*)`", prose)
    assert offered == [f"invoke hint {find(break_id).alias}", "invoke progress"], prose
    said = bash("\n".join(offered), clone, env)
    assert said.returncode == 0, said.stdout + said.stderr
    state = json.loads((clone / "learners" / name / "progress.json").read_text(encoding="utf-8"))
    assert state["breaks"][break_id]["hints"] == 1
