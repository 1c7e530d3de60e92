"""hostkit installs, upgrades and rolls back vLLM itself (vllm_install), on a real lab host.

The releases are wheels of the vLLM STAND-IN as the distribution `vllm` (hostkit_lab/standin/wheel.py),
at releases whose flag sets differ as the real ones do (0.17.1 spells chunked prefill off
`--no-enable-chunked-prefill`, 0.33.0 `--disable-chunked-prefill`), plus a 0.33.1 that fails to
start. They are served from a wheelhouse directory copied to the host, with no index; the host
starts bare (Debian 12's python3 without venv or ensurepip): the deploy adds python3-venv.
One host, five deploys of the full deploy: install, no-change rerun, upgrade, failed upgrade, and
a declared release that differs from the installed one (refused, nothing restarted).
"""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest

from hostkit.vllm.readiness import Probe, probe_command
from tests.e2e.lab_shell import sh
from hostkit_lab.standin.wheel import standin_wheel

pytestmark = pytest.mark.lab
HOST_KIND = "container"

WHEELHOUSE = "/srv/wheelhouse"
DATA = {
    "nvme_device": None,
    "swap_enabled": False,
    "monitoring_enabled": False,
    "vllm_watchdog": False,
    "vllm_served_model_name": "lab-model",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 120,
    "vllm_install": True,
    "vllm_find_links": [WHEELHOUSE],
    "vllm_enable_chunked_prefill": False,
}


@pytest.fixture(scope="module")
def install_host(shared_lab_host, tmp_path_factory):
    house = tmp_path_factory.mktemp("wheelhouse")
    standin_wheel(house, "0.17.1")
    standin_wheel(house, "0.33.0")
    standin_wheel(house, "0.33.1", crash=True)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for path in house.iterdir():
            tar.add(path, arcname=path.name)
    copied = subprocess.run(shared_lab_host.ssh_argv(f"mkdir -p {WHEELHOUSE} && tar -xzf - -C {WHEELHOUSE}"),
                            input=archive.getvalue(), capture_output=True, timeout=300)
    assert copied.returncode == 0, copied.stderr
    return shared_lab_host


def serving(lab_host) -> Probe:
    return Probe.parse(sh(lab_host, probe_command("0.0.0.0", 8000)).strip())


def release_in_service(lab_host) -> tuple[str, str]:
    return (sh(lab_host, "readlink /opt/vllm/current").strip(),
            sh(lab_host, "/opt/vllm/current/bin/hostkit-vllm --version").strip())


def test_install_then_a_rerun_changes_nothing(install_host, run_deploy):
    first = run_deploy(install_host, {**DATA, "vllm_version": "0.17.1"})
    assert first.ok, first.output[-3000:]
    assert "vLLM host | vLLM runtime" in first.changed, first.changed
    assert release_in_service(install_host) == ("/opt/vllm/vllm-0.17.1", "0.17.1")
    assert "--no-enable-chunked-prefill" in sh(install_host, "systemctl show -p ExecStart --value vllm.service")
    assert serving(install_host).serves("lab-model")
    # The service user may read and run the release, never change it.
    assert sh(install_host, "stat -c '%U %a' /opt/vllm/vllm-0.17.1 /opt/vllm/vllm-0.17.1/bin/hostkit-vllm").strip() == \
        "root 755\nroot 755"
    assert sh(install_host, "runuser -u vllm -- sh -c 'touch /opt/vllm/vllm-0.17.1/x 2>&1 || echo refused'") \
        .strip().endswith("refused")

    again = run_deploy(install_host, {**DATA, "vllm_version": "0.17.1"})
    assert again.ok and again.changed == [], again.changed


def test_upgrade_rerenders_the_flags_and_keeps_the_previous_release(install_host, run_deploy):
    upgrade = run_deploy(install_host, {**DATA, "vllm_version": "0.33.0"})
    print(f"--- upgrade to 0.33.0 ---\n{upgrade.output}--- end ---")  # kept in the test log: what a user sees
    assert upgrade.ok, upgrade.output[-3000:]
    assert release_in_service(install_host) == ("/opt/vllm/vllm-0.33.0", "0.33.0")
    exec_start = sh(install_host, "systemctl show -p ExecStart --value vllm.service")
    assert "--disable-chunked-prefill" in exec_start and "--no-enable-chunked-prefill" not in exec_start
    assert sh(install_host, "ls -d /opt/vllm/vllm-*").split() == ["/opt/vllm/vllm-0.17.1", "/opt/vllm/vllm-0.33.0"]
    assert serving(install_host).serves("lab-model")


def test_a_release_that_does_not_start_is_rolled_back_and_the_old_one_serves(install_host, run_deploy):
    failed = run_deploy(install_host, {**DATA, "vllm_version": "0.33.1"})
    print(f"--- failed upgrade to 0.33.1 ---\n{failed.output}--- end ---")  # kept in the test log: what a user sees
    assert not failed.ok
    assert "did not become ready: rolling back to /opt/vllm/vllm-0.33.0" in failed.output, failed.output[-4000:]
    assert "the previous release (/opt/vllm/vllm-0.33.0) serves again" in failed.output, failed.output[-4000:]
    assert release_in_service(install_host) == ("/opt/vllm/vllm-0.33.0", "0.33.0")
    # The failed release is removed; 0.17.1, older than the previous release, went at the switch.
    assert sh(install_host, "ls -d /opt/vllm/vllm-*").split() == ["/opt/vllm/vllm-0.33.0"]
    assert serving(install_host).serves("lab-model")
    # Declaring the release that serves again converges with nothing to do.
    back = run_deploy(install_host, {**DATA, "vllm_version": "0.33.0"})
    assert back.ok and back.changed == [], back.changed


def test_a_declared_release_that_is_not_the_installed_one_is_refused_without_a_restart(install_host, run_deploy):
    """The user's own vLLM (vllm_install off): the release read from its interpreter is 0.33.0."""
    main_pid = sh(install_host, "systemctl show -p MainPID --value vllm.service").strip()
    refused = run_deploy(install_host, {**DATA, "vllm_install": False, "vllm_version": "0.17.1",
                                        "vllm_command": "/opt/vllm/current/bin/hostkit-vllm"})
    assert not refused.ok
    assert "vLLM 0.33.0 is installed" in refused.output and "but vllm_version is 0.17.1" in refused.output, \
        refused.output[-3000:]
    assert "nothing is restarted" in refused.output
    assert sh(install_host, "systemctl show -p MainPID --value vllm.service").strip() == main_pid
    assert serving(install_host).serves("lab-model")
