"""The sysctl value check, on the kernel section recorded with a profile's keys (fixtures/kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.facts.gpu import parse_gpu_output
from hostkit.facts.kernel import KernelFact
from hostkit.facts.snapshot import HostSnapshot
from hostkit.facts.storage import StorageFact
from hostkit.facts.system import SystemFact
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.plan.planner import PlanError, plan_host
from hostkit.profile.validation import profile_from_data
from hostkit.plan.sysctl_values import kernel_version, value_problem

FIXTURES = Path(__file__).parent / "fixtures" / "kernel"
KERNEL = KernelFact().process((FIXTURES / "profile-keys-6.18.txt").read_text().splitlines())
SYSTEM = SystemFact().process((FIXTURES / "profile-keys-6.18.system.txt").read_text().splitlines())
RELEASE = SYSTEM.kernel  # 6.18.44-fc-v973


def test_the_section_reads_each_profile_key():
    assert KERNEL.live["vm/swappiness"] == "60" and KERNEL.live["vm/no_such_key"] is None
    assert KERNEL.live["net/ipv4/tcp_rmem"] == "4096 131072 33554432"
    assert RELEASE == "6.18.44-fc-v973" and kernel_version(RELEASE) == (6, 18)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("vm.swappiness", "400", "400 is not allowed: vm.swappiness takes a whole number 0 to 200 on kernel"
                                 " 6.18.44-fc-v973 (0 to 100 before 5.8)"),
        ("vm.swappiness", "ten", "ten is not allowed: vm.swappiness takes a whole number 0 to 200"),
        ("vm.swappiness", "-1", "-1 is not allowed"),
        ("vm.max_map_count", "-5", "-5 is not allowed: vm.max_map_count takes a whole number 0 or more"),
        ("vm.no_such_key", "1", "no such key: /proc/sys/vm/no_such_key does not exist on this host"),
        ("net.core.somaxconn", "many", "many is not allowed: the kernel's value is a whole number (now '4096')"),
        ("net.ipv4.tcp_rmem", "4096 131072", "the kernel's value is 3 whole numbers"),
    ],
)
def test_refused_values_say_what_the_kernel_takes(key, value, problem):
    assert problem in value_problem(key, value, RELEASE, KERNEL.live)


@pytest.mark.parametrize(
    ("key", "value"),
    [("vm.swappiness", "200"), ("vm.swappiness", "0"), ("vm.max_map_count", "262144"),
     ("net.ipv4.tcp_rmem", "4096  131072\t6291456"), ("kernel.core_pattern", "|/usr/bin/x %p"),
     ("net.core.somaxconn", 8192), ("vm.not_read_by_these_facts", "x")],
)
def test_values_the_kernel_takes_pass(key, value):
    assert value_problem(key, value, RELEASE, KERNEL.live) is None


def test_swappiness_above_100_is_refused_before_5_8():
    assert "takes a whole number 0 to 100 on kernel 5.4.0-150-generic" in value_problem(
        "vm.swappiness", "150", "5.4.0-150-generic", KERNEL.live
    )
    assert value_problem("vm.swappiness", "100", "5.4.0-150-generic", KERNEL.live) is None
    assert value_problem("vm.swappiness", "150", "5.8.0", KERNEL.live) is None
    # A facts file without the release: the widest range, so nothing a new kernel takes is refused.
    assert value_problem("vm.swappiness", "150", None, {}) is None
    assert "(kernel release unknown)" in value_problem("vm.swappiness", "201", None, {})


def test_the_planner_refuses_every_bad_sysctl_naming_host_key_value_and_allowed():
    facts = planning_facts(HostSnapshot({"system": SYSTEM, "kernel": KERNEL, "storage": StorageFact().process([]),
                                             "gpu": parse_gpu_output([])}))
    profile = profile_from_data("lab-1", {"vllm_enabled": False, "gpu_required": False, "swap_enabled": False,
                                          "sysctl": {"vm.swappiness": 400, "vm.no_such_key": 1, "vm.max_map_count": 262144}})
    with pytest.raises(PlanError) as caught:
        plan_host(profile, facts, host_name="lab-1")
    issues = [str(issue) for issue in caught.value.issues]
    assert issues == [
        "host lab-1: sysctl['vm.swappiness']: 400 is not allowed: vm.swappiness takes a whole number 0 to 200"
        " on kernel 6.18.44-fc-v973 (0 to 100 before 5.8)",
        "host lab-1: sysctl['vm.no_such_key']: no such key: /proc/sys/vm/no_such_key does not exist on this host"
        " (kernel 6.18.44-fc-v973)",
    ]
    assert not caught.value.host_state_only  # bad data: the run stops at prepare, before any host changes

