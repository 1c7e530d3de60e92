"""hostkit on a container host, on outputs recorded in a real systemd-nspawn container
(fixtures/container/README.md): the platform fact's container and cgroup parts, the plan
that leaves NVMe, swap, sysctl and THP to the container's host, verify's "not applicable",
and the MemoryMax= that the container's kernel does not apply (plan, readiness gate,
verify, doctor). The VM counterparts show that nothing changes off containers."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from xml.etree import ElementTree

import pytest

from hostkit.desired.vllm_readiness import memory_limit_problem
from hostkit.cli.plan import plan_as_json, plan_as_text
from hostkit.doctor.gather import parse_doctor_output
from hostkit.doctor.rules import Severity, diagnose
from hostkit.facts.platform import PlatformFact, script
from hostkit.facts.snapshot import MARKER as SNAPSHOT_MARKER
from hostkit.facts.snapshot import HostSnapshotFact
from hostkit.facts.vllm_service import VllmServiceFact
from hostkit.plan.plans import HOST_SETTINGS
from hostkit.plan.planner import plan_host
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.profile.validation import profile_from_data
from hostkit.sizes import MIB
from hostkit.verify.checks import NOT_APPLICABLE, PASS
from hostkit.verify.probes import MARKER as PROBE_MARKER
from hostkit.verify.report import to_json, to_junit, to_text
from hostkit.verify.runner import verify_host
from verify_replay import LAB_DATA, FakeHost, recorded, storage_today

FIXTURES = Path(__file__).parent / "fixtures"
CONTAINER = FIXTURES / "container"
LEFT = "left to the container's host (systemd-nspawn container)"


def container_snapshot():
    return HostSnapshotFact().process((CONTAINER / "nspawn-debian12.snapshot.txt").read_text().splitlines())


def container_plan(data: dict | None = None):
    profile = profile_from_data("c1", data or LAB_DATA)
    return plan_host(profile, planning_facts(container_snapshot()), host_name="c1")


def vm_plan():
    snapshot = HostSnapshotFact().process(storage_today(recorded("debian12-converged.snapshot.txt")))
    return plan_host(profile_from_data("lab1", LAB_DATA), planning_facts(snapshot), host_name="lab1")


# -- the platform fact ---------------------------------------------------------------------


def test_the_snapshot_in_a_nspawn_container_says_so_and_why_memory_max_is_not_applied():
    platform = container_snapshot().platform
    assert platform.container == "systemd-nspawn"  # systemd-detect-virt --container in it
    assert "memory hierarchy (/sys/fs/cgroup/memory) is mounted read-only" in platform.memory_limit_unapplied


def test_the_controller_it_ran_on_is_a_docker_container_whose_memory_hierarchy_is_writable():
    platform = PlatformFact().process((CONTAINER / "lab-controller.platform.txt").read_text().splitlines())
    assert platform.container == "docker"
    assert platform.memory_limit_unapplied is None


def test_a_recording_without_the_parts_knows_no_container_and_no_memory_problem():
    platform = HostSnapshotFact().process(storage_today(recorded("debian12-converged.snapshot.txt"))).sections.get("platform")
    assert platform is None or (platform.container, platform.memory_limit_unapplied) == (None, None)
    assert PlatformFact().process([]).container is None


def run_platform(root: Path) -> list[str]:
    """platform.sh on a recorded tree: under HK_PLATFORM_ROOT it asks no systemd-detect-virt."""
    env = {**os.environ, "HK_PLATFORM_ROOT": str(root)}
    return subprocess.run(["sh", "-c", script()], env=env, capture_output=True, text=True, check=True).stdout.splitlines()


def put(root: Path, path: str, data: bytes) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


@pytest.mark.processes
def test_without_systemd_detect_virt_the_run_file_then_pid1s_environment_name_the_container(tmp_path):
    put(tmp_path, "/proc/1/environ", (CONTAINER / "nspawn-debian12.pid1-environ").read_bytes())
    assert PlatformFact().process(run_platform(tmp_path)).container == "systemd-nspawn"
    put(tmp_path, "/run/systemd/container", b"lxc\n")  # the run file wins over the environment
    assert PlatformFact().process(run_platform(tmp_path)).container == "lxc"


@pytest.mark.processes
@pytest.mark.parametrize(("mountinfo", "unapplied"), [
    ("nspawn-debian12.mountinfo", "mounted read-only"),
    ("lab-controller.mountinfo", None),
])
def test_the_memory_hierarchy_is_read_from_mountinfo(tmp_path, mountinfo, unapplied):
    put(tmp_path, "/proc/self/mountinfo", (CONTAINER / mountinfo).read_bytes())
    found = PlatformFact().process(run_platform(tmp_path)).memory_limit_unapplied
    assert found is None if unapplied is None else unapplied in found


@pytest.mark.processes
@pytest.mark.parametrize(("controllers", "applied"), [
    (b"cpuset cpu io memory hugetlb pids rdma misc\n", True),  # a cgroup v2 VM or a delegated container
    (b"cpu io pids\n", False),  # a container its host gave no memory controller
])
def test_on_cgroup_v2_the_root_cgroups_controllers_decide(tmp_path, controllers, applied):
    put(tmp_path, "/sys/fs/cgroup/cgroup.controllers", controllers)
    put(tmp_path, "/proc/self/mountinfo", (CONTAINER / "lab-controller.mountinfo").read_bytes())
    found = PlatformFact().process(run_platform(tmp_path)).memory_limit_unapplied
    assert (found is None) is applied


# -- the plan ------------------------------------------------------------------------------


def test_a_containers_plan_leaves_nvme_swap_sysctl_and_thp_to_its_host():
    plan = container_plan()  # LAB_DATA names an NVMe device, a swap size and sysctl values
    assert plan.container == "systemd-nspawn" and plan.left_to_host == HOST_SETTINGS
    assert plan.nvme is None and not plan.swap.enabled and plan.swap.reason == LEFT
    assert plan.kernel.sysctl == {} and plan.kernel.thp_enabled is plan.kernel.thp_defrag is None
    text = plan_as_text(plan).splitlines()
    assert text[1:5] == [f"{name:<10}{LEFT}" for name in ("nvme", "swap", "sysctl", "thp")]
    assert not any(line.startswith("          ") and "swap" in line for line in text)
    data = plan_as_json(plan)
    assert (data["container"], data["left_to_host"]) == ("systemd-nspawn", list(HOST_SETTINGS))


def test_a_memory_max_the_containers_kernel_does_not_apply_is_a_plan_warning():
    plan = container_plan()
    assert "mounted read-only" in plan.vllm.memory_limit_unapplied
    assert any("accepted by systemd but not applied by the kernel in this systemd-nspawn container" in warning
               for warning in plan.warnings)
    assert plan_as_json(plan)["vllm"]["memory_limit_unapplied"] == plan.vllm.memory_limit_unapplied
    no_limit = container_plan({**LAB_DATA, "vllm_memory_max": None, "vllm_memory_high": None})
    assert no_limit.vllm.memory_limit_unapplied is None


def test_a_vms_plan_and_its_json_are_as_before():
    plan = vm_plan()
    assert plan.container is None and plan.left_to_host == ()
    assert plan.nvme is not None and plan.swap.enabled and plan.kernel.sysctl
    text = plan_as_text(plan)
    assert "left to" not in text and "\nswap      /mnt/nvme/vllm-hostkit.swap" in text and "\nsysctl    vm." in text
    data = plan_as_json(plan)
    assert "container" not in data and "left_to_host" not in data and "memory_limit_unapplied" not in data["vllm"]


def test_an_unapplied_limit_on_a_vm_stays_the_failure_it_was():
    """hostkit owns a VM's kernel: a missing memory controller there is to be fixed, not warned about."""
    snapshot = HostSnapshotFact().process(storage_today(recorded("debian12-converged.snapshot.txt")))
    facts = planning_facts(snapshot)
    platform = container_snapshot().platform.model_copy(update={"container": None})
    plan = plan_host(profile_from_data("lab1", LAB_DATA), facts.model_copy(update={"platform": platform}))
    assert plan.vllm.memory_limit_unapplied is None and plan.container is None


# -- the readiness gate --------------------------------------------------------------------


def test_the_readiness_gate_does_not_hold_the_unapplied_limit_against_a_container():
    service = container_snapshot().vllm  # the stand-in unit: MemoryMax=100M, no memory cgroup of its own
    assert service.memory_limit_bytes is None
    plan = container_plan()
    assert memory_limit_problem(plan.vllm, service) is None
    applied = plan.vllm.model_copy(update={"memory_limit_unapplied": None})
    assert "not in force" in memory_limit_problem(applied, service)


def test_the_vllm_section_recorded_in_the_container_has_no_memory_cgroup_lines():
    lines = (CONTAINER / "nspawn-debian12.snapshot.txt").read_text().splitlines()
    section = lines[lines.index(f"{SNAPSHOT_MARKER} vllm") + 1:lines.index(f"{SNAPSHOT_MARKER} vllm_release")]
    assert not any(line.startswith("cgroup.") for line in section)
    assert VllmServiceFact().process(section).unit["ControlGroup"] == "/system.slice/vllm.service"


# -- verify --------------------------------------------------------------------------------


def container_report():
    host = FakeHost()
    host.outputs = {SNAPSHOT_MARKER: (CONTAINER / "nspawn-debian12.snapshot.txt").read_text(),
                    PROBE_MARKER: (CONTAINER / "nspawn-debian12.probe.txt").read_text()}
    return verify_host("c1", host, profile_from_data("c1", LAB_DATA))


def test_verify_reports_the_hosts_settings_not_applicable_in_a_container():
    report = container_report()
    skipped = {(c.area, c.name): c.not_applicable for c in report.checks if c.status == NOT_APPLICABLE}
    assert skipped.pop(("swap", "NVMe")) == skipped.pop(("swap", "swap")) == LEFT
    assert skipped.pop(("kernel", "sysctl")) == skipped.pop(("kernel", "THP")) == LEFT
    assert "mounted read-only" in skipped.pop(("vllm", "memory limit in force"))
    assert skipped == {}
    assert all(c.ok for c in report.checks if c.area in ("swap", "kernel"))
    assert any("not applied by the kernel" in warning for warning in report.warnings)


def test_not_applicable_in_text_json_and_junit():
    report = container_report()
    text = to_text([report])
    failed = sum(not c.ok for c in report.checks)
    applicable = len(report.checks) - 5
    assert f"({applicable - failed}/{applicable} checks passed, 5 not applicable;" in text
    assert f"  n/a   [swap] swap: not applicable: {LEFT}" in text
    assert "WARN  MemoryMax 989M is accepted by systemd but not applied" in text
    checks = json.loads(to_json([report]))["hosts"][0]["checks"]
    thp = next(c for c in checks if c["name"] == "THP")
    assert (thp["ok"], thp["status"], thp["reason"]) == (True, NOT_APPLICABLE, LEFT)
    assert all("status" not in c for c in checks if c["name"] not in ("NVMe", "swap", "sysctl", "THP",
                                                                       "memory limit in force"))
    suite = ElementTree.fromstring(to_junit([report])).find("testsuite")
    assert suite.get("skipped") == "5"
    case = suite.find("testcase[@name='sysctl']")
    assert case.find("skipped").get("message") == LEFT and case.find("failure") is None


def test_a_vms_verify_report_has_no_not_applicable_check():
    report = verify_host("lab1", FakeHost(), profile_from_data("lab1", LAB_DATA))
    assert {c.status for c in report.checks} == {PASS}
    assert "not applicable" not in to_text([report]) and 'skipped="0"' in to_junit([report])


# -- doctor --------------------------------------------------------------------------------


def doctor_inputs(platform):
    inputs = parse_doctor_output("lab1", (FIXTURES / "doctor" / "lab-clean.txt").read_text().splitlines())
    return replace(inputs, unit=replace(inputs.unit, max_bytes=100 * MIB), platform=platform)


def test_doctor_warns_of_a_memory_max_the_containers_kernel_does_not_apply():
    finding = next(f for f in diagnose(doctor_inputs(container_snapshot().platform)).findings
                   if f.code == "memory-limit-unapplied")
    assert finding.severity is Severity.WARNING
    assert "MemoryMax=100M is accepted by systemd but the kernel does not apply it in this systemd-nspawn container" \
        in finding.problem


def test_doctor_says_nothing_of_it_where_the_kernel_applies_the_limit():
    platform = PlatformFact().process((CONTAINER / "lab-controller.platform.txt").read_text().splitlines())
    for inputs in (doctor_inputs(platform), doctor_inputs(None)):
        assert "memory-limit-unapplied" not in {f.code for f in diagnose(inputs).findings}


def test_an_unreadable_kernel_log_is_the_containers_hosts_not_a_failure():
    from hostkit.facts.kernel_log import KernelLog
    from hostkit.verify.checks import oom_checks

    (check,) = oom_checks(KernelLog(source=None), "systemd-nspawn")
    assert check.ok and check.status == NOT_APPLICABLE
    assert check.not_applicable == "the kernel log is the container's host's (unreadable in this systemd-nspawn container)"
    (on_a_vm,) = oom_checks(KernelLog(source=None))
    assert not on_a_vm.ok and on_a_vm.fix == "run the verification as root"
    (read,) = oom_checks(KernelLog(source="journalctl"), "lxc")
    assert read.ok and read.status == PASS  # a container that may read the log is checked
