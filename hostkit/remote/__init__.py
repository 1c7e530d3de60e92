"""Code that runs on the host: shell scripts and Python programs (standard library only),
shipped as package data and composed by their callers with a prelude of variables."""

from __future__ import annotations

import ast
from importlib import resources


def host_file(name: str) -> str:
    """hostkit/remote/NAME, as text."""
    return resources.files(__name__).joinpath(name).read_text()


def host_program(program: str, *libraries: str) -> str:
    """`program` as one standalone file for a host: the text of `libraries` (names of
    standard-library modules here without __future__ imports) goes after the program's
    __future__ imports, which must stay first, and before the rest, where the program's own
    import of them fails and is skipped (`except ImportError`)."""
    futures = [node.end_lineno for node in ast.parse(program).body
               if isinstance(node, ast.ImportFrom) and node.module == "__future__"]
    lines = program.splitlines(keepends=True)
    split = max(futures, default=1 if program.startswith("#!") else 0)
    return "".join(lines[:split]) + "\n".join(map(host_file, libraries)) + "\n" + "".join(lines[split:])
