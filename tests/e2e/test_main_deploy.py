"""The whole loop on the fresh `main_host` (a VM): the main deploy, a no-change rerun, a reboot,
verify; then the kernel's settings changed behind hostkit's back (swap off, a sysctl, THP),
which verify names with their fixes and the deploy repairs.

It runs first on that host; the modules after it (MAIN_HOST_MODULES) start from its result.
"""

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import REPO, lab_data, lab_inventory
from tests.e2e.lab_shell import assert_root_owned, sh

SWAP = "/mnt/nvme/vllm-hostkit.swap"


@pytest.mark.slow
def test_deploy_converges_reruns_without_change_and_survives_a_reboot(main_host, run_deploy, tmp_path):
    lab_host = main_host
    inventory = lab_inventory(tmp_path / "lab_inventory.py", lab_host)

    plan = subprocess.run([sys.executable, "-m", "hostkit", "plan", str(inventory), "--format", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    planned = json.loads(plan.stdout)
    assert "/mnt/nvme/vllm-hostkit.swap" in plan.stdout
    assert '"Qwen/Qwen2.5-0.5B-Instruct"' in plan.stdout and '"serve"' in plan.stdout, planned
    assert lab_data()["vllm_api_key"] not in plan.stdout + plan.stderr

    first = run_deploy(lab_host)
    assert first.ok, first.output[-4000:]
    assert "vLLM host | Swap file on NVMe" in first.changed
    # The files only a VM gets (test_security.py audits the rest on a container host).
    assert sh(lab_host, f"stat -c '%a %U %G' {SWAP}").split() == ["600", "root", "root"]
    for path in ("/etc/systemd/system/vllm-hostkit-thp.service", "/etc/sysctl.d/99-zz-vllm-hostkit.conf"):
        assert_root_owned(lab_host, path)

    second = run_deploy(lab_host)
    assert second.ok, second.output[-4000:]
    assert second.changed == [], f"a rerun changed: {second.changed}"

    lab_host.reboot()

    verify = subprocess.run(
        [sys.executable, "-m", "hostkit", "verify", str(inventory), "--format", "json"],
        capture_output=True, text=True, cwd=REPO, timeout=900,
    )
    assert verify.returncode == 0, failed_checks(verify.stdout) or verify.stdout[-4000:] + verify.stderr[-2000:]
    report = json.loads(verify.stdout)
    assert report, "verify reported no host"

    after_reboot = run_deploy(lab_host)
    assert after_reboot.ok and after_reboot.changed == [], after_reboot.changed


@pytest.mark.slow
def test_verify_names_the_kernels_drifted_settings_and_the_deploy_repairs_them(main_host, run_deploy, tmp_path):
    inventory = lab_inventory(tmp_path / "lab_inventory.py", main_host)
    main_host.ssh(f"swapoff {SWAP} && sysctl -w vm.swappiness=60"
                  " && echo always > /sys/kernel/mm/transparent_hugepage/enabled", check=True)
    verify = subprocess.run([sys.executable, "-m", "hostkit", "verify", str(inventory), "--format", "json"],
                            capture_output=True, text=True, cwd=REPO, timeout=900)
    assert verify.returncode == 1, verify.stdout[-4000:] + verify.stderr[-2000:]
    (host,) = json.loads(verify.stdout)["hosts"]
    failed = {check["name"]: check for check in host["checks"] if not check["ok"]}
    assert set(failed) == {"swap active", "sysctl vm.swappiness", "THP enabled"}, failed_checks(verify.stdout)
    message = {name: f"{name}: expected {c['expected']}; actual {c['actual']}; fix: {c['fix']}"
               for name, c in failed.items()}
    assert message["swap active"].startswith(f"swap active: expected {SWAP} in /proc/swaps at priority 10; actual ")
    assert "sysctl vm.swappiness: expected 10; actual 60; fix: sysctl -w vm.swappiness=10," in (
        message["sysctl vm.swappiness"])
    assert "THP enabled: expected madvise; actual always; fix: " in message["THP enabled"]

    repaired = run_deploy(main_host)
    assert repaired.ok, repaired.output[-4000:]
    verify = subprocess.run([sys.executable, "-m", "hostkit", "verify", str(inventory)],
                            capture_output=True, text=True, cwd=REPO, timeout=900)
    assert verify.returncode == 0, verify.stdout[-4000:]


def failed_checks(verify_json: str) -> str:
    """The failed checks of a `hostkit verify --format json` report, one a line ("" if unreadable)."""
    try:
        hosts = json.loads(verify_json)["hosts"]
    except (ValueError, KeyError, TypeError):
        return ""
    return "\n".join(f"{host['name']}: {check['name']}: expected {check['expected']}; actual {check['actual']}"
                     for host in hosts for check in host["checks"] if not check["ok"])
