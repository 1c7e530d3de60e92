"""Each of vllm_instances watched on its own (issue 35), on test_instances' container host with
its three stand-in instances: each has its own watchdog unit, active; an instance whose /health
answers 500 is restarted by its own watchdog while the others keep their MainPID; the
collector's textfile has each instance's series under its vllm_instance label; `hostkit doctor`
reports that restart under that instance alone, from its own watchdog's journal and state file;
removing an instance removes its watchdog too, and the others' watchdogs are left running;
`hostkit verify` then checks each instance's watchdog, fails on a vllm.service watchdog and an
unplanned instance's watchdog left by hand (as a partial deploy leaves them), and passes but for
those and the container's driver checks.

Short watchdog settings (WATCHDOG) keep the module short. Times are printed as JSON lines.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from hostkit.paths import (
    SYSTEMD_UNIT_DIR, WATCHDOG_UNIT, WATCHDOG_UNIT_PATH, vllm_instance_unit, watchdog_instance_state_path,
    watchdog_instance_unit,
)
from tests.e2e.test_doctor_smoke import hostkit
from tests.e2e.test_instances import BASE, INSTANCES, KEYS, NAMES, REMOVED, host, unit_state  # noqa: F401 (host: fixture)
from tests.e2e.conftest import lab_inventory
from tests.e2e.test_verify import failed_checks, hostkit_verify
from tests.e2e.test_verify_instances import LAB_GPU_FAILURES
from tests.e2e.vllm_unit import sh, show
from tests.waiting import wait_for

pytestmark = pytest.mark.lab
HOST_KIND = "container"

DEPLOY = Path(__file__).with_name("instances_watched_deploy.py")
FAILING = "b"
KEPT = [name for name in NAMES if name != REMOVED]
WATCHDOG = {"vllm_watchdog_interval_s": 2, "vllm_watchdog_failures": 2, "vllm_watchdog_max_restarts_per_hour": 2}
DATA = {**BASE, **WATCHDOG, "monitoring_node_exporter": False}
# FAILING serves long enough for its readiness gate, then answers 500 on /health.
WATCHED = {**INSTANCES, FAILING: {**INSTANCES[FAILING], "vllm_env": {
    **BASE["vllm_env"], "VLLM_STANDIN_FAULT": "health-500", "VLLM_STANDIN_FAULT_AFTER_S": "12"}}}
TEXTFILE = "/var/lib/prometheus/node-exporter/hostkit.prom"


def report(**figures) -> None:
    print(json.dumps({"test": "instances_watched", **figures}))


def loaded(lab_host, unit: str) -> str:
    return sh(lab_host, f"systemctl show {unit} -p LoadState --value").strip()


def watchdog_state(lab_host, name: str) -> dict:
    return json.loads(sh(lab_host, f"cat {watchdog_instance_state_path(name)} 2>/dev/null || echo '{{}}'"))


@pytest.fixture(scope="module")
def deployed(host, module_run_deploy):  # noqa: F811
    started = time.monotonic()
    run = module_run_deploy(host, {**DATA, "vllm_instances": WATCHED}, deploy=DEPLOY)
    assert run.ok, run.output[-6000:]
    report(deploy_s=round(time.monotonic() - started, 1))
    return {name: unit_state(host, name) for name in NAMES} | {"ended": time.monotonic()}


def test_each_instance_has_its_own_watchdog_naming_no_secret(host, deployed):  # noqa: F811
    for name in NAMES:
        watchdog = show(host, watchdog_instance_unit(name))
        assert watchdog["ActiveState"] == "active", (name, watchdog)
    assert loaded(host, "vllm-hostkit-watchdog.service") == "not-found"
    seen = sh(host, f"systemctl cat {' '.join(watchdog_instance_unit(name) for name in NAMES)}; ps -eo args")
    assert not any(key in seen for key in KEYS.values())
    watchdogs = [line for line in seen.splitlines() if line.startswith("/usr/bin/python3 -I /usr/local/sbin/vllm-watchdog")]
    assert sorted(re.search(r"--instance (\S+)", line).group(1) for line in watchdogs) == sorted(NAMES)
    assert not any("vllm-hostkit" in line for line in watchdogs)  # the deploy lock's leftover marker


def test_a_failing_instance_is_restarted_by_its_own_watchdog_alone(host, deployed):  # noqa: F811
    restarted = wait_for(lambda: watchdog_state(host, FAILING).get("restarts_total", 0) >= 1, 90)
    journal = sh(host, f"journalctl -u {watchdog_instance_unit(FAILING)} -o cat --no-pager")
    assert restarted, journal
    report(watchdog_restart_seen_after_deploy_s=round(time.monotonic() - deployed["ended"], 1))
    assert re.search(rf"restarting {re.escape(vllm_instance_unit(FAILING))}: 2 consecutive failed checks "
                     r"\(last: /health: HTTP 500\)", journal), journal
    assert wait_for(lambda: unit_state(host, FAILING)["MainPID"] not in ("0", deployed[FAILING]["MainPID"]), 60)
    for name in NAMES:
        if name != FAILING:
            assert unit_state(host, name)["MainPID"] == deployed[name]["MainPID"], name
            assert watchdog_state(host, name).get("restarts_total") == 0, name


def test_doctor_reports_the_restart_under_that_instance_from_its_own_watchdog(host, deployed, tmp_path):  # noqa: F811
    inventory = lab_inventory(tmp_path / "inventory.py", host, {**DATA, "vllm_instances": WATCHED})
    started = time.monotonic()
    result = hostkit("doctor", str(inventory), "--format", "json")
    report(doctor_s=round(time.monotonic() - started, 1))
    (checked,) = json.loads(result.stdout)["hosts"]
    instances = {instance["name"]: instance for instance in checked["instances"]}
    assert sorted(instances) == sorted(NAMES), result.stdout[-3000:]
    restarts = {name: [finding for finding in instance["findings"] if finding["code"] == "vllm-watchdog-restarts"]
                for name, instance in instances.items()}
    assert {name: len(found) for name, found in restarts.items()} == {name: int(name == FAILING) for name in NAMES}
    [finding] = restarts[FAILING]
    assert finding["problem"].startswith(f"The health watchdog restarted {vllm_instance_unit(FAILING)} ")
    assert f"journalctl -u {watchdog_instance_unit(FAILING)}" in finding["fix"]
    assert finding["evidence"]["restarts"] == watchdog_state(host, FAILING)["restarts"][:len(finding["evidence"]["restarts"])]
    assert any(f"restarting {vllm_instance_unit(FAILING)}: 2 consecutive failed checks" in line
               for line in finding["evidence"]["journal"]), finding
    assert not [f for f in checked["findings"] if f["code"] == "vllm-watchdog-restarts"]  # none for the host


def test_the_collector_writes_each_instances_series_under_its_label(host, deployed):  # noqa: F811
    sh(host, "systemctl start vllm-hostkit-monitor.service")
    metrics = sh(host, f"cat {TEXTFILE}")
    for name in NAMES:
        assert f'hostkit_vllm_up{{vllm_instance="{name}"}} ' in metrics, metrics
        restarts = re.search(rf'^hostkit_vllm_watchdog_restarts_total{{vllm_instance="{name}"}} (\d+)$', metrics, re.M)
        assert restarts and (int(restarts.group(1)) >= 1) is (name == FAILING), metrics
    for name in NAMES:
        if name != FAILING:  # which may be restarting now
            assert f'hostkit_vllm_up{{vllm_instance="{name}"}} 1' in metrics
            assert f'hostkit_vllm_unit_state{{state="active",vllm_instance="{name}"}} 1' in metrics
            assert f'hostkit_vllm_oom_kills_total{{vllm_instance="{name}"}} 0' in metrics
    # A container's cgroup gives no memory files (test_monitoring.py): the unit tests read recorded ones.
    assert not re.search(r"^hostkit_vllm_up ", metrics, re.M)  # no vllm.service, no unlabelled series


def test_removing_an_instance_removes_its_watchdog_and_leaves_the_others_running(  # noqa: F811
        host, deployed, module_run_deploy):
    before = {name: show(host, watchdog_instance_unit(name))["MainPID"] for name in KEPT}
    started = time.monotonic()
    run = module_run_deploy(host, {**DATA, "vllm_instances": {name: WATCHED[name] for name in KEPT}}, deploy=DEPLOY)
    report(removal_deploy_s=round(time.monotonic() - started, 1))
    assert run.ok, run.output[-6000:]
    # The collector no longer reads the removed instance; nothing else changes.
    assert sorted(run.changed_on(host.name)) == ["Memory monitoring", "Remove the vLLM units not planned",
                                                 "Remove the watchdogs of instances not planned"], run.changed
    assert loaded(host, watchdog_instance_unit(REMOVED)) == "not-found"
    assert sh(host, f"ls /etc/systemd/system/{watchdog_instance_unit(REMOVED)} {watchdog_instance_state_path(REMOVED)}"
                    " 2>/dev/null; true").strip() == ""
    for name in KEPT:
        assert show(host, watchdog_instance_unit(name))["MainPID"] == before[name], name


def test_verify_checks_each_instances_watchdog_and_flags_those_left_over(host, deployed, tmp_path):  # noqa: F811
    """After the removal: a and c serve, each watched (this module's data, monitoring on); by
    hand, as a deploy stopped partway leaves them: vllm.service's watchdog (a copy of a's unit,
    enabled) and the removed instance's watchdog unit file."""
    inventory = lab_inventory(tmp_path / "inventory.py", host,
                              {**DATA, "vllm_instances": {name: WATCHED[name] for name in KEPT}})
    kept_unit = f"{SYSTEMD_UNIT_DIR}/{watchdog_instance_unit(KEPT[0])}"
    removed_unit = f"{SYSTEMD_UNIT_DIR}/{watchdog_instance_unit(REMOVED)}"
    sh(host, f"cp {kept_unit} {WATCHDOG_UNIT_PATH} && cp {kept_unit} {removed_unit} && systemctl daemon-reload"
             f" && systemctl enable {WATCHDOG_UNIT}")
    try:
        started = time.monotonic()
        proc, _ = hostkit_verify(inventory, "--format", "json")
        report(verify_s=round(time.monotonic() - started, 1))
    finally:
        sh(host, f"systemctl disable {WATCHDOG_UNIT}; rm -f {WATCHDOG_UNIT_PATH} {removed_unit}; systemctl daemon-reload")
    [checked] = json.loads(proc.stdout)["hosts"]
    left_over = {f"no {WATCHDOG_UNIT}", "no watchdogs of instances not planned"}
    assert failed_checks(checked) == LAB_GPU_FAILURES | left_over, proc.stdout[-3000:]
    actual = {check["name"]: check["actual"] for check in checked["checks"] if check["name"] in left_over}
    assert actual == {f"no {WATCHDOG_UNIT}": f"{WATCHDOG_UNIT_PATH} present, enabled",
                      "no watchdogs of instances not planned": watchdog_instance_unit(REMOVED)}, actual
    names = {check["name"] for check in checked["checks"]}
    for name in KEPT:
        for check in ("health watchdog installed", "health watchdog active"):
            assert f"{vllm_instance_unit(name)} {check}" in names, sorted(names)
