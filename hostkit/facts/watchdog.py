"""An installed vLLM health watchdog: its files' hashes and its unit's state, and the
instances' watchdog units the host has."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.paths import WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT, watchdog_instance_unit

UNIT_DIR = "/etc/systemd/system"
_INSTANCE_GLOB = f"{UNIT_DIR}/{watchdog_instance_unit('*')}"


@dataclass(frozen=True)
class WatchdogState:
    unit_sha256: str | None
    script_sha256: str | None
    unit: dict[str, str]
    # The NAME of each vllm-hostkit-watchdog@NAME.service file, sorted.
    instance_units: tuple[str, ...] = ()

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
    """The installed watchdog `unit` (vllm.service's by default): file hashes and unit state;
    and which instances have a watchdog unit file."""

    def command(self, unit: str = WATCHDOG_UNIT) -> str:
        return "\n".join((SHOW_FUNCTIONS, _sha_line("unit_sha256", f"{UNIT_DIR}/{unit}"),
                          _sha_line("script_sha256", WATCHDOG_SCRIPT_PATH), f"hk_show {unit} {' '.join(_SHOW)}",
                          f"for hk_path in {_INSTANCE_GLOB}; do [ -f \"$hk_path\" ] && echo \"instance_unit=$hk_path\"; done",
                          "true"))

    def process(self, output: list[str]) -> WatchdogState:
        before, after = _INSTANCE_GLOB.split("*")
        names = sorted(line[len("instance_unit=") + len(before):len(line) - len(after)] for line in output
                       if line.startswith(f"instance_unit={before}") and line.endswith(after))
        values = parse_show(line for line in output if not line.startswith("instance_unit="))
        return WatchdogState(values.pop("unit_sha256", "") or None, values.pop("script_sha256", "") or None, values,
                             tuple(names))
