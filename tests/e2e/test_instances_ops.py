"""Operating several vLLM instances on one lab container host (issue 35): `hostkit doctor`
shows each instance and its findings, `hostkit smoke --instance b` loads that instance alone,
and one deploy upgrades one instance and removes another while the third serves throughout.

The three stand-ins, the nvidia-smi stand-in and the deploy of the vLLM steps alone are
tests/e2e/test_instances.py's (its fixtures, imported). Times are printed as JSON lines.
"""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest

from hostkit.paths import vllm_instance_env_file, vllm_instance_unit
from tests.e2e.conftest import lab_inventory
from tests.e2e.test_doctor_smoke import forwarded, hostkit
from tests.e2e.test_instances import (  # noqa: F401 (fixtures)
    BASE, DEPLOY, INSTANCES, KEYS, NAMES, UUIDS, deployed, files_of, host, models_status, port, probe, unit_state,
)
from tests.e2e.vllm_unit import sh

pytestmark = pytest.mark.lab
HOST_KIND = "container"

# A loopback address of this module's own: the smoke's forward takes the instance's port here.
LOOPBACK = "127.35.0.1"
UPGRADED, REMOVED, SERVING = "a", "b", "c"
UPGRADED_MODEL = "lab-a-v2"
# The findings of one vLLM unit (hostkit.doctor.rules.UNIT_RULES): each instance's, never the host's.
UNIT_CODES = {"vllm-absent", "vllm-not-running", "vllm-restarted", "memory-limit-missing", "memory-limit-unapplied",
              "unknown-vllm-option", "vllm-oom-killed"}
# Requests the serving instance answers, one every PROBE_PAUSE_S, until the stop file appears:
# `time status` lines; the key is read from the instance's env file (systemd's quoting), so
# it is in no argv.
PROBE_LOOP = """\
import json, os, shlex, sys, time, urllib.error, urllib.request
port, model, env_file, stop = sys.argv[1:5]
key = next(shlex.split(line.split("=", 1)[1])[0] for line in open(env_file) if line.startswith("VLLM_API_KEY="))
body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 4}).encode()
while not os.path.exists(stop):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        status = urllib.request.urlopen(request, timeout=5).status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError as error:
        status = type(error).__name__
    print(f"{time.time():.3f} {status}", flush=True)
    time.sleep(0.1)
"""
PROBE_DIR = "/root/instances-ops"


def report(**figures) -> None:
    print(json.dumps({"test": "instances_ops", **figures}))


@pytest.fixture(scope="module")
def inventory(host, deployed, tmp_path_factory):  # noqa: F811
    """The deploy's inventory data, monitoring off (instances_deploy.py installs none)."""
    data = {**BASE, "vllm_instances": INSTANCES, "monitoring_enabled": False}
    return lab_inventory(tmp_path_factory.mktemp("instances-ops") / "inventory.py", host, data)


def doctor_json(inventory) -> tuple[int, dict]:
    started = time.monotonic()
    result = hostkit("doctor", str(inventory), "--format", "json")
    report(doctor_s=round(time.monotonic() - started, 1))
    for key in KEYS.values():
        assert key not in result.stdout + result.stderr
    (checked,) = json.loads(result.stdout)["hosts"]
    return result.returncode, checked


def successes(lab_host, name: str) -> float:
    """The instance's vllm:request_success_total (its /metrics, which needs no key)."""
    script = (f"import urllib.request as u\n"
              f"text = u.urlopen('http://127.0.0.1:{port(name)}/metrics', timeout=10).read().decode()\n"
              f"print(next(line.split()[-1] for line in text.splitlines() "
              f"if line.startswith('vllm:request_success_total')))\n")
    return float(sh(lab_host, f"python3 -c {shlex.quote(script)}").strip())


def wait_serving(lab_host, name: str, model: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ((found := probe(lab_host, name)) and found.serves(model)):
        assert time.monotonic() < deadline, f"{name} does not serve {model}: {found}"
        time.sleep(0.5)


def test_doctor_shows_each_instance_and_its_findings(host, inventory):  # noqa: F811
    code, checked = doctor_json(inventory)
    instances = {instance["name"]: instance for instance in checked["instances"]}
    assert list(instances) == list(NAMES)
    for index, name in enumerate(NAMES):
        instance, state = instances[name], unit_state(host, name)
        unit = instance["inputs"]["unit"]
        assert instance["unit"] == unit["unit"] == vllm_instance_unit(name)
        assert (unit["active_state"], unit["restarts"]) == ("active", 0), unit
        assert unit["main_pid"] == int(state["MainPID"]) == instance["inputs"]["vllm"]["pid"]
        # Its MemoryMax as systemd has it: its own vllm_memory_max (4G) where the kernel applies
        # it; a container's systemd on a cgroup v1 host has no memory controller ("infinity").
        limit = sh(host, f"systemctl show {vllm_instance_unit(name)} -p MemoryMax --value").strip()
        expected = None if limit == "infinity" else int(limit)
        assert unit["max_bytes"] == expected and expected in (None, 4 * 2**30), limit
        assert [(gpu["index"], gpu["uuid"]) for gpu in instance["inputs"]["gpus"]] == [(index, UUIDS[index])]
        options = instance["vllm_settings"]["options"]
        assert (options["--port"], options["--served-model-name"]) == (str(port(name)), f"lab-{name}"), options
        assert not {finding["code"] for finding in instance["findings"]} & {"vllm-not-running", "vllm-absent"}
    host_codes = [finding["code"] for finding in checked["findings"]]
    assert not set(host_codes) & UNIT_CODES, host_codes  # vllm.service is absent here, as planned
    assert len(host_codes) == len(set(host_codes))  # each host finding once, not once per instance
    assert code == 0, checked["findings"]

    stopped = vllm_instance_unit(REMOVED)
    sh(host, f"systemctl stop {stopped}")
    try:
        code, checked = doctor_json(inventory)
        text = hostkit("doctor", str(inventory)).stdout
    finally:
        sh(host, f"systemctl start {stopped}")
    critical = {(instance["name"], finding["code"]) for instance in checked["instances"]
                for finding in instance["findings"] if finding["severity"] == "critical"}
    assert critical == {(REMOVED, "vllm-not-running")} and code == 1, critical
    assert f"CRITICAL vllm@{REMOVED}.service: vllm-not-running: vllm@{REMOVED}.service is inactive/dead" in text, text
    for index, name in enumerate(NAMES):
        assert f"vllm@{name}.service GPU {index} " in text and f"vllm@{name}.service memory " in text, text
        state = "inactive/dead" if name == REMOVED else "active/running"
        assert re.search(rf"^  vllm@{name}\.service +{state}", text, re.MULTILINE), text
    wait_serving(host, REMOVED, f"lab-{REMOVED}")


def test_smoke_of_one_instance_loads_it_alone_with_its_own_key(host, inventory, tmp_path):  # noqa: F811
    before = {name: successes(host, name) for name in NAMES}
    requests = 24
    started = time.monotonic()
    with forwarded(host, port(REMOVED), address=LOOPBACK, same_port=True) as url:
        # No --api-key-env: the instance's own vllm_api_key from the inventory.
        result = hostkit("smoke", url, "--watch", host.name, "--inventory", str(inventory), "--instance", REMOVED,
                         "--concurrency", "4", "--requests", str(requests), "--max-tokens", "8", "--settle", "0",
                         "--out", str(tmp_path))
    report(smoke_s=round(time.monotonic() - started, 1))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for key in KEYS.values():
        assert key not in result.stdout + result.stderr
    assert f"{vllm_instance_unit(REMOVED)}: {url}" in result.stdout
    assert sorted(path.name for path in tmp_path.iterdir()) == [REMOVED]
    smoked = json.loads((tmp_path / REMOVED / "smoke-report.json").read_text())
    assert (smoked["requests"]["succeeded"], smoked["requests"]["failed"]) == (requests, 0), smoked["requests"]
    assert smoked["memory"]["source"] == host.name and smoked["memory"]["samples"] > 0
    after = {name: successes(host, name) for name in NAMES}
    assert {name: after[name] - before[name] for name in NAMES} == {"a": 0, "b": requests, "c": 0}


def test_upgrade_one_and_remove_one_while_the_third_serves(host, deployed, module_run_deploy):  # noqa: F811
    before = {name: unit_state(host, name) for name in NAMES}
    sh(host, f"mkdir -p {PROBE_DIR} && cat >{PROBE_DIR}/probe.py <<'EOF'\n{PROBE_LOOP}EOF\n"
             f"nohup python3 {PROBE_DIR}/probe.py {port(SERVING)} lab-{SERVING} {vllm_instance_env_file(SERVING)} "
             f"{PROBE_DIR}/stop >{PROBE_DIR}/probe.log 2>&1 </dev/null &")
    deadline = time.monotonic() + 30
    while len(sh(host, f"cat {PROBE_DIR}/probe.log").split()) < 6:  # three answers before the deploy
        assert time.monotonic() < deadline, sh(host, f"cat {PROBE_DIR}/probe.log")
        time.sleep(0.2)
    wanted = {UPGRADED: {**INSTANCES[UPGRADED], "vllm_served_model_name": UPGRADED_MODEL},
              SERVING: INSTANCES[SERVING]}
    started = time.time()
    try:
        run = module_run_deploy(host, {**BASE, "vllm_instances": wanted}, deploy=DEPLOY)
    finally:
        ended = time.time()
        sh(host, f"touch {PROBE_DIR}/stop; sleep 1")
    report(upgrade_and_removal_deploy_s=round(ended - started, 1))
    assert run.ok, run.output[-6000:]
    answers = [line.split() for line in sh(host, f"cat {PROBE_DIR}/probe.log").splitlines()]
    during = [status for stamp, status in answers if started <= float(stamp) <= ended]
    report(probe_requests=len(answers), during_deploy=len(during))
    assert {status for _, status in answers} == {"200"}, [answer for answer in answers if answer[1] != "200"]
    assert len(during) >= 10, (len(during), ended - started)

    changed = run.changed_on(host.name)
    assert not [operation for operation in changed if vllm_instance_unit(SERVING) in operation], changed
    serving = unit_state(host, SERVING)
    assert (serving["MainPID"], serving["ActiveEnterTimestamp"]) == (before[SERVING]["MainPID"],
                                                                    before[SERVING]["ActiveEnterTimestamp"])
    assert probe(host, SERVING).serves(f"lab-{SERVING}")

    upgraded = unit_state(host, UPGRADED)
    assert upgraded["ActiveState"] == "active" and upgraded["MainPID"] != before[UPGRADED]["MainPID"]
    assert upgraded["ActiveEnterTimestamp"] != before[UPGRADED]["ActiveEnterTimestamp"]
    found = probe(host, UPGRADED)
    assert found.serves(UPGRADED_MODEL) and not found.serves(f"lab-{UPGRADED}"), found
    assert models_status(host, UPGRADED, KEYS[UPGRADED]) == 200

    assert files_of(host, REMOVED) == ""
    assert unit_state(host, REMOVED)["LoadState"] == "not-found"
    assert probe(host, REMOVED).health is None  # nothing listens on its port

    again = module_run_deploy(host, {**BASE, "vllm_instances": wanted}, deploy=DEPLOY)
    assert again.ok and again.changed_on(host.name) == [], again.changed
