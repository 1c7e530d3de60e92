"""The monitoring collector's state on a host: installed files, the timer, node_exporter,
and how old the metrics file is. One snapshot section (hostkit.facts.snapshot)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from hostkit.facts.scope import SnapshotScope
from hostkit.remote import host_file
from hostkit.monitoring import (
    COLLECTOR_PATH,
    NODE_EXPORTER_DROPIN,
    NODE_EXPORTER_PACKAGE,
    NODE_EXPORTER_UNIT,
    SERVICE_PATH,
    TIMER,
    TIMER_PATH,
    textfile_path,
)

MANAGED_FILES = (COLLECTOR_PATH, SERVICE_PATH, TIMER_PATH, NODE_EXPORTER_DROPIN)


@dataclass(frozen=True)
class MonitoringState:
    file_sha256: dict[str, str] = field(default_factory=dict)  # of MANAGED_FILES present
    timer_enabled: str = ""  # systemctl is-enabled: "enabled", "disabled", "not-found"...
    timer_active: str = ""  # systemctl is-active
    node_exporter_installed: bool = False
    node_exporter_enabled: str = ""
    node_exporter_active: str = ""
    textfile_age_s: int | None = None  # None: no metrics file
    textfile_path: str = ""

    @property
    def installed(self) -> bool:
        return bool(self.file_sha256) or self.timer_enabled not in ("", "not-found")


class MonitoringFact(FactBase):
    """`key=value` lines; `sha256 PATH` lines from one sha256sum of the managed files
    (hostkit/remote/monitoring.sh)."""

    section = "monitoring"
    takes_scope = True

    def command(self, scope: SnapshotScope) -> str:
        settings = {
            "hk_timer": TIMER,
            "hk_node_exporter_package": NODE_EXPORTER_PACKAGE,
            "hk_node_exporter_unit": NODE_EXPORTER_UNIT,
            "hk_metrics": textfile_path(scope.textfile_dir),
        }
        lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        lines.append(f"set -- {shlex.join(MANAGED_FILES)}")
        return "\n".join((*lines, host_file("monitoring.sh")))

    def process(self, output: list[str]) -> MonitoringState:
        sums: dict[str, str] = {}
        values: dict[str, str] = {}
        for line in output:
            if line.startswith("sha256 "):
                parts = line.split(None, 2)
                if len(parts) == 3:
                    sums[parts[2].strip()] = parts[1]
            else:
                key, _, value = line.partition("=")
                values[key] = value.strip()
        age = values.get("textfile_age", "")
        return MonitoringState(
            file_sha256=sums,
            timer_enabled=values.get("timer_enabled", ""),
            timer_active=values.get("timer_active", ""),
            node_exporter_installed=values.get("node_exporter", "") == "install ok installed",
            node_exporter_enabled=values.get("node_exporter_enabled", ""),
            node_exporter_active=values.get("node_exporter_active", ""),
            textfile_age_s=int(age) if age.lstrip("-").isdigit() else None,
            textfile_path=values.get("textfile", ""),
        )
