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
            modules.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "hostkit")
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


# hostkit's packages from the bottom up: each may import only the tiers below its own. Data
# flows one way, inventory -> profile -> plan -> desired state -> operation or verify.
LAYERS = (
    # names, sizes, exit codes; host-side files; hostkit.templates(), the Jinja environment
    {"paths", "sizes", "exit_codes", "remote", "templates"},
    {"monitoring"},  # the collector (a host program, with remote's HTTP client) and the alert rules
    {"vllm"},  # what vLLM's releases accept and need
    {"facts"},  # readers of a host
    {"profile"},  # the inventory's typed schema
    {"plan"},  # pure: profile and facts to a plan
    {"desired"},  # the desired state from a plan: files as rendered, settings as wanted
    {"operations"},
    {"deploy"},
    {"fleet"},  # inventories, connections, facts of many hosts
    {"verify", "smoke"},
    {"doctor"},
    {"rollout"},
    {"cli"},
    {"__main__"},
)


def package_imports() -> set[tuple[str, str, str]]:
    """(importing package, imported package, file) for each import between hostkit's packages."""
    found = set()
    for path in (REPO / "hostkit").rglob("*.py"):
        parts = path.relative_to(REPO / "hostkit").with_suffix("").parts
        if parts == ("__init__",):
            continue
        for module in imported_modules(path):
            names = module.split(".")
            if names[0] == "hostkit" and len(names) > 1 and names[1] != parts[0]:
                found.add((parts[0], names[1], str(path.relative_to(REPO))))
    return found


def test_every_package_has_a_layer():
    layered = set().union(*LAYERS)
    packages = {p.stem if p.is_file() else p.name for p in (REPO / "hostkit").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert packages - layered == set()


def test_no_package_imports_one_above_it():
    tier = {package: level for level, packages in enumerate(LAYERS) for package in packages}
    upward = sorted(f"{path}: {importer} imports {imported}" for importer, imported, path in package_imports()
                    if imported in tier and tier[imported] >= tier[importer])
    assert upward == []


def test_checks_read_the_desired_state_not_operations():
    """verify, doctor and smoke judge a host against the wanted state the operations apply, read
    from hostkit.desired: they import nothing from hostkit.operations."""
    found = {
        (str(path.relative_to(REPO)), module)
        for package in ("verify", "doctor", "smoke") for path in (REPO / "hostkit" / package).rglob("*.py")
        for module in imported_modules(path) if module == "hostkit.operations" or module.startswith("hostkit.operations.")
    }
    assert found == set()


def test_operations_take_the_plan_not_the_profile():
    """After validation only the planner reads HostProfile (issue 33): an operation takes plan
    parts and the snapshot scope the planner made (HostPlan.scope), so no module under
    hostkit.operations imports hostkit.profile, nor hostkit.plan.scope, which makes a scope
    from a profile."""
    found = sorted(
        f"{path.relative_to(REPO)}: {module}"
        for path in (REPO / "hostkit" / "operations").rglob("*.py") for module in imported_modules(path)
        if module in ("hostkit.profile", "hostkit.plan.scope") or module.startswith("hostkit.profile.")
    )
    assert found == []
