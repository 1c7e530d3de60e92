"""The installed vLLM health watchdog: its files' hashes and its unit's state."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.paths import WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT, WATCHDOG_UNIT_PATH


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
    """The installed watchdog: file hashes and unit state."""

    def command(self) -> str:
        return "\n".join((SHOW_FUNCTIONS, _sha_line("unit_sha256", WATCHDOG_UNIT_PATH),
                          _sha_line("script_sha256", WATCHDOG_SCRIPT_PATH), f"hk_show {WATCHDOG_UNIT} {' '.join(_SHOW)}",
                          "true"))

    def process(self, output: list[str]) -> WatchdogState:
        values = parse_show(output)
        return WatchdogState(values.pop("unit_sha256", "") or None, values.pop("script_sha256", "") or None, values)
