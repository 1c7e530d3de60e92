"""Swap on NVMe: make a filesystem on a blank NVMe device, and keep one swap file as planned.

`prepare_nvme(plan=NvmePlan)` formats a blank device, mounts it and persists the mount
by UUID in fstab with `nofail,x-systemd.device-timeout=30s`, so that a blank or missing
disk at boot (instance-store NVMe after a stop/start) neither stalls nor fails the boot.
A device that carries any signature is never formatted: the check runs again on the
host in the same shell script as mkfs.

`swap_file(plan=SwapPlan)` creates, resizes, repairs or removes `<dir>/vllm-hostkit.swap`.
Each change is one shell script (`set -e` and an EXIT trap), so a failure part-way
removes the partial file and writes no fstab entry for it:

- create: free space for size plus a reserve, an empty file made root:root 0600, made
  NOCOW on btrfs, filled with dd (fallocate can leave holes that swapon rejects; O_DIRECT,
  so the zeros do not evict the page cache), mkswap,
  swapon with the priority, confirmed in /proc/swaps; only then the fstab line
  (`nofail,pri=N`). zfs, nfs, tmpfs, overlay and anything else unknown are refused.
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
import re
import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, Host, State, operation
from pyinfra.api.exceptions import OperationValueError

from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.storage import SWAP_FILE_SELINUX_TYPE, TEMP_SUFFIX, FileStat, StorageInfo
from hostkit.plans import SWAP_FILE_NAME, NvmePlan, SwapPlan
from hostkit.swap_filesystems import FILL_METHODS, swap_file_refusal

SWAP_FILE_MODE = 0o600
# Paths go into shell scripts, fstab and awk comparisons with /proc/swaps: keep them plain.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+:@/-]*$")
# nofail alone still holds the boot for the default 90 s device timeout: swap.target waits
# for the swap file's unit, which needs the mount (measured: 104 s from power-off to ssh
# with a blank lab NVMe). 5 s was too short on a lab host: udev announced the disk after
# the timeout at an ordinary reboot, and the host came up without its swap.
NVME_MOUNT_OPTIONS = "defaults,nofail,x-systemd.device-timeout=30s"
MKFS_COMMANDS = {
    "ext4": 'mkfs.ext4 -q -U "$hk_uuid" "$hk_dev"',
    "xfs": 'mkfs.xfs -q -m uuid="$hk_uuid" "$hk_dev"',
}
# Shell functions every script starts with. Paths reach them checked against _SAFE_PATH,
# so they compare equal to the (octal-escaped) fields of /proc/swaps and fstab.
SHELL_LIB = r"""set -eu
hk_fstab=/etc/fstab
hk_swaps=/proc/swaps
hk_meminfo=/proc/meminfo
hk_selinux_enforce=/sys/fs/selinux/enforce
hk_partial=
hk_fstab_changed=
hk_say() { echo "vllm-hostkit: $*" >&2; }
hk_fail() { hk_say "$*"; exit 1; }
hk_active() { awk -v p="$1" 'NR > 1 && $1 == p { found = 1 } END { exit !found }' "$hk_swaps"; }
hk_mem_kib() { awk -v k="$1:" '$1 == k { print $2; exit }' "$hk_meminfo"; }
hk_used_kib() { awk -v p="$1" 'NR > 1 && $1 == p { print $4; exit }' "$hk_swaps"; }
hk_on_exit() {
  hk_rc=$?
  if [ "$hk_rc" -ne 0 ] && [ -n "$hk_partial" ]; then
    if hk_active "$hk_partial"; then swapoff "$hk_partial" 2>/dev/null || true; fi
    if rm -f -- "$hk_partial" 2>/dev/null; then
      hk_say "failed part-way: removed the partial swap file $hk_partial; no fstab entry was written for it"
    else
      hk_say "failed part-way: could not remove the partial swap file $hk_partial"
    fi
  fi
  exit "$hk_rc"
}
trap hk_on_exit EXIT
# Succeeds when swapping off $1 is safe: MemAvailable covers its used pages plus a margin.
hk_check_swapoff() {
  hk_active "$1" || return 0
  hk_used=$(hk_used_kib "$1"); hk_avail=$(hk_mem_kib MemAvailable); hk_total=$(hk_mem_kib MemTotal)
  hk_margin=$(( hk_total / 20 )); [ "$hk_margin" -ge 262144 ] || hk_margin=262144
  [ $(( hk_used + hk_margin )) -gt "$hk_avail" ] || return 0
  hk_say "refusing to swapoff $1: it holds $(( hk_used / 1024 )) MiB of swapped-out pages;" \
    "swapoff needs those plus a $(( hk_margin / 1024 )) MiB margin ($(( (hk_used + hk_margin) / 1024 )) MiB)" \
    "of MemAvailable, and MemAvailable is $(( hk_avail / 1024 )) MiB"
  return 1
}
hk_swapoff() {
  hk_active "$1" || return 0
  hk_check_swapoff "$1" || exit 1
  swapoff "$1"
}
# hk_fstab_put swap|mount KEY LINE: replace the entries whose spec (swap) or mount point
# (mount) is KEY with LINE, or remove them when LINE is empty. Fields, not regexes.
hk_fstab_put() {
  hk_fstab_file=$(readlink -f -- "$hk_fstab")
  [ -e "$hk_fstab_file" ] || : > "$hk_fstab_file"
  HK_KIND=$1 HK_KEY=$2 HK_LINE=$3 awk '
    function ours() {
      if (ENVIRON["HK_KIND"] == "swap") return $3 == "swap" && $1 == ENVIRON["HK_KEY"]
      return $3 != "swap" && $2 == ENVIRON["HK_KEY"]
    }
    $1 !~ /^#/ && NF >= 3 && ours() { if (!put && ENVIRON["HK_LINE"] != "") print ENVIRON["HK_LINE"]; put = 1; next }
    { print }
    END { if (!put && ENVIRON["HK_LINE"] != "") print ENVIRON["HK_LINE"] }
  ' "$hk_fstab_file" > "$hk_fstab_file.vllm-hostkit.tmp"
  chmod 644 "$hk_fstab_file.vllm-hostkit.tmp"
  mv -f -- "$hk_fstab_file.vllm-hostkit.tmp" "$hk_fstab_file"
  hk_fstab_changed=1
}
hk_reload_if_fstab_changed() {
  if [ -n "$hk_fstab_changed" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
}
# hk_label FILE PATH: under SELinux, FILE gets the swap file type now (chcon), and PATH (the
# file's final name) a file-context rule so that a relabel keeps it, where semanage exists.
hk_label() {
  [ -e "$hk_selinux_enforce" ] || return 0
  if command -v semanage >/dev/null 2>&1; then
    hk_re=$(printf '%s' "$2" | sed 's/[].[\\*^$()+?{}|]/\\&/g')
    timeout 120 semanage fcontext -a -t swapfile_t "$hk_re" 2>/dev/null \
      || timeout 120 semanage fcontext -m -t swapfile_t "$hk_re" \
      || hk_fail "semanage fcontext -t swapfile_t $2 failed or timed out"
  fi
  chcon -t swapfile_t "$1"
}
# hk_create PATH SIZE_BYTES PRIORITY dd|nocow: a new active swap file, or a failure that
# leaves no file behind.
hk_create() {
  ! hk_active "$1" || hk_fail "$1 is an active swap area; not overwriting it"
  hk_dir=$(dirname -- "$1")
  mkdir -p -- "$hk_dir"
  hk_df=$(df -P -B1 -- "$hk_dir" | awk 'NR == 2 { print $2 " " $4 }')
  hk_fs_size=${hk_df% *}; hk_fs_avail=${hk_df#* }
  hk_reserve=$(( hk_fs_size / 50 )); [ "$hk_reserve" -ge 268435456 ] || hk_reserve=268435456
  [ $(( $2 + hk_reserve )) -le "$hk_fs_avail" ] || hk_fail "not enough free space in $hk_dir for $1:" \
    "need $(( $2 / 1048576 )) MiB plus a $(( hk_reserve / 1048576 )) MiB reserve," \
    "$(( hk_fs_avail / 1048576 )) MiB available"
  hk_partial=$1
  rm -f -- "$1"
  (umask 077 && : > "$1")
  chown root:root "$1"
  chmod 600 "$1"
  hk_label "$1" "${1%.new}"
  if [ "$4" = nocow ]; then chattr +C "$1"; fi
  # O_DIRECT: gigabytes of zeros must not push the page cache (or vLLM) out of RAM.
  dd if=/dev/zero of="$1" bs=1M count="$2" iflag=count_bytes oflag=direct conv=fsync status=none
  mkswap "$1" > /dev/null
  swapon -p "$3" "$1"
  hk_active "$1" || hk_fail "swapon $1 returned success but /proc/swaps does not list it (see dmesg)"
}
"""


class SwapRefused(Exception):
    """The snapshot shows a state this host must not be changed from; says why."""


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
    if plan.fstype not in MKFS_COMMANDS:
        raise ValueError(f"NVMe filesystem must be one of {sorted(MKFS_COMMANDS)}, not {plan.fstype!r}")


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


def swap_problems(plan: SwapPlan, storage: StorageInfo) -> list[str]:
    """How the host's swap differs from the plan, worded for people; [] when it matches.

    Pure: the verification checks run the storage fact's command, parse it with
    `StorageFact().process(lines)` and judge the result with this.
    """
    state = swap_state(plan, storage)
    problems = []
    if plan.enabled:
        file = state.file
        if file is None:
            problems.append(f"{plan.path} does not exist")
        elif not file.is_regular:
            problems.append(f"{plan.path} is a {file.kind}, not a regular file")
        else:
            if file.size_bytes != plan.size_bytes:
                problems.append(f"{plan.path} is {file.size_bytes} bytes, planned {plan.size_bytes}")
            if file.mode != SWAP_FILE_MODE:
                problems.append(f"{plan.path} has mode {file.mode:04o}, not 0600")
            if (file.uid, file.gid) != (0, 0):
                problems.append(f"{plan.path} is owned by {file.uid}:{file.gid}, not root:root")
            if file.selinux_type not in (None, SWAP_FILE_SELINUX_TYPE):
                problems.append(f"{plan.path} has the SELinux type {file.selinux_type}, not {SWAP_FILE_SELINUX_TYPE}")
        if state.active_priority is None:
            problems.append(f"{plan.path} is not an active swap area")
        elif state.active_priority != plan.priority:
            problems.append(f"{plan.path} is active at priority {state.active_priority}, planned {plan.priority}")
        if not state.fstab_ok:
            problems.append(f"/etc/fstab lacks exactly one entry `{swap_fstab_line(plan)}` (nofail, pri={plan.priority})")
    for stray in state.strays:
        where = []
        if storage.swap_area(stray):
            where.append("active")
        if storage.fstab_swap_entries(stray):
            where.append("in /etc/fstab")
        if stray in storage.files:
            where.append("on disk")
        problems.append(f"{stray} is a hostkit swap file the plan does not want ({', '.join(where)})")
    return problems


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

    `nvme_mount`: the mount point of the NVMe the profile names, if any. A planned path
    under it needs a filesystem mounted there: otherwise the file would land on the
    filesystem underneath (a blank NVMe at boot leaves just the empty directory).
    Raises SwapRefused for states that must not be changed from.
    """
    state = swap_state(plan, storage)
    steps: list[str] = []
    strays = list(state.strays)
    if plan.enabled:
        steps = _planned_file_steps(plan, storage, state, nvme_mount)
        if any(step.startswith("hk_create ") and TEMP_SUFFIX in step for step in steps):
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
    fstab_step = [] if state.fstab_ok else [f"hk_fstab_put swap {_q(path)} {_q(swap_fstab_line(plan))}"]
    if file is not None and not file.is_regular:
        raise SwapRefused(f"{path} is a {file.kind}, not a regular file; remove it or choose another swap_dir")
    if nvme_mount and _is_under(directory, nvme_mount) and not storage.is_mountpoint(nvme_mount):
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
            + [
                f"hk_create {_q(tmp)} {size} {priority} {method}",
                f"hk_swapoff {_q(path)}",
                "hk_partial=",
                f"rm -f -- {_q(path)}",
                f"hk_swapoff {_q(tmp)}",
                f"mv -f -- {_q(tmp)} {_q(path)}",
                f"swapon -p {priority} {_q(path)}",
                f"hk_active {_q(path)} || hk_fail 'swapon {path} failed after the resize'",
            ]
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


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def nvme_steps(plan: NvmePlan, storage: StorageInfo) -> list[str]:
    """Shell steps (after SHELL_LIB) that make `plan.device` a mounted filesystem at
    `plan.mount`, persisted in fstab by UUID; [] when it already is.
    Raises SwapRefused for a device that is missing, in use, or not blank."""
    signatures = storage.devices.get(plan.device)
    real = signatures.real_path if signatures else plan.device
    family = storage.device_and_descendants(real)
    device_mounts = sorted({m for d in family for m in d.mountpoints})
    mounted_here = storage.filesystem_at(plan.mount)
    fstab_entries = storage.fstab_mount_entries(plan.mount)

    if plan.mount in device_mounts:
        holder = next(d for d in family if plan.mount in d.mountpoints)
        uuid = holder.uuid or (signatures.uuid if signatures and holder.path == real else None)
        if uuid is None:
            raise SwapRefused(f"{plan.device} is mounted at {plan.mount} but its filesystem UUID is unknown")
        wanted = f"UUID={uuid}"
        if len(fstab_entries) == 1 and fstab_entries[0].spec == wanted and _boot_safe(fstab_entries[0]):
            return []
        fstype = mounted_here.fstype if mounted_here else plan.fstype
        line = f"{wanted} {plan.mount} {fstype} {NVME_MOUNT_OPTIONS} 0 2"
        return [f"hk_fstab_put mount {_q(plan.mount)} {_q(line)}", "hk_reload_if_fstab_changed"]
    if mounted_here is not None:
        raise SwapRefused(f"{plan.mount} already has {mounted_here.source} mounted, not {plan.device}")
    if device_mounts:
        raise SwapRefused(f"{plan.device} is already mounted at {', '.join(device_mounts)}, not at {plan.mount}")
    if signatures is None or not signatures.present:
        raise SwapRefused(f"NVMe device {plan.device} does not exist on this host")
    if not signatures.probed:
        raise SwapRefused(f"refusing to format: {signatures.describe()}")
    if not signatures.blank:
        ours = [e for e in fstab_entries if signatures.uuid and e.spec == f"UUID={signatures.uuid}"]
        if ours and not signatures.partitions:
            # hostkit's own filesystem, not mounted (say, mounting failed at boot): mount it.
            return [f"mkdir -p -- {_q(plan.mount)}", f'mount --fstab "$hk_fstab" {_q(plan.mount)}']
        raise SwapRefused(f"refusing to format {plan.device}: it is not blank: {signatures.describe()}")
    line = f'UUID=$hk_uuid {plan.mount} {plan.fstype} {NVME_MOUNT_OPTIONS} 0 2'
    dev, mount = _q(plan.device), _q(plan.mount)
    return [
        # The same check as the snapshot's, again right before mkfs: the disk may have
        # been used since. wipefs fails when it cannot probe; blkid cannot say so.
        f"hk_dev={dev}",
        '[ -b "$hk_dev" ] || hk_fail "$hk_dev is not a block device"',
        'dd if="$hk_dev" of=/dev/null bs=4096 count=1 2>/dev/null || hk_fail "cannot read $hk_dev"',
        'hk_found=$(wipefs --no-act --noheadings --output TYPE -- "$hk_dev") '
        '|| hk_fail "wipefs cannot probe $hk_dev; not formatting it"',
        'hk_found="$hk_found $(blkid -p -o value -s TYPE -s PTTYPE -- "$hk_dev" || true)'
        ' $(lsblk -n -r -o PATH -- "$hk_dev" | tail -n +2)"',
        "hk_found=$(echo $hk_found)",
        '[ -z "$hk_found" ] || hk_fail "refusing to format $hk_dev: it is not blank: it carries $hk_found"',
        "hk_uuid=$(cat /proc/sys/kernel/random/uuid)",
        MKFS_COMMANDS[plan.fstype],
        "if command -v udevadm > /dev/null; then udevadm settle || true; fi",
        f'hk_fstab_put mount {mount} "{line}"',
        "hk_reload_if_fstab_changed",
        f"mkdir -p -- {mount}",
        f'mount --fstab "$hk_fstab" {mount}',
        f'[ "$(findmnt -n -o SOURCE --mountpoint {mount})" = "$(readlink -f -- "$hk_dev")" ] '
        f'|| hk_fail "{plan.mount} does not show $hk_dev after mount"',
    ]


def _boot_safe(entry) -> bool:
    return entry.option("nofail") is not None and entry.option("x-systemd.device-timeout") is not None


def script(steps: list[str]) -> str:
    return SHELL_LIB + "\n".join(steps) + "\n"


# -- operations ----------------------------------------------------------------------------


def refuse_host(state: State, host: Host, message: str) -> bool:
    """Log why this host is refused; returning False fails this host only."""
    host.log_styled(f"swap: {message}", fg="red", log_func=logger.error)
    return False


def _profile_value(profile: Any, name: str) -> Any:
    return getattr(profile, name, None) if profile is not None else None


@operation()
def prepare_nvme(plan: NvmePlan, profile: Any = None):
    """
    Make a filesystem on a blank NVMe device, mount it and persist the mount in fstab.

    + plan: the host's NvmePlan (device, mount point, filesystem type)
    + profile: the host's HostProfile, passed on to the snapshot
    """
    try:
        check_nvme_plan(plan)
    except ValueError as error:
        raise OperationValueError(str(error)) from None
    storage: StorageInfo = snapshot(host, profile).storage
    try:
        steps = nvme_steps(plan, storage)
    except SwapRefused as refusal:
        yield FunctionCommand(refuse_host, (str(refusal),), {})
        return
    if steps:
        mark_changed(host, "storage")
        yield script(steps)


@operation()
def swap_file(plan: SwapPlan, profile: Any = None):
    """
    Create, resize, repair or remove the hostkit swap file as planned.

    + plan: the host's SwapPlan (enabled=False removes every hostkit swap file)
    + profile: the host's HostProfile: its nvme_device/nvme_mount guard the swap dir, and
      the snapshot looks in its swap_dir and nvme_mount for swap files
    """
    try:
        check_swap_plan(plan)
    except ValueError as error:
        raise OperationValueError(str(error)) from None
    storage: StorageInfo = snapshot(host, profile).storage
    nvme_mount = _profile_value(profile, "nvme_mount") if _profile_value(profile, "nvme_device") else None
    try:
        steps = swap_steps(plan, storage, nvme_mount=nvme_mount)
    except SwapRefused as refusal:
        yield FunctionCommand(refuse_host, (str(refusal),), {})
        return
    if steps:
        mark_changed(host, "storage", "system")  # system holds SwapTotal and SwapFree
        yield script(steps)
