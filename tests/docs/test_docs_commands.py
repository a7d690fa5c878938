"""Every command a page tells a learner to type, checked as written, in both languages.

The commands are extracted from the pages themselves (``bash`` blocks and inline code spans), from
the fragments the docs hook generates for the break pages, from the README files and the notebook
template.  Then:

- every ``invoke TASK ...`` is parsed by invoke's own parser against this repository's ``tasks.py``:
  the task exists and takes the flags and positional arguments the page uses, and a break it names
  exists;
- every ``python -m MODULE ...`` names a module that exists, and its arguments are accepted by that
  module's own argument parser when it has one;
- the cheap ones really run: ``invoke --list``, ``invoke breaks``, ``invoke check ALIAS`` (as
  ``--dry-run``: the guard tests are collected, not run), ``python -m ... --help``.

Placeholders (``NAME``, ``<you>``, ``ALIAS``...) are replaced by real values first.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # docs_hooks

# Placeholders a page may use, and what they stand for when the command is checked.
PLACEHOLDERS = {
    "NAME": "docs-check", "NOMBRE": "docs-check", "<you>": "docs-check", "<tu-nombre>": "docs-check",
    "$me": "docs-check", "$nombre": "docs-check",
    "ALIAS": "no-cap", "VARIANT": "no-cap", "BREAK": "no-cap", "ID": "no-cap", "$b": "no-cap",
    "QUESTION": "What is the past simple of go for she?", "PREGUNTA": "What is the past simple of go for she?",
    "TEXT": "What is the past simple of go for she?", "S": "5", "N": "2", "FILE": "labs/01-tutor-end-to-end/eval.jsonl",
    "PATH": "model.gguf", "LANG": "es", "URL": "http://127.0.0.1:8000/v1",
}
VARIANT_TASKS = {"break", "fix", "check", "predict", "exp", "hint", "watch", "reset"}


@dataclass(frozen=True)
class Command:
    where: str  # "docs/breaks/00-no-cap.md:12"
    argv: tuple[str, ...]
    inline: bool = False  # from a `code span` in prose: "`invoke exp` runs..." may name a task without its arguments

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.argv)}"


def _sources() -> list[Path]:
    from docs_hooks.generate import generate

    generate(ROOT)  # the break pages include these fragments: check what they will show
    files = sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "build" / "generated").rglob("*.md"))
    files += [ROOT / "docs" / "includes" / "quickstart.sh", ROOT / "README.md", ROOT / "learners" / "README.md"]
    files += sorted((ROOT / "labs").rglob("README.md")) + sorted((ROOT / "learners" / "_template").rglob("*.md"))
    return [f for f in files if f.is_file()]


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w-]*)")
_INLINE = re.compile(r"(?<!`)`((?:invoke|python3?) [^`]+)`(?!`)")


def _shell_lines(path: Path) -> list[tuple[int, str, bool]]:
    """(line number, logical line, inline?) of every shell snippet: bash blocks, and inline `invoke ...` spans."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sh":
        return [(n, line, False) for n, line in enumerate(text.splitlines(), 1)]
    out: list[tuple[int, str, bool]] = []
    fence, shell, pending, start = None, False, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m and fence is None:
            fence, shell = m.group(1), m.group(2) in ("bash", "sh", "shell", "console")
            continue
        if m and fence is not None and m.group(1)[0] == fence[0] and not m.group(2):
            fence = None
            continue
        if fence is not None:
            if shell:
                line = line.strip()
                if not pending:
                    start = n
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                out.append((start, pending + line, False))
                pending = ""
            continue
        for span in _INLINE.findall(line.replace("\\|", "|")):
            out.append((n, span, True))
    return out


def _simple_commands(line: str, inline: bool = False) -> list[list[str]]:
    """The commands of one shell line: split on && ; | and loop keywords, comments dropped.

    A line a shell could not split (an unclosed quote) is a typo on the page, unless it is prose in a code span
    that names no command."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError as err:
        if inline and not re.match(r"\s*([A-Z_]+=\S*\s+)*(invoke|python3?)\s", line):
            return []
        raise ValueError(f"a shell could not run this line ({err}): {line!r}") from None
    commands, current = [], []
    for tok in tokens:
        if tok and set(tok) <= set(";&|"):
            commands.append(current)
            current = []
        else:
            current.append(tok)
    commands.append(current)
    out = []
    for cmd in commands:
        while cmd and cmd[0] in ("do", "then", "else", "time", "env") or (cmd and re.fullmatch(r"[A-Z_]+=\S*", cmd[0])):
            cmd = cmd[1:]
        if cmd:
            out.append(cmd)
    return out


def _substitute(argv: list[str]) -> list[str]:
    out = []
    for tok in argv:
        if tok in ("[", "]", "...", "…"):
            continue
        written, tok = tok, tok.strip("[]")
        if "|" in tok and not tok.startswith(("scored|", "-")) and " " not in tok:
            tok = tok.split("|")[0]
        for key, value in PLACEHOLDERS.items():
            if tok == key:
                tok = value
        tok = tok.replace("$b", "no-cap")
        if tok.startswith("--") and "|" in tok:
            tok = tok.split("|")[0]
        if tok == "scored|greedy":
            tok = "scored"
        if tok or not written:  # an empty argument as written ('') is one: "--cache-dir ''" turns the cache off
            out.append(tok)
    return out


@functools.lru_cache(maxsize=1)
def _page_commands() -> tuple[tuple[str, list[str], bool], ...]:
    """(where, argv, inline?) of every simple command on the pages, as a shell would split it."""
    found = []
    for path in _sources():
        where = path.relative_to(ROOT).as_posix()
        for n, line, inline in _shell_lines(path):
            found += [(f"{where}:{n}", cmd, inline) for cmd in _simple_commands(line, inline)]
    return tuple(found)


@functools.lru_cache(maxsize=1)
def all_commands() -> tuple[Command, ...]:
    found: list[Command] = []
    for where, cmd, inline in _page_commands():
        if inline and ("..." in cmd or "…" in cmd):
            continue  # prose that elides arguments ("python -m miniagent ask ... --json")
        if cmd[0] in ("invoke", "python", "python3"):
            found.append(Command(where, tuple(_substitute(cmd)), inline))
    return tuple(found)


def invoke_commands() -> list[Command]:
    return [c for c in all_commands() if c.argv[0] == "invoke"]


def python_commands() -> list[Command]:
    return [c for c in all_commands() if c.argv[0] in ("python", "python3") and len(c.argv) > 1]


# --------------------------------------------------------------------------
# invoke: every task and flag exists
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _collection():
    from invoke import Collection

    spec = importlib.util.spec_from_file_location("lab_tasks_under_test", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Collection.from_module(module)


def parse_invoke(argv: tuple[str, ...]) -> dict:
    """invoke's own parse of ``invoke ...``: {task name: {arg: value}}; raises ParseError when a page is wrong.

    A fresh parser each time: invoke's parser keeps the values it has seen in its arguments.
    """
    from invoke import Program
    from invoke.parser import Parser, ParserContext

    parser = Parser(initial=ParserContext(args=Program().core_args()), contexts=_collection().to_contexts())
    return {ctx.name: {name: arg.value for name, arg in ctx.args.items()}
            for ctx in parser.parse_argv(list(argv[1:])) if ctx.name}


def test_the_pages_have_commands_in_both_languages():
    wheres = {c.where.split(":")[0] for c in invoke_commands()}
    assert any(w.endswith(".es.md") for w in wheres) and any(w.endswith("00-no-cap.md") for w in wheres)
    assert len(invoke_commands()) > 100


def test_every_invoke_command_on_every_page_parses():
    from invoke.exceptions import ParseError

    from miniagent.lab.catalogue import BreakError, find

    def parsed(argv: tuple[str, ...]) -> dict | ParseError:
        try:
            return parse_invoke(argv)
        except ParseError as err:
            return err

    @functools.lru_cache(maxsize=None)
    def unknown(variant: str) -> BreakError | None:
        try:
            find(variant)
        except BreakError as err:
            return err
        return None

    # The pages hold each command several times (EN and ES, the README): each is parsed and looked up once (a
    # parse and a read of the catalogue cost ~10 ms each, ~800 commands), and judged wherever it is written.
    parses = {argv: parsed(argv) for argv in {cmd.argv for cmd in invoke_commands()}}
    problems = []
    for cmd in invoke_commands():
        result = parses[cmd.argv]
        if isinstance(result, ParseError):
            if not (cmd.inline and len(cmd.argv) == 2 and "positional" in str(result)):  # "`invoke exp` runs..."
                problems.append(f"{cmd}  ->  {result}")
            continue
        for task, args in result.items():
            if task not in VARIANT_TASKS:
                continue
            variant = args["variant"]
            if variant in ("all", "baseline") and task in ("check", "exp"):
                continue
            if unknown(variant) is not None:
                problems.append(f"{cmd}  ->  {unknown(variant)}")
    assert not problems, "commands on the pages that invoke refuses:\n" + "\n".join(problems)


def test_the_parse_check_catches_a_wrong_command():
    from invoke.exceptions import ParseError

    for wrong in (("invoke", "chek", "no-cap"), ("invoke", "check", "no-cap", "--nope"), ("invoke", "exp")):
        with pytest.raises(ParseError):
            parse_invoke(wrong)
    assert parse_invoke(("invoke", "check", "no-cap"))["check"]["variant"] == "no-cap"
    assert parse_invoke(("invoke", "check", "--variant", "no-cap"))["check"]["variant"] == "no-cap"


# --------------------------------------------------------------------------
# python -m: the module exists and accepts the arguments
# --------------------------------------------------------------------------

def _module_parser(module: str):
    if module == "miniagent":
        from miniagent.cli import build_parser

        return build_parser()
    if module == "miniagent.tools.server":
        from miniagent.tools.server import _parser

        return _parser()
    if module == "miniagent.lab.harness":
        from miniagent.lab.harness.__main__ import build_parser

        return build_parser()
    if module == "miniagent.serving.llama_cpp_server":
        from miniagent.serving.llama_cpp_server import build_parser

        return build_parser()
    if module == "miniagent.serving.class_server":
        from miniagent.serving.class_server import build_parser

        return build_parser()
    return None


def _accepts(parser, args: list[str]) -> bool:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            parser.parse_args(args)
        except SystemExit as exit_:
            return exit_.code in (0, None)  # --help
    return True


def test_every_python_command_on_every_page_is_accepted():
    problems = []
    for cmd in python_commands():
        args = list(cmd.argv[1:])
        if args[0] == "-m":
            module, rest = args[1], args[2:]
            if importlib.util.find_spec(module) is None:
                problems.append(f"{cmd}  ->  no module {module}")
                continue
            parser = _module_parser(module)
            if parser is None or not rest:
                continue
            if module == "miniagent.lab.harness" and "--" in rest:  # the command under the harness
                inner = rest[rest.index("--") + 1:]
                if inner[:2] == ["python", "-m"] and inner[2] == "miniagent":
                    if not _accepts(_module_parser("miniagent"), inner[3:]):
                        problems.append(f"{cmd}  ->  the agent refuses {shlex.join(inner)}")
            if not _accepts(parser, rest):
                problems.append(f"{cmd}  ->  {module} refuses these arguments")
        elif args[0].endswith(".py"):
            if not (ROOT / args[0]).is_file():
                problems.append(f"{cmd}  ->  no file {args[0]}")
    assert not problems, "python commands on the pages that fail:\n" + "\n".join(problems)


# --------------------------------------------------------------------------
# The cheap ones, really run
# --------------------------------------------------------------------------

def _cheap() -> list[tuple[str, ...]]:
    runs: set[tuple[str, ...]] = {("invoke", "--list")}
    for cmd in invoke_commands():
        task = cmd.argv[1] if len(cmd.argv) > 1 else ""
        if task == "breaks" or cmd.argv[1:] == ("--list",):
            runs.add(cmd.argv)
        elif task == "check" and len(cmd.argv) >= 3:
            runs.add(("invoke", "check", cmd.argv[2], "--dry-run"))
    for cmd in python_commands():
        if cmd.argv[1] == "-m":
            runs.add(("python", "-m", cmd.argv[2], "--help"))
        elif cmd.argv[1] == "-c" and cmd.argv[2:] != ("while True: pass",):  # cheap: run it as written
            runs.add(cmd.argv)  # (the busy loop the pages name as "another program" never ends, by design)
        elif cmd.argv[1].endswith(".py"):  # a lab's script: its imports and its options, without the long run
            runs.add(("python", cmd.argv[1], "--help"))
    return sorted(runs)


def test_the_lab_scripts_on_the_pages_are_among_the_cheap_runs():
    """Lab 04's script imported a function from a module it had left (load_config): only its file was checked."""
    assert ("python", "labs/04-remaining-budget/compare.py", "--help") in _cheap()


def test_the_one_liners_on_the_pages_are_among_the_cheap_runs():
    """``python -c`` lines were checked by nothing: one imported a module that does not exist (miniagent.config)."""
    one_liners = [argv for argv in _cheap() if argv[:2] == ("python", "-c")]
    assert ("python", "-c", "from miniagent.agent.config import TutorConfig; print(TutorConfig.max_turns)") in one_liners


@pytest.mark.parametrize("argv", _cheap(), ids=" ".join)
def test_the_cheap_commands_run(argv):
    real = [sys.executable, "-m", "invoke", *argv[1:]] if argv[0] == "invoke" else [sys.executable, *argv[1:]]
    result = subprocess.run(real, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{shlex.join(argv)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


# --------------------------------------------------------------------------
# ps | grep: the pattern finds a process the lab starts
# --------------------------------------------------------------------------

def _grep_patterns() -> list[tuple[str, str]]:
    """(where, pattern) of every ``grep '[x]...'`` on the pages: the bracket keeps grep from finding itself in
    ``ps``'s list, so these lines look for the lab's processes by their command lines."""
    found = []
    for where, cmd, _ in _page_commands():
        patterns = [tok for tok in cmd[1:] if not tok.startswith("-")]
        if cmd[0] == "grep" and patterns and patterns[0].startswith("["):
            found.append((where, patterns[0]))
    return found


def _lab_command_lines() -> list[str]:
    """The command lines of the processes the lab starts, as the code builds them (``ps`` shows argv joined)."""
    from miniagent.lab.patching import agent_command
    from miniagent.tools.mcp_client import SERVER_MODULE

    agent = agent_command("What is the past simple of go for she?", Path("runs/t.jsonl"), llm="llama", flags=[])
    return [" ".join(["python", *agent[1:]]), " ".join(["python", "-m", SERVER_MODULE]),
            "python -m miniagent.lab.harness --timeout 10 -- python -m miniagent ask QUESTION"]


def test_every_ps_grep_on_the_pages_finds_a_process_the_lab_starts():
    """``grep '[m]iniagent.server'`` found nothing: the server runs as ``python -m miniagent.tools.server``."""
    lines = _lab_command_lines()
    patterns = _grep_patterns()
    assert len(patterns) >= 8  # lab 02, breaks 05, 07 and 09, in both languages
    missed = [f"{where}: grep {pattern!r}" for where, pattern in patterns
              if not any(re.search(pattern, line) for line in lines)]
    assert not missed, "patterns that match no process the lab starts:\n" + "\n".join(missed)
