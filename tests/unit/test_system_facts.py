"""The system section's command, run here under sh, against what Python reads itself."""

from __future__ import annotations

import pytest

import os
import platform
import subprocess
from pathlib import Path

from hostkit.facts.system import SystemFact

pytestmark = pytest.mark.processes


def test_command_reads_the_same_values_as_python():
    env = {key: value for key, value in os.environ.items() if not key.startswith("OMP_")}
    result = subprocess.run(["sh", "-c", SystemFact().command()], capture_output=True, text=True, env=env,
                            timeout=30, check=True)
    info = SystemFact().process(result.stdout.splitlines())
    assert info.hostname == Path("/proc/sys/kernel/hostname").read_text().strip()
    assert info.kernel == platform.release()
    assert info.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert info.kernel_cmdline == Path("/proc/cmdline").read_text().strip()
    assert info.cpu_count == len(os.sched_getaffinity(0))
    assert info.mem_total_bytes > 0 and info.mem_available_bytes > 0
    cgroup_fs = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout
    assert info.cgroup_version == (2 if cgroup_fs.strip() == "cgroup2fs" else 1)
    assert len([line for line in result.stdout.splitlines() if line.startswith("systemd=")]) == 1
