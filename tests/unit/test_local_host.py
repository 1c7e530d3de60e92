"""`@local`: plan, verify, the pytest plugin and doctor really run against this machine.

This machine has no systemd and no GPU, so hosts fail here; what is tested is that they are
reached through pyinfra's and testinfra's local connectors (no DNS, no ssh), give the same
report shape as a host over ssh (the recorded lab host of verify_replay), and fail for the same
reasons in verify and in the plugin. Then a wedged nvidia-smi (first on PATH, sleeping for
ever) with a 1 s deadline: doctor and verify fail within their deadlines and name it.

Each command runs in its own process: `hostkit` patches the standard library for gevent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from hostkit.facts.deadline import NVIDIA_SMI_ENV
from hostkit.profile.validation import profile_from_data
from hostkit.verify.report import to_json
from hostkit.verify.runner import verify_host
from verify_replay import LAB_DATA, FakeHost

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
DATA = {"vllm_enabled": False, "swap_enabled": False, "monitoring_enabled": False}
AREAS = {"test_swap": "swap", "test_kernel": "kernel", "test_gpu": "gpu", "test_vllm_unit": "vllm",
         "test_no_oom_kills": "oom"}


@pytest.fixture
def inventory(tmp_path) -> Path:
    path = tmp_path / "inventory.py"
    path.write_text(f"hosts = [('@local', {DATA!r})]\n")
    return path


def hostkit(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostkit", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, **(env or {})}, check=False)


def wedged_nvidia_smi(directory: Path) -> dict[str, str]:
    """The environment of a host whose nvidia-smi never answers, with a 1 s deadline."""
    fake = directory / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexec sleep 1000000\n")
    fake.chmod(0o755)
    return {"PATH": f"{directory}:{os.environ['PATH']}", NVIDIA_SMI_ENV: "1"}


def failed_areas(host: dict) -> set[str]:
    return {check["area"] for check in host["checks"] if not check["ok"]}


def test_verify_reaches_local_without_ssh_and_reports_as_over_ssh(inventory):
    result = hostkit("verify", str(inventory), "--format", "json", "--connection", "ssh")
    document = json.loads(result.stdout)
    (host,) = document["hosts"]
    assert host["name"] == "@local" and host["reachable"], host["error"]
    assert host["remote_commands"] == 2 and set(host["command_seconds"]) == {"snapshot", "probe"}
    over_ssh = json.loads(to_json([verify_host("lab1", FakeHost(), profile_from_data("lab1", LAB_DATA))]))
    assert list(document) == list(over_ssh) and list(host) == list(over_ssh["hosts"][0])
    assert {key for check in host["checks"] for key in check} <= {key for check in over_ssh["hosts"][0]["checks"]
                                                                  for key in check} | {"status", "reason"}
    # No NVIDIA driver on this machine: a GPU failure, exit 1 (a failing host), not 2 (unreachable).
    assert "gpu" in failed_areas(host)
    assert result.returncode == document["exit_code"] == 1


def test_the_pytest_plugin_on_local_fails_exactly_the_areas_verify_fails(inventory, tmp_path):
    verified = json.loads(hostkit("verify", str(inventory), "--format", "json").stdout)["hosts"][0]
    junit = tmp_path / "junit.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--pyinfra-inventory", str(inventory),
         str(REPO / "tests" / "host"), f"--junitxml={junit}", "-q"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )
    assert "KeyError" not in result.stdout, result.stdout[-3000:]
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    outcomes = {case.get("name"): case.find("failure") is None and case.find("error") is None for case in cases}
    assert set(outcomes) == {f"{name}[local]" for name in AREAS}
    failed = failed_areas(verified)
    assert outcomes == {
        f"{name}[local]": area not in failed for name, area in AREAS.items()
    }


def test_doctor_on_local_matches_doctor_dash_local(inventory):
    through_pyinfra = json.loads(hostkit("doctor", str(inventory), "--format", "json").stdout)
    direct = json.loads(hostkit("doctor", "--local", "--format", "json").stdout)
    (host,) = through_pyinfra["hosts"]
    assert host["host"] == "@local" and through_pyinfra["unreachable"] == []
    assert set(host["inputs"]) == set(direct["hosts"][0]["inputs"])
    # Findings on the kernel's settings agree; processes (a vLLM someone runs here) may come and
    # go between the two runs, and the inventory's data changes others (no swap wanted, monitoring).
    static = {"swappiness-high", "thp-always", "swap-almost-full", "kernel-log-unreadable", "command-timed-out"}
    assert {f["code"] for f in host["findings"]} & static == {f["code"] for f in direct["hosts"][0]["findings"]} & static


def test_plan_on_local_exits_0_with_its_plan_in_json(inventory, tmp_path):
    result = hostkit("plan", str(inventory), "--format", "json", cwd=tmp_path)
    document = json.loads(result.stdout)
    assert result.returncode == document["exit_code"] == 0, result.stderr
    assert document["problems"] == [] and list(document["hosts"]) == ["@local"]


def test_a_wedged_nvidia_smi_fails_verify_within_its_deadline_naming_it(inventory, tmp_path):
    started = time.monotonic()
    result = hostkit("verify", str(inventory), "--format", "json", env=wedged_nvidia_smi(tmp_path))
    assert time.monotonic() - started < 60
    (host,) = json.loads(result.stdout)["hosts"]
    assert host["reachable"] and result.returncode == 1
    actual = [check["actual"] for check in host["checks"] if not check["ok"]]
    assert "nvidia-smi --query-gpu timed out after 1 s" in actual


def test_a_wedged_nvidia_smi_fails_doctor_within_its_deadline_naming_it(inventory, tmp_path):
    env = wedged_nvidia_smi(tmp_path)
    for args in ((str(inventory),), ("--local",)):
        started = time.monotonic()
        result = hostkit("doctor", *args, "--format", "json", env=env)
        assert time.monotonic() - started < 60
        (host,) = json.loads(result.stdout)["hosts"]
        (timed_out,) = [f for f in host["findings"] if f["code"] == "command-timed-out"]
        assert timed_out["severity"] == "critical"
        assert "nvidia-smi --query-gpu timed out after 1 s" in timed_out["problem"]
        assert result.returncode == 1
