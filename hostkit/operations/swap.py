"""Swap on NVMe: make a filesystem on a blank NVMe device, and keep one swap file as planned.

`prepare_nvme(plan=NvmePlan)` formats a blank device (ext4 labelled NVME_LABEL) and mounts
it, with no fstab line: at boot hostkit's unit (hostkit.operations.nvme_boot) finds the disk
by its by-id name and mounts it, or formats it again when an instance-store disk comes back
blank. A fstab line by UUID would hold such a boot for its device timeout, then leave the host
without swap. A device that carries any signature is never formatted: the check runs again
on the host in the same shell script as mkfs (hostkit/remote/nvme_format.sh, which the boot
unit runs too).

`swap_file(plan=SwapPlan)` creates, resizes, repairs or removes `<dir>/vllm-hostkit.swap`.
Each change is one shell script (`set -e` and an EXIT trap), so a failure part-way
removes the partial file and writes no fstab entry for it:

- create: free space for size plus a reserve, an empty file made root:root 0600, made
  NOCOW on btrfs, filled with dd (fallocate can leave holes that swapon rejects; O_DIRECT,
  so the zeros do not evict the page cache), mkswap,
  swapon with the priority, confirmed in /proc/swaps; only then the fstab line
  (`nofail,pri=N`), unless the file is under nvme_mount (SwapPlan.boot "unit"): the boot
  unit swaps that one on. zfs, nfs, tmpfs, overlay and anything else unknown are refused.
- resize, make-before-break: `<path>.new` is made and swapped on before the old file
  is swapped off and removed. The kernel refuses to rename or unlink an active swap
  file (EPERM), so the new file is then swapped off for the instant of the rename and
  swapped on under the planned path.
- swapoff, wherever it happens, runs only when MemAvailable covers the file's used
  swap pages plus a margin (5% of MemTotal, at least 256 MiB), read on the host right
  before the swapoff: the snapshot may be stale. Otherwise the host is refused, with
  the numbers.
- drift: wrong size, wrong mode or owner, inactive, wrong priority, missing or wrong
  fstab entry, and hostkit swap files at other paths, are all put right; a host that
  matches the plan gets no command.

Refusals decided from the snapshot fail this host only, through a FunctionCommand that
returns False (an exception in the generator would stop every host).
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import OperationValueError

from hostkit.remote import host_file
from hostkit.desired.swap import (
    SWAP_FILE_MODE,
    SwapState,
    check_nvme_plan,
    check_swap_plan,
    swap_fstab_line,
    swap_state,
)
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.storage import SWAP_FILE_SELINUX_TYPE, TEMP_SUFFIX, StorageInfo, is_under
from hostkit.operations import callbacks
from hostkit.paths import NVME_LABEL
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.plan.swap_filesystems import FILL_METHODS, RESERVE_FRACTION, RESERVE_MIN_BYTES, swap_file_refusal

# Shell functions every script starts with (hostkit/remote/swap_lib.sh), after the free-space
# reserve the plan also keeps (hostkit.plan.swap_filesystems). Paths reach them as plain as
# check_swap_plan and check_nvme_plan require, so they compare equal to the (octal-escaped)
# fields of /proc/swaps and fstab.
SHELL_LIB = (f"hk_reserve_min={RESERVE_MIN_BYTES}; hk_reserve_fraction={RESERVE_FRACTION}\n"
             + host_file("swap_lib.sh"))
# A step that formats, mounts and persists a blank NVMe device, after its variables.
NVME_FORMAT = host_file("nvme_format.sh").removesuffix("\n")
# Controller-side deadlines for each remote step (pyinfra's _timeout): a write stuck in the
# kernel cannot be killed from the host (a lab NVMe once held mkfs in D state for 24 min,
# and the whole rollout batch with it); past these the host fails, "Command timed out after
# Ns", and the others go on. The swap steps' deadline grows with the file's size
# (hostkit.desired.swap.swap_deadline_s).
NVME_PREPARE_DEADLINE_S = 900


class SwapRefused(Exception):
    """The snapshot shows a state this host must not be changed from; says why."""


def fill_method(storage: StorageInfo, directory: str) -> str:
    fstype = storage.fstype_for(directory)
    if fstype is None:
        raise SwapRefused(f"cannot tell which filesystem holds {directory}")
    reason = swap_file_refusal(fstype)
    if reason is not None:
        raise SwapRefused(f"refusing to put a swap file on {fstype} at {directory}: {reason}")
    return FILL_METHODS[fstype]


def _q(value: Any) -> str:
    return shlex.quote(str(value))


def _remove_steps(path: str, storage: StorageInfo) -> list[str]:
    steps = []
    if storage.swap_area(path):
        steps.append(f"hk_swapoff {_q(path)}")
    if path in storage.files:
        steps.append(f"rm -f -- {_q(path)}")
    if storage.fstab_swap_entries(path):
        steps.append(f"hk_fstab_put swap {_q(path)} ''")
    return steps


def swap_steps(plan: SwapPlan, storage: StorageInfo, nvme_mount: str | None = None) -> list[str]:
    """Shell steps (after SHELL_LIB) that bring the host to the plan; [] when it matches.

    `nvme_mount`: the mount point of the NVMe the inventory names, if any. A planned path
    under it needs a filesystem mounted there: otherwise the file would land on the
    filesystem underneath (a blank NVMe at boot leaves just the empty directory).
    Raises SwapRefused for states that must not be changed from.
    """
    state = swap_state(plan, storage)
    steps: list[str] = []
    strays = list(state.strays)
    if plan.enabled:
        steps = _planned_file_steps(plan, storage, state, nvme_mount)
        if any(step.startswith("hk_resize ") for step in steps):
            strays = [p for p in strays if p != plan.path + TEMP_SUFFIX]  # the resize used it
    for stray in strays:
        steps += _remove_steps(stray, storage)
    if any(step.startswith("hk_fstab_put") for step in steps):
        steps.append("hk_reload_if_fstab_changed")
    return steps


def _planned_file_steps(plan: SwapPlan, storage: StorageInfo, state: SwapState, nvme_mount: str | None) -> list[str]:
    path = plan.path or ""
    directory = posixpath.dirname(path)
    tmp = path + TEMP_SUFFIX
    size, priority = plan.size_bytes, plan.priority
    file = state.file
    active = state.active_priority is not None
    # A file the boot unit brings back has no fstab line; nvme_boot removes an old one once
    # the unit is in place.
    fstab_step = [] if state.fstab_ok or plan.boot == "unit" else [
        f"hk_fstab_put swap {_q(path)} {_q(swap_fstab_line(plan))}"]
    if file is not None and not file.is_regular:
        raise SwapRefused(f"{path} is a {file.kind}, not a regular file; remove it or choose another swap_dir")
    if nvme_mount and is_under(directory, nvme_mount) and not storage.is_mountpoint(nvme_mount):
        raise SwapRefused(
            f"the swap file {path} belongs on the NVMe filesystem at {nvme_mount}, but nothing is mounted there"
        )
    usable = file is not None and file.swap_signature and not file.sparse
    if file is None or (not active and (file.size_bytes != size or not usable)):
        method = fill_method(storage, directory)
        # An active area whose file is gone from the disk is swapped off first.
        swapoff = [f"hk_swapoff {_q(path)}"] if active else []
        # The fstab line comes only after swapon succeeded; a failure before it removes the file.
        return swapoff + [f"hk_create {_q(path)} {size} {priority} {method}"] + fstab_step + ["hk_partial="]
    if active and file.size_bytes != size:
        method = fill_method(storage, directory)
        return (
            [f"hk_check_swapoff {_q(path)} || exit 1"]  # refuse before spending a dd
            + ([f"hk_swapoff {_q(tmp)}"] if storage.swap_area(tmp) else [])
            + [f"hk_resize {_q(path)} {size} {priority} {method}"]
            + fstab_step
        )
    steps = []
    if file.mode != SWAP_FILE_MODE or (file.uid, file.gid) != (0, 0):
        steps.append(f"chown root:root {_q(path)} && chmod 600 {_q(path)}")
    if file.selinux_type not in (None, SWAP_FILE_SELINUX_TYPE):
        steps.append(f"hk_label {_q(path)} {_q(path)}")
    if active and state.active_priority != priority:
        steps.append(f"hk_swapoff {_q(path)}")
        active = False
    if not active:
        steps.append(f"swapon -p {priority} {_q(path)}")
        steps.append(f"hk_active {_q(path)} || hk_fail 'swapon {path} did not activate it (see dmesg)'")
    return steps + fstab_step


def nvme_steps(plan: NvmePlan, storage: StorageInfo) -> list[str]:
    """Shell steps (after SHELL_LIB) that make `plan.device` hostkit's filesystem, labelled
    NVME_LABEL and mounted at `plan.mount`; [] when it already is. No fstab line: the boot
    unit (hostkit.operations.nvme_boot) mounts it at boot.
    Raises SwapRefused for a device that is missing, in use, or not blank."""
    signatures = storage.devices.get(plan.device)
    real = signatures.real_path if signatures else plan.device
    family = storage.device_and_descendants(real)
    device_mounts = sorted({m for d in family for m in d.mountpoints})
    mounted_here = storage.filesystem_at(plan.mount)

    # lsblk's mount points and findmnt's are read a moment apart: a mount made in between (a
    # concurrent deploy's, which its lock then refuses) shows in findmnt only.
    mounted_by_source = mounted_here is not None and mounted_here.source in (real, plan.device)
    if plan.mount in device_mounts or mounted_by_source:
        holder = next((d for d in family if plan.mount in d.mountpoints), None)
        if holder is not None and holder.path != real:
            raise SwapRefused(f"{plan.mount} is {holder.path}, a partition of {plan.device}: the boot unit "
                              "brings back only a filesystem on the whole disk")
        if signatures is not None and signatures.label == NVME_LABEL:
            return []
        # A host of the fstab era: its filesystem gets the label the boot unit knows it by.
        return [f"hk_set_fs_label {_q(plan.device)} {_q(plan.mount)} {NVME_LABEL}"]
    if mounted_here is not None:
        raise SwapRefused(f"{plan.mount} already has {mounted_here.source} mounted, not {plan.device}")
    if device_mounts:
        raise SwapRefused(f"{plan.device} is already mounted at {', '.join(device_mounts)}, not at {plan.mount}")
    if signatures is None or not signatures.present:
        raise SwapRefused(f"NVMe device {plan.device} does not exist on this host")
    if not signatures.probed:
        raise SwapRefused(f"refusing to format: {signatures.describe()}")
    mount = f"hk_mount_fs {_q(plan.device)} {_q(plan.mount)}"
    if not signatures.blank:
        if not signatures.partitions and is_hostkit_filesystem(signatures, storage, plan.mount):
            # hostkit's own filesystem, not mounted (say, the boot unit failed): mount it.
            return [mount]
        raise SwapRefused(f"refusing to format {plan.device}: it is not blank: {signatures.describe()}")
    settings = {"hk_dev": plan.device, "hk_fstype": plan.fstype, "hk_fs_label": NVME_LABEL}
    return [*(f"{name}={_q(value)}" for name, value in settings.items()), NVME_FORMAT, mount]


def is_hostkit_filesystem(signatures, storage: StorageInfo, mount: str) -> bool:
    """hostkit's filesystem: its label, or (made before the label) fstab's line for `mount` by its UUID."""
    legacy = [e for e in storage.fstab_mount_entries(mount) if signatures.uuid and e.spec == f"UUID={signatures.uuid}"]
    return signatures.label == NVME_LABEL or bool(legacy)


def script(steps: list[str]) -> str:
    return SHELL_LIB + "\n".join(steps) + "\n"


# -- operations ----------------------------------------------------------------------------


@operation()
def prepare_nvme(plan: NvmePlan, scope: SnapshotScope):
    """
    Make a filesystem on a blank NVMe device and mount it (the boot unit mounts it at boot).

    + plan: the host's NvmePlan (device, mount point, filesystem type)
    + scope: the host plan's snapshot scope
    """
    try:
        check_nvme_plan(plan)
    except ValueError as error:
        raise OperationValueError(str(error)) from None
    storage: StorageInfo = snapshot(host, scope).storage
    try:
        steps = nvme_steps(plan, storage)
    except SwapRefused as refusal:
        yield FunctionCommand(callbacks.fail_host, ([f"swap: {refusal}"],), {})
        return
    if steps:
        mark_changed(host, "storage")
        yield script(steps)


@operation()
def swap_file(plan: SwapPlan, scope: SnapshotScope):
    """
    Create, resize, repair or remove the hostkit swap file as planned.

    + plan: the host's SwapPlan (enabled=False removes every hostkit swap file)
    + scope: the host plan's snapshot scope: its nvme_device/nvme_mount guard the swap dir, and
      the snapshot looks in its swap_dir and nvme_mount for swap files
    """
    try:
        check_swap_plan(plan)
    except ValueError as error:
        raise OperationValueError(str(error)) from None
    storage: StorageInfo = snapshot(host, scope).storage
    nvme_mount = scope.nvme_mount if scope.nvme_device else None
    try:
        steps = swap_steps(plan, storage, nvme_mount=nvme_mount)
    except SwapRefused as refusal:
        yield FunctionCommand(callbacks.fail_host, ([f"swap: {refusal}"],), {})
        return
    if steps:
        mark_changed(host, "storage", "system")  # system holds SwapTotal and SwapFree
        yield script(steps)
