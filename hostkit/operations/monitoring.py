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

The files are rendered from the plan by hostkit.desired.monitoring, which `hostkit verify`
checks the host against.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation

from hostkit.desired.monitoring import wanted_files
from hostkit.facts.monitoring import MonitoringState
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.monitoring import (
    COLLECTOR_PATH,
    NODE_EXPORTER_DROPIN,
    NODE_EXPORTER_PACKAGE,
    NODE_EXPORTER_UNIT,
    SERVICE,
    SERVICE_PATH,
    STATE_DIR,
    TIMER,
    TIMER_PATH,
    textfile_path,
)
from hostkit.desired.digest import text_sha256
from hostkit.plan.plans import MonitoringPlan, VllmPlan

APT_TIMEOUT_S = 600
UNIT_FILES = (SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN)


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


def _unmet(plan: MonitoringPlan, state: MonitoringState) -> list[str]:
    """What is wrong on the host besides the files: the timer, a stray drop-in, node_exporter."""
    problems = []
    if (state.timer_enabled, state.timer_active) != ("enabled", "active"):
        problems.append(f"{TIMER} is {state.timer_enabled or 'not installed'}, {state.timer_active or 'inactive'}")
    if NODE_EXPORTER_DROPIN in state.file_sha256 and not plan.node_exporter:
        problems.append(f"{NODE_EXPORTER_DROPIN} is no longer wanted")
    if plan.node_exporter and not (
            state.node_exporter_installed and (state.node_exporter_enabled, state.node_exporter_active)
            == ("enabled", "active")):
        problems.append(f"{NODE_EXPORTER_UNIT} is not installed, enabled and active")
    return problems


def monitoring_changes(plan: MonitoringPlan, servers: Sequence[VllmPlan],
                       state: MonitoringState) -> dict[str, str] | None:
    """The files to (re)write, or None when nothing at all needs doing."""
    changed = {path: text for path, text in wanted_files(plan, servers).items()
               if state.file_sha256.get(path) != text_sha256(text)}
    if changed or _unmet(plan, state):
        return changed
    return None


def change_reasons(plan: MonitoringPlan, state: MonitoringState, changed: dict[str, str]) -> list[str]:
    """What a run says when it changes monitoring (a rerun that changes must say why)."""
    return [f"{path} is missing or differs" for path in changed] + _unmet(plan, state)


def apply_command(plan: MonitoringPlan, state: MonitoringState, changed: dict[str, str]) -> str:
    timer, service, exporter = shlex.quote(TIMER), shlex.quote(SERVICE), shlex.quote(NODE_EXPORTER_UNIT)
    lines = ["set -e"]
    exporter_restart = NODE_EXPORTER_DROPIN in changed
    if plan.node_exporter and not state.node_exporter_installed:
        lines.append(_apt_install(NODE_EXPORTER_PACKAGE))
        exporter_restart = True
    lines.append(f"mkdir -p -m 0755 {shlex.quote(plan.textfile_dir)} {shlex.quote(STATE_DIR)}")
    for path, text in changed.items():
        lines += _install_file(path, text)
    removing_dropin = NODE_EXPORTER_DROPIN in state.file_sha256 and not plan.node_exporter
    if removing_dropin:
        lines.append(f"rm -f {shlex.quote(NODE_EXPORTER_DROPIN)}")
    if removing_dropin or any(path in changed for path in UNIT_FILES):
        lines.append("systemctl daemon-reload")
    # One run now: the file exists when the deploy ends, and a broken collector fails here.
    lines.append(f"systemctl start {service} || {{ journalctl -u {service} -b -n 20 --no-pager >&2; exit 1; }}")
    lines.append(f"systemctl enable --quiet {timer}")
    lines.append(f"systemctl {'restart' if TIMER_PATH in changed else 'start'} {timer}")
    if plan.node_exporter:
        lines.append(f"systemctl enable --quiet {exporter}")
        lines.append(f"systemctl {'restart' if exporter_restart else 'start'} {exporter}")
    elif removing_dropin:
        lines.append(f"systemctl try-restart {exporter}")
    return "\n".join(lines)


def remove_command(plan: MonitoringPlan, state: MonitoringState) -> str:
    paths = [COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, textfile_path(plan.textfile_dir),
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
def monitoring(plan: MonitoringPlan, servers: list[VllmPlan], scope: SnapshotScope):
    """
    Install (or with monitoring not enabled, remove) the memory collector, its timer and
    optionally node_exporter.

    + plan: the host plan's monitoring part
    + servers: the host plan's vLLM servers (monitored_servers: the units and health URLs the collector reads)
    + scope: the host plan's snapshot scope
    """
    state: MonitoringState = snapshot(host, scope).monitoring
    if not plan.enabled:
        if state.installed:
            mark_changed(host, "monitoring")
            yield remove_command(plan, state)
        return
    changed = monitoring_changes(plan, servers, state)
    if changed is None:
        return
    mark_changed(host, "monitoring")
    host.log_styled(f"monitoring: {'; '.join(change_reasons(plan, state, changed))}", fg="yellow")
    yield apply_command(plan, state, changed)
