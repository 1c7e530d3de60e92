"""Each of vllm_instances watched on its own (issue 35): its watchdog's plan, unit, script
arguments, fact and operations, and the collector's series of several units, each instance's
under its vllm_instance label. vllm.service's watchdog and collector units are those of before
(fixtures/watchdog/, recorded from the commit before)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pyinfra.context import ctx_host

from hostkit import paths
from hostkit.desired import watchdog as desired
from hostkit.desired.digest import text_sha256
from hostkit.desired.monitoring import monitored_servers, render_service
from hostkit.facts.watchdog import WatchdogFact, WatchdogState
from hostkit.monitoring import collector
from hostkit.operations import watchdog as op
from hostkit.plan.plans import MonitoringPlan, WatchdogSettings
from hostkit.remote import vllm_watchdog as wd
from tests.unit.op_host import OpHost
from tests.unit.test_monitoring_collector import V2, samples_by_name
from hostkit.plan.scope import snapshot_scope
from tests.unit.test_vllm_instances_deploy import SECRET, TWO, on_host, plan
from tests.unit.test_vllm_unit import PLAN

BEFORE = Path(__file__).parent / "fixtures" / "watchdog"


def exec_start(unit_text: str) -> str:
    return next(line for line in unit_text.splitlines() if line.startswith("ExecStart="))


def test_vllm_service_keeps_its_watchdog_and_collector_units_byte_for_byte():
    assert desired.watchdog_plan(WatchdogSettings(), PLAN).unit_text == (BEFORE / "vllm-hostkit-watchdog.service").read_text()
    assert render_service(MonitoringPlan(), [PLAN]) == (BEFORE / "vllm-hostkit-monitor.service").read_text()


def test_an_instances_watchdog_names_it_and_no_secret_or_marker_in_its_argv():
    host_plan = plan(TWO, vllm_api_key=SECRET, vllm_watchdog_interval_s=4)
    b = host_plan.instances["b"]
    wanted = desired.watchdog_plan(b.watchdog, b)
    assert (wanted.unit, wanted.unit_path) == ("vllm-hostkit-watchdog@b.service",
                                               "/etc/systemd/system/vllm-hostkit-watchdog@b.service")
    line = exec_start(wanted.unit_text)
    assert line == ("ExecStart=/usr/bin/python3 -I /usr/local/sbin/vllm-watchdog --instance b "
                    f"--url http://127.0.0.1:8001 --model {b.served_model_name} --interval 4 --failures 3 "
                    "--max-restarts-per-hour 4 --completion-every 6 --completion-timeout 12 "
                    f"--lock-stale-after {desired.deploy_lock_stale_after_s(b.ready_timeout_s)}")
    assert "vllm-hostkit" not in line  # the deploy lock's leftover marker
    assert SECRET not in wanted.unit_text
    assert "Description=vLLM health watchdog of vllm@b.service (vllm-hostkit)\n" in wanted.unit_text
    assert "After=vllm@b.service\n" in wanted.unit_text
    assert "# Its state: /var/lib/vllm-hostkit/watchdog@b.json.\n" in wanted.unit_text


def test_an_instance_sets_its_own_watchdog_keys():
    host_plan = plan({**TWO, "b": {**TWO["b"], "vllm_watchdog": False},
                      "a": {**TWO["a"], "vllm_watchdog_failures": 5}}, vllm_watchdog_failures=2)
    a, b = host_plan.instances["a"].watchdog, host_plan.instances["b"].watchdog
    assert (a.enabled, a.failures, b.enabled, b.failures) == (True, 5, False, 2)
    plans = desired.host_watchdog_plans(host_plan)
    assert [(w.unit, w.enabled, w.keep_script) for w in plans] == [
        ("vllm-hostkit-watchdog.service", False, True), ("vllm-hostkit-watchdog@a.service", True, False),
        ("vllm-hostkit-watchdog@b.service", False, True)]
    unwatched = plan({name: {**data, "vllm_watchdog": False} for name, data in TWO.items()})
    assert not desired.host_watchdog_plans(unwatched)[0].keep_script  # no watchdog left: the script goes


def test_the_scripts_instance_files_are_hostkits_names():
    assert wd.instance_files("b") == (paths.vllm_instance_unit("b"), paths.watchdog_instance_state_path("b"),
                                      paths.vllm_instance_env_file("b"))
    config, state, env_file, _ = wd.parse_args(["--instance", "b", "--url", "http://127.0.0.1:8001", "--model", "m"])
    assert (config.unit, state, env_file) == wd.instance_files("b")
    config, state, env_file, _ = wd.parse_args(["--url", "http://127.0.0.1:8000", "--model", "m"])
    assert (config.unit, state, env_file) == (paths.VLLM_UNIT, paths.WATCHDOG_STATE_PATH, paths.VLLM_ENV_FILE)


def test_the_fact_reads_one_watchdog_unit():
    command = WatchdogFact().command("vllm-hostkit-watchdog@b.service")
    assert "hk_show vllm-hostkit-watchdog@b.service " in command
    assert "sha256sum /etc/systemd/system/vllm-hostkit-watchdog@b.service " in command
    assert "sha256sum /etc/systemd/system/vllm-hostkit-watchdog.service " in WatchdogFact().command()


def commands(operation, current: WatchdogState, sections: dict | None = None, **kwargs) -> tuple[list, OpHost]:
    fake = OpHost(sections or {}, executing=True, facts={WatchdogFact: current})
    with ctx_host.use(fake):
        return [str(command) for command in operation._inner(**kwargs)], fake


def test_watchdogs_of_instances_not_planned_are_removed_with_their_state_the_script_kept():
    """Which instances have a watchdog is the snapshot's vllm section (as their units are)."""
    sections = {"vllm": dataclasses.replace(on_host(), instance_watchdogs=("a", "b", "c"))}
    removed, fake = commands(op.instance_watchdogs_removed, None, sections, planned=["a", "c"], scope=snapshot_scope())
    assert removed == ["\n".join((
        "set -e", "systemctl disable --now vllm-hostkit-watchdog@b.service 2>/dev/null || true",
        "systemctl reset-failed vllm-hostkit-watchdog@b.service 2>/dev/null || true",
        "rm -f /etc/systemd/system/vllm-hostkit-watchdog@b.service /var/lib/vllm-hostkit/watchdog@b.json",
        "systemctl daemon-reload"))]
    assert fake.logged == ["vllm-hostkit-watchdog@b.service: its instance is not planned: stopped, disabled and removed"]
    assert commands(op.instance_watchdogs_removed, None, sections, planned=["a", "b", "c"], scope=snapshot_scope())[0] == []
    every = commands(op.instance_watchdogs_removed, None, sections, planned=[], scope=snapshot_scope())[0]
    assert len(every[0].split("rm -f ")) == 4


def test_vllm_services_watchdog_removed_beside_instances_leaves_the_script():
    installed = WatchdogState("x", "y", {})
    kept, fake = commands(op.vllm_watchdog, installed, plan=desired.WatchdogPlan(False, keep_script=True))
    assert "rm -f /etc/systemd/system/vllm-hostkit-watchdog.service\n" in kept[0]
    assert fake.facts_asked == [{"unit": "vllm-hostkit-watchdog.service"}]
    assert commands(op.vllm_watchdog, WatchdogState(None, "y", {}), plan=desired.WatchdogPlan(False, keep_script=True))[0] == []
    gone = commands(op.vllm_watchdog, installed, plan=desired.WatchdogPlan(False))[0]
    assert f"rm -f /etc/systemd/system/vllm-hostkit-watchdog.service {paths.WATCHDOG_SCRIPT_PATH}\n" in gone[0]


def test_an_instances_watchdog_installs_under_its_own_unit():
    host_plan = plan(TWO)
    wanted = desired.watchdog_plan(host_plan.instances["a"].watchdog, host_plan.instances["a"])
    fresh, fake = commands(op.vllm_watchdog, WatchdogState(None, text_sha256(wanted.script_text), {}), plan=wanted)
    assert fake.facts_asked == [{"unit": "vllm-hostkit-watchdog@a.service"}]
    assert "mv -f /etc/systemd/system/.vllm-hostkit-watchdog@a.service.new " \
           "/etc/systemd/system/vllm-hostkit-watchdog@a.service" in fresh[-1]
    assert fresh[-1].endswith("systemctl enable vllm-hostkit-watchdog@a.service\n"
                              "systemctl restart vllm-hostkit-watchdog@a.service")
    assert paths.WATCHDOG_SCRIPT_PATH + ".new" not in fresh[-1]  # the script is there already
    converged = WatchdogState(text_sha256(wanted.unit_text), text_sha256(wanted.script_text),
                              {"ActiveState": "active", "UnitFileState": "enabled"})
    assert commands(op.vllm_watchdog, converged, plan=wanted)[0] == []


# -- the collector -------------------------------------------------------------------------


def test_the_collector_reads_each_instance_after_the_first_in_its_place():
    host_plan = plan(TWO)
    line = exec_start(render_service(MonitoringPlan(), monitored_servers(host_plan)))
    assert line.endswith(
        " --unit vllm@a.service --interval 15 --health-url http://127.0.0.1:8000/health --state-dir /var/lib/vllm-hostkit"
        " --watchdog-file /var/lib/vllm-hostkit/watchdog@a.json --nvme-settings /etc/vllm-hostkit/nvme.conf"
        " --unit vllm@b.service --health-url http://127.0.0.1:8001/health --watchdog-file /var/lib/vllm-hostkit/watchdog@b.json")


def test_instance_series_carry_vllm_instance_and_vllm_services_none():
    assert collector.unit_labels("vllm@b.service") == {"vllm_instance": "b"}
    assert collector.unit_labels("vllm.service") == {}
    samples = samples_by_name(collector.unit_sample({"ActiveState": "active", "NRestarts": "2"}, True, {"vllm_instance": "b"}))
    assert samples["hostkit_vllm_up"] == [({"vllm_instance": "b"}, 1)]
    assert ({"vllm_instance": "b", "state": "active"}, 1) in samples["hostkit_vllm_unit_state"]
    memory, _ = collector.unit_memory_samples(str(V2), 2, "inv", {}, {"vllm_instance": "b"})
    assert {name for name, labels, _ in memory if labels != {"vllm_instance": "b"}} == set()


def test_one_run_over_two_instances_writes_each_ones_series(tmp_path, monkeypatch):
    """The collector's main over two units: systemctl and the cgroup files recorded (V2), one
    unit serving, an OOM kill in the other's cgroup, each its watchdog file."""
    shown = (V2 / "systemctl-show").read_text()

    def answer(argv, timeout_s):
        if argv[:2] == ["systemctl", "show"]:
            return shown.replace("/system.slice/rec-hog.service", f"/system.slice/{argv[2]}")
        return None

    oom = ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
           "oom_memcg=/system.slice/vllm@b.service,task_memcg=/system.slice/vllm@b.service,task=python3,pid=9,uid=0")
    monkeypatch.setattr(collector, "run_bounded", answer)
    monkeypatch.setattr(collector, "cgroup_dirs", lambda control_group: (str(V2), 2))
    monkeypatch.setattr(collector, "read_kmsg", lambda: iter([(5, oom)]))
    monkeypatch.setattr(collector, "health_ok", lambda url, timeout_s: url.endswith(":8000/health"))
    for name, restarts in (("a", []), ("b", [1.0, 2.0])):
        (tmp_path / f"watchdog@{name}.json").write_text(json.dumps({"restarts": restarts}))
    argv = ["--textfile-dir", str(tmp_path), "--state-dir", str(tmp_path)]
    for name, port in (("a", 8000), ("b", 8001)):
        argv += ["--unit", f"vllm@{name}.service", "--health-url", f"http://127.0.0.1:{port}/health",
                 "--watchdog-file", str(tmp_path / f"watchdog@{name}.json")]
    assert collector.main(argv) == 0
    text = (tmp_path / collector.TEXTFILE_NAME).read_text()
    current = int((V2 / "memory.current").read_text())
    for line in ('hostkit_vllm_up{vllm_instance="a"} 1', 'hostkit_vllm_up{vllm_instance="b"} 0',
                 'hostkit_vllm_watchdog_restarts_total{vllm_instance="a"} 0',
                 'hostkit_vllm_watchdog_restarts_total{vllm_instance="b"} 2',
                 'hostkit_vllm_oom_kills_total{vllm_instance="a"} 0', 'hostkit_vllm_oom_kills_total{vllm_instance="b"} 1',
                 f'hostkit_vllm_memory_current_bytes{{vllm_instance="a"}} {current}'):
        assert line in text.splitlines(), line
    assert "\nhostkit_vllm_up " not in text and 'instance="' not in text.replace('vllm_instance="', "")
    state = json.loads((tmp_path / "monitor-state.json").read_text())
    assert state["units"]["vllm@b.service"]["unit_ooms"] == 1 and state["kmsg_seq"] == 5
    collector.main(argv)  # the next run counts the kill once
    assert 'hostkit_vllm_oom_kills_total{vllm_instance="b"} 1' in (tmp_path / collector.TEXTFILE_NAME).read_text()
