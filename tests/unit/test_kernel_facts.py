"""The kernel section: its shell command on a fake tree, and parsing of real lab output."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.kernel import (
    KernelFact,
    SysctlAssignment,
    SysctlFile,
    KernelState,
    parse_sysctl_line,
    parse_thp_setting,
    sysctl_path,
)
from hostkit.facts.snapshot import SECTIONS, parse_sections, MARKER
from hostkit.paths import SYSCTL_FILE

FIXTURES = Path(__file__).parent / "fixtures" / "kernel"


def recorded(name: str) -> KernelState:
    return KernelFact().process((FIXTURES / name).read_text().splitlines())


@pytest.mark.parametrize(
    ("key", "path"),
    [
        ("vm.swappiness", "vm/swappiness"),
        ("vm/swappiness", "vm/swappiness"),
        ("net.ipv4.conf.eth0/100.rp_filter", "net/ipv4/conf/eth0.100/rp_filter"),
        ("net/ipv4/conf/eth0.100/rp_filter", "net/ipv4/conf/eth0.100/rp_filter"),
        (" kernel.printk ", "kernel/printk"),
    ],
)
def test_sysctl_path_follows_the_first_separator(key, path):
    assert sysctl_path(key) == path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vm.swappiness = 10", SysctlAssignment(3, "vm/swappiness", "10")),
        ("  vm.swappiness=10  ", SysctlAssignment(3, "vm/swappiness", "10")),
        ("net.ipv4.tcp_rmem = 4096\t131072  6291456", SysctlAssignment(3, "net/ipv4/tcp_rmem", "4096 131072 6291456")),
        ("-vm.swappiness = 5", SysctlAssignment(3, "vm/swappiness", "5", ignore_failure=True)),
        ("-net.ipv4.conf.lo.rp_filter", SysctlAssignment(3, "net/ipv4/conf/lo/rp_filter", None)),
        ("# vm.swappiness = 1", None),
        ("; vm.swappiness = 1", None),
        ("   ", None),
        ("not an assignment", None),
    ],
)
def test_sysctl_lines_parse_as_systemd_sysctl_reads_them(text, expected):
    assert parse_sysctl_line(3, text) == expected


def test_thp_setting_reads_the_bracketed_choice():
    setting = parse_thp_setting("always defer defer+madvise [madvise] never")
    assert setting.selected == "madvise"
    assert setting.choices == ("always", "defer", "defer+madvise", "madvise", "never")
    assert parse_thp_setting("always madvise never") is None


def test_debian12_reads_etc_sysctl_conf_through_the_procps_link():
    state = recorded("debian12.txt")
    by_path = {f.path: f for f in state.sysctl_files}
    assert by_path["/etc/sysctl.d/99-sysctl.conf"].link_target == "/etc/sysctl.conf"
    assert state.reads_sysctl_conf_at_boot()
    assert state.sysctl_conf is not None


def test_debian13_does_not_read_etc_sysctl_conf():
    state = recorded("debian13.txt")
    assert not state.reads_sysctl_conf_at_boot()
    assert "/etc/sysctl.d/99-sysctl.conf" not in {f.path for f in state.sysctl_files}


@pytest.mark.parametrize("name", ["debian12.txt", "debian13.txt"])
def test_a_fresh_lab_host_has_thp_and_no_hostkit_files(name):
    state = recorded(name)
    assert state.thp_supported
    assert state.thp_enabled.selected in state.thp_enabled.choices
    assert "defer+madvise" in state.thp_defrag.choices
    assert state.hostkit_sysctl_text is None
    assert state.thp_unit_text is None
    assert not state.thp_unit_enabled
    assert state.live == {}


def test_boot_order_masks_by_name_then_sorts_by_name():
    files = (
        SysctlFile("/etc/sysctl.d/50-a.conf"),
        SysctlFile("/etc/sysctl.d/99-zz-vllm-hostkit.conf"),
        SysctlFile("/run/sysctl.d/50-a.conf"),
        SysctlFile("/run/sysctl.d/10-b.conf"),
        SysctlFile("/usr/lib/sysctl.d/10-b.conf"),
        SysctlFile("/usr/lib/sysctl.d/zz-c.conf"),
    )
    state = KernelState(sysctl_files=files)
    assert [f.path for f in state.boot_sysctl_files()] == [
        "/run/sysctl.d/10-b.conf",
        "/etc/sysctl.d/50-a.conf",
        "/etc/sysctl.d/99-zz-vllm-hostkit.conf",
        "/usr/lib/sysctl.d/zz-c.conf",
    ]


def test_thp_absent_means_unsupported():
    state = KernelFact().process(["thp.absent"])
    assert not state.thp_supported
    assert state.thp_enabled is None


def test_kernel_is_a_snapshot_section():
    assert KernelFact in SECTIONS
    sections = parse_sections([f"{MARKER} kernel", "thp.absent"])
    assert sections["kernel"].thp_supported is False


# -- the command itself, run by sh against a fake root ---------------------------------------


@pytest.fixture
def fake_root(tmp_path):
    """A tree standing in for /etc, /run, /usr/lib, /proc/sys and /sys of a host."""
    for directory in ("etc/sysctl.d", "run/sysctl.d", "usr/lib/sysctl.d", "etc/systemd/system/basic.target.wants",
                      "proc/sys/vm", "proc/sys/net/ipv4/conf/eth0.100", "sys/kernel/mm/transparent_hugepage"):
        (tmp_path / directory).mkdir(parents=True)
    (tmp_path / "proc/sys/vm/swappiness").write_text("60\n")
    (tmp_path / "proc/sys/net/ipv4/tcp_rmem").write_text("4096\t131072\t6291456\n")
    (tmp_path / "proc/sys/net/ipv4/conf/eth0.100/rp_filter").write_text("2\n")
    thp = tmp_path / "sys/kernel/mm/transparent_hugepage"
    (thp / "enabled").write_text("always [madvise] never\n")
    (thp / "defrag").write_text("always defer defer+madvise [madvise] never\n")
    return tmp_path


def run_command_in(root: Path) -> list[str]:
    command = re.sub(r"(?<![\w/.])/(etc|run|usr|lib|proc|sys)/", f"{root}/\\1/", KernelFact().command(snapshot_scope()))
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert result.stderr == ""
    return [line.replace(str(root), "") for line in result.stdout.splitlines()]


@pytest.mark.processes
def test_command_reads_live_values_for_the_keys_of_hostkits_file(fake_root):
    (fake_root / SYSCTL_FILE.lstrip("/")).write_text(
        "# managed\n"
        "vm.swappiness = 10\n"
        "net.ipv4.tcp_rmem = 4096 131072 6291456\n"
        "-net.ipv4.conf.eth0/100.rp_filter=1\n"
        "vm.no_such_key = 1\n"
    )
    state = KernelFact().process(run_command_in(fake_root))
    assert state.live == {
        "vm/swappiness": "60",
        "net/ipv4/tcp_rmem": "4096 131072 6291456",
        "net/ipv4/conf/eth0.100/rp_filter": "2",
        "vm/no_such_key": None,
    }
    assert state.hostkit_sysctl_text.startswith("# managed\nvm.swappiness = 10\n")


@pytest.mark.processes
def test_command_lists_every_sysctl_file_with_links_and_settings(fake_root):
    (fake_root / "etc/sysctl.conf").write_text("# comment\nvm.swappiness=1\n")
    (fake_root / "etc/sysctl.d/99-sysctl.conf").symlink_to("../sysctl.conf")
    (fake_root / "etc/sysctl.d/README.sysctl").write_text("vm.swappiness = 2\n")
    (fake_root / "usr/lib/sysctl.d/zz-vendor.conf").write_text("\n; note\n  vm.swappiness = 70\n")
    (fake_root / "run/sysctl.d/99-zz-vllm-hostkit.conf").write_text("vm.swappiness = 3\n")
    state = KernelFact().process(run_command_in(fake_root))

    by_path = {f.path: f for f in state.sysctl_files}
    assert set(by_path) == {
        "/etc/sysctl.d/99-sysctl.conf", "/run/sysctl.d/99-zz-vllm-hostkit.conf", "/usr/lib/sysctl.d/zz-vendor.conf",
    }
    assert by_path["/etc/sysctl.d/99-sysctl.conf"].link_target.endswith("/etc/sysctl.conf")
    assert by_path["/usr/lib/sysctl.d/zz-vendor.conf"].assignments == (SysctlAssignment(3, "vm/swappiness", "70"),)
    assert state.sysctl_conf.assignments == (SysctlAssignment(2, "vm/swappiness", "1"),)
    # Only /etc holds hostkit's file: a same-named file elsewhere is someone else's.
    assert state.hostkit_sysctl_text is None


@pytest.mark.processes
def test_command_reads_thp_and_the_installed_unit(fake_root):
    unit = fake_root / "etc/systemd/system/vllm-hostkit-thp.service"
    unit.write_text("[Unit]\n\n  indented = kept\n")
    (fake_root / "etc/systemd/system/basic.target.wants/vllm-hostkit-thp.service").symlink_to(unit)
    state = KernelFact().process(run_command_in(fake_root))
    assert state.thp_supported
    assert state.thp_enabled.selected == "madvise"
    assert state.thp_defrag.selected == "madvise"
    assert state.thp_unit_text == "[Unit]\n\n  indented = kept\n"
    assert state.thp_unit_enabled


@pytest.mark.processes
def test_command_reports_a_kernel_without_thp(fake_root):
    for name in ("enabled", "defrag"):
        (fake_root / "sys/kernel/mm/transparent_hugepage" / name).unlink()
    (fake_root / "sys/kernel/mm/transparent_hugepage").rmdir()
    state = KernelFact().process(run_command_in(fake_root))
    assert not state.thp_supported

