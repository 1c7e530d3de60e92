"""hostkit's monitoring as the host should have it: the collector, its service and timer, and
node_exporter's textfile drop-in, rendered from the plan's monitoring part and its vLLM
servers (the units, health URLs and watchdog files the collector reads). Shared by the deploy and `hostkit verify`."""

from __future__ import annotations

from collections.abc import Sequence

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
from hostkit.paths import NVME_SETTINGS_FILE, VLLM_UNIT, vllm_instance_unit, watchdog_instance_state_path
from hostkit.plan.plans import HostPlan, MonitoringPlan, VllmPlan
from hostkit.vllm.readiness import probe_address


def health_url(vllm: VllmPlan) -> str:
    """Where the collector asks vLLM whether it serves; empty when the host runs no vLLM."""
    if not vllm.enabled:
        return ""
    address = probe_address(vllm.host)
    address = f"[{address}]" if ":" in address else address
    return f"http://{address}:{vllm.port}/health"


def monitored_servers(plan: HostPlan) -> list[VllmPlan]:
    """The vLLM servers the collector reads: vllm.service's plan, or each instance's."""
    return list(plan.instances.values()) or [plan.vllm]


def collector_target(vllm: VllmPlan) -> tuple[str, str, str]:
    """What the collector reads of one server: its unit, its health URL ('""' for none) and its
    watchdog's state file."""
    url = health_url(vllm) or '""'
    if vllm.instance is None:
        return VLLM_UNIT, url, WATCHDOG_FILE
    return vllm_instance_unit(vllm.instance), url, watchdog_instance_state_path(vllm.instance)


def render_service(monitoring: MonitoringPlan, servers: Sequence[VllmPlan]) -> str:
    """The collector's service for `servers` (monitored_servers). The first server's arguments
    stand where vllm.service's always have, so that its hosts keep the unit they had; the
    others' follow, each --unit paired with the --health-url and --watchdog-file of its place."""
    (unit, url, watchdog_file), *more = map(collector_target, servers)
    return templates().get_template("vllm-hostkit-monitor.service.j2").render(
        collector=COLLECTOR_PATH, textfile=textfile_path(monitoring.textfile_dir),
        textfile_dir=monitoring.textfile_dir, vllm_unit=unit, interval=monitoring.interval_s,
        health_url=url, state_dir=STATE_DIR, watchdog_file=watchdog_file,
        more_units="".join(f" --unit {u} --health-url {h} --watchdog-file {w}" for u, h, w in more),
        timeout_s=RUN_TIMEOUT_S, nvme_settings=NVME_SETTINGS_FILE,
    )


def render_timer(monitoring: MonitoringPlan) -> str:
    return templates().get_template("vllm-hostkit-monitor.timer.j2").render(interval=monitoring.interval_s)


def render_node_exporter_dropin(monitoring: MonitoringPlan) -> str:
    return templates().get_template("node-exporter-textfile.conf.j2").render(textfile_dir=monitoring.textfile_dir)


def wanted_files(monitoring: MonitoringPlan, servers: Sequence[VllmPlan]) -> dict[str, str]:
    """{path: text} of every file hostkit installs for monitoring."""
    files = {COLLECTOR_PATH: collector_source(), SERVICE_PATH: render_service(monitoring, servers),
             TIMER_PATH: render_timer(monitoring)}
    if monitoring.node_exporter:
        files[NODE_EXPORTER_DROPIN] = render_node_exporter_dropin(monitoring)
    return files
