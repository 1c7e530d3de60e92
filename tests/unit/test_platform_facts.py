"""The platform section's script, run here under sh on recorded file trees with the host tools
replaced by scripts that print documented output, and its parser."""

from __future__ import annotations

import pytest

import shutil
import subprocess
from pathlib import Path

from hostkit.facts.platform import PlatformFact, PlatformInfo, parse_tuned_conf

FIXTURES = Path(__file__).parent / "fixtures" / "platform"
# What the script needs from the host besides the tools each test stands in for.
BASE_TOOLS = ("sed", "awk", "tr", "cat")


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def run_script(tmp_path: Path, tools: dict[str, str]) -> PlatformInfo:
    """The platform script with PATH holding only BASE_TOOLS and `tools` ({name: sh body}),
    reading its files under tmp_path/root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in BASE_TOOLS:
        (bin_dir / name).symlink_to(shutil.which(name))
    for name, body in tools.items():
        tool(bin_dir, name, body)
    result = subprocess.run(["/bin/sh", "-c", PlatformFact().command()], capture_output=True, text=True, timeout=30,
                            env={"PATH": str(bin_dir), "HK_PLATFORM_ROOT": str(tmp_path / "root")}, check=True)
    return PlatformFact().process(result.stdout.splitlines())


def put(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


@pytest.mark.processes
def test_ubuntu_with_unattended_upgrades_leaves_the_driver_unprotected(tmp_path):
    dump = (FIXTURES / "ubuntu-24.04-apt-config-dump.txt").read_text()
    put(tmp_path / "root", "/var/lib/dpkg/status", (FIXTURES / "ubuntu-24.04-dpkg-status").read_text())
    info = run_script(tmp_path, {
        "python3": "exit 0",
        "apt-config": f"cat <<'EOF'\n{dump}EOF",
        "unattended-upgrade": "exit 0",
        "systemctl": 'case "$1" in is-enabled) echo enabled ;; esac',
    })
    assert info.selinux == "disabled" and info.tuned_profiles is None
    assert info.python == str(tmp_path / "bin" / "python3")
    assert info.package_manager == "apt" and info.auto_upgrades
    assert "nvidia-driver-535" not in info.driver_packages and "bash" not in info.driver_packages  # config files only
    assert info.held_packages == ["nvidia-kernel-common-570"]
    assert info.upgrade_exclusions == []
    unprotected = info.unprotected_driver_packages()
    assert "libnvidia-compute-570" in unprotected and "nvidia-kernel-common-570" not in unprotected
    assert len(unprotected) == 7


def test_unattended_upgrades_off_or_blacklisting_the_driver_protects_it(tmp_path):
    packages = [f"package {name} install" for name in ("libnvidia-compute-570", "nvidia-driver-570")]
    common = ["%%hostkit-platform:packages", "manager apt", *packages, "auto-upgrader unattended-upgrades",
              "timer apt-daily-upgrade.timer enabled"]
    off = PlatformFact().process(common + ["config APT::Periodic::Unattended-Upgrade 0"])
    assert not off.auto_upgrades and off.unprotected_driver_packages() == []
    timer_off = PlatformFact().process([*common[:-1], "timer apt-daily-upgrade.timer disabled",
                                        "config APT::Periodic::Unattended-Upgrade 1"])
    assert not timer_off.auto_upgrades
    listed = PlatformFact().process(common + ["config APT::Periodic::Unattended-Upgrade 1",
                                              "blocklist nvidia-", "blocklist libnvidia-",
                                              "blocklist linux-modules-nvidia-"])
    assert listed.auto_upgrades and listed.unprotected_driver_packages() == []


@pytest.mark.processes
def test_rhel8_platform_python_selinux_enforcing_and_a_no_thp_tuned_profile(tmp_path):
    root = tmp_path / "root"
    put(root, "/sys/fs/selinux/enforce", "1\n")
    put(root, "/usr/libexec/platform-python", "", 0o755)
    put(root, "/run/tuned/tuned.pid", "812\n")
    (root / "proc" / "812").mkdir(parents=True)
    put(root, "/etc/tuned/active_profile", "no-thp\n")
    put(root, "/etc/tuned/no-thp/tuned.conf", (FIXTURES / "tuned-no-thp.conf").read_text())
    for name in ("virtual-guest", "throughput-performance"):
        put(root, f"/usr/lib/tuned/{name}/tuned.conf", (FIXTURES / f"tuned-{name}.conf").read_text())
    put(root, "/etc/dnf/automatic.conf", "[commands]\nupgrade_type = default\napply_updates = no\n")
    put(root, "/etc/dnf/dnf.conf", "[main]\ngpgcheck=1\nexclude=kmod-nvidia*\n")
    info = run_script(tmp_path, {
        # rpm -qa answers each query with the installed packages its patterns match.
        "rpm": "case \"$*\" in *nvidia*) printf 'package %s install\\n' nvidia-driver kmod-nvidia-latest-dkms "
               "nvidia-driver-cuda-libs ;; *numactl-libs*) echo 'installed numactl-libs' ;; esac",
        "dnf-automatic": "exit 0",
        "systemctl": 'case "$1 $2" in "is-enabled dnf-automatic-install.timer") echo enabled ;; *) echo disabled ;; esac',
    })
    assert info.python == "/usr/libexec/platform-python"  # no python3 on PATH
    assert info.selinux == "enforcing"
    assert info.tuned_profiles == ["no-thp"] and info.tuned_missing == []
    # virtual-guest's swappiness overrides throughput-performance's; no-thp adds THP never.
    assert info.tuned_settings["sysctl.vm.swappiness"] == "30"
    assert info.tuned_settings["vm.transparent_hugepages"] == "never"
    assert info.tuned_settings["sysctl.vm.dirty_background_ratio"] == "10"
    assert info.package_manager == "dnf" and info.auto_upgrades
    assert info.upgrade_exclusions == ["kmod-nvidia*"]
    assert info.unprotected_driver_packages() == ["nvidia-driver", "nvidia-driver-cuda-libs"]
    assert info.runtime_packages == ["numactl-libs"]


@pytest.mark.processes
def test_dnf_automatic_download_only_is_no_automatic_upgrade(tmp_path):
    (tmp_path / "root").mkdir()
    put(tmp_path / "root", "/etc/dnf/automatic.conf", "[commands]\napply_updates = no\n")
    info = run_script(tmp_path, {
        "python3": "exit 0",
        "rpm": "case \"$*\" in *nvidia*) echo 'package nvidia-driver install' ;; esac",
        "dnf-automatic": "exit 0",
        "systemctl": 'case "$1 $2" in "is-enabled dnf-automatic.timer") echo enabled ;; *) echo disabled ;; esac',
    })
    assert info.package_manager == "dnf" and info.driver_packages == ["nvidia-driver"]
    assert not info.auto_upgrades


@pytest.mark.processes
def test_no_python_and_a_missing_tuned_profile(tmp_path):
    root = tmp_path / "root"
    put(root, "/sys/fs/selinux/enforce", "0\n")
    put(root, "/run/tuned/tuned.pid", "4242\n")
    (root / "proc" / "4242").mkdir(parents=True)
    put(root, "/etc/tuned/active_profile", "virtual-guest mine\n")
    put(root, "/usr/lib/tuned/profiles/virtual-guest/tuned.conf", (FIXTURES / "tuned-virtual-guest.conf").read_text())
    info = run_script(tmp_path, {})
    assert info.python is None and info.selinux == "permissive" and info.package_manager is None
    assert info.tuned_profiles == ["virtual-guest", "mine"]
    assert info.tuned_missing == ["throughput-performance", "mine"]
    assert info.tuned_settings["sysctl.vm.swappiness"] == "30"


@pytest.mark.processes
def test_a_stale_tuned_pid_file_is_no_running_tuned(tmp_path):
    root = tmp_path / "root"
    put(root, "/run/tuned/tuned.pid", "4242\n")  # no /proc/4242
    put(root, "/etc/tuned/active_profile", "virtual-guest\n")
    assert run_script(tmp_path, {}).tuned_profiles is None


def test_tuned_section_type_and_later_profiles_win():
    includes, settings = parse_tuned_conf([
        "[main]", "include = a, b", "[my_thp]", "type=vm", "transparent_hugepages = madvise",
        "[sysfs]", "/sys/kernel/mm/transparent_hugepage/defrag=never", "# vm.swappiness=1",
    ])
    assert includes == ["a", "b"]
    assert settings == {"vm.transparent_hugepages": "madvise", "sysfs./sys/kernel/mm/transparent_hugepage/defrag": "never"}
    output = ["%%hostkit-platform:tuned", "active one two",
              "profile one", "| [sysctl]", "| vm.swappiness=1", "profile two", "| [sysctl]", "| vm.swappiness=2"]
    assert PlatformFact().process(output).tuned_settings == {"sysctl.vm.swappiness": "2"}


@pytest.mark.processes
def test_this_host():
    """The script as it runs on a host: here a Debian without SELinux or tuned."""
    result = subprocess.run(["sh", "-c", PlatformFact().command()], capture_output=True, text=True, timeout=60,
                            check=True)
    info = PlatformFact().process(result.stdout.splitlines())
    assert info.python == shutil.which("python3")
    assert info.selinux == ("disabled" if not Path("/sys/fs/selinux/enforce").exists() else info.selinux)
    assert info.package_manager == ("apt" if shutil.which("dpkg-query") else info.package_manager)
