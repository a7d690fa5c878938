"""The pieces of a break: what a partial fix may leave out (``invoke check-breaks --lines`` runs them).

A piece is one removed statement dropped alone, one term of it dropped (an operand, a boolean value, a keyword
argument), or one replacing hunk left broken. Each must fail the break's guard tests, or be listed under
``[[check.cosmetic]]`` with why.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from pathlib import Path

from ..catalogue import ROOT, Break
from ..patching import Hunk, hunks


@dataclass(frozen=True)
class Piece:
    """One partial fix: ``label`` names what it leaves out, ``file`` gets ``text`` (the rest stays intact)."""

    label: str
    file: str
    text: str


def pieces(brk: Break, root: Path = ROOT) -> list[Piece]:
    """Every partial fix of ``brk``, each a whole file's text that compiles."""
    out: list[Piece] = []
    by_file: dict[str, list[Hunk]] = {}
    for hunk in hunks(brk.patch):
        by_file.setdefault(hunk.file, []).append(hunk)
    sources = {file: (root / file).read_text(encoding="utf-8") for file in by_file}
    for file, file_hunks in by_file.items():
        source = sources[file]
        lines = source.splitlines(keepends=True)
        removed = {n for hunk in file_hunks for n in hunk.removed}
        for stmt in _removed_statements(ast.parse(source), removed):
            span = f"{stmt.lineno}" if stmt.end_lineno == stmt.lineno else f"{stmt.lineno}-{stmt.end_lineno}"
            where = f"{Path(file).name}:{span}"
            out.append(Piece(f"{where} without `{_first_line(lines, stmt)}`", file,
                             _replace(lines, stmt, [_indent(lines, stmt) + "pass\n"])))
            for dropped, smaller in _term_drops(stmt):
                new = ast.unparse(smaller).splitlines(keepends=False)
                out.append(Piece(f"{where} without the term `{dropped}`", file,
                                 _replace(lines, stmt, [_indent(lines, stmt) + line + "\n" for line in new])))
    all_hunks = [h for hs in by_file.values() for h in hs]
    if len(all_hunks) > 1:  # a hunk that only removes is already covered, statement by statement
        for hunk in (h for h in all_hunks if any(tag == "+" for tag, _ in h.lines)):
            out.append(Piece(f"{Path(hunk.file).name}:{hunk.old_start} left broken (one hunk)", hunk.file,
                             hunk.apply_to(sources[hunk.file])))
    return [p for p in dict.fromkeys(out) if _compiles(p.text)]


def _removed_statements(tree: ast.AST, removed: set[int]) -> list[ast.stmt]:
    """The statements every line of which the break removes, outer ones first."""
    found = []
    for node in ast.walk(tree):
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str)  # not code: nothing a test could miss
        if isinstance(node, ast.stmt) and not docstring and set(range(node.lineno, node.end_lineno + 1)) <= removed:
            found.append(node)
    return sorted(found, key=lambda n: (n.lineno, -n.end_lineno))


def _term_drops(stmt: ast.stmt) -> list[tuple[str, ast.stmt]]:
    """(the term dropped, the statement without it) for each operand, boolean value and keyword argument."""
    out = []
    for index, node in enumerate(ast.walk(stmt)):
        if not _own(stmt, node):
            continue
        if isinstance(node, ast.BinOp):
            options = [(f"{_op(node)} {ast.unparse(node.right)}", node.left),
                       (f"{ast.unparse(node.left)} {_op(node)}", node.right)]
        elif isinstance(node, ast.BoolOp):
            options = [(ast.unparse(v), ast.BoolOp(node.op, node.values[:i] + node.values[i + 1:])
                        if len(node.values) > 2 else node.values[1 - i]) for i, v in enumerate(node.values)]
        elif isinstance(node, ast.Call):
            options = [(ast.unparse(k), _without_keyword(node, i)) for i, k in enumerate(node.keywords)]
        else:
            continue
        for said, replacement in options:
            out.append((said, _swap(stmt, index, replacement)))
    return out


def _own(stmt: ast.stmt, node: ast.AST) -> bool:
    """``node`` belongs to ``stmt`` itself, not to a statement in its body (those are pieces of their own)."""
    inner = [n for child in ast.iter_child_nodes(stmt) if isinstance(child, ast.stmt) for n in ast.walk(child)]
    return not any(n is node for n in inner)


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
        ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}


def _op(node: ast.BinOp) -> str:
    return _OPS[type(node.op)]


def _without_keyword(call: ast.Call, i: int) -> ast.Call:
    return ast.Call(call.func, call.args, call.keywords[:i] + call.keywords[i + 1:])


def _swap(stmt: ast.stmt, index: int, replacement: ast.expr) -> ast.stmt:
    """A copy of ``stmt`` with its ``index``-th node (in ast.walk order) replaced."""
    new = copy.deepcopy(stmt)
    target = list(ast.walk(new))[index]
    for parent in ast.walk(new):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, copy.deepcopy(replacement))
            elif isinstance(value, list) and any(v is target for v in value):
                setattr(parent, name, [copy.deepcopy(replacement) if v is target else v for v in value])
    return ast.fix_missing_locations(new)


def _first_line(lines: list[str], stmt: ast.stmt) -> str:
    return lines[stmt.lineno - 1].strip() + (" …" if stmt.end_lineno > stmt.lineno else "")


def _indent(lines: list[str], stmt: ast.stmt) -> str:
    line = lines[stmt.lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def _replace(lines: list[str], stmt: ast.stmt, new: list[str]) -> str:
    return "".join(lines[:stmt.lineno - 1] + new + lines[stmt.end_lineno:])


def _compiles(text: str) -> bool:
    try:
        compile(text, "<partial fix>", "exec")
    except SyntaxError:
        return False
    return True

