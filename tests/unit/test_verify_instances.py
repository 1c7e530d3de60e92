"""verify of a host with vllm_instances (issue 35): each instance's probe looks at its own unit,
env file and port and its own watchdog; its checks (unit, active, readiness, env file, GPUs by
UUID, watchdog) carry its unit's name; the host's checks come once; the API key is never in a
check's text; watchdogs a partial deploy leaves (vllm.service's beside instances, an unplanned
instance's) fail."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hostkit.desired.digest import text_sha256
from hostkit.desired.vllm_unit import memory_directives
from hostkit.desired.watchdog import watchdog_plan
from hostkit.facts.kernel_log import KernelLog
from hostkit.facts.vllm_service import VllmServiceFact
from hostkit.facts.watchdog import WatchdogState
from hostkit.paths import VLLM_ENV_FILE, VLLM_UNIT
from hostkit.verify.checks import InstanceReadings, check_host, instance_checks, leftover_watchdog_checks
from hostkit.verify.probes import Probes, Readiness, VllmProcess, parse_probes, probe_command
from hostkit.vllm.readiness import Probe
from hostkit.profile.validation import profile_from_data
from tests.unit.test_instances_plan import QWEN7, UUID
from tests.unit.test_verify_checks import observed
from tests.unit.test_vllm_instances_deploy import SECRET, TWO, converged, plan

CLEAN_LOG = KernelLog(source="journalctl")


@pytest.fixture(scope="module")
def host_plan():
    return plan(TWO, vllm_api_key=SECRET)


def serving(p, **unit) -> Probes:
    """The probes of an instance that serves as planned."""
    shown = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "UnitFileState": "enabled",
             "NeedDaemonReload": "no", "MainPID": "42",
             "Environment": f"CUDA_VISIBLE_DEVICES={','.join(p.gpu_uuids)} HF_HOME=/x",
             **{name: str(value) for name, value in memory_directives(p)}, **unit}
    wanted = watchdog_plan(p.watchdog, p)
    watchdog = WatchdogState(text_sha256(wanted.unit_text), text_sha256(wanted.script_text),
                             {"ActiveState": "active", "SubState": "running", "UnitFileState": "enabled"})
    return Probes(ooms=CLEAN_LOG, unit=shown,
                  readiness=Readiness(Probe(200, "", 200, (p.served_model_name,)), "ready", 1, 0),
                  process=VllmProcess(42, tuple(p.argv), 999, p.user, text_sha256(SECRET)), watchdog=watchdog)


def test_an_instances_probe_looks_at_its_unit_env_file_port_and_watchdog(host_plan):
    b = host_plan.instances["b"]
    script = probe_command(b, host_parts=False)
    assert "hk_unit=vllm@b.service" in script and "/etc/vllm-hostkit/vllm@b.env" in script
    assert " 8001 " in script and "Environment" in script
    assert "@@hostkit-probe:watchdog@@" in script and "@@hostkit-probe:oom@@" not in script
    assert "hk_show vllm-hostkit-watchdog@b.service " in script
    assert "sha256sum /etc/systemd/system/vllm-hostkit-watchdog@b.service " in script
    assert "@@hostkit-probe:oom@@" in probe_command(b)


def test_vllm_services_probe_is_as_before(host_plan):
    classic = host_plan.instances["a"].model_copy(update={"instance": None, "gpu_indices": [], "gpu_uuids": []})
    script = probe_command(classic)
    assert f"hk_unit={VLLM_UNIT}" in script and VLLM_ENV_FILE in script
    assert "@@hostkit-probe:watchdog@@" in script and "Environment" not in script


def test_a_serving_instance_passes_each_check_named_by_its_unit(host_plan):
    a = host_plan.instances["a"]
    results = instance_checks(a, converged(a), serving(a), "gpu-8")
    assert [r for r in results if not r.ok] == []
    names = [r.name for r in results]
    assert all(name.startswith("vllm@a.service ") for name in names)
    for check in ("unit active", "unit file", "environment file", "ready (/health)", "serves the model (/v1/models)",
                  "API key in effect", "GPUs", "health watchdog installed", "health watchdog active"):
        assert f"vllm@a.service {check}" in names
    gpus = next(r for r in results if r.name == "vllm@a.service GPUs")
    assert gpus.expected == f"CUDA_VISIBLE_DEVICES={UUID.format(0)},{UUID.format(1)}"
    assert "vllm@a.env" in next(r for r in results if r.name == "vllm@a.service environment file").expected
    assert not any(SECRET in r.message() + r.expected + r.actual + r.fix for r in results)


def test_a_wrong_gpu_or_a_wrong_env_mode_fails_that_instance(host_plan):
    b = host_plan.instances["b"]
    swapped = serving(b, Environment=f"CUDA_VISIBLE_DEVICES={UUID.format(0)}")
    loose = dataclasses.replace(converged(b), env_stat=dataclasses.replace(converged(b).env_stat, mode="644"))
    failed = {r.name for r in instance_checks(b, loose, swapped, "gpu-8") if not r.ok}
    assert failed == {"vllm@b.service GPUs", "vllm@b.service environment file"}


def test_an_instances_watchdog_stopped_or_another_instances_fails_that_instance(host_plan):
    a, b = host_plan.instances["a"], host_plan.instances["b"]
    stopped = serving(b)
    stopped = dataclasses.replace(stopped, watchdog=dataclasses.replace(stopped.watchdog, unit={"ActiveState": "inactive"}))
    failed = [r for r in instance_checks(b, converged(b), stopped, "gpu-8") if not r.ok]
    assert [r.name for r in failed] == ["vllm@b.service health watchdog active"]
    assert failed[0].fix == ("systemctl enable --now vllm-hostkit-watchdog@b.service; "
                             "read journalctl -u vllm-hostkit-watchdog@b.service")
    swapped = dataclasses.replace(serving(b), watchdog=serving(a).watchdog)  # a's unit where b's should be
    failed = [r for r in instance_checks(b, converged(b), swapped, "gpu-8") if not r.ok]
    assert [r.name for r in failed] == ["vllm@b.service health watchdog installed"]
    assert "/etc/systemd/system/vllm-hostkit-watchdog@b.service" in failed[0].expected


def test_host_checks_come_once_and_a_stopped_instance_fails_alone(host_plan):
    readings = {name: InstanceReadings(converged(p), serving(p)) for name, p in host_plan.instances.items()}
    stopped = serving(host_plan.instances["b"], ActiveState="inactive", SubState="dead")
    readings["b"] = InstanceReadings(readings["b"].service, dataclasses.replace(stopped, process=None))
    _, _, snapshot, _ = observed("converged")  # a lab host's snapshot: its host-level sections
    profile = profile_from_data("gpu-8", {"vllm_model": QWEN7, "vllm_instances": TWO})
    results = check_host(profile, host_plan, snapshot, readings["a"].probes, readings)
    names = [r.name for r in results]
    for host_level in ("no OOM kills since boot", "collector installed"):
        assert names.count(host_level) == 1
    assert not any(name.startswith(("unit ", "release", "health watchdog")) for name in names)
    instance_failures = {r.name for r in results if not r.ok and r.name.startswith("vllm@")}
    assert instance_failures == {"vllm@b.service unit active", "vllm@b.service server process"}
    assert {n.split()[0] for n in names if n.startswith("vllm@")} == {"vllm@a.service", "vllm@b.service"}


# --- watchdogs left over: vllm.service's beside instances, an unplanned instance's ----------
# Recorded on tests/e2e/test_instances_watched.py's host (fixtures/verify/README.md): a copy of
# an instance's watchdog unit as vllm-hostkit-watchdog.service, enabled, and as b's, whose
# instance was removed.
VERIFY_FIXTURES = Path(__file__).parent / "fixtures" / "verify"
CONTAINER_PROBE = Path(__file__).parent / "fixtures" / "container" / "nspawn-debian12.probe.txt"


def recorded_lines(name: str) -> list[str]:
    return (VERIFY_FIXTURES / name).read_text().splitlines()


def left_over_probes() -> Probes:
    return parse_probes(["@@hostkit-probe:host-watchdog@@", *recorded_lines("lab-instances-host-watchdog.txt")])


def by_check(results):
    return {r.name: r for r in results}


def test_the_first_instances_probe_reads_vllm_services_watchdog_beside_it(host_plan):
    a, b = host_plan.instances["a"], host_plan.instances["b"]
    assert "echo '@@hostkit-probe:host-watchdog@@'" in probe_command(a)
    assert "hk_show vllm-hostkit-watchdog.service " in probe_command(a)
    assert "host-watchdog" not in probe_command(b, host_parts=False)
    classic = a.model_copy(update={"instance": None, "gpu_indices": [], "gpu_uuids": []})
    assert "host-watchdog" not in probe_command(classic)  # its watchdog is the watchdog part
    assert left_over_probes().host_watchdog.unit["UnitFileState"] == "enabled"


def test_vllm_services_watchdog_and_an_unplanned_instances_watchdog_left_over_fail(host_plan):
    """host_plan runs a and b; the recorded host has a's, b's and c's watchdog unit files."""
    fact = VllmServiceFact().process(recorded_lines("lab-instances-vllm-fact.txt"))
    assert fact.instance_watchdogs == ("a", "b", "c")
    results = by_check(leftover_watchdog_checks(host_plan, fact, left_over_probes(), "gpu-8"))
    assert {name: r.ok for name, r in results.items()} == {"no vllm-hostkit-watchdog.service": False,
                                                           "no watchdogs of instances not planned": False}
    single = results["no vllm-hostkit-watchdog.service"]
    assert single.actual == "/etc/systemd/system/vllm-hostkit-watchdog.service present, enabled"
    assert "systemctl disable --now vllm-hostkit-watchdog.service" in single.fix and "--limit gpu-8" in single.fix
    assert results["no watchdogs of instances not planned"].actual == "vllm-hostkit-watchdog@c.service"


def test_a_host_without_leftovers_passes_both_and_vllm_services_host_checks_only_leftovers(host_plan):
    absent = parse_probes(CONTAINER_PROBE.read_text().splitlines())  # its watchdog part: not-found
    clean = Probes(ooms=CLEAN_LOG, host_watchdog=absent.watchdog)
    assert absent.watchdog.unit["LoadState"] == "not-found"
    fact = dataclasses.replace(converged(host_plan.instances["a"]), instance_watchdogs=("a", "b"))
    results = leftover_watchdog_checks(host_plan, fact, clean, "gpu-8")
    assert [(r.name, r.ok, r.actual) for r in results] == [("no vllm-hostkit-watchdog.service", True, "none"),
                                                           ("no watchdogs of instances not planned", True, "none")]
    # A still-running vllm.service watchdog whose unit file is gone is left over too.
    running = dataclasses.replace(absent.watchdog, unit={"ActiveState": "active", "SubState": "running"})
    [single, _] = leftover_watchdog_checks(host_plan, fact, Probes(ooms=CLEAN_LOG, host_watchdog=running), "gpu-8")
    assert (single.ok, single.actual) == (False, "active/running")
    # vllm.service's host: nothing to check until an instance's watchdog is left on it.
    classic = host_plan.model_copy(update={"instances": {}})
    assert leftover_watchdog_checks(classic, dataclasses.replace(fact, instance_watchdogs=()), clean, "gpu-8") == []
    [left] = leftover_watchdog_checks(classic, fact, clean, "gpu-8")
    assert (left.name, left.ok, left.actual) == ("no watchdogs of instances not planned", False,
                                                 "vllm-hostkit-watchdog@a.service, vllm-hostkit-watchdog@b.service")
