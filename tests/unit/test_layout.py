"""The tree's layout rules that code review alone would let slip."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE_TESTS = ("hostkit", "hostkit_lab", "scripts", "bench", "deploys", "inventories", "examples")


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_nothing_outside_tests_imports_tests():
    offenders = sorted(
        f"{path.relative_to(REPO)}: {module}"
        for top in OUTSIDE_TESTS for path in (REPO / top).rglob("*.py")
        for module in imported_modules(path) if module == "tests" or module.startswith("tests.")
    )
    assert offenders == []


def test_host_names_sit_at_the_bottom():
    """hostkit.paths names units and files for every layer, so it may import none of them."""
    assert {module for module in imported_modules(REPO / "hostkit" / "paths.py") if module.startswith("hostkit")} == set()
