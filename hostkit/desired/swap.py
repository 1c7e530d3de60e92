"""The swap file and NVMe filesystem hostkit wants, from a SwapPlan and an NvmePlan: plain paths,
the fstab line, the file's mode, how long writing it may take, and the planned file as the host
has it. Pure: no host access; hostkit.operations.swap changes the host, `hostkit verify` checks it.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass

from hostkit.facts.storage import FileStat, StorageInfo
from hostkit.paths import SWAP_FILE_NAME
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.sizes import GIB

SWAP_FILE_MODE = 0o600
# Paths go into shell scripts, fstab and awk comparisons with /proc/swaps: keep them plain.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+:@/-]*$")
# The filesystems hostkit/remote/nvme_format.sh makes.
MKFS_FSTYPES = ("ext4", "xfs")
# How long writing the swap file may take: each swap step's deadline in the deploy, and the
# NVMe boot unit's, which writes it again on a blank disk. Generous: a 16 GiB swap file at
# 100 MB/s takes under 3 min.
SWAP_DEADLINE_BASE_S = 600
SWAP_DEADLINE_PER_GIB_S = 60


def swap_deadline_s(plan: SwapPlan) -> int:
    """The deadline of each swap step: writing the file grows with its size."""
    return SWAP_DEADLINE_BASE_S + SWAP_DEADLINE_PER_GIB_S * math.ceil(plan.size_bytes / GIB)


@dataclass(frozen=True)
class SwapState:
    """The planned swap file as the host has it."""

    file: FileStat | None
    active_priority: int | None  # None: not in /proc/swaps
    fstab_ok: bool  # exactly one swap entry for the path, with nofail and the planned pri=
    strays: tuple[str, ...]  # hostkit swap files at paths other than the planned one


def swap_fstab_line(plan: SwapPlan) -> str:
    return f"{plan.path} none swap nofail,pri={plan.priority} 0 0"


def _check_path(path: str, what: str) -> None:
    if not _SAFE_PATH.match(path) or posixpath.normpath(path) != path:
        raise ValueError(f"{what} must be a normalised absolute path of letters, digits and ._+:@/-, not {path!r}")


def check_swap_plan(plan: SwapPlan) -> None:
    """Bad input raises ValueError: it would be wrong on every host."""
    if not plan.enabled:
        return
    if plan.path is None:
        raise ValueError("an enabled SwapPlan needs a path")
    _check_path(plan.path, "the swap file path")
    if posixpath.basename(plan.path) != SWAP_FILE_NAME:
        raise ValueError(f"the swap file must be named {SWAP_FILE_NAME}, not {posixpath.basename(plan.path)!r}")
    if plan.size_bytes <= 0:
        raise ValueError(f"the swap size must be positive, not {plan.size_bytes}")
    if not 0 <= plan.priority <= 32767:
        raise ValueError(f"the swap priority must be 0..32767, not {plan.priority}")


def check_nvme_plan(plan: NvmePlan) -> None:
    _check_path(plan.device, "nvme_device")
    _check_path(plan.mount, "nvme_mount")
    if plan.mount == "/":
        raise ValueError("nvme_mount cannot be /")
    if plan.fstype not in MKFS_FSTYPES:
        raise ValueError(f"NVMe filesystem must be one of {sorted(MKFS_FSTYPES)}, not {plan.fstype!r}")


def swap_state(plan: SwapPlan, storage: StorageInfo) -> SwapState:
    path = plan.path or ""
    area = storage.swap_area(path) if plan.enabled else None
    entries = storage.fstab_swap_entries(path) if plan.enabled else []
    fstab_ok = len(entries) == 1 and entries[0].option("nofail") is not None and (
        entries[0].option("pri") == str(plan.priority)
    )
    return SwapState(
        file=storage.files.get(path) if plan.enabled else None,
        active_priority=area.priority if area else None,
        fstab_ok=fstab_ok,
        strays=tuple(p for p in storage.hostkit_swap_paths() if not plan.enabled or p != path),
    )
