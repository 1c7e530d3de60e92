"""hostkit's monitoring as the host should have it: the collector, its service and timer, and
node_exporter's textfile drop-in, rendered from the plan's monitoring part and its vLLM plan
(the health URL the collector probes). Shared by the deploy and `hostkit verify`."""

from __future__ import annotations

from hostkit import templates
from hostkit.monitoring import (
    COLLECTOR_PATH,
    NODE_EXPORTER_DROPIN,
    RUN_TIMEOUT_S,
    SERVICE_PATH,
    STATE_DIR,
    TIMER_PATH,
    WATCHDOG_FILE,
    collector_source,
    textfile_path,
)
from hostkit.paths import NVME_SETTINGS_FILE, VLLM_UNIT
from hostkit.plan.plans import MonitoringPlan, VllmPlan
from hostkit.vllm.readiness import probe_address


def health_url(vllm: VllmPlan) -> str:
    """Where the collector asks vLLM whether it serves; empty when the host runs no vLLM."""
    if not vllm.enabled:
        return ""
    address = probe_address(vllm.host)
    address = f"[{address}]" if ":" in address else address
    return f"http://{address}:{vllm.port}/health"


def render_service(monitoring: MonitoringPlan, vllm: VllmPlan) -> str:
    return templates().get_template("vllm-hostkit-monitor.service.j2").render(
        collector=COLLECTOR_PATH, textfile=textfile_path(monitoring.textfile_dir),
        textfile_dir=monitoring.textfile_dir, vllm_unit=VLLM_UNIT, interval=monitoring.interval_s,
        health_url=health_url(vllm) or '""', state_dir=STATE_DIR, watchdog_file=WATCHDOG_FILE,
        timeout_s=RUN_TIMEOUT_S, nvme_settings=NVME_SETTINGS_FILE,
    )


def render_timer(monitoring: MonitoringPlan) -> str:
    return templates().get_template("vllm-hostkit-monitor.timer.j2").render(interval=monitoring.interval_s)


def render_node_exporter_dropin(monitoring: MonitoringPlan) -> str:
    return templates().get_template("node-exporter-textfile.conf.j2").render(textfile_dir=monitoring.textfile_dir)


def wanted_files(monitoring: MonitoringPlan, vllm: VllmPlan) -> dict[str, str]:
    """{path: text} of every file hostkit installs for monitoring."""
    files = {COLLECTOR_PATH: collector_source(), SERVICE_PATH: render_service(monitoring, vllm),
             TIMER_PATH: render_timer(monitoring)}
    if monitoring.node_exporter:
        files[NODE_EXPORTER_DROPIN] = render_node_exporter_dropin(monitoring)
    return files
