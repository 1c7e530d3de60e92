"""`hostkit verify`'s monitoring checks on the snapshot's monitoring section."""

from __future__ import annotations

from hostkit.desired.digest import text_sha256
from hostkit.facts.monitoring import MonitoringState
from hostkit.desired.monitoring import wanted_files
from hostkit.plan.plans import MonitoringPlan, VllmPlan
from hostkit.verify.checks import monitoring_checks

VLLM = VllmPlan(enabled=True)


def state(p: MonitoringPlan, **changes) -> MonitoringState:
    values = dict(file_sha256={path: text_sha256(text) for path, text in wanted_files(p, [VLLM]).items()},
                  timer_enabled="enabled", timer_active="active", node_exporter_installed=True,
                  node_exporter_enabled="enabled", node_exporter_active="active", textfile_age_s=4,
                  textfile_path="/var/lib/prometheus/node-exporter/hostkit.prom")
    values.update(changes)
    return MonitoringState(**values)


def failed(results) -> dict[str, str]:
    return {r.name: r.message() for r in results if not r.ok}


def test_a_converged_host_passes():
    p = MonitoringPlan(node_exporter=True)
    results = monitoring_checks(p, [VLLM], state(p), "gpu-a01")
    assert [r.name for r in results] == ["collector installed", "collector timer active", "metrics file fresh",
                                         "node_exporter serving"]
    assert failed(results) == {}


def test_a_stopped_timer_and_a_stale_file_fail():
    p = MonitoringPlan()
    failures = failed(monitoring_checks(p, [VLLM], state(p, timer_active="inactive", textfile_age_s=136), "gpu-a01"))
    assert set(failures) == {"collector timer active", "metrics file fresh"}
    assert "written in the last 135s (3 intervals and one run's deadline); actual written 136s ago" in failures["metrics file fresh"]
    assert "systemctl enable --now vllm-hostkit-monitor.timer" in failures["collector timer active"]


def test_no_file_and_an_edited_collector_fail():
    p = MonitoringPlan()
    edited = state(p, textfile_age_s=None)
    edited.file_sha256["/usr/local/lib/vllm-hostkit/monitoring-collector.py"] = "0" * 64
    failures = failed(monitoring_checks(p, [VLLM], edited, "gpu-a01"))
    assert "actual no metrics file" in failures["metrics file fresh"]
    assert "/usr/local/lib/vllm-hostkit/monitoring-collector.py" in failures["collector installed"]


def test_node_exporter_is_checked_only_when_asked_for():
    p = MonitoringPlan(node_exporter=True)
    failures = failed(monitoring_checks(p, [VLLM], state(p, node_exporter_installed=False, node_exporter_active=""), "h"))
    assert "not installed" in failures["node_exporter serving"]
    assert [r.name for r in monitoring_checks(MonitoringPlan(), [VLLM], state(MonitoringPlan()), "h")][-1] == "metrics file fresh"


def test_monitoring_off_expects_nothing_installed():
    off = MonitoringPlan(enabled=False)
    assert failed(monitoring_checks(off, [VLLM], MonitoringState(), "h")) == {}
    assert "no monitoring installed" in failed(monitoring_checks(off, [VLLM], state(MonitoringPlan()), "h"))
