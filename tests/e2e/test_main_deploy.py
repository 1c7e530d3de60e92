"""The whole loop on the fresh `main_host`: the main deploy, a no-change rerun, a reboot, verify.\n\nIt runs first on that host; the modules after it (MAIN_HOST_MODULES) start from its result.\n"""

import json
import subprocess
import sys

import pytest

from conftest import REPO, lab_data, lab_inventory


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


def failed_checks(verify_json: str) -> str:
    """The failed checks of a `hostkit verify --format json` report, one a line ("" if unreadable)."""
    try:
        hosts = json.loads(verify_json)["hosts"]
    except (ValueError, KeyError, TypeError):
        return ""
    return "\n".join(f"{host['name']}: {check['name']}: expected {check['expected']}; actual {check['actual']}"
                     for host in hosts for check in host["checks"] if not check["ok"])
