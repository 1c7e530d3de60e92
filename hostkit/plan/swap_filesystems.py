"""Which filesystems hostkit puts a swap file on, how, and what free space it leaves there:
one rule for plan, deploy and verify.

An allow list, not a deny list: a filesystem hostkit has not tried (vfat, f2fs, a new FUSE
one) is refused at plan time, not only when the deploy reaches the host.
"""

from __future__ import annotations

from hostkit.sizes import GIB

# How each filesystem gets a swap file the kernel accepts.
FILL_METHODS = {"ext2": "dd", "ext3": "dd", "ext4": "dd", "xfs": "dd", "btrfs": "nocow"}
NO_SWAP_FILE_REASONS = {
    "zfs": "the kernel cannot swap to a file on zfs",
    "nfs": "a swap file on nfs depends on the network",
    "nfs4": "a swap file on nfs depends on the network",
    "tmpfs": "tmpfs lives in the memory that swap is meant to relieve",
    "ramfs": "ramfs lives in the memory that swap is meant to relieve",
    "overlay": "the kernel cannot swap to a file on overlayfs",
}


# Free space a swap file leaves on its filesystem, so that the logs and caches beside it can
# still grow: the plan sizes the file by it and the host checks it again before writing.
RESERVE_MIN_BYTES = GIB
RESERVE_FRACTION = 20


def reserve_bytes(filesystem_bytes: int) -> int:
    """What stays free on a filesystem of this size: 1 GiB, or 5 % when that is more."""
    return max(RESERVE_MIN_BYTES, filesystem_bytes // RESERVE_FRACTION)


def swap_file_refusal(fstype: str) -> str | None:
    """Why a swap file cannot go on `fstype`, or None when hostkit makes one there."""
    if fstype in FILL_METHODS:
        return None
    return NO_SWAP_FILE_REASONS.get(fstype, f"hostkit makes swap files only on {', '.join(sorted(FILL_METHODS))}")
