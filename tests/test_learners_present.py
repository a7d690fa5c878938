"""The suite reads the same with a learner's work in the checkout.

The lab's commands work on this checkout and remember who ran them last: its crash reports and verdicts speak
that learner's language. A learner who runs the suite after working through the lab in Spanish must get the
green of a fresh clone (four tests once read "SE HA ROTO" where they expected "CRASHED").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from miniagent.lab.learner import notebook, progress

ROOT = Path(__file__).resolve().parents[1]

# The tests that run the lab's commands on this checkout, where the remembered learner is read.
READ_THE_REMEMBERED_LEARNER = ["tests/test_tasks.py", "tests/test_task_bodies.py", "tests/lab/harness/test_crash.py",
                               "tests/lab/commands/test_experiment.py", "tests/lab/commands/test_exercise_commands.py",
                               "tests/lab/commands/test_exercise_loop.py", "tests/lab/commands/test_breaks.py", "tests/lab/test_words.py"]


@pytest.mark.serial  # it plants a remembered learner in the checkout: a test beside it would read that learner
@pytest.mark.slow  # ~20 s: a pytest run of its own
def test_the_lab_command_tests_are_green_with_a_spanish_learner_remembered(learner):
    """A learner who chose Spanish, predicted break 00 and ran it, remembered as the last to run a command."""
    assert progress.learner_lang(ROOT, learner, "es") == "es"
    notebook.add_prediction(ROOT, learner, "00-no-cap", "sin tope")
    progress.update(ROOT, learner, lambda s: progress.break_state(s, "00-no-cap").update(runs=1, hits=4, fields=5))
    progress.remember_learner(ROOT, learner)
    assert progress.resolve_learner(ROOT, None) == learner
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "-m",
                           "not serial and not slow and not real_model and not browser",
                           *READ_THE_REMEMBERED_LEARNER], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert progress.resolve_learner(ROOT, None) == learner, "the run's tests left another learner remembered"
