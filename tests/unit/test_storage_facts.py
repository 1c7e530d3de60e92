"""The storage section: its parser on real outputs, and its command run under sh.

Fixtures in fixtures/storage/ are the section's real output on a Debian 12 lab host
(qemu NVMe disk): blank, after prepare_nvme, and after a 1 GiB swap file was made.
rhel8-lsblk-2.32.json is `lsblk -J -b -o NAME,KNAME,TYPE,TRAN,FSTYPE,UUID,MOUNTPOINT,SIZE` as
util-linux 2.32 (RHEL 8) prints it (every value a string or null; no PATH column, which came
in 2.33: 2.32 answers `lsblk: unknown column: PATH`), written from that format for an NVMe
disk with LVM on it, not recorded on a host.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.snapshot import SECTIONS
from hostkit.facts.storage import (
    _SHELL_HELPERS,
    StorageFact,
    decode_octal,
    parse_df,
    parse_files,
    parse_fstab,
    parse_lsblk,
    parse_proc_swaps,
)
from hostkit.operations import swap
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.verify.checks import swap_checks

FIXTURES = Path(__file__).parent / "fixtures" / "storage"
PATH = "/mnt/nvme/vllm-hostkit.swap"
UUID = "4d0717ea-d116-42b8-b639-05b4867a5afb"


def load(name: str):
    return StorageFact().process((FIXTURES / name).read_text().splitlines())


def test_storage_is_a_snapshot_section():
    assert StorageFact in SECTIONS and StorageFact.section == "storage"


def test_blank_nvme_host():
    storage = load("debian12-blank-nvme.txt")
    assert storage.swaps == ()
    nvme = storage.block_device("/dev/nvme0n1")
    assert nvme.on_nvme and nvme.tran == "nvme" and nvme.size_bytes == 8 * 2**30 and nvme.mountpoints == ()
    assert not storage.block_device("/dev/vda").on_nvme
    assert [fs for fs in storage.filesystems if fs.on_nvme] == []
    device = storage.devices["/dev/nvme0n1"]
    assert device.present and device.probed and device.blank and device.signatures == ()
    assert storage.dirs["/mnt/nvme"].existing == "/mnt" and not storage.dirs["/mnt/nvme"].exists
    assert not storage.is_mountpoint("/mnt/nvme")
    assert storage.fstype_for("/mnt/nvme") == "ext4"  # the root filesystem underneath
    assert [e.file for e in storage.fstab] == ["/"]


def test_blank_nvme_host_gets_formatted_and_no_swap_until_mounted():
    storage = load("debian12-blank-nvme.txt")
    assert swap.nvme_steps(NvmePlan(device="/dev/nvme0n1", by_id="/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1", mount="/mnt/nvme"), storage)
    with pytest.raises(swap.SwapRefused, match="nothing is mounted there"):
        swap.swap_steps(SwapPlan(enabled=True, path=PATH, size_bytes=2**30), storage, nvme_mount="/mnt/nvme")


def test_mounted_nvme_host():
    storage = load("debian12-nvme-mounted.txt")
    [fs] = [fs for fs in storage.filesystems if fs.on_nvme]
    assert (fs.mountpoint, fs.source, fs.fstype, fs.on_nvme) == ("/mnt/nvme", "/dev/nvme0n1", "ext4", True)
    assert fs.avail_bytes > 7 * 10**9
    assert storage.devices["/dev/nvme0n1"].signatures == ("ext4",)
    assert not storage.devices["/dev/nvme0n1"].blank
    [entry] = storage.fstab_mount_entries("/mnt/nvme")
    assert entry.spec.startswith("UUID=") and entry.option("nofail") == ""
    assert entry.option("x-systemd.device-timeout") == "5s"


def test_converged_host():
    storage = load("debian12-converged.txt")
    [area] = storage.swaps
    assert (area.path, area.kind, area.size_bytes, area.used_bytes, area.priority) == (
        PATH, "file", 1048572 * 1024, 0, 10)
    file = storage.files[PATH]
    assert (file.size_bytes, file.mode, file.uid, file.gid, file.swap_signature) == (2**30, 0o600, 0, 0, True)
    assert file.is_regular and not file.sparse
    [entry] = storage.fstab_swap_entries(PATH)
    assert entry.options == ("nofail", "pri=10") and entry.option("pri") == "10"
    assert storage.devices["/dev/nvme0n1"].uuid == UUID
    assert storage.block_device("/dev/nvme0n1").uuid == UUID
    assert storage.hostkit_swap_paths() == [PATH]
    plan = SwapPlan(enabled=True, path=PATH, size_bytes=2**30)
    assert swap.swap_steps(plan, storage, nvme_mount="/mnt/nvme") == []
    assert [check.name for check in swap_checks(plan, storage, "lab") if not check.ok] == []
    # Recorded before the boot unit: its filesystem (fstab by UUID, no label) gets the label.
    assert swap.nvme_steps(NvmePlan(device="/dev/nvme0n1", by_id="/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1",
                                    mount="/mnt/nvme"), storage) == ["hk_set_fs_label /dev/nvme0n1 /mnt/nvme vllm-hostkit"]


def test_proc_swaps_with_escaped_names_and_partitions():
    areas = parse_proc_swaps([
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority",
        "/dev/dm-1                               partition\t8388604\t\t1024\t\t-2",
        "/mnt/my\\040disk/vllm-hostkit.swap       file\t\t1048572\t\t0\t\t10",
    ])
    assert [(a.path, a.kind, a.size_bytes, a.used_bytes, a.priority) for a in areas] == [
        ("/dev/dm-1", "partition", 8388604 * 1024, 1024 * 1024, -2),
        ("/mnt/my disk/vllm-hostkit.swap", "file", 1048572 * 1024, 0, 10),
    ]


def test_octal_escapes_are_decoded():
    assert decode_octal("/a\\040b\\011c\\134d\\012") == "/a b\tc\\d\n"


def test_lsblk_partitions_and_lvm_on_nvme_inherit_nvme_and_old_mountpoint_column():
    text = """{"blockdevices": [
      {"name": "nvme1n1", "path": "/dev/nvme1n1", "type": "disk", "tran": "nvme", "fstype": null, "uuid": null,
       "mountpoint": null, "size": "1000204886016",
       "children": [
         {"name": "nvme1n1p1", "path": "/dev/nvme1n1p1", "type": "part", "tran": null, "fstype": "LVM2_member",
          "uuid": "x", "mountpoint": null, "size": "1000203091968",
          "children": [{"name": "vg-data", "path": "/dev/mapper/vg-data", "type": "lvm", "tran": null,
                        "fstype": "xfs", "uuid": "y", "mountpoint": "/data", "size": "1000203091968"}]}]},
      {"name": "sda", "path": "/dev/sda", "type": "disk", "tran": "sata", "fstype": "ext4", "uuid": "z",
       "mountpoint": "/", "size": "512110190592"}]}"""
    devices = {d.path: d for d in parse_lsblk(text)}
    assert devices["/dev/mapper/vg-data"].on_nvme and devices["/dev/mapper/vg-data"].mountpoints == ("/data",)
    assert devices["/dev/nvme1n1"].children == ("/dev/nvme1n1p1",)
    assert devices["/dev/nvme1n1"].size_bytes == 1000204886016
    assert not devices["/dev/sda"].on_nvme
    assert parse_lsblk("") == [] and parse_lsblk("lsblk: unknown column") == []


def test_df_keeps_mount_points_with_spaces_and_marks_nvme():
    fs = parse_df([
        "Filesystem     Type       1-blocks       Used  Available Capacity Mounted on",
        "/dev/nvme0n1p1 ext4     8350298112 1073770496 6830256128      14% /mnt/my disk",
    ], {"/mnt/my disk"})
    assert [(f.mountpoint, f.on_nvme, f.avail_bytes) for f in fs] == [("/mnt/my disk", True, 6830256128)]


def test_fstab_parsing_skips_comments_and_reads_options():
    entries = parse_fstab([
        "# <file system> <mount point> <type> <options> <dump> <pass>",
        "   # indented comment",
        "",
        "UUID=abc /mnt/nvme ext4 defaults,nofail,x-systemd.device-timeout=5s 0 2",
        "/swap\\040file none swap sw",
    ])
    assert [(e.spec, e.file, e.vfstype, e.line_no) for e in entries] == [
        ("UUID=abc", "/mnt/nvme", "ext4", 4), ("/swap file", "none", "swap", 5)]
    assert entries[0].option("x-systemd.device-timeout") == "5s" and entries[0].option("noauto") is None


def test_mount_lookup_uses_the_longest_mount_point_and_statfs_for_the_unknown():
    storage = StorageFact().process([
        "%%hostkit-storage:mounts",
        "/dev/vda / ext4 rw 0 0",
        "server:/export /mnt/shared nfs4 rw 0 0",
        "%%hostkit-storage:dirs",
        "dir\t/mnt/shared\tnfs\t/mnt/shared\t/mnt/shared/swap",
    ])
    assert storage.fstype_for("/mnt/shared/swap") == "nfs4"
    assert storage.fstype_for("/mnt/sharedx") == "ext4"
    assert storage.fstype_for("/var/swap") == "ext4"


def test_devices_that_cannot_be_probed_are_not_blank():
    storage = StorageFact().process([
        "%%hostkit-storage:devices", "device /dev/nvme0n1", "present", "realpath=/dev/nvme0n1",
        "device /dev/nvme9n1",
    ])
    assert not storage.devices["/dev/nvme0n1"].blank and not storage.devices["/dev/nvme0n1"].probed
    assert not storage.devices["/dev/nvme9n1"].present
    assert "could not be checked" in storage.devices["/dev/nvme0n1"].describe()
    assert storage.devices["/dev/nvme9n1"].describe() == "/dev/nvme9n1 does not exist"


class Profile:
    swap_dir = "auto"
    nvme_device = None
    nvme_mount = "/mnt/nvme"


@pytest.mark.processes
def test_command_runs_under_sh_and_finds_hostkit_swap_files(tmp_path):
    """The command itself, on this machine: it must exit 0 and find a planted swap file."""
    if shutil.which("sh") is None:
        pytest.skip("no sh")

    class Here(Profile):
        swap_dir = str(tmp_path / "swapdir")

    (tmp_path / "swapdir").mkdir()
    planted = tmp_path / "swapdir" / "vllm-hostkit.swap"
    planted.write_bytes(b"\0" * 8192)
    planted.chmod(0o640)
    result = subprocess.run(["sh", "-c", StorageFact().command(Here)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    storage = StorageFact().process(result.stdout.splitlines())
    file = storage.files[str(planted)]
    assert (file.size_bytes, file.mode, file.is_regular, file.swap_signature) == (8192, 0o640, True, False)
    assert storage.dirs[str(tmp_path / "swapdir")].exists
    assert storage.mounts and storage.fstype_for(str(tmp_path)) is not None


def test_command_without_profile_uses_defaults():
    command = StorageFact().command(snapshot_scope(None))
    assert "/mnt/nvme" in command and "\nhk_device " not in command


def shell(script: str, tmp_path: Path) -> list[str]:
    result = subprocess.run(["sh", "-c", _SHELL_HELPERS + "\n" + script + "\ntrue"], capture_output=True, text=True,
                            cwd=tmp_path, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.processes
def test_nvme_namespace_names_are_those_of_the_old_regex(tmp_path):
    names = ["nvme0n1", "nvme12n3", "nvme0c0n1", "nvme0n1p1", "nvme0", "nvme", "nvmen1", "nvme0n",
             "nvme0n1n2", "xnvme0n1", "nvme0nx", "sda", "nvme*"]
    script = "".join(f"hk_nvme_namespace '{name}' && echo '{name}'\n" for name in names)
    assert shell(script, tmp_path) == [n for n in names if re.fullmatch(r"nvme[0-9]+n[0-9]+", n)]


@pytest.mark.processes
def test_shell_helpers_keep_a_last_line_without_newline_and_print_once(tmp_path):
    (tmp_path / "fstab").write_text("# comment\n/swap none swap sw 0 0")
    script = """hk_cat fstab; echo marker
hk_prefix child= "$(printf 'a b\\n\\\\x\\n')"; hk_prefix none= ""
for d in /a '/b c' /a '/b c' /b; do hk_first "dir $d" && echo "first $d"; done"""
    assert shell(script, tmp_path) == [
        "# comment", "/swap none swap sw 0 0", "marker", "child=a b", "child=\\x",
        "first /a", "first /b c", "first /b",
    ]


@pytest.mark.processes
def test_util_linux_2_32_without_the_path_column(tmp_path):
    """RHEL 8's lsblk (util-linux 2.32) refuses PATH and MOUNTPOINTS: the command falls back to
    KNAME and the parser derives the paths, /dev/mapper/NAME for device-mapper devices."""
    recorded = FIXTURES / "rhel8-lsblk-2.32.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lsblk = bin_dir / "lsblk"
    lsblk.write_text(
        "#!/bin/sh\n"
        'case "$*" in *PATH*|*MOUNTPOINTS*) echo "lsblk: unknown column: PATH" >&2; exit 1 ;; esac\n'
        f'case "$*" in *-J*) cat {recorded} ;; *) echo nvme0n1; echo nvme0n1p1 ;; esac\n'
    )
    lsblk.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    result = subprocess.run(["sh", "-c", StorageFact().command(snapshot_scope())], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    storage = StorageFact().process(result.stdout.splitlines())
    assert storage.lsblk_without_path
    devices = {d.path: d for d in storage.block_devices}
    assert sorted(devices) == ["/dev/mapper/data-scratch", "/dev/mapper/rhel-root", "/dev/nvme0n1", "/dev/nvme0n1p1",
                               "/dev/sda", "/dev/sda1", "/dev/sda2"]
    scratch = devices["/dev/mapper/data-scratch"]
    assert scratch.on_nvme and scratch.mountpoints == ("/scratch",) and scratch.size_bytes == 3840750739456
    assert devices["/dev/nvme0n1"].children == ("/dev/nvme0n1p1",)
    assert not devices["/dev/mapper/rhel-root"].on_nvme
    # A current lsblk takes the first command: nothing is derived.
    assert not load("debian12-converged.txt").lsblk_without_path


def test_selinux_labels_of_swap_files_are_read_where_selinux_is_on():
    lines = [
        f"file\tswap\tregular file|1073741824|600|0|0|2097152|512\t{PATH}",
        f"label\tsystem_u:object_r:unlabeled_t:s0\t{PATH}",
        "file\tswap\tregular file|1073741824|600|0|0|2097152|512\t/data/vllm-hostkit.swap",
    ]
    files = parse_files(lines)
    assert files[PATH].selinux_type == "unlabeled_t"
    assert files["/data/vllm-hostkit.swap"].selinux_type is None  # no label line: SELinux off
