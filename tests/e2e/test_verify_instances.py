"""`hostkit verify` of a lab container host running several vLLM instances (issue 35): the
three stand-ins of tests/e2e/test_instances.py, deployed the same way (instances_deploy.py,
the nvidia-smi stand-in); verify passes naming each instance's checks, and a stopped instance
fails verify naming that instance alone. Times are printed as JSON lines.

The container has no NVIDIA driver, only the nvidia-smi stand-in, so verify's GPU checks of
the driver fail there as the deploy's GPU check would (LAB_GPU_FAILURES): every other check
passes. instances_deploy.py installs no monitoring and no watchdogs: verify reads the inventory
with them off (tests/e2e/test_instances_watched.py verifies the instances' watchdogs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hostkit.paths import vllm_instance_unit
from tests.e2e.conftest import lab_inventory
from tests.e2e.test_instances import BASE, INSTANCES, KEYS, NAMES, deployed, host  # noqa: F401 (fixtures)
from tests.e2e.test_verify import failed_checks, hostkit_verify
from tests.e2e.vllm_unit import sh

pytestmark = pytest.mark.lab
HOST_KIND = "container"

LAB_GPU_FAILURES = {"GPU device nodes", "GPU kernel module loaded", "GPU kernel modules"}
# Each instance's checks that must be in the report, by the name after its unit's.
INSTANCE_CHECKS = ("unit active", "unit file", "environment file", "ready (/health)", "serves the model (/v1/models)",
                   "API key in effect", "GPUs")


def report(**figures) -> None:
    print(json.dumps({"test": "verify_instances", **figures}))


@pytest.fixture(scope="module")
def inventory(host, deployed, tmp_path_factory) -> Path:  # noqa: F811
    """The deploy's inventory data, monitoring and watchdogs off (instances_deploy.py installs none)."""
    data = {**BASE, "vllm_instances": INSTANCES, "monitoring_enabled": False, "vllm_watchdog": False}
    return lab_inventory(tmp_path_factory.mktemp("verify") / "inventory.py", host, data)


def verified(inventory: Path) -> tuple[object, dict]:
    started = time.monotonic()
    proc, _ = hostkit_verify(inventory, "--format", "json")
    report(verify_s=round(time.monotonic() - started, 1))
    for key in KEYS.values():
        assert key not in proc.stdout + proc.stderr
    return proc, json.loads(proc.stdout)


def test_verify_passes_and_names_each_instance(inventory):
    proc, result = verified(inventory)
    [checked] = result["hosts"]
    assert failed_checks(checked) == LAB_GPU_FAILURES, proc.stdout[-3000:]
    names = {check["name"] for check in checked["checks"]}
    for name in NAMES:
        for check in INSTANCE_CHECKS:
            assert f"{vllm_instance_unit(name)} {check}" in names, sorted(names)


def test_a_stopped_instance_fails_verify_naming_that_instance_only(host, inventory):  # noqa: F811
    stopped = vllm_instance_unit("b")
    sh(host, f"systemctl stop {stopped}")
    try:
        proc, result = verified(inventory)
    finally:
        sh(host, f"systemctl start {stopped}")
    failed = failed_checks(result["hosts"][0]) - LAB_GPU_FAILURES
    assert proc.returncode == 1
    assert failed and all(check.startswith(f"{stopped} ") for check in failed), failed
    assert f"{stopped} unit active" in failed
