"""`hostkit rollout` on three real lab hosts with the main deploy and the vLLM stand-in.

The shared `lab_fleet` serves every scenario (boots are slow under qemu TCG), in order:
the happy path; a new configuration whose second host serves but hangs on completions
(the stand-in's VLLM_STANDIN_STEP_DELAY_MS), so it passes the deploy's readiness gate and
fails the rollout's completion check: the rollout halts and the third host is untouched;
then a fix and --resume, which completes, leaving the fleet on FLEET_DATA for test_verify.py.
Then, on that serving fleet: a plain re-deploy changes and restarts nothing; a new release of
the stand-in rolls out with drain and undrain commands and --max-unavailable 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit.fleet.pyinfra_runner import run_pyinfra
from tests.e2e.conftest import FLEET_DATA, MAIN_DEPLOY, REPO, lab_inventory
from hostkit_lab.standin.install import install_standin

pytestmark = pytest.mark.lab
HOST_KIND = "container"

NEW = FLEET_DATA
BASE = {**NEW, "vllm_served_model_name": "lab-model"}
# 4 tokens at 15 s each: the probe's completion (30 s timeout) gives up; /health and
# /v1/models, all the deploy's readiness gate and `hostkit verify` ask for, still answer.
HANGING = {**NEW, "vllm_env": {**NEW["vllm_env"], "VLLM_STANDIN_STEP_DELAY_MS": "15000"}}


def rollout(inventory: Path, report: Path, *args: str) -> subprocess.CompletedProcess:
    # The default deploy: hostkit.deploy.vllm_host by name, as an installed hostkit runs it.
    argv = [sys.executable, "-c", "from hostkit.cli.main import main; main()", "rollout", str(inventory),
            "--report", str(report), "--gate-timeout", "20", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=3600)


def explain(result: subprocess.CompletedProcess, hosts) -> str:
    """The rollout's output and each host's vLLM journal, for a failed assertion."""
    journals = [f"--- {h.name}\n" + h.ssh("journalctl -u vllm.service -n 15 --no-pager -o cat").stdout for h in hosts]
    return "\n".join([result.stdout, result.stderr, *journals])


def served_state(lab_host) -> str:
    """The unit and env file as installed, and when the server last started."""
    command = ("systemctl cat vllm.service | sha256sum; sha256sum /etc/vllm-hostkit/vllm.env; "
               "systemctl show -p ExecMainStartTimestampMonotonic vllm.service")
    return lab_host.ssh(command, check=True).stdout


def test_rollout_happy_path_halt_on_a_failing_gate_and_resume(lab_fleet, tmp_path):
    hosts = lab_fleet
    first, second, third = hosts
    names = [lab_host.name for lab_host in hosts]

    # The happy path: canary, then the other two (2 of 3 at once: more than the default
    # --max-unavailable 25% allows); every host deployed and gated.
    happy = rollout(lab_inventory(tmp_path / "v1.py", hosts, BASE), tmp_path / "v1.json", "--batches", "1,100%",
                    "--max-unavailable", "2")
    assert happy.returncode == 0, explain(happy, hosts)
    report = json.loads((tmp_path / "v1.json").read_text())
    assert report["outcome"] == "completed" and report["counts"] == {"done": 3}
    assert [(host["name"], host["batch"]) for host in report["hosts"]] == [(names[0], 1), (names[1], 2), (names[2], 2)]
    for host in report["hosts"]:
        assert "vLLM host | vLLM systemd unit" in host["changed"]
        assert [check["name"] for check in host["gate"]["checks"]] == ["verify", "health", "models", "completion"]
        assert all(check["passed"] for check in host["gate"]["checks"]), host["gate"]
    assert "batch 1/2: gate verify passed on 1/1" in happy.stderr
    assert "lab-secret-not-for-production" not in happy.stdout + happy.stderr + (tmp_path / "v1.json").read_text()

    # A new configuration, one host per batch; the second host hangs on completions.
    third_before = served_state(third)
    inventory = lab_inventory(tmp_path / "v2.py", hosts, NEW, per_host_data={second.name: HANGING})
    halted = rollout(inventory, tmp_path / "v2.json", "--batches", "1,2,100%", "--gate", "ready")
    assert halted.returncode == 1, explain(halted, hosts)
    report = json.loads((tmp_path / "v2.json").read_text())
    states = {host["name"]: host["state"] for host in report["hosts"]}
    assert states == {first.name: "done", second.name: "failed", third.name: "untouched"}
    assert report["outcome"] == "halted" and report["halt_reason"].startswith("batch 2/3")
    failed = report["hosts"][1]
    assert failed["changed"] and failed["gate"]["checks"][-1]["name"] == "completion"
    assert not failed["gate"]["checks"][-1]["passed"]
    assert served_state(third) == third_before  # later batches are untouched
    table = {line.split()[0]: line.split()[1:3] for line in halted.stdout.splitlines()[1:] if line.split()}
    assert table[third.name] == ["3", "untouched"] and table[second.name] == ["2", "failed"]

    # The fix, then --resume: the first host is skipped, the second retried, the third rolled.
    fixed = lab_inventory(tmp_path / "v2.py", hosts, NEW)
    resumed = rollout(fixed, tmp_path / "v2-resumed.json", "--batches", "1,2,100%", "--gate", "ready",
                      "--resume", str(tmp_path / "v2.json"))
    assert resumed.returncode == 0, explain(resumed, hosts)
    report = json.loads((tmp_path / "v2-resumed.json").read_text())
    assert report["outcome"] == "completed" and report["counts"] == {"done": 3}
    assert [host["previous_run"] for host in report["hosts"]] == [True, False, False]
    assert [batch["hosts"] for batch in report["batches"]] == [[second.name], [third.name]]
    assert f"resume: 1 host already done, skipped: {first.name}" in resumed.stderr
    for lab_host in hosts:
        health = lab_host.ssh("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/health').status)\"")
        assert health.stdout.strip() == "200"
    assert served_state(third) != third_before


HOOK = Path(__file__).with_name("rollout_hook.py")


def invocation(lab_host) -> str:
    return lab_host.ssh("systemctl show -p InvocationID --value vllm.service", check=True).stdout.strip()


def test_a_serving_fleet_redeploys_without_restarts_and_rolls_a_release_with_drain(lab_fleet, tmp_path):
    hosts = lab_fleet
    names = [lab_host.name for lab_host in hosts]
    inventory = lab_inventory(tmp_path / "fleet.py", hosts, NEW)

    # A plain re-deploy of the serving fleet (all hosts at once): nothing changes, nothing restarts.
    # (After the test above the first run changes nothing either; run alone, it converges.)
    assert run_pyinfra(inventory, MAIN_DEPLOY, cwd=REPO).ok
    before = {lab_host.name: invocation(lab_host) for lab_host in hosts}
    # The deploy by name from outside the checkout: the same operations, nothing to change.
    redeploy = run_pyinfra(inventory, "hostkit.deploy.vllm_host", cwd=tmp_path)
    print(redeploy.stderr[-3000:])
    assert redeploy.ok, redeploy.output[-4000:]
    assert all(redeploy.changed_on(name) == [] for name in names), {name: redeploy.changed_on(name) for name in names}
    assert {lab_host.name: invocation(lab_host) for lab_host in hosts} == before

    # A new release of vLLM (the stand-in reinstalled): each host restarts, drained around it.
    for lab_host in hosts:
        install_standin(lab_host)
    ssh = {lab_host.name: lab_host.ssh_argv("systemctl show -p InvocationID --value vllm.service") for lab_host in hosts}
    (tmp_path / "ssh.json").write_text(json.dumps(ssh))
    log = tmp_path / "lb.log"
    hooks = {f"rollout_{action}_command": [sys.executable, str(HOOK), action, str(tmp_path / "ssh.json"), str(log)]
             for action in ("drain", "undrain")}
    drained = lab_inventory(tmp_path / "drained.py", hosts, {**NEW, **hooks, "rollout_drain_timeout": 60})
    result = rollout(drained, tmp_path / "drain.json", "--batches", "100%", "--max-unavailable", "2", "--gate", "ready")
    print(result.stderr)
    assert result.returncode == 0, explain(result, hosts)
    report = json.loads((tmp_path / "drain.json").read_text())
    assert [batch["hosts"] for batch in report["batches"]] == [names[:2], names[2:]]  # 2 of 3 at most
    assert report["max_unavailable"] == "2"
    for host in report["hosts"]:
        assert [step for step, _ in host["timeline"]] == ["drain", "deploy", "gate", "undrain"], host
        assert [check["name"] for check in host["drain"]] == ["drain", "idle", "undrain"]
        assert all(check["passed"] for check in host["drain"]) and host["gate"]["passed"]
        assert "(on the host)" in host["drain"][1]["detail"]
    # The load balancer saw both hosts of batch 1 drained before either came back, and the
    # third host only after them; each host ran another vllm.service after its drain.
    lines = [line.split() for line in log.read_text().splitlines()]
    steps = [(action, host) for action, host, _ in lines]
    assert sorted(steps[:2]) == [("drain", names[0]), ("drain", names[1])]  # in parallel: any order
    assert sorted(steps[2:4]) == [("undrain", names[0]), ("undrain", names[1])]
    assert steps[4:] == [("drain", names[2]), ("undrain", names[2])]
    runs = {(action, host): run for action, host, run in lines}
    for lab_host in hosts:
        name = lab_host.name
        assert runs[("drain", name)] == before[name] != runs[("undrain", name)] == invocation(lab_host)
