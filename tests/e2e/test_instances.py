"""Several vLLM instances on one lab container host (issue 35): three stand-ins, each its own
vllm@NAME.service on its own port with its own API key and GPU; a rerun changes nothing; an
instance left out of the inventory is stopped and its files removed, while the other two go
on serving, not restarted; going to vllm.service removes the instances, and back.

The container has no GPU: an nvidia-smi stand-in (FAKE_NVIDIA_SMI) lists three, so that the
planner can place each instance by index and UUID; the deploy is tests/e2e/instances_deploy.py
(the vLLM steps alone: see there why). Times are printed as JSON lines.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from hostkit.paths import vllm_instance_env_file, vllm_instance_unit
from hostkit.vllm.readiness import Probe, probe_command
from hostkit_lab.standin.install import install_standin
from tests.e2e.vllm_unit import sh

pytestmark = pytest.mark.lab
HOST_KIND = "container"

DEPLOY = Path(__file__).with_name("instances_deploy.py")
FAKE_NVIDIA_SMI = "/usr/local/bin/nvidia-smi"
UUIDS = [f"GPU-1ab0c0de-0000-4000-8000-00000000000{index}" for index in range(3)]
NAMES = ("a", "b", "c")
REMOVED = "b"
KEYS = {name: f"lab-key-{name}-not-for-production" for name in NAMES}
# A MemoryMax of its own each: with "auto" the instances share the host's RAM, and the two
# left after a removal get more of it (applied to their running units, no restart).
INSTANCES = {
    name: {"gpus": [index], "vllm_port": 8000 + index, "vllm_api_key": KEYS[name],
           "vllm_served_model_name": f"lab-{name}", "vllm_memory_max": "4G"}
    for index, name in enumerate(NAMES)
}
BASE = {"nvme_device": None, "swap_enabled": False, "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "1"},
        "vllm_ready_timeout": 120}

# Answers the GPU fact's two queries (hostkit.facts.gpu) for three idle H200s, any field order.
NVIDIA_SMI = f'''#!/usr/bin/python3
import sys
UUIDS = {UUIDS!r}
query = next((arg.split("=", 1) for arg in sys.argv[1:] if arg.startswith("--query-")), None)
if query and query[0] == "--query-gpu":
    for index, uuid in enumerate(UUIDS):
        row = {{"index": str(index), "pci.bus_id": "00000000:1%d:00.0" % index, "name": "NVIDIA H200",
               "uuid": uuid, "driver_version": "580.159.04", "persistence_mode": "Enabled",
               "memory.total": "143771", "memory.used": "0", "ecc.mode.current": "Enabled",
               "ecc.errors.uncorrected.volatile.total": "0", "retired_pages.pending": "No",
               "remapped_rows.pending": "No", "remapped_rows.failure": "No", "mig.mode.current": "Disabled"}}
        print(", ".join(row.get(field, "[N/A]") for field in query[1].split(",")))
'''


def report(**figures) -> None:
    print(json.dumps({"test": "instances", **figures}))


def with_gpus(lab_host):
    """`lab_host` with the vLLM stand-in and the nvidia-smi stand-in's three GPUs."""
    install_standin(lab_host)
    sh(lab_host, f"cat >{FAKE_NVIDIA_SMI} <<'EOF'\n{NVIDIA_SMI}EOF\nchmod 755 {FAKE_NVIDIA_SMI}")
    return lab_host


@pytest.fixture(scope="module")
def host(shared_lab_host):
    return with_gpus(shared_lab_host)


def port(name: str) -> int:
    return INSTANCES[name]["vllm_port"]


def probe(lab_host, name: str) -> Probe | None:
    output = sh(lab_host, probe_command("0.0.0.0", port(name), vllm_instance_env_file(name))).strip()
    return Probe.parse(output) if output else None


def models_status(lab_host, name: str, key: str) -> int:
    """/v1/models' status with `key` as the bearer token."""
    script = (f"import urllib.request as u, urllib.error as e\n"
              f"r = u.Request('http://127.0.0.1:{port(name)}/v1/models', headers={{'Authorization': 'Bearer {key}'}})\n"
              f"try: print(u.urlopen(r, timeout=10).status)\nexcept e.HTTPError as x: print(x.code)\n")
    return int(sh(lab_host, f"python3 -c {shlex.quote(script)}").strip())


def unit_state(lab_host, name: str) -> dict[str, str]:
    properties = "-p LoadState -p ActiveState -p MainPID -p ActiveEnterTimestamp -p Environment"
    output = sh(lab_host, f"systemctl show {vllm_instance_unit(name)} {properties}")
    return dict(line.split("=", 1) for line in output.splitlines())


def files_of(lab_host, name: str) -> str:
    """`MODE PATH` of the instance's unit and env file that exist."""
    paths = f"/etc/systemd/system/{vllm_instance_unit(name)} {vllm_instance_env_file(name)}"
    return sh(lab_host, f"stat -c '%a %n' {paths} 2>/dev/null || true").strip()


@pytest.fixture(scope="module")
def deployed(host, module_run_deploy):
    started = time.monotonic()
    run = module_run_deploy(host, {**BASE, "vllm_instances": INSTANCES}, deploy=DEPLOY)
    assert run.ok, run.output[-6000:]
    report(first_deploy_s=round(time.monotonic() - started, 1))
    return run


def test_three_instances_each_serve_on_their_port_with_their_key_and_gpu(host, deployed):
    for index, name in enumerate(NAMES):
        assert f"vLLM unit {vllm_instance_unit(name)}" in " ".join(deployed.changed), deployed.changed
        state = unit_state(host, name)
        assert state["ActiveState"] == "active", state
        assert f"CUDA_VISIBLE_DEVICES={UUIDS[index]}" in state["Environment"].split(), state
        assert probe(host, name).serves(f"lab-{name}"), probe(host, name)
        assert models_status(host, name, KEYS[name]) == 200
        other = KEYS[NAMES[(index + 1) % len(NAMES)]]
        assert models_status(host, name, other) == 401  # another instance's key opens nothing here
        unit_text = sh(host, f"cat /etc/systemd/system/{vllm_instance_unit(name)}")
        assert KEYS[name] not in unit_text and f"EnvironmentFile={vllm_instance_env_file(name)}" in unit_text
        assert files_of(host, name).splitlines() == [f"644 /etc/systemd/system/{vllm_instance_unit(name)}",
                                                     f"600 {vllm_instance_env_file(name)}"]
    for key in KEYS.values():
        assert key not in deployed.output
    assert sh(host, "systemctl show vllm.service -p LoadState --value").strip() == "not-found"


def test_a_rerun_changes_nothing(host, deployed, module_run_deploy):
    started = time.monotonic()
    again = module_run_deploy(host, {**BASE, "vllm_instances": INSTANCES}, deploy=DEPLOY)
    report(rerun_s=round(time.monotonic() - started, 1))
    assert again.ok and again.changed_on(host.name) == [], f"{again.changed}\n{again.output[-3000:]}"


def test_an_instance_left_out_is_removed_and_the_others_are_not_restarted(host, deployed, module_run_deploy):
    kept = [name for name in NAMES if name != REMOVED]
    before = {name: unit_state(host, name) for name in kept}
    started = time.monotonic()
    run = module_run_deploy(host, {**BASE, "vllm_instances": {name: INSTANCES[name] for name in kept}}, deploy=DEPLOY)
    report(removal_deploy_s=round(time.monotonic() - started, 1))
    assert run.ok, run.output[-6000:]
    assert run.changed_on(host.name) == ["Remove the vLLM units not planned"], run.changed
    assert files_of(host, REMOVED) == ""
    assert unit_state(host, REMOVED)["LoadState"] == "not-found"
    assert probe(host, REMOVED).health is None  # nothing listens on its port
    for name in kept:
        after = unit_state(host, name)
        assert (after["MainPID"], after["ActiveEnterTimestamp"]) == (before[name]["MainPID"],
                                                                      before[name]["ActiveEnterTimestamp"]), name
        assert probe(host, name).serves(f"lab-{name}")
    again = module_run_deploy(host, {**BASE, "vllm_instances": {name: INSTANCES[name] for name in kept}}, deploy=DEPLOY)
    assert again.ok and again.changed_on(host.name) == [], again.changed


def test_switching_to_vllm_service_and_back_removes_the_other_form(host, deployed, module_run_deploy):
    kept = [name for name in NAMES if name != REMOVED]
    classic = module_run_deploy(host, BASE, deploy=DEPLOY)
    assert classic.ok, classic.output[-6000:]
    assert sh(host, "systemctl is-active vllm.service").strip() == "active"
    assert sh(host, "ls /etc/systemd/system/ /etc/vllm-hostkit/ | grep -c 'vllm@' || true").strip() == "0"
    back = module_run_deploy(host, {**BASE, "vllm_instances": {name: INSTANCES[name] for name in kept}}, deploy=DEPLOY)
    assert back.ok, back.output[-6000:]
    assert sh(host, "systemctl show vllm.service -p LoadState --value").strip() == "not-found"
    assert sh(host, "ls /etc/vllm-hostkit/").split() == [vllm_instance_env_file(name).rsplit("/", 1)[1] for name in kept]
    for name in kept:
        assert probe(host, name).serves(f"lab-{name}")


def test_a_placed_instances_numa_directives_are_applied_by_the_hosts_systemd(host, deployed):
    """What the unit of an instance placed on a NUMA node says, loaded by the container's systemd
    (252) and applied to its process. The planner places nothing in a container (its host's
    cpuset may leave it none of a node's CPUs), so the plan here is the 2-node fixture's
    instance b (tests/unit/test_numa_plan.py) on node 0 of this host's real sysfs, with
    /bin/sleep for a command. A NUMAMask naming a node the host lacks fails the start: why
    only a node the host reported is ever named. On this 2-CPU lab host node 0 holds every CPU,
    so the CPU mask shows what systemd loaded; the memory policy shows it applied: instance a,
    deployed unplaced, runs under the kernel's default policy."""
    from hostkit.desired.vllm_unit import render_unit
    from tests.unit.test_numa_plan import TP4_PAIR, TWO_NODES, plan, section

    cpus = sh(host, "cat /sys/devices/system/node/node0/cpulist").strip()
    nodes = sh(host, "ls -d /sys/devices/system/node/node[0-9]* | wc -l").strip()
    placed = plan(TP4_PAIR, section(TWO_NODES)).instances["b"].model_copy(update={
        "instance": "numa", "numa_node": 0, "cpu_affinity": cpus, "argv": ["/bin/sleep", "600"],
        "cache_dir": "/var/cache/vllm-numa", "systemd_version": 252})
    unit, env = vllm_instance_unit("numa"), vllm_instance_env_file("numa")
    results = {}
    for mask in ("0", nodes):  # node 0, then the first node this host does not have
        text = render_unit(placed).replace("NUMAMask=0\n", f"NUMAMask={mask}\n")
        sh(host, f"install -m 600 /dev/null {env} && cat >/etc/systemd/system/{unit} <<'EOF'\n{text}EOF\n"
                 f"systemctl daemon-reload && (systemctl start {unit} || true) && sleep 1")
        shown = dict(line.split("=", 1) for line in sh(
            host, f"systemctl show {unit} -p CPUAffinity -p NUMAPolicy -p NUMAMask -p ActiveState -p Result "
                  "-p MainPID").splitlines())
        pid = shown["MainPID"]
        # The failed start's journal line may come a moment after systemctl show says it failed.
        failure = f"journalctl -u {unit} -o cat --no-pager | grep 'step NUMA_POLICY'"
        status = sh(host, f"grep Cpus_allowed_list /proc/{pid}/status; head -1 /proc/{pid}/numa_maps" if pid != "0"
                    else f"for i in $(seq 20); do {failure} >/dev/null && break; sleep 0.5; done; {failure} | tail -1")
        results[mask] = (shown, status)
        sh(host, f"systemctl stop {unit}; systemctl reset-failed {unit}; rm -f /etc/systemd/system/{unit} {env}; "
                 "systemctl daemon-reload")
    (placed_shown, placed_status), (absent_shown, absent_log) = results["0"], results[nodes]
    report(numa_node0_cpus=cpus, numa_nodes=int(nodes), placed=placed_shown, placed_process=placed_status,
           absent_node=absent_shown, absent_log=absent_log)
    assert (placed_shown["ActiveState"], placed_shown["NUMAPolicy"], placed_shown["NUMAMask"]) == ("active", "preferred", "0")
    assert placed_shown["CPUAffinity"] == cpus
    assert f"Cpus_allowed_list:\t{cpus}" in placed_status and " prefer:0 " in placed_status
    unplaced = sh(host, f"head -1 /proc/{unit_state(host, 'a')['MainPID']}/numa_maps")
    assert " default " in unplaced and "prefer:" not in unplaced, unplaced
    # Restart=always retries it (activating, auto-restart) until StartLimitBurst ends it.
    assert absent_shown["Result"] == "exit-code" and absent_shown["MainPID"] == "0"
    assert "Failed at step NUMA_POLICY spawning" in absent_log and "Invalid argument" in absent_log
