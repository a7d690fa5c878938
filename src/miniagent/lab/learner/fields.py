"""What a prediction is: its fields, its outcome words, and how a value is shown to a person.

The notebook (:mod:`.notebook`) reads and writes these fields; scoring
(:mod:`.scoring`) judges them against what a run did.
"""

from __future__ import annotations

import math
from typing import Any

# The outcome words are the harness's own (harness._fill_outcome), in both languages:
# answer (stop reason "answered"), fallback (any other stop reason), timeout (killed at the
# harness's time limit), crash (the process ended without reporting any stop reason).
OUTCOMES = ("answer", "declined", "fallback", "timeout", "crash")

# The keys of a prediction block, in the order of the block, the observed block and the comparison.
# They are identifiers, the same in both languages; the comment beside each follows the notebook's language
# (``[notebook.comments]`` in the lab's words).
FIELDS = ("outcome", "wall_s", "cpu_percent", "tool_calls", "processes_left")
NUMERIC_FIELDS = ("wall_s", "cpu_percent", "tool_calls", "processes_left")

# A value the learner has not filled in yet ("?" means "not predicted", nothing else).
NOT_PREDICTED = ("", "?")
# What an observed block writes when the run reported no stop reason.
NO_STOP_REASON = "none"


def fmt(value: Any) -> str:
    """Numbers for people: 30.0 -> 30, 98.666 -> 98.7; None -> ?."""
    if value is None:
        return "?"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        rounded = round(float(value), 1)
        return str(int(rounded)) if rounded == int(rounded) else f"{rounded:.1f}"
    return str(value)
