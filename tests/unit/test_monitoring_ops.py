"""The monitoring operation's pure parts: rendered units (hostkit.desired.monitoring), what a
host needs, the commands."""

from __future__ import annotations

import shlex

from hostkit.desired.digest import text_sha256
from hostkit.facts.monitoring import MonitoringState
from hostkit.monitoring import COLLECTOR_PATH, NODE_EXPORTER_DROPIN, SERVICE_PATH, TIMER_PATH, collector_source
from hostkit.desired.monitoring import health_url, render_service, render_timer, wanted_files
from hostkit.operations.monitoring import apply_command, change_reasons, monitoring_changes, remove_command
from hostkit.plan.plans import MonitoringPlan, VllmPlan

VLLM = VllmPlan(enabled=True)  # on the default 0.0.0.0:8000


def converged_state(p: MonitoringPlan, **changes) -> MonitoringState:
    values = dict(
        file_sha256={path: text_sha256(text) for path, text in wanted_files(p, [VLLM]).items()},
        timer_enabled="enabled", timer_active="active",
        node_exporter_installed=p.node_exporter,
        node_exporter_enabled="enabled" if p.node_exporter else "",
        node_exporter_active="active" if p.node_exporter else "",
        textfile_age_s=3, textfile_path="/var/lib/prometheus/node-exporter/hostkit.prom",
    )
    values.update(changes)
    return MonitoringState(**values)


def exec_start(unit_text: str) -> list[str]:
    (line,) = [line for line in unit_text.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line[len("ExecStart="):])


def test_the_service_runs_the_host_python_isolated_with_the_plan_settings():
    p, vllm = MonitoringPlan(textfile_dir="/srv/textfiles", interval_s=30), VllmPlan(enabled=True, port=8100)
    argv = exec_start(render_service(p, [vllm]))
    assert argv[:4] == ["/usr/bin/python3", "-I", "-S", COLLECTOR_PATH]
    options = dict(zip(argv[4::2], argv[5::2]))
    assert options["--textfile-dir"] == "/srv/textfiles" and options["--interval"] == "30"
    assert options["--health-url"] == "http://127.0.0.1:8100/health"
    assert "ReadWritePaths=/srv/textfiles /var/lib/vllm-hostkit" in render_service(p, [vllm])
    timer = render_timer(p)
    assert "OnActiveSec=1s" in timer and "OnUnitInactiveSec=30" in timer
    assert "AccuracySec=1s" in timer and "WantedBy=timers.target" in timer


def test_health_url_for_other_bind_addresses():
    assert health_url(VllmPlan(enabled=True, host="::")) == "http://[::1]:8000/health"
    assert health_url(VllmPlan(enabled=True, host="10.0.0.5")) == "http://10.0.0.5:8000/health"
    assert health_url(VllmPlan(enabled=False)) == ""
    argv = exec_start(render_service(MonitoringPlan(), [VllmPlan(enabled=False)]))
    assert argv[argv.index("--health-url") + 1] == ""


def test_the_collector_file_is_the_package_script():
    files = wanted_files(MonitoringPlan(), [VLLM])
    assert files[COLLECTOR_PATH] == collector_source() and "def main(" in files[COLLECTOR_PATH]
    assert NODE_EXPORTER_DROPIN not in files
    dropin = wanted_files(MonitoringPlan(node_exporter=True), [VLLM])[NODE_EXPORTER_DROPIN]
    assert "ExecStart=\nExecStart=/usr/bin/prometheus-node-exporter $ARGS " \
           "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in dropin


def test_a_converged_host_needs_nothing():
    for p in (MonitoringPlan(), MonitoringPlan(node_exporter=True)):
        assert monitoring_changes(p, [VLLM], converged_state(p)) is None


def test_a_fresh_host_gets_everything_and_one_collector_run():
    p = MonitoringPlan(node_exporter=True)
    changed = monitoring_changes(p, [VLLM], MonitoringState())
    assert set(changed) == {COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN}
    command = apply_command(p, MonitoringState(), changed)
    assert "apt-get install -y -q -o Dpkg::Options::=--force-confold --no-install-recommends prometheus-node-exporter" \
           in command
    assert command.index("apt-get install") < command.index("systemctl daemon-reload") \
           < command.index("systemctl start vllm-hostkit-monitor.service")
    assert "systemctl restart prometheus-node-exporter.service" in command
    assert "timeout 600 apt-get" in command  # nothing waits for ever


def test_a_changed_interval_rewrites_the_units_and_restarts_the_timer_only():
    before = MonitoringPlan()
    after = MonitoringPlan(interval_s=60)
    state = converged_state(before)
    changed = monitoring_changes(after, [VLLM], state)
    assert set(changed) == {SERVICE_PATH, TIMER_PATH}
    command = apply_command(after, state, changed)
    assert "systemctl restart vllm-hostkit-monitor.timer" in command and "apt-get" not in command
    assert "prometheus-node-exporter.service" not in command


def test_a_stopped_timer_is_started_without_rewriting_anything():
    p = MonitoringPlan()
    state = converged_state(p, timer_active="inactive")
    assert monitoring_changes(p, [VLLM], state) == {}
    assert change_reasons(p, state, {}) == ["vllm-hostkit-monitor.timer is enabled, inactive"]
    command = apply_command(p, state, {})
    assert "daemon-reload" not in command and "printf" not in command
    assert "systemctl start vllm-hostkit-monitor.timer" in command


def test_turning_node_exporter_off_removes_only_hostkits_dropin():
    on = MonitoringPlan(node_exporter=True)
    off = MonitoringPlan()
    state = converged_state(on)
    changed = monitoring_changes(off, [VLLM], state)
    assert changed == {}
    assert change_reasons(off, state, changed) == [f"{NODE_EXPORTER_DROPIN} is no longer wanted"]
    command = apply_command(off, state, changed)
    assert f"rm -f {NODE_EXPORTER_DROPIN}" in command and "systemctl try-restart prometheus-node-exporter.service" in command
    assert "apt-get" not in command and "remove" not in command


def test_monitoring_disabled_removes_what_hostkit_installed():
    p = MonitoringPlan(enabled=False)
    command = remove_command(p, converged_state(MonitoringPlan(node_exporter=True)))
    assert "systemctl disable --now --quiet vllm-hostkit-monitor.timer" in command
    for path in (COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN,
                 "/var/lib/prometheus/node-exporter/hostkit.prom"):
        assert path in command
    assert not MonitoringState().installed and converged_state(p).installed


def test_the_recorded_snapshot_section_of_a_provisioned_lab_host():
    from pathlib import Path

    from hostkit.facts.monitoring import MonitoringFact
    from hostkit.verify.checks import monitoring_checks

    lines = (Path(__file__).parent / "fixtures" / "monitoring" / "debian12-snapshot-section.txt").read_text().splitlines()
    state = MonitoringFact().process(lines)
    assert set(state.file_sha256) == {COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN}
    assert (state.timer_enabled, state.timer_active, state.node_exporter_installed) == ("enabled", "active", True)
    assert state.textfile_age_s == 4 and state.textfile_path == "/var/lib/prometheus/node-exporter/hostkit.prom"
    p = MonitoringPlan(node_exporter=True, interval_s=5)
    # The recorded drop-in is today's render for that plan. The collector file changes with the
    # code; after this recording the service lost its After=vllm.service (a hung vLLM start held it
    # back) and the timer moved from OnUnitActiveSec= to OnUnitInactiveSec= (it did not re-arm).
    wanted = wanted_files(p, [VLLM])
    for path in (NODE_EXPORTER_DROPIN,):
        assert state.file_sha256[path] == text_sha256(wanted[path]), path
    results = {r.name: r.ok for r in monitoring_checks(p, [VLLM], state, "main1")}
    assert results["collector timer active"] and results["metrics file fresh"] and results["node_exporter serving"]
