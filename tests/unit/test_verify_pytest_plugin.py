"""`pytest --pyinfra-inventory` on the shipped checks (tests/host), run with pytester.

Gathering is replaced by a replay of a lab host's recorded output (verify_replay),
except in the test of an unreachable host, which really tries to connect.
"""

from __future__ import annotations

import re
import shutil
import socket
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from hostkit.verify import runner, targets
from hostkit.verify.checks import CheckResult
from verify_replay import LAB_DATA, FakeHost

pytest_plugins = ["pytester"]

SHIPPED = Path(__file__).parents[1] / "host" / "test_host_state.py"
AREA_TESTS = ("test_swap", "test_kernel", "test_gpu", "test_vllm_unit", "test_no_oom_kills")


def _plugin_args() -> list[str]:
    installed = any(ep.value == "hostkit.verify.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "hostkit.verify.pytest_plugin"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def checks_dir(pytester):
    shutil.copy(SHIPPED, pytester.path / SHIPPED.name)
    return pytester


def _inventory(pytester, names, **extra) -> Path:
    hosts = [(name, {"ssh_hostname": "127.0.0.1", "ssh_port": _closed_port(), **LAB_DATA, **extra})
             for name in names]
    path = pytester.path / "inventory.py"
    path.write_text(f"hosts = {hosts!r}\n")
    return path


@pytest.fixture
def replay(monkeypatch):
    """verify_host answers from recorded output; `broken[name]` changes one host's checks."""
    broken: dict[str, CheckResult] = {}
    real_verify = runner.verify_host

    def fake_verify(name, host, profile, ready_timeout_s=None):
        report = real_verify(name, FakeHost(), profile, ready_timeout_s)
        if name in broken:
            report.checks = [broken[name] if c.name == broken[name].name else c for c in report.checks]
        return report

    monkeypatch.setattr(runner, "verify_host", fake_verify)
    monkeypatch.setattr(targets, "attach_paramiko", lambda host, target: None)
    return broken


@pytest.mark.processes
def test_one_test_per_area_and_host_with_the_host_name_in_the_id(checks_dir, replay):
    inventory = _inventory(checks_dir, ["gpu-01", "gpu-02"])
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory), "-v")
    result.assert_outcomes(passed=10)
    for name in ("gpu-01", "gpu-02"):
        for test in AREA_TESTS:
            result.stdout.fnmatch_lines([f"*{test}?paramiko://{name}? PASSED*"])


@pytest.mark.processes
def test_a_broken_host_fails_only_its_area_with_expected_actual_and_fix(checks_dir, replay):
    replay["gpu-02"] = CheckResult("kernel", "sysctl vm.swappiness", False, "10", "60", "sysctl -w vm.swappiness='10'")
    inventory = _inventory(checks_dir, ["gpu-01", "gpu-02"])
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory), "-v")
    result.assert_outcomes(passed=9, failed=1)
    result.stdout.fnmatch_lines([
        "*test_kernel?paramiko://gpu-02? FAILED*",
        "*gpu-02: sysctl vm.swappiness: expected 10; actual 60; fix: sysctl -w vm.swappiness='10'*",
    ])


@pytest.mark.processes
def test_limit_selects_inventory_hosts(checks_dir, replay):
    inventory = _inventory(checks_dir, ["gpu-01", "gpu-02"])
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory),
                                            "--pyinfra-limit", "gpu-02", "-v")
    result.assert_outcomes(passed=5)
    assert "gpu-01" not in result.stdout.str()


@pytest.mark.processes
def test_an_unreachable_host_errors_each_test_saying_so(checks_dir):
    inventory = _inventory(checks_dir, ["gpu-09"])
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory))
    result.assert_outcomes(errors=5)
    result.stdout.fnmatch_lines(["*gpu-09: cannot connect: NoValidConnectionsError*"])
    assert "During handling" not in result.stdout.str()


@pytest.mark.processes
def test_invalid_inventory_data_is_a_usage_error(checks_dir):
    inventory = _inventory(checks_dir, ["gpu-01"], vllm_port=99999)
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*host gpu-01: vllm_port = 99999 is invalid*"])


def test_without_an_inventory_the_checks_skip(checks_dir):
    result = checks_dir.runpytest_inprocess(*_plugin_args())
    result.assert_outcomes(skipped=5)


@pytest.mark.processes
def test_report_fixture_carries_the_plan_expectations(checks_dir, replay):
    checks_dir.makepyfile(test_mine="""
        def test_swap_path(hostkit_report, hostkit_target, host):
            names = {c.name: c for c in hostkit_report.checks}
            assert names["swap active"].expected.startswith("/mnt/nvme/vllm-hostkit.swap")
            assert hostkit_target.profile.swap_size == 2**30
            assert host.backend.get_hostname() == hostkit_target.name
    """)
    inventory = _inventory(checks_dir, ["gpu-01"])
    result = checks_dir.runpytest_inprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory), "test_mine.py")
    result.assert_outcomes(passed=1)



@pytest.mark.processes
def test_xdist_loadgroup_keeps_each_host_on_one_worker(checks_dir):
    inventory = _inventory(checks_dir, ["gpu-01", "gpu-02"])
    result = checks_dir.runpytest_subprocess(*_plugin_args(), "--pyinfra-inventory", str(inventory), "-v",
                                             "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    workers: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        match = re.search(r"\[(gw\d+)\].*\[paramiko://([\w-]+)\]@([\w-]+)", line)
        if match:
            worker, host, group = match.groups()
            assert group == host
            workers.setdefault(host, set()).add(worker)
    assert sorted(workers) == ["gpu-01", "gpu-02"]
    assert all(len(used) == 1 for used in workers.values()), workers
