"""Decorated functions written out as plain ones, in mutmut's copy only, so that ``invoke mutants`` mutates them.

mutmut 3 skips decorated functions (``@staticmethod`` and ``@classmethod`` aside).  Each becomes the function
undecorated, then its decorators applied by hand, the nearest first::

    @task(help=...)                         def ask(c, question): ...
    @refusing                 becomes       ask = task(help=...)(refusing(ask))
    def ask(c, question): ...

Why: docs/maintainers.md.
"""

from __future__ import annotations

import ast

# mutmut mutates a method under one of these as it is
KEPT = (["staticmethod"], ["classmethod"])


def decorated(source: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions mutmut would leave alone, at any depth (methods and nested functions too)."""
    return [node for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list
            and [ast.unparse(d) for d in node.decorator_list] not in KEPT]


def undecorate(source: str) -> str:
    """``source`` with every decorated function written out as above."""
    while found := decorated(source):
        # the last one defined contains no other decorated function: its rewrite moves none of theirs
        source = _written_out(source, max(found, key=lambda node: node.lineno))
    return source


def _written_out(source: str, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    names = {node.id for d in function.decorator_list for node in ast.walk(d) if isinstance(node, ast.Name)}
    if function.name in names:  # `@f.setter def f`: applied afterwards, `f` would name the new function
        raise ValueError(f"line {function.lineno}: a decorator of {function.name}() names it; write it out by hand")
    lines = source.splitlines(keepends=True)
    first, define, end = function.decorator_list[0].lineno - 1, function.lineno - 1, function.end_lineno
    applied = function.name
    # what `@` does, except that the decorators' expressions are now evaluated after the function is defined
    for decorator in reversed(function.decorator_list):
        applied = f"{ast.get_source_segment(source, decorator)}({applied})"
    body = lines[define:end]  # the function's own lines as they are: mutmut numbers its mutants as it would have
    body[-1] = body[-1] if body[-1].endswith("\n") else body[-1] + "\n"
    indent = lines[define][:function.col_offset]
    return "".join([*lines[:first], *body, f"{indent}{function.name} = {applied}\n", *lines[end:]])
