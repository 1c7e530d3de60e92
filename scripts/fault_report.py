"""Run the fault, bad-input and security tests on lab hosts and print one summary.

    python3 scripts/fault_report.py                     # runs pytest (boots lab VMs), then summarises
    python3 scripts/fault_report.py --junit FILE        # summarises an earlier run's junit XML
    python3 scripts/fault_report.py -- -k 'not slow'    # extra pytest arguments after --

Faults tested by other areas' tests are run by node id, not repeated. Exit status: pytest's
(or 1 when a summarised test failed).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Fault:
    name: str
    node: str  # pytest node id (a prefix: parametrised ids match too)
    held: str  # what is checked after the fault


AFTER_EACH = "reachable, booted clean, no fstab entry for a missing file, rerun converges with no change"
FAULTS = (
    Fault("swap filesystem full (3 ways)",
          "tests/e2e/test_swap.py::test_disk_full_is_refused_or_cleaned_up",
          "partial file removed, fstab unchanged, old swap still active, rerun changes nothing"),
    Fault("ssh cut during the swap dd",
          "tests/e2e/test_faults.py::test_ssh_cut_during_the_swap_dd_then_a_rerun_converges",
          f"dead run's lock taken over after its dd ended; {AFTER_EACH}"),
    Fault("reboot between swap and unit steps",
          "tests/e2e/test_faults.py::test_a_reboot_between_the_swap_and_unit_steps_then_a_rerun_converges",
          f"unit not half-written; rerun applies the new flag; {AFTER_EACH}"),
    Fault("blank or foreign NVMe at boot",
          "tests/e2e/test_swap.py::test_swap_comes_back_at_boot_by_itself_and_a_foreign_disk_is_left_alone",
          "boot not held; blank: formatted and swap back with no deploy, a deploy then changes nothing;"
          " foreign: untouched, no swap, the metric says absent"),
    Fault("resize or swapoff while RAM cannot absorb the swap",
          "tests/e2e/test_swap.py::test_resize_and_swapoff_are_refused_while_memory_is_short_then_swap_is_removed",
          "both refused with the numbers, before any dd; old swap and fstab kept; allowed once memory is free"),
    Fault("vLLM crash loop (bad model path)",
          "tests/e2e/test_faults.py::test_a_crash_looping_vllm_fails_the_gate_with_its_journal",
          f"gate fails with the unit's journal lines, host reachable; {AFTER_EACH}"),
    Fault("memory hog in the vLLM unit (cgroup v2, v1)",
          "tests/e2e/test_vllm_service.py::test_memory_overrun_is_contained_in_the_unit",
          "OOM inside the unit's cgroup only, sshd untouched, unit restarted, converges"),
    Fault("two deploys at once",
          "tests/e2e/test_faults.py::test_a_second_deploy_at_once_is_refused_and_nothing_is_corrupted",
          f"second refused naming the lock holder, first succeeds; {AFTER_EACH}"),
)
BAD_INPUT = "tests/e2e/test_bad_input.py"
BAD_INPUT_CASE = f"{BAD_INPUT}::test_bad_input_is_refused_naming_host_and_key["
SECURITY = "tests/e2e/test_security.py"


@dataclass(frozen=True)
class Result:
    node: str
    outcome: str  # passed, failed, error, skipped
    seconds: float
    message: str


def node_id(case: ElementTree.Element) -> str:
    """pytest's node id from junit's classname (`tests.e2e.test_x`) and name (module-level tests),
    without the `@lane` suffix that xdist's loadgroup adds."""
    name = re.sub(r"@[\w-]+$", "", case.get("name", ""))
    return f"{case.get('classname', '').replace('.', '/')}.py::{name}"


def read_junit(path: Path) -> list[Result]:
    results = []
    for case in ElementTree.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (element.get("message") or "").splitlines()[0][:160] if element.get("message") else ""
                break
        results.append(Result(node_id(case), outcome, float(case.get("time", 0)), message))
    return results


def matching(results: list[Result], prefix: str) -> list[Result]:
    return [r for r in results if r.node == prefix or r.node.startswith(prefix)]


def verdict(found: list[Result]) -> str:
    if not found:
        return "NOT RUN"
    if all(r.outcome == "passed" for r in found):
        return "survived"
    if all(r.outcome == "skipped" for r in found):
        return "skipped"
    return "FAILED"


def summary(results: list[Result]) -> tuple[str, bool]:
    lines = ["vllm-hostkit fault report (lab hosts: Debian 12 VMs under qemu and container hosts, real pyinfra over ssh)", ""]
    ok = True

    cases = matching(results, BAD_INPUT_CASE)
    refused = [r for r in cases if r.outcome == "passed"]
    digest = matching(results, f"{BAD_INPUT}::test_the_host_is_unchanged_after_each_case")
    lines.append(f"Bad input: {len(cases)} bad inventory hosts tried through `pyinfra INVENTORY deploys/vllm_host.py`;"
                 f" {len(refused)} refused with a non-zero exit naming the host and the key.")
    lines.append(f"  host state digest (fstab, sysctl.d, systemd units, /proc/swaps, THP) before == after each case:"
                 f" {'held' if verdict(digest) == 'survived' else verdict(digest)}")
    for r in cases:
        if r.outcome != "passed":
            ok = False
            lines.append(f"  NOT REFUSED PROPERLY: {r.node.split('[', 1)[1].rstrip(']')}: {r.message}")
    if len(refused) != len(cases) or not cases:
        ok = False

    lines += ["", "Faults injected:"]
    width = max(len(f.name) for f in FAULTS)
    for fault in FAULTS:
        found = matching(results, fault.node)
        state = verdict(found)
        ok = ok and state in ("survived",)
        seconds = sum(r.seconds for r in found)
        lines.append(f"  {fault.name:<{width}}  {state:<8} {seconds:6.0f}s")
        lines.append(f"  {'':<{width}}  held: {fault.held}")
        for r in found:
            if r.outcome not in ("passed",):
                lines.append(f"  {'':<{width}}  {r.outcome}: {r.message}")

    checks = matching(results, SECURITY)
    lines += ["", f"Security audit ({len(checks)} checks on one provisioned host):"]
    for r in checks:
        name = r.node.split("::", 1)[1].removeprefix("test_").replace("_", " ")
        lines.append(f"  {'held  ' if r.outcome == 'passed' else r.outcome.upper():<6} {name}"
                     + (f": {r.message}" if r.outcome != "passed" else ""))
        ok = ok and r.outcome == "passed"
    if not checks:
        ok = False
        lines.append("  NOT RUN")
    covered = {r.node: r for prefix in (BAD_INPUT, SECURITY, *(f.node for f in FAULTS)) for r in matching(results, prefix)}
    total = sum(r.seconds for r in covered.values())
    passed = sum(r.outcome == "passed" for r in covered.values())
    lines += ["", f"{len(covered)} tests, {passed} passed, {total / 60:.1f} min of test time"]
    return "\n".join(lines), ok


def pytest_nodes() -> list[str]:
    return [BAD_INPUT, "tests/e2e/test_faults.py", SECURITY] + [f.node for f in FAULTS
                                                                if not f.node.startswith("tests/e2e/test_faults.py")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--junit", type=Path, help="summarise this junit XML instead of running pytest")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "faults.xml", help="where pytest writes junit")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    status = 0
    junit = args.junit
    if junit is None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pytest", *pytest_nodes(), f"--junitxml={args.out}",
                   "-o", "junit_family=xunit1", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                   "-q", *args.pytest_args]
        print("$", " ".join(command), flush=True)
        status = subprocess.run(command, cwd=REPO).returncode
        junit = args.out
    text, ok = summary(read_junit(junit))
    print()
    print(text)
    return status or (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
