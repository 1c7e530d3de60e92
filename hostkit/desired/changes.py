"""What a change of a systemd unit file means for the service it runs. Pure: no host access.

A unit's text changes for reasons that do not touch the running process: a comment in
hostkit's template, a release note in the header, an automatic memory limit moving. Only
its directives count, compared section by section and in order (repeated directives such
as Environment= accumulate; an empty one resets). Every directive needs a restart to take
effect except the resource limits that systemd re-applies to the running unit's cgroup
when it reloads the unit (measured on Debian 12's systemd 252, cgroup v2 and v1; the
docs/design.md, "When vLLM restarts"): those change without one.

`service_changes` puts that together with the rest of the vLLM service as the host has it
(user, environment file, enablement, the process): what the vllm_service operation changes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hostkit.desired.digest import text_sha256
from hostkit.desired.vllm_unit import ENV_DIR_STAT, ENV_FILE_STAT
from hostkit.facts.vllm_service import VllmServiceState

# Resource limits systemd writes to a running unit's cgroup on `systemctl daemon-reload`:
# memory.max, memory.high, memory.swap.max (v2) and memory.limit_in_bytes (v1).
LIVE_DIRECTIVES = frozenset({"MemoryMax", "MemoryHigh", "MemorySwapMax", "MemoryLimit"})
_LIVE_SECTION = "Service"

Directives = dict[tuple[str, str], tuple[str, ...]]


def unit_directives(text: str) -> Directives:
    """{(section, key): values in order} of a unit file, without comments and blank lines.

    Follows systemd's syntax: `#` and `;` start comment lines, a trailing backslash joins
    the next line, whitespace around `=` and around the value does not count.
    """
    directives: Directives = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith(("#", ";"))):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        directives.setdefault((section, key.strip()), ())
        directives[(section, key.strip())] += (value.strip(),)
    return directives


@dataclass(frozen=True)
class UnitChange:
    """How an installed unit differs from the wanted one (both None-free texts)."""

    restart_directives: tuple[str, ...] = ()  # changed directives that need a restart
    live_directives: tuple[str, ...] = ()  # changed limits applied to the running unit


def unit_change(installed: str | None, wanted: str) -> UnitChange:
    """What replacing `installed` (None: not installed or not readable) by `wanted` needs."""
    if installed is None:
        return UnitChange(restart_directives=("the unit file",))
    before, after = unit_directives(installed), unit_directives(wanted)
    changed = sorted({key for key in (*before, *after) if before.get(key) != after.get(key)})
    names = [f"{key}=" if section == _LIVE_SECTION else f"[{section}] {key}=" for section, key in changed]
    live = [name for (section, key), name in zip(changed, names) if section == _LIVE_SECTION and key in LIVE_DIRECTIVES]
    return UnitChange(
        restart_directives=tuple(name for name in names if name not in live),
        live_directives=tuple(live),
    )


@dataclass(frozen=True)
class ServiceChanges:
    create_user: bool = False
    fix_env_dir: bool = False
    write_env: bool = False
    fix_env_file: bool = False  # same content, wrong mode or owner
    install_unit: bool = False
    daemon_reload: bool = False
    enable: bool = False
    restart: bool = False
    # Why the running service restarts, or which limits daemon-reload applies to it live.
    restart_reasons: tuple[str, ...] = ()
    live_limits: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, item.name) for item in fields(self))

    def describe(self) -> str:
        words = []
        for item in fields(self):
            value = getattr(self, item.name)
            if value is True:
                words.append(item.name.replace("_", " "))
            elif value:
                words.append(f"{item.name.replace('_', ' ')}: {' '.join(value)}")
        return ", ".join(words)


def restart_reasons(current: VllmServiceState, unit: UnitChange, write_env: bool) -> tuple[str, ...]:
    """Why the service must (re)start: a change of what runs, or it does not run."""
    if not current.is_active:
        return ("not running",)
    reasons = list(unit.restart_directives)
    if write_env:
        reasons.append("the environment file")
    if current.release_replaced:
        reasons.append(f"{current.target.command} replaced since start (a new release)")
    return tuple(reasons)


def service_changes(current: VllmServiceState, unit_text: str, env_text: str) -> ServiceChanges:
    """What must change on a host in state `current` to run the unit and env file given.

    A new unit text restarts the service only when a directive that needs a restart
    changed (hostkit.desired.changes); comments do not count, and limits that daemon-reload
    applies to the running unit's cgroup change without one.
    """
    install_unit = current.unit_sha256 != text_sha256(unit_text)
    write_env = current.env_sha256 != text_sha256(env_text)
    unit = unit_change(current.unit_text, unit_text) if install_unit else UnitChange()
    reasons = restart_reasons(current, unit, write_env)
    return ServiceChanges(
        create_user=current.user_uid is None,
        fix_env_dir=current.env_dir_stat != ENV_DIR_STAT,
        write_env=write_env,
        fix_env_file=not write_env and current.env_stat != ENV_FILE_STAT,
        install_unit=install_unit,
        daemon_reload=install_unit or current.need_daemon_reload,
        enable=not current.is_enabled,
        restart=bool(reasons),
        restart_reasons=reasons,
        live_limits=() if reasons else unit.live_directives,
    )
