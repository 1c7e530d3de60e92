"""An installed vLLM health watchdog (vllm.service's, or an instance's): its files' hashes and
its unit's state. Which instances have a watchdog is the snapshot's (hostkit.facts.vllm_service)."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.paths import SYSTEMD_UNIT_DIR, WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT


@dataclass(frozen=True)
class WatchdogState:
    unit_sha256: str | None
    script_sha256: str | None
    unit: dict[str, str]

    @property
    def active(self) -> bool:
        return self.unit.get("ActiveState") == "active"

    @property
    def enabled(self) -> bool:
        return self.unit.get("UnitFileState") == "enabled"


_SHOW = ("LoadState", "ActiveState", "SubState", "UnitFileState", "NeedDaemonReload")


def _sha_line(name: str, path: str) -> str:
    return f"echo {name}=$(sha256sum {path} 2>/dev/null | cut -d' ' -f1)"


class WatchdogFact(FactBase):
    """The installed watchdog `unit` (vllm.service's by default): file hashes and unit state."""

    def command(self, unit: str = WATCHDOG_UNIT) -> str:
        return "\n".join((SHOW_FUNCTIONS, _sha_line("unit_sha256", f"{SYSTEMD_UNIT_DIR}/{unit}"),
                          _sha_line("script_sha256", WATCHDOG_SCRIPT_PATH), f"hk_show {unit} {' '.join(_SHOW)}",
                          "true"))

    def process(self, output: list[str]) -> WatchdogState:
        values = parse_show(output)
        return WatchdogState(values.pop("unit_sha256", "") or None, values.pop("script_sha256", "") or None, values)
