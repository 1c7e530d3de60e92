"""Plan warnings and notes from the platform facts, and the driver-package hold's command."""

from __future__ import annotations

import pytest

import subprocess
from pathlib import Path

from hostkit.facts.platform import PlatformFact, PlatformInfo
from hostkit.paths import PLATFORM_PYTHON
from hostkit.operations.driver_hold import hold_command
from hostkit.plan.platform_findings import platform_findings
from hostkit.plan.plans import GpuPlan
from hostkit.profile.validation import profile_from_data

FIXTURES = Path(__file__).parent / "fixtures" / "platform"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
DRIVER = ["libnvidia-compute-570", "nvidia-driver-570", "nvidia-utils-570"]


def profile(**data):
    return profile_from_data("gpu-1", {"vllm_model": MODEL, **data})


def ubuntu(**changes) -> PlatformInfo:
    base = dict(python="/usr/bin/python3", package_manager="apt", driver_packages=DRIVER, auto_upgrades=True)
    return PlatformInfo(**{**base, **changes})


def findings(platform: PlatformInfo, swap_enabled: bool = True, **data) -> tuple[list[str], list[str]]:
    return platform_findings(profile(**data), platform, swap_enabled)


def test_a_plain_debian_host_has_nothing_to_say():
    assert findings(PlatformInfo(python="/usr/bin/python3", package_manager="apt")) == ([], [])


def test_ubuntu_unattended_upgrades_of_the_driver_warn_and_the_hold_is_offered():
    warnings, _ = findings(ubuntu())
    (warning,) = warnings
    assert warning.startswith("unattended-upgrades may upgrade the NVIDIA driver packages libnvidia-compute-570, ")
    assert "Driver/library version mismatch" in warning and "gpu_hold_driver_packages: true" in warning
    # With the key on, the deploy holds them: a note instead, and the command holds the unheld ones only.
    warnings, notes = findings(ubuntu(held_packages=["nvidia-utils-570"]), gpu_hold_driver_packages=True)
    assert warnings == [] and notes == [f"apt-mark hold on the NVIDIA driver packages: {', '.join(DRIVER)}"]
    command = hold_command(GpuPlan(hold_driver_packages=True), ubuntu(held_packages=["nvidia-utils-570"]))
    assert command.startswith("timeout 300 apt-mark hold libnvidia-compute-570 nvidia-driver-570 >/dev/null")
    assert hold_command(GpuPlan(hold_driver_packages=True), ubuntu(held_packages=DRIVER)) is None
    assert hold_command(GpuPlan(), ubuntu()) is None


def test_dnf_hosts_get_versionlock_advice_not_a_hold():
    rhel = PlatformInfo(python=PLATFORM_PYTHON, package_manager="dnf", driver_packages=["nvidia-driver"],
                        auto_upgrades=True)
    warnings, notes = findings(rhel, gpu_hold_driver_packages=True)
    assert hold_command(GpuPlan(hold_driver_packages=True), rhel) is None
    assert any("dnf versionlock add" in w and "nvidia-driver" in w for w in warnings)
    assert notes == [f"python3 is not on PATH: the probes run {PLATFORM_PYTHON} (RHEL 8's own python)"]
    warnings, _ = findings(rhel)
    assert warnings[0].startswith("dnf-automatic may upgrade the NVIDIA driver packages nvidia-driver ")


def test_no_python_warns_and_selinux_and_old_lsblk_are_noted():
    warnings, notes = findings(PlatformInfo(selinux="enforcing", lsblk_without_path=True))
    assert warnings == [f"no python3 on the host (nor {PLATFORM_PYTHON}): the readiness gate and verify cannot "
                        "probe vLLM; install python3"]
    assert any(n.startswith("lsblk has no PATH column") for n in notes)
    assert any(n.startswith("SELinux enforcing: the swap file gets the swapfile_t label") for n in notes)
    _, notes = findings(PlatformInfo(python="/usr/bin/python3", selinux="enforcing"), swap_enabled=False)
    assert notes == []


def test_tuned_profiles_that_set_thp_or_swappiness_conflict(tmp_path):
    """The no-thp profile of the install guides, resolved from tuned's own profiles."""
    lines = ["%%hostkit-platform:python", "/usr/bin/python3", "%%hostkit-platform:tuned", "active no-thp"]
    for name in ("no-thp", "virtual-guest", "throughput-performance"):
        lines += [f"profile {name}"] + [f"| {line}" for line in (FIXTURES / f"tuned-{name}.conf").read_text().splitlines()]
    platform = PlatformFact().process(lines)
    warnings, _ = findings(platform)
    assert [w.split(":")[0] for w in warnings] == [
        "tuned profile no-thp sets vm.swappiness = 30 (hostkit sets 10)",
        "tuned profile no-thp sets transparent_hugepages = never (hostkit sets madvise)",
    ]
    assert "tuned's value wins" in warnings[0]
    # Where tuned and hostkit agree there is nothing to say.
    warnings, _ = findings(platform, sysctl={"vm.swappiness": "30"}, thp_enabled="never")
    assert warnings == []


@pytest.mark.processes
def test_the_hold_command_runs_under_sh(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-mark").write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/held\n")
    (bin_dir / "apt-mark").chmod(0o755)
    command = hold_command(GpuPlan(hold_driver_packages=True), ubuntu())
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    subprocess.run(["sh", "-c", command], check=True, env=env, timeout=30)
    assert (tmp_path / "held").read_text().split() == ["hold", *DRIVER]
    (bin_dir / "apt-mark").write_text("#!/bin/sh\nexit 100\n")
    failed = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=30)
    assert failed.returncode == 1 and "apt-mark hold libnvidia-compute-570" in failed.stderr
