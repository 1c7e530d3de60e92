"""What a change of a systemd unit file means for the service it runs. Pure: no host access.

A unit's text changes for reasons that do not touch the running process: a comment in
hostkit's template, a release note in the header, an automatic memory limit moving. Only
its directives count, compared section by section and in order (repeated directives such
as Environment= accumulate; an empty one resets). Every directive needs a restart to take
effect except the resource limits that systemd re-applies to the running unit's cgroup
when it reloads the unit (measured on Debian 12's systemd 252, cgroup v2 and v1; the
docs/design.md, "When vLLM restarts"): those change without one.
"""

from __future__ import annotations

from dataclasses import dataclass

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
