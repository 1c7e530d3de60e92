"""Install the memory collector and its timer; optionally node_exporter to serve its file.

The collector (hostkit/monitoring/collector.py) is copied to COLLECTOR_PATH and run every
`monitoring_interval_s` by a oneshot service and a timer. Installing or changing them runs
the collector once at once, so the metrics file exists when the deploy ends (and a broken
collector fails the deploy, with its journal, instead of failing silently every 15 s).

With `monitoring_node_exporter`, Debian's prometheus-node-exporter is installed with apt
(without the recommended extra collectors) and a drop-in points its textfile collector at
`monitoring_textfile_dir`. With it off, hostkit only writes the file, for the exporter a
fleet already runs; a drop-in hostkit wrote earlier is removed, the package is left alone.
`monitoring_enabled: False` removes everything hostkit installed for monitoring.
"""

from __future__ import annotations

import posixpath
import shlex

from pyinfra import host
from pyinfra.api import operation

from hostkit import templates
from hostkit.facts.monitoring import MonitoringState
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.plan.scope import snapshot_scope
from hostkit.monitoring import (
    COLLECTOR_PATH,
    NODE_EXPORTER_DROPIN,
    NODE_EXPORTER_PACKAGE,
    NODE_EXPORTER_UNIT,
    RUN_TIMEOUT_S,
    SERVICE,
    SERVICE_PATH,
    STATE_DIR,
    TIMER,
    TIMER_PATH,
    WATCHDOG_FILE,
    collector_source,
    textfile_path,
)
from hostkit.operations.vllm_service import text_sha256
from hostkit.paths import NVME_SETTINGS_FILE, VLLM_UNIT
from hostkit.profile.host_profile import HostProfile
from hostkit.vllm.readiness import probe_address

APT_TIMEOUT_S = 600
UNIT_FILES = (SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN)


def health_url(profile: HostProfile) -> str:
    if not profile.vllm_enabled:
        return ""
    address = probe_address(profile.vllm_host)
    address = f"[{address}]" if ":" in address else address
    return f"http://{address}:{profile.vllm_port}/health"


def render_service(profile: HostProfile) -> str:
    return templates().get_template("vllm-hostkit-monitor.service.j2").render(
        collector=COLLECTOR_PATH, textfile=textfile_path(profile.monitoring_textfile_dir),
        textfile_dir=profile.monitoring_textfile_dir, vllm_unit=VLLM_UNIT, interval=profile.monitoring_interval_s,
        health_url=health_url(profile) or '""', state_dir=STATE_DIR, watchdog_file=WATCHDOG_FILE,
        timeout_s=RUN_TIMEOUT_S, nvme_settings=NVME_SETTINGS_FILE,
    )


def render_timer(profile: HostProfile) -> str:
    return templates().get_template("vllm-hostkit-monitor.timer.j2").render(interval=profile.monitoring_interval_s)


def render_node_exporter_dropin(profile: HostProfile) -> str:
    return templates().get_template("node-exporter-textfile.conf.j2").render(
        textfile_dir=profile.monitoring_textfile_dir)


def wanted_files(profile: HostProfile) -> dict[str, str]:
    files = {COLLECTOR_PATH: collector_source(), SERVICE_PATH: render_service(profile), TIMER_PATH: render_timer(profile)}
    if profile.monitoring_node_exporter:
        files[NODE_EXPORTER_DROPIN] = render_node_exporter_dropin(profile)
    return files


def _install_file(path: str, text: str) -> list[str]:
    directory, name = posixpath.split(path)
    tmp = posixpath.join(directory, f".{name}.hostkit-new")
    return [f"mkdir -p {shlex.quote(directory)}", f"printf %s {shlex.quote(text)} > {shlex.quote(tmp)}",
            f"chmod 0644 {shlex.quote(tmp)}", f"mv -f {shlex.quote(tmp)} {shlex.quote(path)}"]


def _apt_install(package: str) -> str:
    install = (f"timeout {APT_TIMEOUT_S} apt-get install -y -q -o Dpkg::Options::=--force-confold "
               f"--no-install-recommends {package}")
    # A fresh host may have no package lists yet: update only when the install needs it.
    return (f"DEBIAN_FRONTEND=noninteractive {install} >/dev/null 2>&1 || "
            f"{{ DEBIAN_FRONTEND=noninteractive timeout {APT_TIMEOUT_S} apt-get update -q >/dev/null && "
            f"DEBIAN_FRONTEND=noninteractive {install} >/dev/null; }}")


def _unmet(profile: HostProfile, state: MonitoringState) -> list[str]:
    """What is wrong on the host besides the files: the timer, a stray drop-in, node_exporter."""
    problems = []
    if (state.timer_enabled, state.timer_active) != ("enabled", "active"):
        problems.append(f"{TIMER} is {state.timer_enabled or 'not installed'}, {state.timer_active or 'inactive'}")
    if NODE_EXPORTER_DROPIN in state.file_sha256 and not profile.monitoring_node_exporter:
        problems.append(f"{NODE_EXPORTER_DROPIN} is no longer wanted")
    if profile.monitoring_node_exporter and not (
            state.node_exporter_installed and (state.node_exporter_enabled, state.node_exporter_active)
            == ("enabled", "active")):
        problems.append(f"{NODE_EXPORTER_UNIT} is not installed, enabled and active")
    return problems


def monitoring_changes(profile: HostProfile, state: MonitoringState) -> dict[str, str] | None:
    """The files to (re)write, or None when nothing at all needs doing."""
    changed = {path: text for path, text in wanted_files(profile).items()
               if state.file_sha256.get(path) != text_sha256(text)}
    if changed or _unmet(profile, state):
        return changed
    return None


def change_reasons(profile: HostProfile, state: MonitoringState, changed: dict[str, str]) -> list[str]:
    """What a run says when it changes monitoring (a rerun that changes must say why)."""
    return [f"{path} is missing or differs" for path in changed] + _unmet(profile, state)


def apply_command(profile: HostProfile, state: MonitoringState, changed: dict[str, str]) -> str:
    timer, service, exporter = shlex.quote(TIMER), shlex.quote(SERVICE), shlex.quote(NODE_EXPORTER_UNIT)
    lines = ["set -e"]
    exporter_restart = NODE_EXPORTER_DROPIN in changed
    if profile.monitoring_node_exporter and not state.node_exporter_installed:
        lines.append(_apt_install(NODE_EXPORTER_PACKAGE))
        exporter_restart = True
    lines.append(f"mkdir -p -m 0755 {shlex.quote(profile.monitoring_textfile_dir)} {shlex.quote(STATE_DIR)}")
    for path, text in changed.items():
        lines += _install_file(path, text)
    removing_dropin = NODE_EXPORTER_DROPIN in state.file_sha256 and not profile.monitoring_node_exporter
    if removing_dropin:
        lines.append(f"rm -f {shlex.quote(NODE_EXPORTER_DROPIN)}")
    if removing_dropin or any(path in changed for path in UNIT_FILES):
        lines.append("systemctl daemon-reload")
    # One run now: the file exists when the deploy ends, and a broken collector fails here.
    lines.append(f"systemctl start {service} || {{ journalctl -u {service} -b -n 20 --no-pager >&2; exit 1; }}")
    lines.append(f"systemctl enable --quiet {timer}")
    lines.append(f"systemctl {'restart' if TIMER_PATH in changed else 'start'} {timer}")
    if profile.monitoring_node_exporter:
        lines.append(f"systemctl enable --quiet {exporter}")
        lines.append(f"systemctl {'restart' if exporter_restart else 'start'} {exporter}")
    elif removing_dropin:
        lines.append(f"systemctl try-restart {exporter}")
    return "\n".join(lines)


def remove_command(profile: HostProfile, state: MonitoringState) -> str:
    paths = [COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, textfile_path(profile.monitoring_textfile_dir),
             posixpath.join(STATE_DIR, "monitor-state.json")]
    lines = ["set -e", f"systemctl disable --now --quiet {shlex.quote(TIMER)} 2>/dev/null || true"]
    if NODE_EXPORTER_DROPIN in state.file_sha256:
        paths.append(NODE_EXPORTER_DROPIN)
    lines.append("rm -f " + " ".join(shlex.quote(path) for path in paths))
    lines.append("systemctl daemon-reload")
    if NODE_EXPORTER_DROPIN in state.file_sha256:
        lines.append(f"systemctl try-restart {shlex.quote(NODE_EXPORTER_UNIT)}")
    return "\n".join(lines)


@operation()
def monitoring(profile: HostProfile):
    """
    Install (or with monitoring_enabled False, remove) the memory collector, its timer and
    optionally node_exporter.

    + profile: the host's HostProfile
    """
    state: MonitoringState = snapshot(host, snapshot_scope(profile)).monitoring
    if not profile.monitoring_enabled:
        if state.installed:
            mark_changed(host, "monitoring")
            yield remove_command(profile, state)
        return
    changed = monitoring_changes(profile, state)
    if changed is None:
        return
    mark_changed(host, "monitoring")
    host.log_styled(f"monitoring: {'; '.join(change_reasons(profile, state, changed))}", fg="yellow")
    yield apply_command(profile, state, changed)
