"""`hostkit rollout` per instance (issue 35) on two lab container hosts, each serving one model
with two stand-in replicas (vllm@a.service, vllm@b.service), deployed as tests/e2e/test_instances.py
deploys (its nvidia-smi stand-in and instances_deploy.py).

A change of the model's flags with --max-unavailable 1 restarts one instance at a time over the
fleet: a client on each host (replica_probe.py) sends completions to both replicas throughout,
and its log shows each replica out of service once, never two at once, so at least one replica
(three of four) served all along. A rerun of the rollout changes and restarts nothing. With drain
and undrain commands (rollout_hook.py, a load balancer's log), a host's restarting replicas are
drained together: --max-unavailable 1 is refused before any host is touched, naming them; with 2,
each host's two replicas are drained, restarted and undrained before the next host's. Times are
printed as JSON lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostkit.paths import vllm_instance_env_file, vllm_instance_unit
from tests.e2e.conftest import lab_inventory
from tests.e2e.lab_shell import sh
from tests.e2e.test_instances import BASE, DEPLOY, with_gpus
from tests.e2e.test_rollout import rollout

pytestmark = pytest.mark.lab
HOST_KIND = "container"

MODEL = "lab-model"
REPLICAS = ("a", "b")
KEYS = {name: f"lab-key-{name}-not-for-production" for name in REPLICAS}
DATA = {**BASE, "vllm_served_model_name": MODEL, "vllm_instances": {
    name: {"gpus": [index], "vllm_port": 8000 + index, "vllm_api_key": KEYS[name], "vllm_memory_max": "4G"}
    for index, name in enumerate(REPLICAS)}}
NEW_FLAGS = {**DATA, "vllm_max_num_seqs": 8}
DRAINED_FLAGS = {**DATA, "vllm_max_num_seqs": 4, "rollout_drain_timeout": 60}
CLIENT = Path(__file__).with_name("replica_probe.py")
HOOK = Path(__file__).with_name("rollout_hook.py")
CLIENT_LOG, CLIENT_STOP = "/root/replica_probe.log", "/root/replica_probe.stop"


def report(**figures) -> None:
    print(json.dumps({"test": "rollout_instances", **figures}))


@pytest.fixture(scope="module")
def fleet(lab, module_run_deploy):
    hosts = lab.up(2, prefix="rinst", kind="container")
    try:
        for lab_host in hosts:
            with_gpus(lab_host)
        started = time.monotonic()
        run = module_run_deploy(hosts, DATA, deploy=DEPLOY)
        assert run.ok, run.output[-6000:]
        report(first_deploy_s=round(time.monotonic() - started, 1))
        yield hosts
    finally:
        for lab_host in hosts:
            lab.remove(lab_host.name)


def invocations(hosts) -> dict[str, str]:
    """`host/unit` -> the InvocationID of the instance's run now."""
    return {f"{lab_host.name}/{vllm_instance_unit(name)}":
            sh(lab_host, f"systemctl show -p InvocationID --value {vllm_instance_unit(name)}").strip()
            for lab_host in hosts for name in REPLICAS}


def start_clients(hosts) -> None:
    ports = json.dumps({str(8000 + index): vllm_instance_env_file(name) for index, name in enumerate(REPLICAS)})
    for lab_host in hosts:
        subprocess.run(lab_host.ssh_argv("cat > /root/replica_probe.py"), input=CLIENT.read_bytes(), check=True,
                       timeout=60)
        sh(lab_host, f"rm -f {CLIENT_LOG} {CLIENT_STOP}; nohup python3 /root/replica_probe.py '{ports}' {MODEL}"
                     f" {CLIENT_LOG} {CLIENT_STOP} >/dev/null 2>&1 </dev/null &")


def client_samples(hosts) -> list[tuple[float, str, bool]]:
    """Every request of the clients, in time order: (sent, `host/unit`, answered)."""
    samples = []
    for lab_host in hosts:
        sh(lab_host, f"touch {CLIENT_STOP}; sleep 1")
        for line in sh(lab_host, f"cat {CLIENT_LOG}").splitlines():
            sent, port, ok = line.split()
            unit = vllm_instance_unit(REPLICAS[int(port) - 8000])
            samples.append((float(sent), f"{lab_host.name}/{unit}", ok == "1"))
    return sorted(samples)


def outages(samples) -> dict[str, list[tuple[float, float]]]:
    """Per replica, its runs of failed requests: (first sent, last sent)."""
    runs: dict[str, list[tuple[float, float]]] = {}
    failing: dict[str, tuple[float, float]] = {}
    for sent, endpoint, ok in samples:
        if not ok:
            first = failing.get(endpoint, (sent, sent))[0]
            failing[endpoint] = (first, sent)
        elif endpoint in failing:
            runs.setdefault(endpoint, []).append(failing.pop(endpoint))
    for endpoint, run in failing.items():
        runs.setdefault(endpoint, []).append(run)
    return runs


def most_down_at_once(samples) -> int:
    down: set[str] = set()
    most = 0
    for _, endpoint, ok in samples:
        (down.discard if ok else down.add)(endpoint)
        most = max(most, len(down))
    return most


def test_a_flag_change_restarts_one_replica_at_a_time_and_one_always_serves(fleet, tmp_path):
    first, second = fleet
    before = invocations(fleet)
    start_clients(fleet)
    time.sleep(1)
    started = time.monotonic()
    result = rollout(lab_inventory(tmp_path / "new.py", fleet, NEW_FLAGS), tmp_path / "new.json", "--deploy",
                     str(DEPLOY), "--gate", "ready", "--batches", "100%", "--max-unavailable", "1")
    seconds = round(time.monotonic() - started, 1)
    samples = client_samples(fleet)
    print(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    rolled = json.loads((tmp_path / "new.json").read_text())
    assert [batch["hosts"] for batch in rolled["batches"]] == [[first.name], [second.name]]
    for host in rolled["hosts"]:
        assert [(e["unit"], e["restarts"], bool(e["changed"])) for e in host["endpoints"]] == [
            ("vllm@a.service", True, True), ("vllm@b.service", True, True)], host
        assert host["gate"]["passed"] and [check["name"] for check in host["gate"]["checks"]] == [
            f"{vllm_instance_unit(name)} {check}" for name in REPLICAS for check in ("health", "models", "completion")]
    for lab_host in fleet:
        assert f"{lab_host.name}/vllm@a.service" in result.stdout  # the summary names each instance
    after = invocations(fleet)
    assert all(after[endpoint] != before[endpoint] for endpoint in before), (before, after)

    # What the clients saw: each replica out of service once, one after the other, never two at once.
    runs = outages(samples)
    order = [f"{lab_host.name}/{vllm_instance_unit(name)}" for lab_host in fleet for name in REPLICAS]
    assert sorted(runs) == sorted(order) and all(len(runs[endpoint]) == 1 for endpoint in order), runs
    spans = [runs[endpoint][0] for endpoint in order]
    assert all(earlier[1] < later[0] for earlier, later in zip(spans, spans[1:])), spans
    assert most_down_at_once(samples) == 1
    report(rollout_s=seconds, requests=len(samples), failed=sum(not ok for _, _, ok in samples),
           outages_s=[round(end - start, 1) for start, end in spans])
    for key in KEYS.values():
        assert key not in result.stdout + result.stderr + (tmp_path / "new.json").read_text()


def test_a_rerun_changes_and_restarts_nothing(fleet, tmp_path):
    before = invocations(fleet)
    started = time.monotonic()
    result = rollout(lab_inventory(tmp_path / "new.py", fleet, NEW_FLAGS), tmp_path / "again.json", "--deploy",
                     str(DEPLOY), "--gate", "ready", "--batches", "100%", "--max-unavailable", "1")
    report(rerun_s=round(time.monotonic() - started, 1))
    assert result.returncode == 0, result.stdout + result.stderr
    again = json.loads((tmp_path / "again.json").read_text())
    # Nothing goes down, so both hosts fit one batch.
    assert [batch["hosts"] for batch in again["batches"]] == [[lab_host.name for lab_host in fleet]]
    for host in again["hosts"]:
        assert host["changed"] == [] and host["gate"]["passed"], host
        assert [(e["restarts"], e["changed"]) for e in host["endpoints"]] == [(False, [])] * 2
    assert invocations(fleet) == before


def with_hooks(hosts, tmp_path: Path) -> tuple[dict, Path]:
    """DRAINED_FLAGS with drain and undrain commands that log each instance's run (rollout_hook.py)."""
    targets = {f"{lab_host.name}/{vllm_instance_unit(name)}":
               lab_host.ssh_argv(f"systemctl show -p InvocationID --value {vllm_instance_unit(name)}")
               for lab_host in hosts for name in REPLICAS}
    (tmp_path / "targets.json").write_text(json.dumps(targets))
    log = tmp_path / "lb.log"
    hooks = {f"rollout_{action}_command": [sys.executable, str(HOOK), action, str(tmp_path / "targets.json"), str(log)]
             for action in ("drain", "undrain")}
    return {**DRAINED_FLAGS, **hooks}, log


def test_drained_replicas_go_out_together_so_a_budget_of_one_is_refused_and_two_rolls_host_by_host(fleet, tmp_path):
    first, second = fleet
    data, log = with_hooks(fleet, tmp_path)
    inventory = lab_inventory(tmp_path / "drained.py", fleet, data)
    before = invocations(fleet)

    refused = rollout(inventory, tmp_path / "refused.json", "--deploy", str(DEPLOY), "--gate", "ready",
                      "--batches", "100%", "--max-unavailable", "1")
    assert refused.returncode != 0, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "no host was touched" in said and "drained together" in said, said
    assert f"{first.name}/vllm@a.service, {first.name}/vllm@b.service" in said, said
    assert not log.exists() and invocations(fleet) == before

    started = time.monotonic()
    result = rollout(inventory, tmp_path / "drained.json", "--deploy", str(DEPLOY), "--gate", "ready",
                     "--batches", "100%", "--max-unavailable", "2")
    seconds = round(time.monotonic() - started, 1)
    print(result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    rolled = json.loads((tmp_path / "drained.json").read_text())
    assert [batch["hosts"] for batch in rolled["batches"]] == [[first.name], [second.name]]
    for host in rolled["hosts"]:
        assert [step for step, _ in host["timeline"]] == ["drain", "deploy", "gate", "undrain"], host
        assert [check["name"] for check in host["drain"]] == [
            "vllm@a.service drain", "vllm@b.service drain", "vllm@a.service idle", "vllm@b.service idle",
            "undrain"], host["drain"]
        assert all(check["passed"] for check in host["drain"]) and host["gate"]["passed"], host

    # The load balancer's log: both of a host's replicas out (their old runs), both back (new
    # runs), then the next host's, never more than one host's replicas out at once.
    lines = [line.split() for line in log.read_text().splitlines()]
    order = [(action, target.split("/")[0]) for action, target, _ in lines]
    assert order == [("drain", first.name)] * 2 + [("undrain", first.name)] * 2 + \
        [("drain", second.name)] * 2 + [("undrain", second.name)] * 2, lines
    runs = {(action, target): run for action, target, run in lines}
    after = invocations(fleet)
    for endpoint in before:
        assert runs[("drain", endpoint)] == before[endpoint] != runs[("undrain", endpoint)] == after[endpoint]
    report(drained_rollout_s=seconds)
    for key in KEYS.values():
        assert key not in said + result.stdout + result.stderr + (tmp_path / "drained.json").read_text()
