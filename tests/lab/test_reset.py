"""``invoke reset`` on the cases the catalogue's own breaks do not reach: a break that changes two files in one
folder, a reset run from another directory, and a patched file the last commit does not hold.

Each starts from a learner's clone (src/, breaks/, tests/ under git) with a fix in progress on a break's lines,
the case where reset merges: it takes the intact and the broken files from the last commit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import repo_copy

from miniagent.lab.catalogue import BreakError, find
from miniagent.lab.patching import apply_to_tree, reset_in_tree

GIT = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]


@pytest.fixture
def tree(tmp_path):
    tree = repo_copy(tmp_path / "tree")
    subprocess.run("git init -q && git add -A", shell=True, cwd=tree, check=True)
    subprocess.run([*GIT, "commit", "-qm", "clone"], cwd=tree, check=True)
    return tree


def two_file_break(tree: Path) -> None:
    """A break of our own that changes loop.py and guards.py (one folder), committed as learners get breaks."""
    loop, guards = tree / "src/miniagent/agent/loop.py", tree / "src/miniagent/agent/guards.py"
    intact = loop.read_text(), guards.read_text()
    loop.write_text(intact[0].replace("TurnCap(config.max_turns)", "TurnCap(TutorConfig.max_turns)", 1))
    guards.write_text(intact[1] + "\n# broken on purpose\n")
    patch = subprocess.run(["git", "diff"], cwd=tree, capture_output=True, text=True, check=True).stdout
    loop.write_text(intact[0])
    guards.write_text(intact[1])
    folder = tree / "breaks" / "99-two-files"
    folder.mkdir()
    (folder / "break.patch").write_text(patch)
    toml = (tree / "breaks/01-dead-config/break.toml").read_text().replace('id = "01-dead-config"', 'id = "99-two-files"')
    (folder / "break.toml").write_text(toml)
    subprocess.run("git add -A", shell=True, cwd=tree, check=True)
    subprocess.run([*GIT, "commit", "-qm", "a break in two files"], cwd=tree, check=True)


def fix_in_progress(tree: Path) -> Path:
    loop = tree / "src/miniagent/agent/loop.py"
    loop.write_text(loop.read_text().replace("TurnCap(TutorConfig.max_turns)", "TurnCap(TutorConfig.max_turns + 0)  # my try"))
    return loop


def test_a_break_in_two_files_of_one_folder_is_reset_in_both(tree):
    two_file_break(tree)
    brk = find("two-files", tree)
    intact = {p: (tree / p).read_text() for p in ("src/miniagent/agent/loop.py", "src/miniagent/agent/guards.py")}
    apply_to_tree(brk, tree)
    fix_in_progress(tree)
    result = reset_in_tree(brk, tree, backups=tree / "backups")
    assert result.how == "merged" and result.files == ["src/miniagent/agent/guards.py", "src/miniagent/agent/loop.py"]
    assert {p: (tree / p).read_text() for p in intact} == intact


def test_reset_reads_the_learners_tree_wherever_it_is_run_from(tree, tmp_path, monkeypatch):
    brk = find("dead-config", tree)
    apply_to_tree(brk, tree)
    loop = fix_in_progress(tree)
    monkeypatch.chdir(tmp_path)  # not the tree, and not this repository either
    assert reset_in_tree(brk, tree, backups=tree / "backups").how == "merged"
    assert "my try" not in loop.read_text() and "TurnCap(config.max_turns)" in loop.read_text()


def test_a_patched_file_the_last_commit_lacks_is_refused_naming_it_and_nothing_changes(tree):
    brk = find("dead-config", tree)
    apply_to_tree(brk, tree)
    loop = fix_in_progress(tree)
    subprocess.run(["git", "rm", "-q", "--cached", "src/miniagent/agent/loop.py"], cwd=tree, check=True)
    subprocess.run([*GIT, "commit", "-qm", "loop.py untracked"], cwd=tree, check=True)
    before = loop.read_text()
    with pytest.raises(BreakError) as refused:
        reset_in_tree(brk, tree, backups=tree / "backups")
    message = str(refused.value)
    assert message.startswith("cannot reset 01-dead-config: src/miniagent/agent/loop.py is not in the last commit "
                              "of a git checkout (fatal: ")
    assert message.endswith("); nothing was changed.")
    assert loop.read_text() == before


def test_a_refused_merge_leaves_src_as_the_learner_left_it_and_keeps_a_copy(tree):
    """The merge brings the break's lines back, yet they are still not intact for its patch: the learner also
    edited a line of the patch's context. The reset is refused, and src/ itself must hold the learner's edits
    again, byte for byte (not only the backup copy)."""
    brk = find("dead-config", tree)
    apply_to_tree(brk, tree)
    loop = fix_in_progress(tree)
    context = "# for the stats only: repeats"  # two lines above the broken one, in the patch's context
    loop.write_text(loop.read_text().replace(context, "# mine, " + context[2:], 1))
    before = loop.read_bytes()
    with pytest.raises(BreakError) as refused:
        reset_in_tree(brk, tree, backups=tree / "backups")
    assert str(refused.value).startswith("could not bring 01-dead-config's lines back to intact; every file is as "
                                         "it was (copies in ")
    assert loop.read_bytes() == before
    assert [copy.read_bytes() for copy in (tree / "backups").rglob("loop.py")] == [before]
