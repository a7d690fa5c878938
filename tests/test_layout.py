"""The package's shape: imports run downwards only (lab -> models/tools -> agent).

``agent/`` is what a learner reads; it must stand on the standard library alone,
so it never imports from ``models/``, ``tools/`` or ``lab/``.  ``models/`` and
``tools/`` are adapters that plug into the agent and never reach up into the lab
or into each other; ``telemetry/`` turns the agent's trace events into spans.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "miniagent"
MAY_IMPORT = {
    "agent": {"agent"},
    "models": {"agent", "models", "processes"},
    "tools": {"agent", "tools", "processes", "telemetry"},  # the server traces its side of a traced run
    "serving": {"agent", "models", "serving", "processes"},  # a class's model server, and how the lab starts one
    "lab": {"agent", "models", "tools", "serving", "lab", "processes", "settings", "telemetry"},
    "processes": set(),  # a leaf: processes, threads and signals, for every wing but the agent's
    "settings": {"agent", "models", "tools", "telemetry"},  # every wing's settings, read together
    "telemetry": {"agent", "telemetry"},  # spans made from the agent's trace events; the only wing with the SDK
}


def imported_modules(path: Path, root: Path = PACKAGE) -> list[str]:
    """Absolute miniagent modules a file imports (relative imports resolved)."""
    package = path.relative_to(root.parent).with_suffix("").parts[:-1]  # ("miniagent", "agent")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = [module + "." + a.name for a in node.names] if not node.module else [module]
            found += names
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return [m for m in found if m == "miniagent" or m.startswith("miniagent.")]


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in MAY_IMPORT else None


def wing_files(wing: str) -> list[Path]:
    module = PACKAGE / f"{wing}.py"
    return [module] if module.is_file() else sorted((PACKAGE / wing).rglob("*.py"))


@pytest.mark.parametrize("wing", sorted(MAY_IMPORT))
def test_imports_run_downwards_only(wing):
    wrong = []
    files = wing_files(wing)
    assert files, f"no files for {wing}"
    for path in files:
        for module in imported_modules(path):
            target = wing_of(module)
            if target is None or target not in MAY_IMPORT[wing]:
                wrong.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert not wrong, "imports that run the wrong way:\n" + "\n".join(wrong)


def test_the_agent_uses_the_standard_library_only():
    third_party = []
    for path in sorted((PACKAGE / "agent").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "__future__":
                    third_party.append(f"{path.name} imports {name}")
    assert not third_party, third_party


def test_the_check_sees_a_wrong_import(tmp_path):
    """The checker must catch an upward import (a check that cannot fail proves nothing)."""
    planted = tmp_path / "miniagent" / "agent" / "loop.py"
    planted.parent.mkdir(parents=True)
    planted.write_text((PACKAGE / "agent" / "loop.py").read_text(encoding="utf-8") + "\nfrom ..lab import harness\n")
    upward = [m for m in imported_modules(planted, tmp_path / "miniagent") if wing_of(m) not in MAY_IMPORT["agent"]]
    assert upward == ["miniagent.lab"]


def _docstrings(tree: ast.AST) -> list[str]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [doc for doc in (ast.get_docstring(n, clean=False) for n in nodes) if doc]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")) + [PACKAGE.parents[1] / "tasks.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE.parents[1])))
def test_every_docstring_is_text_python_3_13_can_compile(path):
    # Python 3.13 cleans docstrings as UTF-8 when it compiles them: a lone surrogate written as an escape in
    # a docstring ("go\ud800") made `import miniagent.tools.mcp_client` fail there, and nowhere else.
    for doc in _docstrings(ast.parse(path.read_text(encoding="utf-8"))):
        doc.encode("utf-8")


def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Every module of the package and the package modules it imports (function-level imports included)."""
    modules = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in root.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = path.relative_to(root.parent).with_suffix("").parts[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                # "from .x import y": y is a module of its own, or a name in x
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_no_module_imports_itself_back_through_others():
    """An import cycle (two modules importing each other inside functions to get round it) ties their fates."""
    assert cycles(module_graph()) == []
    # tasks.py and the docs' hooks stand on the package: no module of it may import them back (a cycle)
    for path in PACKAGE.rglob("*.py"):
        assert not re.search(r"^\s*(from|import) (tasks|docs_hooks)\b", path.read_text(encoding="utf-8"), re.M), path


def test_the_cycle_check_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# Files and functions over the limits, each with why it is still so. The list may only shrink: a new long file or
# function fails, and so does an entry that is no longer over its limit (take it out).
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60
LONG_FILES: dict[str, str] = {}  # none now: tools/mcp_client.py fell under the bound once its docstring summarised
LONG_FUNCTIONS: dict[str, str] = {}  # none now: stdio_pipes.session_streams fell to 60 lines once its docstring summarised


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines of each file and function: the package's (named from the package), the root's tasks.py and the docs'
    hooks (named from the repository's root)."""
    root = PACKAGE.parents[1]
    files, functions = {}, {}
    paths = [*sorted(PACKAGE.rglob("*.py")), root / "tasks.py", *sorted((root / "docs_hooks").glob("*.py"))]
    for path in paths:
        name = path.relative_to(PACKAGE if PACKAGE in path.parents else root).as_posix()
        text = path.read_text(encoding="utf-8")
        files[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return files, functions


def test_no_file_or_function_is_longer_than_a_reader_can_hold_but_the_listed_ones():
    files, functions = sizes()
    assert {n for n, lines in files.items() if lines > MAX_FILE_LINES} == set(LONG_FILES), \
        {n: files.get(n) for n in set(LONG_FILES) ^ {n for n, lines in files.items() if lines > MAX_FILE_LINES}}
    assert {n for n, lines in functions.items() if lines > MAX_FUNCTION_LINES} == set(LONG_FUNCTIONS), \
        {n: functions.get(n) for n in set(LONG_FUNCTIONS) ^ {n for n, v in functions.items() if v > MAX_FUNCTION_LINES}}


# Asking the machine about its CPUs: how many there are, which ones we may use, how busy they are.  One module
# answers (``miniagent.processes``), so the thread choice, the harness's busy-machine note and the benchmark
# cannot count the same machine three ways.
MACHINE_CPU_CALLS = {("os", "cpu_count"), ("os", "sched_getaffinity"), ("os", "getloadavg"),
                     ("psutil", "cpu_count"), ("psutil", "cpu_times"), ("psutil", "cpu_percent")}


def machine_cpu_calls(text: str) -> set[str]:
    """``module.function`` for each call in ``text`` that asks the machine (not one process) about its CPUs."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in MACHINE_CPU_CALLS:
            found.add(f"{node.func.value.id}.{node.func.attr}")
    return found


def test_only_the_process_module_asks_the_machine_about_its_cpus():
    askers = {path.relative_to(PACKAGE).as_posix(): calls for path in sorted(PACKAGE.rglob("*.py"))
              if (calls := machine_cpu_calls(path.read_text(encoding="utf-8")))}
    assert set(askers) == {"processes.py"}, askers


def test_the_cpu_check_sees_a_second_asker():
    assert machine_cpu_calls("import os, psutil\nn = os.cpu_count()\nt = psutil.cpu_times()\n") == \
        {"os.cpu_count", "psutil.cpu_times"}
    assert machine_cpu_calls("import psutil\np = psutil.Process()\nt = p.cpu_times()\n") == set()  # one process's


def test_the_tests_mirror_the_package_folder_by_folder():
    """A folder of tests is named for the package folder it tests (tests/lab/harness/ for lab/harness/); the tests
    of a top-level module (cli.py, processes.py) sit in tests/ itself, and the docs' own tests in tests/docs/."""
    tests = PACKAGE.parents[1] / "tests"
    folders = {p.parent.relative_to(tests) for p in tests.rglob("test_*.py")}
    assert {f for f in folders if f.parts and f.parts[0] != "docs" and not (PACKAGE / f).is_dir()} == set()
    parts = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*") if p.is_dir() and any(p.glob("[!_]*.py"))}
    assert {f for f in parts if not (tests / f).is_dir()} == set(), "a package folder without its tests' folder"


# Every Python project's own files: named by their kind, not by the README's layout.
PROJECT_FILES = {"README.md", "pyproject.toml", ".gitignore"}


def test_the_top_level_holds_only_what_the_readme_layout_names():
    """A stray file at the top (a pyflakes wheel stood there for a day) is caught, and so is a README that
    forgets a folder."""
    root = PACKAGE.parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    top = {line.split("/")[0] + ("/" if "/" in line else "") for line in tracked.splitlines()}
    readme = (root / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    unnamed = sorted(entry for entry in top - PROJECT_FILES if f"`{entry}" not in layout)
    assert unnamed == [], "top-level entries the README's Layout does not name"
