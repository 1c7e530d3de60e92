"""What the host's distribution means for the plan: warnings and notes from its platform facts.

Pure, like the planner that adds these to each host's plan (so `hostkit plan` shows them and
the deploy logs the warnings):
- no python3 on PATH: the probes use RHEL 8's /usr/libexec/platform-python, or cannot run;
- util-linux without lsblk's PATH column (2.32, RHEL 8): device paths derived from names;
- SELinux on: the swap file is labelled swapfile_t, or swapon at boot is denied and the
  `nofail` of its fstab line hides that;
- tuned running a profile that sets THP or a sysctl hostkit sets: tuned applies its values
  after hostkit's early-boot unit and sysctl.d, so the last writer is tuned;
- NVIDIA driver packages that unattended-upgrades or dnf-automatic may upgrade under a
  running driver ("Driver/library version mismatch" until a reboot), and what
  gpu_hold_driver_packages does about it.
"""

from __future__ import annotations

from typing import Any

from hostkit.facts.platform import PlatformInfo
from hostkit.paths import PLATFORM_PYTHON
from hostkit.facts.storage import SWAP_FILE_SELINUX_TYPE

# tuned options (as "plugin.option") that set what hostkit's THP settings set.
TUNED_THP_ENABLED = ("vm.transparent_hugepages", "vm.transparent_hugepage",
                     "sysfs./sys/kernel/mm/transparent_hugepage/enabled")
TUNED_THP_DEFRAG = ("vm.transparent_hugepage.defrag", "sysfs./sys/kernel/mm/transparent_hugepage/defrag")


def tuned_conflicts(platform: PlatformInfo, sysctl: dict[str, str], thp_enabled: str, thp_defrag: str) -> list[str]:
    """One sentence per tuned setting that differs from what hostkit sets."""
    if not platform.tuned_profiles:
        return []
    wanted = {**{f"sysctl.{name}": value for name, value in sysctl.items()},
              **dict.fromkeys(TUNED_THP_ENABLED, thp_enabled), **dict.fromkeys(TUNED_THP_DEFRAG, thp_defrag)}
    profiles = " ".join(platform.tuned_profiles)
    found = []
    for option, want in wanted.items():
        have = platform.tuned_settings.get(option)
        if have is not None and " ".join(have.split()) != " ".join(str(want).split()):
            found.append(f"tuned profile {profiles} sets {option.partition('.')[2]} = {have} (hostkit sets {want}): "
                         "tuned applies it after hostkit's early-boot settings, so tuned's value wins; "
                         "set hostkit's value in a tuned profile of your own or leave it out of hostkit's data")
    return found


def platform_findings(profile: Any, platform: PlatformInfo, swap_enabled: bool,
                      kernel_settings: bool = True) -> tuple[list[str], list[str]]:
    """(warnings, notes) for one host. `kernel_settings` False: hostkit sets no sysctl or THP
    there (a container: its host owns them), so tuned's values are not compared with the profile's."""
    warnings: list[str] = []
    notes: list[str] = []
    if platform.python is None:
        warnings.append(f"no python3 on the host (nor {PLATFORM_PYTHON}): the readiness gate and verify cannot "
                        "probe vLLM; install python3")
    elif platform.python == PLATFORM_PYTHON:
        notes.append(f"python3 is not on PATH: the probes run {PLATFORM_PYTHON} (RHEL 8's own python)")
    if platform.lsblk_without_path:
        notes.append("lsblk has no PATH column (util-linux < 2.33): device paths derived from kernel names, "
                     "/dev/mapper/NAME for LVM and dm-crypt")
    if platform.selinux != "disabled" and swap_enabled:
        notes.append(f"SELinux {platform.selinux}: the swap file gets the {SWAP_FILE_SELINUX_TYPE} label "
                     "(without it swapon at boot is denied, and the fstab line's nofail hides that)")
    if kernel_settings:
        warnings.extend(tuned_conflicts(platform, profile.sysctl, profile.thp_enabled, profile.thp_defrag))
    if platform.tuned_missing:
        warnings.append(f"tuned profile(s) {', '.join(platform.tuned_missing)} not found on the host: "
                        "their settings were not checked against hostkit's")
    warnings.extend(_driver_upgrades(profile, platform, notes))
    return warnings, notes


def _driver_upgrades(profile: Any, platform: PlatformInfo, notes: list[str]) -> list[str]:
    hold = profile.gpu_hold_driver_packages
    if hold and platform.package_manager == "apt" and platform.driver_packages:
        notes.append(f"apt-mark hold on the NVIDIA driver packages: {', '.join(platform.driver_packages)}")
        return []
    unprotected = platform.unprotected_driver_packages()
    if hold and platform.package_manager == "dnf":
        return [f"gpu_hold_driver_packages holds apt packages only; on this dnf host lock "
                f"{', '.join(unprotected or platform.driver_packages) or 'the driver packages'} with "
                "`dnf versionlock add` (python3-dnf-plugin-versionlock) or exclude= in /etc/dnf/dnf.conf"]
    if not unprotected:
        return []
    upgrader = "unattended-upgrades" if platform.package_manager == "apt" else "dnf-automatic"
    fix = ("set gpu_hold_driver_packages: true (apt-mark hold) or add them to Unattended-Upgrade::Package-Blacklist"
           if platform.package_manager == "apt" else "lock them with `dnf versionlock add` or exclude= in dnf.conf")
    return [f"{upgrader} may upgrade the NVIDIA driver packages {', '.join(unprotected)} under the running driver "
            f"(CUDA then fails with 'Driver/library version mismatch' until a reboot): {fix}"]
