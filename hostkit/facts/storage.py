"""Storage facts for swap on NVMe: active swap, block devices, filesystems, fstab, disk
signatures and the hostkit swap files that already exist.

One shell command, split into parts by `%%hostkit-storage:<part>` lines. Every path the
kernel or fstab prints with octal escapes (`\\040` for a space) is decoded here.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from pyinfra.api import FactBase

from hostkit.remote import host_file
from hostkit.facts.parts import split_on_marker, to_int
from hostkit.facts.scope import SnapshotScope
from hostkit.paths import NVME_SETTINGS_FILE, NVME_UNIT, SWAP_FILE_NAME

PART_MARKER = "%%hostkit-storage:"
# The lsblk part's name when only the util-linux < 2.33 columns worked (no PATH).
LSBLK_WITHOUT_PATH = "lsblk-without-path"
TEMP_SUFFIX = ".new"  # make-before-break resize builds `<path>.new` first
# Under SELinux, swapon at boot (systemd, init_t) may only use a file of this type; the
# file's default type (e.g. unlabeled_t, default_t) is denied, and fstab's nofail hides it.
SWAP_FILE_SELINUX_TYPE = "swapfile_t"
# Filesystems that can hold a hostkit swap file: the command looks for one on each.
SWAP_CAPABLE_FSTYPES = ("ext2", "ext3", "ext4", "xfs", "btrfs")

# The boot unit's files (hostkit.operations.nvme_boot): the unit, its settings, and the host
# shell it runs, which is the deploy's own (hostkit/remote/), installed beside it.
NVME_UNIT_PATH = f"/etc/systemd/system/{NVME_UNIT}"
NVME_WANTED_BY = "multi-user.target"
NVME_WANTS_LINK = f"/etc/systemd/system/{NVME_WANTED_BY}.wants/{NVME_UNIT}"
NVME_LIB_DIR = "/usr/local/lib/vllm-hostkit"
NVME_SCRIPTS = ("swap_lib.sh", "nvme_format.sh", "nvme_boot.sh")
NVME_FILES = (NVME_UNIT_PATH, NVME_SETTINGS_FILE, *(f"{NVME_LIB_DIR}/{name}" for name in NVME_SCRIPTS))
# udev's by-id names that are not model_serial: WWN/EUI/UUID forms, and partitions.
_NOT_MODEL_SERIAL = re.compile(r"^nvme-(eui|nvme|uuid)\.|-part\d+$")

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def decode_octal(text: str) -> str:
    """Undo the `\\040`-style escapes of /proc/swaps, /proc/self/mounts and fstab."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def is_hostkit_swap_path(path: str) -> bool:
    name = posixpath.basename(path)
    return name in (SWAP_FILE_NAME, SWAP_FILE_NAME + TEMP_SUFFIX)


@dataclass(frozen=True)
class SwapArea:
    """One line of /proc/swaps. Sizes there are KiB; here bytes."""

    path: str
    kind: str  # "file" or "partition"
    size_bytes: int
    used_bytes: int
    priority: int


@dataclass(frozen=True)
class BlockDevice:
    name: str
    path: str
    type: str  # disk, part, lvm, crypt, loop, rom...
    tran: str | None
    fstype: str | None
    uuid: str | None
    size_bytes: int
    mountpoints: tuple[str, ...]
    on_nvme: bool  # the device or one of its ancestors is an NVMe disk
    children: tuple[str, ...] = ()  # paths of direct children


@dataclass(frozen=True)
class Filesystem:
    """A mounted local filesystem (`df -l`)."""

    source: str
    fstype: str
    size_bytes: int
    avail_bytes: int
    mountpoint: str
    on_nvme: bool


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mounts: every mount, local or not, without a statfs call
    (which can hang on a dead network filesystem)."""

    source: str
    mountpoint: str
    fstype: str


@dataclass(frozen=True)
class FstabEntry:
    spec: str
    file: str
    vfstype: str
    options: tuple[str, ...]
    freq: int
    passno: int
    line_no: int

    def option(self, name: str) -> str | None:
        """Value of `name=value`, "" for a bare flag, None when absent (last one wins)."""
        found = None
        for opt in self.options:
            key, sep, value = opt.partition("=")
            if key == name:
                found = value if sep else ""
        return found


@dataclass(frozen=True)
class DeviceSignatures:
    """What `wipefs` and `blkid -p` found on a whole device. A device is blank only when
    it exists, neither tool found anything and it has no partitions."""

    device: str
    present: bool
    probed: bool  # False when the device could not be read, or wipefs failed or is missing
    signatures: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    real_path: str = ""  # the device node a /dev/disk/by-* link points to
    uuid: str | None = None  # filesystem UUID, when blkid found a filesystem
    label: str | None = None  # filesystem label, when blkid found one

    @property
    def blank(self) -> bool:
        return self.present and self.probed and not self.signatures and not self.partitions

    def describe(self) -> str:
        if not self.present:
            return f"{self.device} does not exist"
        if not self.probed:
            return f"{self.device} could not be checked for signatures (unreadable, or wipefs missing or failing)"
        found = list(self.signatures) + [f"partition {p}" for p in self.partitions]
        return f"{self.device} carries " + (", ".join(found) if found else "nothing")


@dataclass(frozen=True)
class FileStat:
    path: str
    kind: str  # stat %F: "regular file", "directory", "symbolic link"...
    size_bytes: int
    mode: int  # permission bits, e.g. 0o600
    uid: int
    gid: int
    allocated_bytes: int
    swap_signature: bool  # blkid -p says TYPE=swap
    selinux_type: str | None = None  # the type of its SELinux label; None where SELinux is off

    @property
    def is_regular(self) -> bool:
        return self.kind in ("regular file", "regular empty file")

    @property
    def sparse(self) -> bool:
        return self.allocated_bytes < self.size_bytes


@dataclass(frozen=True)
class DirInfo:
    """Where a directory named by the profile would live: its nearest existing ancestor,
    that ancestor's mount point and statfs type."""

    path: str
    existing: str
    mountpoint: str
    statfs_type: str

    @property
    def exists(self) -> bool:
        return self.existing == self.path


@dataclass(frozen=True)
class StorageInfo:
    swaps: tuple[SwapArea, ...] = ()
    block_devices: tuple[BlockDevice, ...] = ()
    filesystems: tuple[Filesystem, ...] = ()
    mounts: tuple[Mount, ...] = ()
    fstab: tuple[FstabEntry, ...] = ()
    devices: dict[str, DeviceSignatures] = field(default_factory=dict)
    files: dict[str, FileStat] = field(default_factory=dict)
    dirs: dict[str, DirInfo] = field(default_factory=dict)
    lsblk_without_path: bool = False  # util-linux < 2.33: paths derived from kernel names
    by_id: dict[str, str] = field(default_factory=dict)  # /dev/disk/by-id/nvme-* link -> the device it names
    nvme_unit_sha256: dict[str, str] = field(default_factory=dict)  # of NVME_FILES present
    nvme_unit_enabled: bool = False

    def model_serial_link(self, device: str) -> str | None:
        """The /dev/disk/by-id link that names `device` by model and serial. Where udev also
        made one with the namespace id appended (`..._1`, systemd 253 and later), that one:
        the plain name is ambiguous on a disk of several namespaces."""
        links = sorted(link for link, target in self.by_id.items()
                       if target == device and not _NOT_MODEL_SERIAL.search(posixpath.basename(link)))
        with_nsid = [link for link in links if re.sub(r"_\d+$", "", link) in links and link != re.sub(r"_\d+$", "", link)]
        return (with_nsid or links or [None])[0]

    def swap_area(self, path: str) -> SwapArea | None:
        return next((s for s in self.swaps if s.path == path), None)

    def filesystem_at(self, mountpoint: str) -> Filesystem | None:
        return next((f for f in self.filesystems if f.mountpoint == mountpoint), None)

    def filesystem_for(self, directory: str) -> Filesystem | None:
        """The mounted filesystem that holds `directory` (it need not exist yet)."""
        info = self.dirs.get(directory)
        if info is not None:
            return self.filesystem_at(info.mountpoint)
        candidates = [f for f in self.filesystems if is_under(directory, f.mountpoint)]
        return max(candidates, key=lambda f: len(f.mountpoint), default=None)

    def mount_for(self, directory: str) -> Mount | None:
        """The mount that holds `directory` (it need not exist yet); the last one mounted
        on a mount point is the one that shows."""
        info = self.dirs.get(directory)
        if info is not None:
            return next((m for m in reversed(self.mounts) if m.mountpoint == info.mountpoint), None)
        candidates = [m for m in self.mounts if is_under(directory, m.mountpoint)]
        longest = max((len(m.mountpoint) for m in candidates), default=-1)
        return next((m for m in reversed(candidates) if len(m.mountpoint) == longest), None)

    def fstype_for(self, directory: str) -> str | None:
        """Filesystem type at `directory`: from the mount table, else from statfs."""
        mount = self.mount_for(directory)
        if mount is not None:
            return mount.fstype
        info = self.dirs.get(directory)
        return _STATFS_NAMES.get(info.statfs_type, info.statfs_type) if info else None

    def is_mountpoint(self, directory: str) -> bool:
        return self.filesystem_at(directory) is not None

    def fstab_swap_entries(self, path: str) -> list[FstabEntry]:
        return [e for e in self.fstab if e.vfstype == "swap" and e.spec == path]

    def fstab_mount_entries(self, mountpoint: str) -> list[FstabEntry]:
        return [e for e in self.fstab if e.file == mountpoint and e.vfstype != "swap"]

    def block_device(self, path: str) -> BlockDevice | None:
        return next((d for d in self.block_devices if d.path == path), None)

    def device_and_descendants(self, path: str) -> list[BlockDevice]:
        root = self.block_device(path)
        if root is None:
            return []
        found, queue = [], [root]
        while queue:
            dev = queue.pop(0)
            found.append(dev)
            queue.extend(d for d in (self.block_device(c) for c in dev.children) if d is not None)
        return found

    def hostkit_swap_paths(self) -> list[str]:
        """Every hostkit swap file the host knows of: active, in fstab, or on disk."""
        paths = {s.path for s in self.swaps if is_hostkit_swap_path(s.path)}
        paths |= {e.spec for e in self.fstab if e.vfstype == "swap" and is_hostkit_swap_path(e.spec)}
        paths |= {p for p in self.files if is_hostkit_swap_path(p)}
        return sorted(paths)


# statfs names (stat -f -c %T) that differ from the mount table's names.
_STATFS_NAMES = {"ext2/ext3": "ext4", "overlayfs": "overlay", "nfs": "nfs"}


def is_under(path: str, directory: str) -> bool:
    """`path` is `directory` or inside it (by name: no links resolved)."""
    return directory == "/" or path == directory or path.startswith(directory.rstrip("/") + "/")


# Shell builtins where they do the job: on a slow host each process costs a noticeable
# fraction of a second, and the snapshot runs this on every deploy. hk_nvme_namespace
# matches `nvme[0-9]+n[0-9]+`: whole namespaces, not the nvme<N>c<C>n<M> nodes behind
# NVMe multipath. The functions: hostkit/remote/storage_helpers.sh; the section's own
# shell, after them: hostkit/remote/storage.sh.
_SHELL_HELPERS = host_file("storage_helpers.sh").removesuffix("\n")
_COMMAND = host_file("storage.sh")


class StorageFact(FactBase):
    """Swap, block devices, filesystems, fstab, NVMe signatures and hostkit swap files."""

    section = "storage"
    takes_scope = True

    def command(self, scope: SnapshotScope) -> str:
        swap_dir, nvme_mount, nvme_device = scope.swap_dir, scope.nvme_mount, scope.nvme_device
        explicit_dirs = [
            posixpath.normpath(d) for d in (swap_dir, nvme_mount) if isinstance(d, str) and d.startswith("/")
        ]
        settings = {
            "hk_mark": PART_MARKER,
            "hk_lsblk_without_path": LSBLK_WITHOUT_PATH,
            "hk_nvme_device": nvme_device or "",
            "hk_swap_file": SWAP_FILE_NAME,
            "hk_temp_suffix": TEMP_SUFFIX,
            "hk_swap_fstypes": " ".join(SWAP_CAPABLE_FSTYPES),
            "hk_nvme_files": " ".join(NVME_FILES),
            "hk_nvme_wants": NVME_WANTS_LINK,
        }
        lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        lines.append(f"set -- {shlex.join(explicit_dirs)}" if explicit_dirs else "set --")
        return "\n".join((*lines, _SHELL_HELPERS, _COMMAND))

    def process(self, output: list[str]) -> StorageInfo:
        parts = split_on_marker(output, PART_MARKER)
        without_path = LSBLK_WITHOUT_PATH in parts
        block_devices = parse_lsblk("\n".join(parts.get(LSBLK_WITHOUT_PATH if without_path else "lsblk", [])))
        nvme_mounts = {m for d in block_devices if d.on_nvme for m in d.mountpoints}
        return StorageInfo(
            swaps=tuple(parse_proc_swaps(parts.get("swaps", []))),
            block_devices=tuple(block_devices),
            filesystems=tuple(parse_df(parts.get("df", []), nvme_mounts)),
            mounts=tuple(parse_mounts(parts.get("mounts", []))),
            fstab=tuple(parse_fstab(parts.get("fstab", []))),
            devices=parse_devices(parts.get("devices", [])),
            files=parse_files(parts.get("files", [])),
            dirs=parse_dirs(parts.get("dirs", [])),
            lsblk_without_path=without_path,
            by_id=parse_by_id(parts.get("by-id", [])),
            nvme_unit_sha256=parse_sha256(parts.get("nvme-unit", [])),
            nvme_unit_enabled="enabled" in parts.get("nvme-unit", []),
        )


def parse_proc_swaps(lines: list[str]) -> list[SwapArea]:
    areas = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or fields[0] == "Filename" or not fields[2].isdigit():
            continue
        areas.append(
            SwapArea(
                path=decode_octal(fields[0]),
                kind=fields[1],
                size_bytes=int(fields[2]) * 1024,
                used_bytes=int(fields[3]) * 1024,
                priority=int(fields[4]),
            )
        )
    return areas


def _device_path(node: dict[str, Any]) -> str:
    """A device's path where lsblk has no PATH column: device-mapper devices (LVM, LUKS)
    are reached by name under /dev/mapper, the rest by their kernel name."""
    name = node.get("name") or ""
    if node.get("type") in ("lvm", "crypt", "dm", "mpath") or (node.get("kname") or "").startswith("dm-"):
        return f"/dev/mapper/{name}"
    return f"/dev/{node.get('kname') or name}"


def parse_lsblk(text: str) -> list[BlockDevice]:
    """Flatten `lsblk -J` (util-linux >= 2.37 `mountpoints`, older `mountpoint`)."""
    try:
        tree = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return []
    found: list[BlockDevice] = []

    def walk(node: dict[str, Any], parent_on_nvme: bool) -> str:
        name = node.get("name") or ""
        path = node.get("path") or _device_path(node)
        on_nvme = parent_on_nvme or node.get("tran") == "nvme" or (
            node.get("type") == "disk" and name.startswith("nvme")
        )
        mounts = node.get("mountpoints", [node.get("mountpoint")])
        index = len(found)
        found.append(None)  # type: ignore[arg-type]  # keep parents before children
        children = tuple(walk(child, on_nvme) for child in node.get("children", []))
        found[index] = BlockDevice(
            name=name,
            path=path,
            type=node.get("type") or "",
            tran=node.get("tran"),
            fstype=node.get("fstype"),
            uuid=node.get("uuid"),
            size_bytes=to_int(node.get("size"), 0),
            mountpoints=tuple(m for m in mounts if m),
            on_nvme=on_nvme,
            children=children,
        )
        return path

    for node in tree.get("blockdevices", []):
        walk(node, False)
    return found


def parse_df(lines: list[str], nvme_mounts: set[str]) -> list[Filesystem]:
    """`df -B1 -T -P`: 7 columns; the mount point is the rest of the line."""
    filesystems = []
    for line in lines:
        fields = line.split(None, 6)
        if len(fields) < 7 or not fields[2].isdigit():
            continue
        source, fstype, size, _used, avail, _pct, mountpoint = fields
        filesystems.append(
            Filesystem(
                source=source,
                fstype=fstype,
                size_bytes=int(size),
                avail_bytes=to_int(avail, 0),
                mountpoint=mountpoint,
                on_nvme=mountpoint in nvme_mounts,
            )
        )
    return filesystems


def parse_mounts(lines: list[str]) -> list[Mount]:
    mounts = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 3:
            mounts.append(Mount(source=decode_octal(fields[0]), mountpoint=decode_octal(fields[1]), fstype=fields[2]))
    return mounts


def parse_fstab(lines: list[str]) -> list[FstabEntry]:
    entries = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith("#"):
            continue
        options = tuple(fields[3].split(",")) if len(fields) > 3 else ("defaults",)
        entries.append(
            FstabEntry(
                spec=decode_octal(fields[0]),
                file=decode_octal(fields[1]),
                vfstype=fields[2],
                options=options,
                freq=to_int(fields[4], 0) if len(fields) > 4 else 0,
                passno=to_int(fields[5], 0) if len(fields) > 5 else 0,
                line_no=number,
            )
        )
    return entries


def parse_devices(lines: list[str]) -> dict[str, DeviceSignatures]:
    found: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in lines:
        if line.startswith("device "):
            device = line[len("device "):].strip()
            current = found.setdefault(
                device, {"present": False, "probed": False, "sigs": [], "children": [], "real_path": "", "uuid": None,
                         "label": None}
            )
        elif current is None:
            continue
        elif line == "present":
            current["present"] = True
        elif line == "probed":
            current["probed"] = True
        elif line.startswith("wipefs="):
            current["sigs"].append(line[len("wipefs="):].strip())
        elif line.startswith("realpath="):
            current["real_path"] = line[len("realpath="):].strip()
        elif line.startswith("blkid:UUID="):
            current["uuid"] = line[len("blkid:UUID="):].strip()
        elif line.startswith("blkid:LABEL="):
            current["label"] = line[len("blkid:LABEL="):].strip()
        elif line.startswith("blkid:"):
            current["sigs"].append(line[len("blkid:"):].partition("=")[2].strip())
        elif line.startswith("child="):
            current["children"].append(line[len("child="):].strip())
    return {
        device: DeviceSignatures(
            device=device,
            present=data["present"],
            signatures=tuple(dict.fromkeys(s for s in data["sigs"] if s)),
            partitions=tuple(dict.fromkeys(data["children"])),
            probed=data["probed"],
            real_path=data["real_path"] or device,
            uuid=data["uuid"],
            label=data["label"],
        )
        for device, data in found.items()
    }


def parse_files(lines: list[str]) -> dict[str, FileStat]:
    files = {}
    labels = {}
    for line in lines:
        if line.startswith("label\t"):
            _tag, context, path = line.split("\t", 2)
            parts = context.split(":")  # user:role:type:level
            labels[posixpath.normpath(path)] = parts[2] if len(parts) >= 3 else context
            continue
        fields = line.split("\t", 3)
        stat_fields = fields[2].split("|") if len(fields) == 4 else []
        if fields[0] != "file" or len(stat_fields) != 7:
            continue
        sig = fields[1]
        kind, size, mode, uid, gid, blocks, block_size = stat_fields
        path = posixpath.normpath(fields[3])
        files[path] = FileStat(
            path=path,
            kind=kind,
            size_bytes=to_int(size, 0),
            mode=int(mode, 8) if mode.isdigit() else 0,
            uid=to_int(uid, 0),
            gid=to_int(gid, 0),
            allocated_bytes=to_int(blocks, 0) * to_int(block_size, 0),
            swap_signature=sig.strip() == "swap",
        )
    return {path: replace(stat, selinux_type=labels.get(path)) for path, stat in files.items()}


def parse_dirs(lines: list[str]) -> dict[str, DirInfo]:
    dirs = {}
    for line in lines:
        fields = line.split("\t")
        if len(fields) != 5 or fields[0] != "dir":
            continue
        _tag, mountpoint, statfs_type, existing, requested = fields
        dirs[requested] = DirInfo(
            path=requested, existing=existing, mountpoint=mountpoint, statfs_type=statfs_type
        )
    return dirs


def parse_by_id(lines: list[str]) -> dict[str, str]:
    """`NAME TARGET` lines (find -printf '%f %l'): udev's links are relative (../../nvme0n1)."""
    links = {}
    for line in lines:
        name, _, target = line.strip().partition(" ")
        if name and target:
            links[f"/dev/disk/by-id/{name}"] = posixpath.normpath(posixpath.join("/dev/disk/by-id", target))
    return links


def parse_sha256(lines: list[str]) -> dict[str, str]:
    sums = {}
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] == "sha256":
            sums[parts[2].strip()] = parts[1]
    return sums
