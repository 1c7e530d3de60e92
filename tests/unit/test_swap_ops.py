"""Swap and NVMe operations against fake snapshots: what they yield, refuse and leave alone.

The generators run as pyinfra runs them (`_inner`, with a fake `host` in pyinfra's
context). The shell they yield then runs under sh with fake swapon/swapoff/mkswap/df and
fake /proc/swaps, /proc/meminfo and /etc/fstab files, so that the cleanup after a
failure, the memory check before swapoff and the fstab editing are exercised for real.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api.exceptions import OperationValueError
from pyinfra.context import ctx_host

from hostkit.desired.swap import SWAP_DEADLINE_BASE_S, swap_deadline_s
from hostkit.facts.storage import (
    BlockDevice,
    DeviceSignatures,
    FileStat,
    Filesystem,
    FstabEntry,
    Mount,
    StorageInfo,
    SwapArea,
)
from hostkit.operations import swap
from hostkit.paths import NVME_LABEL
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.plan.scope import snapshot_scope
from hostkit.plan.swap_filesystems import reserve_bytes
from hostkit.verify.checks import swap_checks
from tests.unit.op_host import OpHost, refusal_text

GIB = 2**30
MIB = 2**20
PATH = "/mnt/nvme/vllm-hostkit.swap"
TMP = PATH + ".new"
PLAN = SwapPlan(enabled=True, path=PATH, size_bytes=2 * GIB, priority=10)
NVME = NvmePlan(device="/dev/nvme0n1", by_id="/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1", mount="/mnt/nvme")
UUID = "3f9c1a52-8d2e-4c57-9a51-0f6c2b7de901"


# Where the snapshot looks on a host whose inventory names this NVMe (its nvme_device guards PATH).
SCOPE = dataclasses.replace(snapshot_scope(), swap_dir="auto", nvme_device="/dev/nvme0n1", nvme_mount="/mnt/nvme")


def fstab_entry(spec, file, vfstype, options, line_no=1):
    return FstabEntry(spec, file, vfstype, tuple(options.split(",")), 0, 0, line_no)


def swap_file_stat(path=PATH, size=2 * GIB, mode=0o600, uid=0, gid=0, allocated=None, signature=True,
                   selinux_type=None):
    return FileStat(path, "regular file", size, mode, uid, gid, size if allocated is None else allocated, signature,
                    selinux_type)


def nvme_storage(fstype="ext4", mounted=True, signatures=(), device_present=True) -> StorageInfo:
    """An NVMe disk, optionally formatted and mounted at /mnt/nvme, and nothing else hostkit made."""
    mountpoints = ("/mnt/nvme",) if mounted else ()
    devices = (
        BlockDevice("vda", "/dev/vda", "disk", None, "ext4", "root-uuid", 20 * GIB, ("/",), False),
        BlockDevice("nvme0n1", "/dev/nvme0n1", "disk", "nvme", fstype if mounted else None,
                    UUID if mounted else None, 8 * GIB, mountpoints, True),
    )
    filesystems = [Filesystem("/dev/vda", "ext4", 20 * GIB, 15 * GIB, "/", False)]
    mounts = [Mount("/dev/vda", "/", "ext4")]
    fstab = [fstab_entry("/dev/vda", "/", "ext4", "rw,errors=remount-ro", 1)]
    if mounted:
        filesystems.append(Filesystem("/dev/nvme0n1", fstype, 8 * GIB, 7 * GIB, "/mnt/nvme", True))
        mounts.append(Mount("/dev/nvme0n1", "/mnt/nvme", fstype))
    sig = DeviceSignatures("/dev/nvme0n1", present=device_present, probed=device_present,
                           signatures=tuple(signatures) or ((fstype,) if mounted else ()),
                           real_path="/dev/nvme0n1", uuid=UUID if mounted else None,
                           label=NVME_LABEL if mounted else None)
    return StorageInfo(
        block_devices=devices, filesystems=tuple(filesystems), mounts=tuple(mounts), fstab=tuple(fstab),
        devices={"/dev/nvme0n1": sig},
    )


def converged(plan: SwapPlan = PLAN, fstype: str = "ext4") -> StorageInfo:
    storage = nvme_storage(fstype)
    return dataclasses.replace(
        storage,
        swaps=(SwapArea(plan.path, "file", plan.size_bytes - 4096, 0, plan.priority),),
        fstab=storage.fstab + (fstab_entry(plan.path, "none", "swap", f"nofail,pri={plan.priority}", 3),),
        files={plan.path: swap_file_stat(plan.path, plan.size_bytes)},
    )


def changed(storage: StorageInfo, **changes) -> StorageInfo:
    return dataclasses.replace(storage, **changes)


def FakeHost(storage: StorageInfo, executing: bool = False) -> OpHost:
    return OpHost({"storage": storage}, executing)


def run_op(op, storage: StorageInfo, plan, scope=SCOPE, executing: bool = False) -> list:
    fake = FakeHost(storage, executing)
    with ctx_host.use(fake):
        return list(op._inner(plan, scope))


def refusal(op, storage: StorageInfo, plan, scope=SCOPE) -> str:
    """The operation must yield one callback that fails the host; returns what it logged."""
    fake = FakeHost(storage)
    with ctx_host.use(fake):
        [command] = list(op._inner(plan, scope))
    return refusal_text(command, fake)


def only_script(op, storage, plan, scope=SCOPE) -> str:
    [command] = run_op(op, storage, plan, scope)
    assert isinstance(command, str)
    assert command.startswith(swap.SHELL_LIB)
    return command[len(swap.SHELL_LIB):]


def failed_checks(plan: SwapPlan, storage: StorageInfo) -> dict[str, str]:
    """What `hostkit verify` reports for this storage: the failed swap checks, by name."""
    return {check.name: check.message() for check in swap_checks(plan, storage, "gpu-01") if not check.ok}


def positions(text: str, *needles: str) -> list[int]:
    found = [text.index(needle) for needle in needles]
    assert found == sorted(found), f"out of order: {needles}"
    return found


# -- swap_file: decisions from the snapshot ------------------------------------------------


def test_converged_host_yields_nothing():
    assert run_op(swap.swap_file, converged(), PLAN) == []
    assert failed_checks(PLAN, converged()) == {}


def test_create_on_ext4_fills_with_dd_then_writes_fstab_after_swapon():
    steps = only_script(swap.swap_file, nvme_storage(), PLAN)
    positions(steps, f"hk_create {PATH} {2 * GIB} 10 dd", f"hk_fstab_put swap {PATH} '{PATH} none swap nofail,pri=10 0 0'",
              "hk_partial=", "hk_reload_if_fstab_changed")
    assert "swapoff" not in steps


def test_create_on_btrfs_makes_a_nocow_file_and_xfs_uses_dd():
    assert f"hk_create {PATH} {2 * GIB} 10 nocow" in only_script(swap.swap_file, nvme_storage("btrfs"), PLAN)
    assert f"hk_create {PATH} {2 * GIB} 10 dd" in only_script(swap.swap_file, nvme_storage("xfs"), PLAN)


@pytest.mark.parametrize("fstype", ["zfs", "nfs", "nfs4", "tmpfs", "overlay", "vfat"])
def test_create_refuses_filesystems_without_swap_file_support(fstype):
    text = refusal(swap.swap_file, nvme_storage(fstype), PLAN)
    assert f"refusing to put a swap file on {fstype} at /mnt/nvme" in text


def test_swap_dir_on_an_unmounted_nvme_mount_point_is_refused():
    """A blank NVMe at boot leaves /mnt/nvme an empty directory on the root filesystem."""
    text = refusal(swap.swap_file, nvme_storage(mounted=False), PLAN)
    assert "belongs on the NVMe filesystem at /mnt/nvme, but nothing is mounted there" in text


def test_without_an_nvme_device_in_the_profile_any_supported_dir_is_fine():
    root_scope = dataclasses.replace(SCOPE, nvme_device=None, swap_dir="/var/swap")
    plan = SwapPlan(enabled=True, path="/var/swap/vllm-hostkit.swap", size_bytes=GIB)
    steps = only_script(swap.swap_file, nvme_storage(mounted=False), plan, root_scope)
    assert f"hk_create /var/swap/vllm-hostkit.swap {GIB} 10 dd" in steps


def test_resize_of_an_active_file_is_make_before_break():
    storage = converged(SwapPlan(enabled=True, path=PATH, size_bytes=GIB))
    steps = only_script(swap.swap_file, storage, PLAN)
    positions(steps, f"hk_check_swapoff {PATH} || exit 1", f"hk_resize {PATH} {2 * GIB} 10 dd")
    assert "hk_fstab_put" not in steps  # the path and its entry stay the same


def test_resize_first_swaps_off_a_leftover_active_temp_file():
    storage = converged(SwapPlan(enabled=True, path=PATH, size_bytes=GIB))
    storage = changed(storage, swaps=storage.swaps + (SwapArea(TMP, "file", GIB, 0, 10),),
                      files={**storage.files, TMP: swap_file_stat(TMP, GIB)})
    steps = only_script(swap.swap_file, storage, PLAN)
    positions(steps, f"hk_swapoff {TMP}", f"hk_resize {PATH} {2 * GIB} 10 dd")
    assert steps.count(f"rm -f -- {TMP}") == 0


def test_inactive_file_of_the_wrong_size_is_recreated_without_swapoff():
    storage = changed(converged(), swaps=(), files={PATH: swap_file_stat(size=GIB)})
    steps = only_script(swap.swap_file, storage, PLAN)
    assert steps.startswith(f"hk_create {PATH} {2 * GIB} 10 dd")
    assert "swapoff" not in steps


@pytest.mark.parametrize("file", [swap_file_stat(signature=False), swap_file_stat(allocated=GIB)],
                         ids=["no-swap-signature", "sparse"])
def test_inactive_file_that_swapon_would_reject_is_recreated(file):
    storage = changed(converged(), swaps=(), files={PATH: file})
    assert only_script(swap.swap_file, storage, PLAN).startswith(f"hk_create {PATH}")


def test_wrong_mode_is_fixed_in_place():
    storage = changed(converged(), files={PATH: swap_file_stat(mode=0o644, uid=1000)})
    assert only_script(swap.swap_file, storage, PLAN) == f"chown root:root {PATH} && chmod 600 {PATH}\n"


def test_a_swap_file_without_the_selinux_swap_type_is_relabelled_in_place():
    storage = changed(converged(), files={PATH: swap_file_stat(selinux_type="unlabeled_t")})
    assert only_script(swap.swap_file, storage, PLAN) == f"hk_label {PATH} {PATH}\n"
    [(name, failure)] = failed_checks(PLAN, storage).items()
    assert name == "swap file SELinux label"
    assert "expected type swapfile_t" in failure and "actual type unlabeled_t" in failure
    labelled = changed(converged(), files={PATH: swap_file_stat(selinux_type="swapfile_t")})
    assert run_op(swap.swap_file, labelled, PLAN) == []


def test_inactive_file_is_swapped_on():
    steps = only_script(swap.swap_file, changed(converged(), swaps=()), PLAN)
    assert steps.startswith(f"swapon -p 10 {PATH}\nhk_active {PATH} ||")
    assert "hk_create" not in steps and "fstab" not in steps


def test_wrong_priority_is_fixed_by_a_checked_swapoff_and_swapon():
    storage = changed(converged(), swaps=(SwapArea(PATH, "file", 2 * GIB, 0, -2),))
    steps = only_script(swap.swap_file, storage, PLAN)
    positions(steps, f"hk_swapoff {PATH}", f"swapon -p 10 {PATH}")


@pytest.mark.parametrize("options", [None, "defaults", "nofail,pri=5", "nofail,pri=10|dup"])
def test_missing_or_wrong_fstab_entry_is_replaced(options):
    storage = converged()
    kept = tuple(e for e in storage.fstab if e.vfstype != "swap")
    if options == "nofail,pri=10|dup":
        entries = (fstab_entry(PATH, "none", "swap", "nofail,pri=10", 3), fstab_entry(PATH, "none", "swap", "sw", 4))
    else:
        entries = () if options is None else (fstab_entry(PATH, "none", "swap", options, 3),)
    steps = only_script(swap.swap_file, changed(storage, fstab=kept + entries), PLAN)
    assert steps == (f"hk_fstab_put swap {PATH} '{PATH} none swap nofail,pri=10 0 0'\n"
                     "hk_reload_if_fstab_changed\n")


def test_stray_hostkit_swap_files_are_removed_after_the_planned_one_is_up():
    old = "/data/vllm-hostkit.swap"
    storage = nvme_storage()
    storage = changed(storage, swaps=(SwapArea(old, "file", GIB, 10 * MIB, 10),),
                      fstab=storage.fstab + (fstab_entry(old, "none", "swap", "nofail,pri=10", 3),),
                      files={old: swap_file_stat(old, GIB), TMP: swap_file_stat(TMP, GIB)})
    steps = only_script(swap.swap_file, storage, PLAN)
    positions(steps, f"hk_create {PATH}", "hk_partial=", f"hk_swapoff {old}", f"rm -f -- {old}",
              f"hk_fstab_put swap {old} ''")
    assert f"rm -f -- {TMP}" in steps
    assert f"hk_swapoff {TMP}" not in steps  # not active


def test_disabled_removes_every_hostkit_swap_file_with_a_checked_swapoff():
    steps = only_script(swap.swap_file, converged(), SwapPlan(enabled=False))
    positions(steps, f"hk_swapoff {PATH}", f"rm -f -- {PATH}", f"hk_fstab_put swap {PATH} ''",
              "hk_reload_if_fstab_changed")


def test_disabled_with_nothing_there_yields_nothing():
    assert run_op(swap.swap_file, nvme_storage(), SwapPlan(enabled=False)) == []


def test_an_active_area_whose_file_is_gone_is_swapped_off_then_recreated():
    steps = only_script(swap.swap_file, changed(converged(), files={}), PLAN)
    positions(steps, f"hk_swapoff {PATH}", f"hk_create {PATH}")


def test_a_directory_at_the_swap_path_is_refused():
    storage = changed(nvme_storage(), files={PATH: dataclasses.replace(swap_file_stat(), kind="directory")})
    assert "is a directory, not a regular file" in refusal(swap.swap_file, storage, PLAN)


@pytest.mark.parametrize("plan", [
    SwapPlan(enabled=True, path="relative/vllm-hostkit.swap", size_bytes=GIB),
    SwapPlan(enabled=True, path="/mnt/my disk/vllm-hostkit.swap", size_bytes=GIB),
    SwapPlan(enabled=True, path="/mnt/nvme/other.swap", size_bytes=GIB),
    SwapPlan(enabled=True, path=PATH, size_bytes=0),
    SwapPlan(enabled=True, path=None, size_bytes=GIB),
])
def test_bad_plans_are_refused_as_bad_input(plan):
    with pytest.raises(OperationValueError):
        run_op(swap.swap_file, nvme_storage(), plan)


def test_a_change_at_execute_time_invalidates_the_snapshot():
    fake = FakeHost(nvme_storage(), executing=True)
    with ctx_host.use(fake):
        list(swap.swap_file._inner(PLAN, SCOPE))
    assert fake._hostkit_snapshot.stale == {"storage", "system"}


def test_verify_names_each_swap_drift():
    storage = changed(
        converged(),
        swaps=(SwapArea(PATH, "file", GIB, 0, 3), SwapArea("/data/vllm-hostkit.swap", "file", GIB, 0, 10)),
        files={PATH: swap_file_stat(size=GIB, mode=0o644)},
        fstab=(),
    )
    failures = failed_checks(PLAN, storage)
    assert set(failures) == {"swap active", "swap size", "swap file", "swap in fstab", "no stray hostkit swap"}
    assert f"actual {PATH} (1G, priority 3)" in failures["swap active"]
    assert "actual 1G (1073741824 bytes)" in failures["swap size"]
    assert f"actual regular file, {GIB} bytes, mode 644, owner 0:0" in failures["swap file"]
    assert "actual no swap entry for it" in failures["swap in fstab"]
    assert "actual /data/vllm-hostkit.swap;" in failures["no stray hostkit swap"]
    failures = failed_checks(PLAN, nvme_storage())
    assert set(failures) == {"swap active", "swap file", "swap in fstab"}
    assert "actual no swap at all" in failures["swap active"] and "actual file missing" in failures["swap file"]
    assert f"`{PATH} none swap nofail,pri=10 0 0`" in failures["swap in fstab"]
    assert f"actual {PATH};" in failed_checks(SwapPlan(enabled=False), converged())["no stray hostkit swap"]


# -- prepare_nvme ----------------------------------------------------------------------------


def test_blank_nvme_is_checked_again_then_formatted_labelled_and_mounted_without_fstab():
    steps = only_script(swap.prepare_nvme, nvme_storage(mounted=False), NVME)
    positions(
        steps,
        f"hk_dev=/dev/nvme0n1\nhk_fstype=ext4\nhk_fs_label={NVME_LABEL}\n",
        "wipefs --no-act --noheadings --output TYPE",
        "blkid -p -o value -s TYPE -s PTTYPE",
        '[ -z "$hk_found" ] || hk_fail "refusing to format $hk_dev: it is not blank',
        'ext4) mkfs.ext4 -q -L "$hk_fs_label" "$hk_dev"',
        "hk_mount_fs /dev/nvme0n1 /mnt/nvme",
    )
    assert "hk_fstab_put" not in steps


def test_mounted_labelled_nvme_yields_nothing():
    assert run_op(swap.prepare_nvme, nvme_storage(), NVME) == []


def test_a_mounted_nvme_of_the_fstab_era_gets_its_label_online():
    storage = nvme_storage()
    unlabelled = dataclasses.replace(storage.devices["/dev/nvme0n1"], label=None)
    steps = only_script(swap.prepare_nvme, changed(storage, devices={"/dev/nvme0n1": unlabelled}), NVME)
    assert steps == f"hk_set_fs_label /dev/nvme0n1 /mnt/nvme {NVME_LABEL}\n"


@pytest.mark.parametrize("signatures,named", [
    (("ext4",), "carries ext4"),
    (("gpt", "PMBR"), "carries gpt, PMBR"),
    (("LVM2_member",), "carries LVM2_member"),
])
def test_nvme_with_any_signature_is_never_formatted(signatures, named):
    storage = changed(nvme_storage(mounted=False), devices={"/dev/nvme0n1": DeviceSignatures(
        "/dev/nvme0n1", True, True, signatures, real_path="/dev/nvme0n1", uuid="other-uuid")})
    text = refusal(swap.prepare_nvme, storage, NVME)
    assert f"refusing to format /dev/nvme0n1: it is not blank: /dev/nvme0n1 {named}" in text


def test_nvme_with_partitions_is_not_formatted():
    storage = changed(nvme_storage(mounted=False), devices={"/dev/nvme0n1": DeviceSignatures(
        "/dev/nvme0n1", True, True, (), ("/dev/nvme0n1p1",), "/dev/nvme0n1")})
    assert "carries partition /dev/nvme0n1p1" in refusal(swap.prepare_nvme, storage, NVME)


@pytest.mark.parametrize("by", ["label", "fstab-era line"])
def test_hostkits_own_filesystem_left_unmounted_is_mounted_not_formatted(by):
    storage = nvme_storage(mounted=False)
    fstab = (fstab_entry(f"UUID={UUID}", "/mnt/nvme", "ext4", "defaults,nofail,x-systemd.device-timeout=90s", 2),)
    storage = changed(
        storage,
        fstab=storage.fstab + (fstab if by != "label" else ()),
        devices={"/dev/nvme0n1": DeviceSignatures("/dev/nvme0n1", True, True, ("ext4",), (), "/dev/nvme0n1", UUID,
                                                  NVME_LABEL if by == "label" else None)},
    )
    assert only_script(swap.prepare_nvme, storage, NVME) == "hk_mount_fs /dev/nvme0n1 /mnt/nvme\n"


def test_missing_or_unreadable_nvme_is_refused():
    missing = changed(nvme_storage(mounted=False), devices={})
    assert "NVMe device /dev/nvme0n1 does not exist" in refusal(swap.prepare_nvme, missing, NVME)
    unreadable = changed(nvme_storage(mounted=False), devices={
        "/dev/nvme0n1": DeviceSignatures("/dev/nvme0n1", True, False, real_path="/dev/nvme0n1")})
    assert "could not be checked for signatures" in refusal(swap.prepare_nvme, unreadable, NVME)


def test_mount_point_taken_by_another_device_is_refused():
    storage = nvme_storage(mounted=False)
    storage = changed(storage, filesystems=storage.filesystems + (
        Filesystem("/dev/sdb1", "ext4", GIB, GIB, "/mnt/nvme", False),))
    assert "/mnt/nvme already has /dev/sdb1 mounted, not /dev/nvme0n1" in refusal(swap.prepare_nvme, storage, NVME)


def test_a_mount_of_the_device_seen_only_by_findmnt_is_the_device_mounted():
    """Read between lsblk and findmnt, a mount another deploy just made is still this device's."""
    storage = nvme_storage(mounted=False)
    unlabelled = dataclasses.replace(storage.devices["/dev/nvme0n1"], label=None)
    storage = changed(storage, devices={"/dev/nvme0n1": unlabelled}, filesystems=storage.filesystems + (
        Filesystem("/dev/nvme0n1", "ext4", GIB, GIB, "/mnt/nvme", False),))
    assert only_script(swap.prepare_nvme, storage, NVME) == f"hk_set_fs_label /dev/nvme0n1 /mnt/nvme {NVME_LABEL}\n"


def test_nvme_mounted_elsewhere_is_refused():
    storage = nvme_storage(mounted=False)
    disk = dataclasses.replace(storage.block_devices[1], mountpoints=("/data",))
    storage = changed(storage, block_devices=(storage.block_devices[0], disk))
    assert "/dev/nvme0n1 is already mounted at /data" in refusal(swap.prepare_nvme, storage, NVME)


@pytest.mark.parametrize("plan", [NvmePlan(device="/dev/nvme0n1", by_id="/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1", mount="/mnt/nvme", fstype="vfat"),
                                  NvmePlan(device="/dev/nvme0n1", by_id="/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1", mount="/")])
def test_bad_nvme_plans_are_refused_as_bad_input(plan):
    with pytest.raises(OperationValueError):
        run_op(swap.prepare_nvme, nvme_storage(mounted=False), plan)


# -- the scripts, run under sh with fake tools -----------------------------------------------

FAKE_TOOLS = {
    # /proc/swaps lines: path, type, size KiB, used KiB, priority.
    "swapon": r'''
pri=0; if [ "$1" = -p ]; then pri=$2; shift 2; fi
[ -z "${FAKE_SWAPON_FAIL:-}" ] || { echo "swapon: $1: swapon failed: Invalid argument" >&2; exit 1; }
kib=$(( $(stat -c %s "$1") / 1024 - 4 ))
printf '%s\tfile\t%s\t0\t%s\n' "$1" "$kib" "$pri" >> "$FAKE_ROOT/swaps"
case "$1" in *.new) [ -z "${FAKE_SQUEEZE_ON_NEW:-}" ] || sed -i 's/^MemAvailable:.*/MemAvailable: 1000 kB/' "$FAKE_ROOT/meminfo";; esac
echo "swapon $1 $pri" >> "$FAKE_ROOT/log"
''',
    "swapoff": r'''
awk -v p="$1" '$1 != p' "$FAKE_ROOT/swaps" > "$FAKE_ROOT/swaps.tmp" && mv "$FAKE_ROOT/swaps.tmp" "$FAKE_ROOT/swaps"
echo "swapoff $1" >> "$FAKE_ROOT/log"
''',
    "mkswap": r'''
[ -z "${FAKE_MKSWAP_FAIL:-}" ] || { echo "mkswap: error: swap area needs to be at least 40 KiB" >&2; exit 1; }
echo "mkswap $1" >> "$FAKE_ROOT/log"
''',
    "df": r'''
echo "Filesystem 1-blocks Used Available Capacity Mounted on"
echo "/dev/nvme0n1 ${FAKE_FS_SIZE:-8589934592} 0 ${FAKE_FS_AVAIL:-8000000000} 0% /mnt/nvme"
''',
    "dd": r'''
[ -z "${FAKE_DD_FULL:-}" ] || { /bin/dd "$@" count=1; echo "dd: error writing: No space left on device" >&2; exit 1; }
exec /bin/dd "$@"
''',
    "chown": 'echo "chown $*" >> "$FAKE_ROOT/log"',
    "chattr": 'echo "chattr $*" >> "$FAKE_ROOT/log"',
    "systemctl": 'echo "systemctl $*" >> "$FAKE_ROOT/log"',
    "chcon": 'echo "chcon $*" >> "$FAKE_ROOT/log"',
    "semanage": 'echo "semanage $*" >> "$FAKE_ROOT/log"',
}


class FakeHostShell:
    """A directory that stands in for the host: swap files, /proc files, fstab and tool logs."""

    def __init__(self, root: Path):
        self.root = root
        self.dir = root / "nvme"
        self.dir.mkdir()
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name, body in FAKE_TOOLS.items():
            tool = bin_dir / name
            tool.write_text("#!/bin/sh\n" + body)
            tool.chmod(0o755)
        (root / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n")
        self.set_meminfo(total_kib=2_000_000, available_kib=1_500_000)
        (root / "fstab").write_text("# /etc/fstab\n/dev/vda / ext4 rw 0 1\n")
        (root / "log").write_text("")
        self.env = {**os.environ, "FAKE_ROOT": str(root), "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def set_meminfo(self, total_kib: int, available_kib: int) -> None:
        (self.root / "meminfo").write_text(f"MemTotal: {total_kib} kB\nMemFree: 1 kB\nMemAvailable: {available_kib} kB\n")

    def path(self, name: str = "vllm-hostkit.swap") -> str:
        return str(self.dir / name)

    def activate(self, path: str, size: int, used_kib: int = 0, priority: int = 10) -> None:
        Path(path).write_bytes(b"\0" * size)
        with open(self.root / "swaps", "a") as swaps:
            swaps.write(f"{path}\tfile\t{size // 1024 - 4}\t{used_kib}\t{priority}\n")

    def run(self, steps: list[str], **env: str) -> subprocess.CompletedProcess:
        text = swap.script(steps)
        for name in ("fstab", "swaps", "meminfo", "selinux_enforce"):
            real = {"fstab": "/etc/fstab", "swaps": "/proc/swaps", "meminfo": "/proc/meminfo",
                    "selinux_enforce": "/sys/fs/selinux/enforce"}[name]
            assert f"hk_{name}={real}\n" in text
            text = text.replace(f"hk_{name}={real}\n", f"hk_{name}={self.root / name}\n")
        return subprocess.run(["sh", "-c", text], env={**self.env, **env}, capture_output=True, text=True)

    def swaps(self) -> dict[str, list[str]]:
        lines = (self.root / "swaps").read_text().splitlines()[1:]
        return {line.split()[0]: line.split()[1:] for line in lines}

    def fstab(self) -> str:
        return (self.root / "fstab").read_text()

    def log(self) -> str:
        return (self.root / "log").read_text()


@pytest.fixture
def shell(tmp_path) -> FakeHostShell:
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    return FakeHostShell(tmp_path)


def plan_for(shell: FakeHostShell, size: int = MIB, priority: int = 10) -> SwapPlan:
    return SwapPlan(enabled=True, path=shell.path(), size_bytes=size, priority=priority)


def fresh_storage() -> StorageInfo:
    return StorageInfo(mounts=(Mount("/dev/nvme0n1", "/", "ext4"),))


@pytest.mark.processes
def test_script_creates_a_0600_swap_file_activates_it_then_writes_fstab(shell):
    plan = plan_for(shell)
    result = shell.run(swap.swap_steps(plan, fresh_storage()))
    assert result.returncode == 0, result.stderr
    swap_path = Path(plan.path)
    assert swap_path.stat().st_size == MIB and swap_path.stat().st_mode & 0o777 == 0o600
    assert shell.swaps()[plan.path][-1] == "10"
    assert f"{plan.path} none swap nofail,pri=10 0 0\n" in shell.fstab()
    log = shell.log()
    positions(log, f"chown root:root {plan.path}", f"mkswap {plan.path}", f"swapon {plan.path} 10")


@pytest.mark.processes
def test_under_selinux_a_new_file_is_labelled_before_swapon_and_its_rule_made_persistent(shell):
    (shell.root / "selinux_enforce").write_text("1\n")
    plan = plan_for(shell)
    result = shell.run(swap.swap_steps(plan, fresh_storage()))
    assert result.returncode == 0, result.stderr
    escaped = plan.path.replace(".", "\\.")
    positions(shell.log(), f"semanage fcontext -a -t swapfile_t {escaped}", f"chcon -t swapfile_t {plan.path}",
              f"mkswap {plan.path}", f"swapon {plan.path} 10")
    # A resize labels the new file with the final name's rule; without semanage, chcon alone.
    shell.activate(plan.path, MIB)
    Path(shell.root / "log").write_text("")
    storage = StorageInfo(mounts=fresh_storage().mounts, swaps=(SwapArea(plan.path, "file", MIB - 4096, 0, 10),),
                          files={plan.path: dataclasses.replace(swap_file_stat(), path=plan.path, size_bytes=MIB)})
    bigger = plan_for(shell, size=2 * MIB)
    (shell.root / "bin" / "semanage").unlink()
    result = shell.run(swap.swap_steps(bigger, storage))
    assert result.returncode == 0, result.stderr
    assert f"chcon -t swapfile_t {plan.path}.new" in shell.log() and "semanage" not in shell.log()


@pytest.mark.processes
def test_without_selinux_nothing_is_labelled(shell):
    result = shell.run(swap.swap_steps(plan_for(shell), fresh_storage()))
    assert result.returncode == 0, result.stderr
    assert "chcon" not in shell.log() and "semanage" not in shell.log()


@pytest.mark.processes
@pytest.mark.parametrize("failure,message", [
    ({"FAKE_MKSWAP_FAIL": "1"}, "mkswap: error"),
    ({"FAKE_DD_FULL": "1"}, "No space left on device"),
    ({"FAKE_SWAPON_FAIL": "1"}, "swapon failed"),
])
def test_a_failure_part_way_removes_the_partial_file_and_writes_no_fstab_entry(shell, failure, message):
    plan = plan_for(shell)
    before = shell.fstab()
    result = shell.run(swap.swap_steps(plan, fresh_storage()), **failure)
    assert result.returncode != 0
    assert message in result.stderr
    assert f"removed the partial swap file {plan.path}" in result.stderr
    assert not Path(plan.path).exists()
    assert shell.fstab() == before
    assert shell.swaps() == {}


@pytest.mark.processes
def test_not_enough_free_space_is_refused_with_the_numbers_before_any_file_is_made(shell):
    plan = plan_for(shell, size=512 * MIB)
    result = shell.run(swap.swap_steps(plan, fresh_storage()), FAKE_FS_SIZE=str(GIB), FAKE_FS_AVAIL=str(600 * MIB))
    assert result.returncode == 1
    assert "not enough free space" in result.stderr
    assert f"need 512 MiB plus a {reserve_bytes(GIB) // MIB} MiB reserve, 600 MiB available" in result.stderr  # the plan's rule
    assert not Path(plan.path).exists()
    assert "dd" not in shell.log() and "mkswap" not in shell.log()


def storage_with_active(shell: FakeHostShell, size: int, priority: int = 10, with_fstab: bool = True) -> StorageInfo:
    path = shell.path()
    fstab = (fstab_entry(path, "none", "swap", f"nofail,pri={priority}"),) if with_fstab else ()
    return StorageInfo(
        swaps=(SwapArea(path, "file", size - 4096, 0, priority),),
        mounts=(Mount("/dev/nvme0n1", "/", "ext4"),),
        fstab=fstab,
        files={path: swap_file_stat(path, size)},
    )


@pytest.mark.processes
def test_script_resizes_make_before_break_to_the_planned_path(shell):
    path = shell.path()
    shell.activate(path, MIB)
    result = shell.run(swap.swap_steps(plan_for(shell, size=2 * MIB), storage_with_active(shell, MIB)))
    assert result.returncode == 0, result.stderr
    assert Path(path).stat().st_size == 2 * MIB
    assert not Path(path + ".new").exists()
    assert list(shell.swaps()) == [path]
    positions(shell.log(), f"swapon {path}.new 10", f"swapoff {path}\n", f"swapoff {path}.new", f"swapon {path} 10")


@pytest.mark.processes
def test_script_refuses_swapoff_when_memory_is_short_with_the_numbers(shell):
    path = shell.path()
    shell.activate(path, 2 * MIB, used_kib=900_000)
    shell.set_meminfo(total_kib=2_000_000, available_kib=700_000)
    with open(shell.root / "fstab", "a") as fstab:
        fstab.write(f"{path} none swap nofail,pri=10 0 0\n")
    before = shell.fstab()
    result = shell.run(swap.swap_steps(SwapPlan(enabled=False), storage_with_active(shell, 2 * MIB)))
    assert result.returncode == 1
    assert (f"refusing to swapoff {path}: it holds 878 MiB of swapped-out pages; swapoff needs those plus "
            "a 256 MiB margin (1134 MiB) of MemAvailable, and MemAvailable is 683 MiB") in result.stderr
    assert list(shell.swaps()) == [path] and Path(path).exists() and shell.fstab() == before


@pytest.mark.processes
def test_resize_refused_at_the_recheck_removes_the_new_file_and_keeps_the_old(shell):
    """Memory runs short between the check that starts a resize and the swapoff."""
    path = shell.path()
    shell.activate(path, MIB, used_kib=500)
    result = shell.run(swap.swap_steps(plan_for(shell, size=2 * MIB), storage_with_active(shell, MIB)),
                       FAKE_SQUEEZE_ON_NEW="1")
    assert result.returncode == 1
    assert f"refusing to swapoff {path}" in result.stderr
    assert f"removed the partial swap file {path}.new" in result.stderr
    assert list(shell.swaps()) == [path] and Path(path).stat().st_size == MIB
    assert not Path(path + ".new").exists()


@pytest.mark.processes
def test_script_removal_swaps_off_deletes_and_drops_only_that_fstab_entry(shell):
    path = shell.path()
    shell.activate(path, MIB)
    (shell.root / "fstab").write_text(
        "# /etc/fstab\n"
        f"#{path} none swap nofail,pri=10 0 0\n"
        "/dev/vda / ext4 rw 0 1\n"
        f"{path}   none  swap  sw  0 0\n"
        f"/dev/sdb1 {path} ext4 defaults 0 2\n"
        "/swapfile none swap sw 0 0\n"
    )
    result = shell.run(swap.swap_steps(SwapPlan(enabled=False), storage_with_active(shell, MIB)))
    assert result.returncode == 0, result.stderr
    assert shell.fstab() == (
        "# /etc/fstab\n"
        f"#{path} none swap nofail,pri=10 0 0\n"
        "/dev/vda / ext4 rw 0 1\n"
        f"/dev/sdb1 {path} ext4 defaults 0 2\n"
        "/swapfile none swap sw 0 0\n"
    )
    assert shell.swaps() == {} and not Path(path).exists()


@pytest.mark.processes
def test_script_replaces_a_wrong_fstab_entry_in_place(shell):
    path = shell.path()
    shell.activate(path, MIB)
    (shell.root / "fstab").write_text(f"/dev/vda / ext4 rw 0 1\n{path} none swap sw 0 0\n/swapfile none swap sw 0 0\n")
    storage = dataclasses.replace(storage_with_active(shell, MIB), fstab=(fstab_entry(path, "none", "swap", "sw"),))
    steps = swap.swap_steps(plan_for(shell), storage)
    assert steps == [f"hk_fstab_put swap {path} '{path} none swap nofail,pri=10 0 0'", "hk_reload_if_fstab_changed"]
    assert shell.run(steps).returncode == 0
    assert shell.fstab() == (f"/dev/vda / ext4 rw 0 1\n{path} none swap nofail,pri=10 0 0\n"
                             "/swapfile none swap sw 0 0\n")


@pytest.fixture
def loop_device(tmp_path):
    """A blank 64 MiB loop device (needs root and losetup)."""
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup")
    image = tmp_path / "disk.img"
    with open(image, "wb") as disk:
        disk.truncate(64 * MIB)
    attached = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
    if attached.returncode != 0:
        pytest.skip(f"losetup: {attached.stderr.strip()}")
    device = attached.stdout.strip()
    yield device
    subprocess.run(["losetup", "-d", device], check=True)


def fake_tools(shell: FakeHostShell, **scripts: str) -> None:
    for name, body in scripts.items():
        tool = shell.root / "bin" / name.replace("_", ".")
        tool.write_text("#!/bin/sh\n" + body + "\n")
        tool.chmod(0o755)


def blank_device_storage(device: str) -> StorageInfo:
    return StorageInfo(devices={device: DeviceSignatures(device, True, True, real_path=device)})


@pytest.mark.processes
def test_nvme_script_formats_a_blank_device_with_the_label_and_mounts_it(shell, loop_device, tmp_path):
    mount = str(tmp_path / "mnt")
    fake_tools(shell, mount='echo "mount $*" >> "$FAKE_ROOT/log"', findmnt=f"echo {loop_device}",
               udevadm="true")
    before = shell.fstab()
    result = shell.run(swap.nvme_steps(NvmePlan(device=loop_device, by_id="/dev/disk/by-id/nvme-test", mount=mount),
                                       blank_device_storage(loop_device)))
    assert result.returncode == 0, result.stderr
    label = subprocess.run(["blkid", "-p", "-o", "value", "-s", "LABEL", loop_device],
                           capture_output=True, text=True).stdout.strip()
    assert label == NVME_LABEL
    assert f"mount -- {loop_device} {mount}" in shell.log()
    assert shell.fstab() == before


@pytest.mark.processes
def test_nvme_script_refuses_a_device_that_stopped_being_blank_since_the_snapshot(shell, loop_device, tmp_path):
    """The snapshot said blank; by execute time someone made it a swap device."""
    subprocess.run(["mkswap", loop_device], check=True, capture_output=True)
    fake_tools(shell, mkfs_ext4='echo "mkfs $*" >> "$FAKE_ROOT/log"', mount='echo "mount $*" >> "$FAKE_ROOT/log"')
    before = shell.fstab()
    result = shell.run(swap.nvme_steps(NvmePlan(device=loop_device, by_id="/dev/disk/by-id/nvme-test", mount=str(tmp_path / "mnt")),
                                       blank_device_storage(loop_device)))
    assert result.returncode == 1
    assert f"refusing to format {loop_device}: it is not blank: it carries" in result.stderr
    assert "swap" in result.stderr
    assert "mkfs" not in shell.log() and "mount" not in shell.log()
    assert shell.fstab() == before


def test_each_swap_step_has_a_deadline_that_grows_with_the_file():
    small, large = (PLAN.model_copy(update={"size_bytes": size}) for size in (GIB, 16 * GIB))
    assert swap_deadline_s(small) == 660 and swap_deadline_s(large) == 1560
    assert swap_deadline_s(SwapPlan(enabled=False)) == SWAP_DEADLINE_BASE_S
