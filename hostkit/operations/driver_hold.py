"""Hold the NVIDIA driver packages (the plan's gpu.hold_driver_packages, profile key
gpu_hold_driver_packages) on apt hosts.

An unattended upgrade of the driver's userspace packages leaves the loaded kernel module at
the old version: CUDA fails with "Driver/library version mismatch" until a reboot. `apt-mark
hold` keeps apt, and unattended-upgrades with it, from upgrading them; the packages are then
upgraded on purpose (`apt-mark unhold`, upgrade, reboot). hostkit never unholds: with the key
off it leaves holds as they are, since it cannot tell its holds from an administrator's.
dnf hosts get a plan warning instead (hostkit.plan.platform_findings): versionlock is a plugin
that may be missing, and exclude= is the administrator's file.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from hostkit.facts.platform import PlatformInfo
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.plan.plans import GpuPlan

# apt-mark waits for the dpkg lock while an upgrade runs; a deadline says so instead of hanging.
APT_MARK_TIMEOUT_S = 300


def hold_command(plan: GpuPlan, platform: PlatformInfo) -> str | None:
    """The command that holds what is not held yet; None when nothing is to be done."""
    if not plan.hold_driver_packages or platform.package_manager != "apt":
        return None
    unheld = [name for name in platform.driver_packages if name not in platform.held_packages]
    if not unheld:
        return None
    names = " ".join(shlex.quote(name) for name in unheld)
    return (f"timeout {APT_MARK_TIMEOUT_S} apt-mark hold {names} >/dev/null"
            f" || {{ echo 'apt-mark hold {names} failed or timed out after {APT_MARK_TIMEOUT_S} s' >&2; exit 1; }}")


@operation()
def hold_driver_packages(plan: GpuPlan, scope: SnapshotScope):
    """
    apt-mark hold the installed NVIDIA driver packages when the plan asks for it.

    + plan: the host plan's GPU part (hold_driver_packages)
    + scope: the host plan's snapshot scope
    """
    command = hold_command(plan, snapshot(host, scope).platform)
    if command is not None:
        mark_changed(host, "platform")
        yield command
