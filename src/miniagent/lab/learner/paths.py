"""Where a learner's files live: ``learners/NAME/``, the notebook in it, and the move from the lab's first layout."""

from __future__ import annotations

import os
import re
from pathlib import Path

NOTEBOOK_FILE = "notebook.md"
OLD_RELPATH = Path("phase-32") / "notes" / "breaks.md"  # the lab's first layout (see migrate)
TEMPLATE_LEARNER = "_template"

_LEARNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # a folder name every file system takes


def learner_folder(root: str | os.PathLike, learner: str) -> Path:
    """``ROOT/learners/NAME``: everything of one learner.

    The name becomes a folder, so it must be a plain name: no slashes, no
    ``..``, and not starting with ``_`` (``_template`` is the lab's, not a
    learner's, and appending predictions to it would spoil every new notebook).
    """
    if not _LEARNER_RE.match(learner or "") or ".." in learner:
        raise ValueError(
            f"learner name {learner!r} is not usable as a folder name: "
            "use up to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return Path(root) / "learners" / learner


def notebook_path(root: str | os.PathLike = ".", learner: str = "") -> Path:
    """``ROOT/learners/NAME/notebook.md``."""
    return learner_folder(root, learner) / NOTEBOOK_FILE


class MigrationError(ValueError):
    """Both the old and the new notebook exist: the lab will not choose between them."""


def migrate(root: str | os.PathLike, learner: str) -> Path | None:
    """Move a notebook from the first layout (``phase-32/notes/breaks.md``) to ``notebook.md``.

    The file is renamed, not copied and rewritten, so every byte stays as it was (line endings,
    a byte-order mark, a missing final newline).  Folders left empty are removed; anything else the
    learner kept there stays.  If both files exist, nothing moves and MigrationError says so.
    Returns the old path when it moved something, else None.
    """
    folder = learner_folder(root, learner)
    old, new = folder / OLD_RELPATH, folder / NOTEBOOK_FILE
    if not old.is_file():
        return None
    if new.exists():
        raise MigrationError(
            f"{new} and {old} both exist: the lab will not choose between your notebooks. Keep the one "
            f"you use as {new.name} (copy anything you want from the other), then remove or rename {old}.")
    os.rename(old, new)
    for empty in (old.parent, old.parent.parent):
        try:
            empty.rmdir()  # only if empty
        except OSError:
            break
    return old
