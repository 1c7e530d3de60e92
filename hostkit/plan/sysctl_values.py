"""Whether the running kernel takes the wanted sysctl values, checked before anything changes.

Pure: no I/O. The planner calls it with the kernel release and the live values the snapshot
read (hostkit.facts.kernel reads every key of the profile's `sysctl`):

- a key in RANGES must be a whole number in its range for that kernel (`vm.swappiness` is
  0-100 before Linux 5.8 and 0-200 from 5.8, which lets it prefer reclaiming anonymous memory);
- any key must exist under /proc/sys, and a value must have the live value's form: as many
  whole numbers as the kernel prints (`net.ipv4.tcp_rmem` takes three), or anything for a
  text key such as `kernel.core_pattern`.

Keys the facts do not cover (a `hostkit plan --facts` file recorded without them) pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hostkit.facts.kernel import squeeze, sysctl_path


@dataclass(frozen=True)
class SysctlRange:
    low: int
    high: int | None  # None: no upper bound hostkit knows
    since: tuple[int, int] = (0, 0)  # the first kernel release this range applies to


# Ranges hostkit knows, newest first per key; from the kernel's proc_dointvec_minmax bounds.
RANGES: dict[str, tuple[SysctlRange, ...]] = {
    "vm.swappiness": (SysctlRange(0, 200, since=(5, 8)), SysctlRange(0, 100)),
    "vm.overcommit_memory": (SysctlRange(0, 2),),
    "vm.dirty_ratio": (SysctlRange(0, 100),),
    "vm.dirty_background_ratio": (SysctlRange(0, 100),),
    "vm.max_map_count": (SysctlRange(0, None),),
    "vm.min_free_kbytes": (SysctlRange(0, None),),
}

_INTEGER = re.compile(r"^-?\d+$")


def kernel_version(release: str | None) -> tuple[int, int] | None:
    """'6.1.0-28-amd64' -> (6, 1); None when unknown."""
    match = re.match(r"^(\d+)\.(\d+)", release or "")
    return (int(match[1]), int(match[2])) if match else None


def _range_for(key: str, kernel: tuple[int, int] | None) -> SysctlRange | None:
    ranges = RANGES.get(key.strip())
    if not ranges:
        return None
    if kernel is None:
        return ranges[0]  # the widest: an unknown kernel is not refused for a value a new one takes
    return next(r for r in ranges if kernel >= r.since)


def _describe(found: SysctlRange, key: str, kernel: tuple[int, int] | None, release: str | None) -> str:
    span = f"{found.low} to {found.high}" if found.high is not None else f"{found.low} or more"
    older = [r for r in RANGES[key.strip()] if r.since < found.since]
    on = f" on kernel {release}" if kernel is not None else " (kernel release unknown)"
    before = f" ({older[0].low} to {older[0].high} before {'.'.join(map(str, found.since))})" if older else ""
    return f"a whole number {span}{on}{before}"


def value_problem(key: str, value: str, kernel_release: str | None, live: dict[str, str | None]) -> str | None:
    """Why the kernel would refuse `value` for `key`, or None. `live` maps /proc/sys paths to
    their current (squeezed) value, None for a path that does not exist."""
    wanted = squeeze(str(value))
    kernel = kernel_version(kernel_release)
    path = sysctl_path(key)
    if path in live and live[path] is None:
        return f"no such key: /proc/sys/{path} does not exist on this host (kernel {kernel_release or 'unknown'})"
    known = _range_for(key, kernel)
    if known is not None:
        number = int(wanted) if _INTEGER.match(wanted) else None
        if number is None or number < known.low or (known.high is not None and number > known.high):
            return f"{wanted} is not allowed: {key.strip()} takes {_describe(known, key, kernel, kernel_release)}"
        return None
    current = live.get(path)
    if current is None:
        return None
    current_words, wanted_words = current.split(), wanted.split()
    if current_words and all(_INTEGER.match(word) for word in current_words):
        if len(wanted_words) != len(current_words) or not all(_INTEGER.match(word) for word in wanted_words):
            form = "a whole number" if len(current_words) == 1 else f"{len(current_words)} whole numbers"
            return f"{wanted} is not allowed: the kernel's value is {form} (now {current!r})"
    return None
