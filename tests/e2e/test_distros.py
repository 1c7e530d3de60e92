"""Debian 11 (systemd 247, kernel 5.10, booted with cgroup v1) and Debian 13 (systemd 257,
kernel 6.12, cgroup v2): the main deploy, a no-change rerun, a reboot and `hostkit verify`, as
test_main_deploy.py does on Debian 12. Each VM then serves test_vllm_service.py's tests of what
the cgroup version changes (conftest.RELEASE_HOSTS).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hostkit.facts.platform import PlatformFact
from tests.e2e.conftest import REPO, RELEASE_HOSTS, lab_inventory, release_host

pytestmark = [pytest.mark.lab, pytest.mark.slow]


# Debian 11's systemd (247) brackets Ubuntu 22.04's (249) from below, Debian 13's (257)
# Ubuntu 24.04's (255) from above.
@pytest.mark.parametrize(("os_name", "systemd"), [pytest.param("debian11", "247", id="debian11"),
                                                  pytest.param("debian13", "257", id="debian13")])
def test_main_deploy_reboot_and_verify(shared_hosts, run_deploy, tmp_path, os_name, systemd):
    lab_host = release_host(shared_hosts, os_name)
    assert lab_host.ssh("systemctl --version", check=True).stdout.split()[1] == systemd
    cgroup_fs = {"v1": "tmpfs", "v2": "cgroup2fs"}[RELEASE_HOSTS[os_name]]
    assert lab_host.ssh("stat -fc %T /sys/fs/cgroup", check=True).stdout.strip() == cgroup_fs
    platform = PlatformFact().process(lab_host.ssh(PlatformFact().command(), check=True).stdout.splitlines())
    assert (platform.python, platform.package_manager, platform.container) == ("/usr/bin/python3", "apt", None)

    first = run_deploy(lab_host)
    assert first.ok, first.output[-4000:]
    assert "vLLM host | vLLM systemd unit" in first.changed, first.changed
    second = run_deploy(lab_host)
    assert second.ok and second.changed == [], f"{second.changed}\n{second.output[-3000:]}"

    lab_host.reboot()
    inventory = lab_inventory(tmp_path / "inventory.py", lab_host)
    verify = subprocess.run([sys.executable, "-m", "hostkit", "verify", str(inventory), "--format", "json"],
                            capture_output=True, text=True, cwd=REPO, timeout=900)
    assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-2000:]
    (host,) = json.loads(verify.stdout)["hosts"]
    assert host["ok"] and {check["area"] for check in host["checks"]} >= {"swap", "kernel", "vllm"}
