"""verify_host through a fake testinfra host that replays a lab host's recorded output
(verify_replay), and the reports made from its result: text, JSON, JUnit XML, exit codes."""

from __future__ import annotations

import json
from xml.etree import ElementTree

from hostkit.profile.validation import profile_from_data
from hostkit.verify.checks import CheckResult
from hostkit.verify.report import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, exit_code, to_json, to_junit, to_text
from hostkit.verify.runner import HostReport, verify_host
from verify_replay import LAB_DATA, FakeHost

def test_two_remote_commands_and_every_check_passes_on_a_provisioned_host():
    host = FakeHost()
    report = verify_host("lab1", host, profile_from_data("lab1", LAB_DATA))
    assert report.error is None
    assert [c.message() for c in report.failures] == []
    assert report.remote_commands == len(host.commands) == 2
    assert set(report.command_seconds) == {"snapshot", "probe"}
    assert report.ok


def test_the_probe_waits_as_long_as_the_profile_says_unless_overridden():
    host = FakeHost()
    verify_host("lab1", host, profile_from_data("lab1", LAB_DATA))
    assert "hk_wait=180\n" in host.commands[1]
    verify_host("lab1", host, profile_from_data("lab1", LAB_DATA), ready_timeout_s=7)
    assert "hk_wait=7\n" in host.commands[3]


def test_an_unreachable_host_is_an_error_not_a_failed_check():
    report = verify_host("lab1", FakeHost(error=OSError("[Errno 113] No route to host")),
                         profile_from_data("lab1", LAB_DATA))
    assert not report.reachable and not report.ok
    assert "No route to host" in report.error
    assert report.checks == []
    assert exit_code([report]) == EXIT_UNREACHABLE


def test_a_profile_that_cannot_be_planned_fails_without_probing():
    data = {**LAB_DATA, "swap_size": "64G"}  # more than the lab NVMe holds
    host = FakeHost()
    report = verify_host("lab1", host, profile_from_data("lab1", data))
    assert report.remote_commands == 1
    assert [(c.area, c.ok) for c in report.checks] == [("plan", False)]
    assert "swap_size" in report.checks[0].actual


def _reports() -> list[HostReport]:
    failing = CheckResult("kernel", "sysctl vm.swappiness", False, "10", "60", "sysctl -w vm.swappiness='10'")
    passing = CheckResult("swap", "swap active", True, "/mnt/nvme/vllm-hostkit.swap in /proc/swaps", "active")
    return [
        HostReport("gpu-01", [passing], 2, 1.5, {"snapshot": 1.0, "probe": 0.4}),
        HostReport("gpu-02", [passing, failing], 2, 2.5, {"snapshot": 2.0, "probe": 0.4}),
        HostReport("gpu-03", [], 0, 10.0, error="cannot connect: TimeoutError: timed out"),
    ]


def test_exit_codes():
    ok, failing, unreachable = _reports()
    assert exit_code([ok]) == EXIT_OK == 0
    assert exit_code([ok, failing]) == EXIT_FAILED == 1
    assert exit_code([ok, failing, unreachable]) == EXIT_UNREACHABLE == 2


def test_text_names_each_failure_with_expected_actual_fix_and_the_command_counts():
    text = to_text(_reports())
    assert "gpu-01: ok (1/1 checks passed; 2 remote commands: snapshot 1.0s, probe 0.4s; 1.5s in all)" in text
    assert ("FAIL  [kernel] sysctl vm.swappiness: expected 10; actual 60; fix: sysctl -w vm.swappiness='10'"
            in text)
    assert "gpu-03: UNREACHABLE" in text and "ERROR cannot connect" in text
    assert text.rstrip().endswith("3 hosts: 1 passed, 1 failed, 1 unreachable")
    assert "swap active" not in text and "swap active" in to_text(_reports(), verbose=True)


def test_json_carries_commands_seconds_and_every_check():
    data = json.loads(to_json(_reports()))
    assert data["exit_code"] == 2 and data["ok"] is False
    first = data["hosts"][0]
    assert (first["name"], first["remote_commands"], first["seconds"]) == ("gpu-01", 2, 1.5)
    assert first["command_seconds"] == {"snapshot": 1.0, "probe": 0.4}
    assert data["hosts"][1]["checks"][1] == {
        "area": "kernel", "name": "sysctl vm.swappiness", "ok": False, "expected": "10", "actual": "60",
        "fix": "sysctl -w vm.swappiness='10'",
    }
    assert data["hosts"][2]["reachable"] is False


def test_junit_has_one_testsuite_per_host():
    root = ElementTree.fromstring(to_junit(_reports()))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["gpu-01", "gpu-02", "gpu-03"]
    assert [(s.get("tests"), s.get("failures"), s.get("errors")) for s in suites] == [
        ("1", "0", "0"), ("2", "1", "0"), ("1", "0", "1")]
    failure = suites[1].find("testcase[@name='sysctl vm.swappiness']/failure")
    assert failure.get("message") == "sysctl vm.swappiness: expected 10; actual 60; fix: sysctl -w vm.swappiness='10'"
    assert suites[1].find("testcase[@name='sysctl vm.swappiness']").get("classname") == "gpu-02.kernel"
    assert suites[2].find("testcase/error").get("message").startswith("cannot connect")


def test_an_error_while_checking_is_reported_for_that_host_only(monkeypatch):
    from hostkit.verify import runner

    def broken_check_host(*args):
        raise KeyError("storage")

    monkeypatch.setattr(runner, "check_host", broken_check_host)
    report = verify_host("lab1", FakeHost(), profile_from_data("lab1", LAB_DATA))
    assert report.error == "checking failed: KeyError: 'storage'"
    assert exit_code([report]) == EXIT_UNREACHABLE


def test_each_remote_command_runs_within_a_deadline_and_says_so_when_it_passes():
    from testinfra.backend.base import CommandResult

    from hostkit.verify.runner import COMMAND_S

    class WedgedHost(FakeHost):
        def run(self, command, *args):
            self.commands.append(command % args)
            return CommandResult(backend=None, exit_status=124, command=b"", _stdout="", _stderr="")

    host = WedgedHost()
    report = verify_host("lab1", host, profile_from_data("lab1", LAB_DATA))
    assert host.commands[0].startswith(f"timeout -k 5 {COMMAND_S} sh -c ")
    assert report.error == f"the snapshot command timed out after {COMMAND_S} s"
    assert exit_code([report]) == EXIT_UNREACHABLE
