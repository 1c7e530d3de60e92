"""Host-side shell and Python live in files of their own (hostkit/remote/), read as
package data, not in long Python strings: no string literal of 12 or more lines under
hostkit/ other than docstrings. And every host file a module names is there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hostkit
from hostkit.remote import host_file

PACKAGE = Path(hostkit.__file__).parent
MAX_LINES = 11


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.add(id(value))
    return ids


def long_strings(source: str) -> list[tuple[int, int]]:
    """(first line, number of lines) of every string literal, f-strings included, of more
    than MAX_LINES lines that is not a docstring."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)  # and the pieces of f-strings, counted with their f-string
    skipped |= {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        is_string = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
        if not is_string or id(node) in skipped:
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_LINES:
            found.append((node.lineno, lines))
    return found


def test_the_check_finds_a_long_string_and_passes_docstrings():
    body = "\n".join(f"echo {n}" for n in range(MAX_LINES + 1))
    source = f'"""Module\n{body}\n"""\ndef f():\n    """Doc\n{body}\n"""\nSCRIPT = """{body}"""\nOTHER = f"""{{x}}\n{body}"""\n'
    starts = [n for n, line in enumerate(source.splitlines(), 1) if line.startswith(("SCRIPT", "OTHER"))]
    assert long_strings(source) == [(starts[0], MAX_LINES + 1), (starts[1], MAX_LINES + 2)]
    short = "\n".join(f"echo {n}" for n in range(MAX_LINES))
    assert long_strings(f'SCRIPT = """{short}"""\nOTHER = f"""{{x}}{short}"""\n') == []


def test_no_long_string_literal_under_hostkit():
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line} ({lines} lines)"
                 for path in sorted(PACKAGE.rglob("*.py")) if "data" not in path.relative_to(PACKAGE).parts
                 for line, lines in long_strings(path.read_text())]
    assert not offenders, "move these into files under hostkit/remote/: " + ", ".join(offenders)


def test_every_host_file_named_in_hostkit_exists():
    named = {name for path in PACKAGE.rglob("*.py")
             for name in re.findall(r'host_file\("([^"]+)"\)', path.read_text())}
    assert named
    for name in sorted(named):
        assert host_file(name).strip(), name
