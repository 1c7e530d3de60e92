"""The kernel tuning hostkit wants, from a KernelPlan: sysctl values, the sysctl file and the THP
unit as rendered, and what on the host stands in their way. Pure: no host access; the kernel
operations (hostkit.operations.kernel) apply it and `hostkit verify` checks it.

A sysctl setting elsewhere conflicts with hostkit's when systemd-sysctl would apply it after
hostkit's file (hostkit.paths.SYSCTL_FILE) at boot, so that it wins, and it sets a different
value. That is:

- it sits in a sysctl.d file that systemd-sysctl reads (a file in /etc/sysctl.d masks the
  same name in /run/sysctl.d, /usr/local/lib/sysctl.d and /usr/lib/sysctl.d, so a masked
  file never counts) and whose name sorts after 99-zz-vllm-hostkit.conf;
- it names a key hostkit sets, explicitly: systemd-sysctl never lets a glob override a key
  that a file sets by name;
- its value differs from hostkit's, compared with whitespace squeezed.

A setting in a file that sorts before hostkit's is overridden at boot and is no conflict,
whatever its value; one that repeats hostkit's value changes nothing. /etc/sysctl.conf is
read at boot only through a sysctl.d link to it: Debian 12's /etc/sysctl.d/99-sysctl.conf ->
../sysctl.conf, which sorts before hostkit's file; Debian 13 has neither the link nor, on a
fresh install, the file (see hostkit/facts/kernel.py). So /etc/sysctl.conf never wins at
boot. procps `sysctl --system` applies it after every sysctl.d file, though, so a different
value there is reported as a warning.

A `transparent_hugepage=` on the kernel command line that differs from thp_enabled is
refused: the boot loader and hostkit would each claim the setting.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from hostkit import templates
from hostkit.facts.kernel import (
    THP_DIR,
    THP_WANTED_BY,
    KernelState,
    SysctlAssignment,
    SysctlFile,
    is_glob,
    squeeze,
    sysctl_key,
    sysctl_path,
)
from hostkit.paths import SYSCTL_FILE, VLLM_UNIT
from hostkit.plan.plans import KernelPlan

THP_CHOICES = {
    "enabled": ("always", "madvise", "never"),
    "defrag": ("always", "defer", "defer+madvise", "madvise", "never"),
}
SYSCTL_CONFLICT_MODES = ("error", "warn")


def wanted_sysctl(plan: KernelPlan) -> dict[str, str]:
    """The plan's sysctl values by /proc/sys path, squeezed. Bad input raises ValueError."""
    if plan.sysctl_conflicts not in SYSCTL_CONFLICT_MODES:
        raise ValueError(f"sysctl_conflicts must be one of {SYSCTL_CONFLICT_MODES}, not {plan.sysctl_conflicts!r}")
    wanted: dict[str, str] = {}
    for key, value in plan.sysctl.items():
        path = sysctl_path(key)
        parts = path.split("/")
        if not key.strip() or is_glob(key) or any(c.isspace() or c in "=#;" for c in key) or "" in parts \
                or ".." in parts or key.startswith("-"):
            raise ValueError(f"sysctl key {key!r} is not a plain sysctl name such as vm.swappiness")
        if "\n" in str(value) or not squeeze(str(value)):
            raise ValueError(f"sysctl {key}: the value must be a non-empty single line, not {value!r}")
        value = squeeze(str(value))
        if path in wanted:
            raise ValueError(f"sysctl {key} is set twice (two spellings of {sysctl_key(path)})")
        wanted[path] = value
    return wanted


def wanted_thp(plan: KernelPlan) -> dict[str, str]:
    """THP sysfs file name -> wanted value; files the plan leaves alone are absent."""
    wanted = {name: value for name, value in (("enabled", plan.thp_enabled), ("defrag", plan.thp_defrag))
              if value is not None}
    for name, value in wanted.items():
        if value not in THP_CHOICES[name]:
            raise ValueError(f"thp_{name} must be one of {', '.join(THP_CHOICES[name])}, not {value!r}")
    return wanted


def _render(template: str, **context: Any) -> str:
    return templates().get_template(template).render(**context)


def render_sysctl_file(plan: KernelPlan) -> str:
    settings = sorted((key.strip(), squeeze(str(value))) for key, value in plan.sysctl.items())
    return _render("sysctl.conf.j2", settings=settings)


def render_thp_unit(plan: KernelPlan) -> str:
    return _render(
        "vllm-hostkit-thp.service.j2",
        settings=sorted(wanted_thp(plan).items(), key=lambda item: item[0] != "enabled"),
        thp_dir=THP_DIR,
        wanted_by=THP_WANTED_BY,
        vllm_unit=VLLM_UNIT,
    )


@dataclass(frozen=True)
class SysctlOverride:
    """A setting outside hostkit's file that would replace hostkit's value."""

    file: SysctlFile
    assignment: SysctlAssignment
    wanted: str
    when: str  # "at boot" or "on `sysctl --system`"

    def __str__(self) -> str:
        return (
            f"{self.file.describe()}:{self.assignment.line} sets {sysctl_key(self.assignment.key)} = "
            f"{self.assignment.value} (hostkit wants {self.wanted}); it would win over "
            f"{SYSCTL_FILE} {self.when}"
        )


def _overrides(sysctl_file: SysctlFile, wanted: dict[str, str], when: str) -> list[SysctlOverride]:
    return [
        SysctlOverride(sysctl_file, assignment, wanted[assignment.key], when)
        for assignment in sysctl_file.assignments
        if assignment.value is not None and not is_glob(assignment.key)
        and assignment.key in wanted and assignment.value != wanted[assignment.key]
    ]


def sysctl_conflicts(state: KernelState, plan: KernelPlan) -> list[SysctlOverride]:
    """Settings that would replace hostkit's values at boot (the rule is in the module docstring)."""
    wanted = wanted_sysctl(plan)
    ours = posixpath.basename(SYSCTL_FILE)
    conflicts: list[SysctlOverride] = []
    for sysctl_file in state.boot_sysctl_files():
        if sysctl_file.name > ours:
            conflicts.extend(_overrides(sysctl_file, wanted, "at boot"))
    return conflicts


def sysctl_conf_overrides(state: KernelState, plan: KernelPlan) -> list[SysctlOverride]:
    """/etc/sysctl.conf settings that procps `sysctl --system` would apply after hostkit's file."""
    if state.sysctl_conf is None:
        return []
    return _overrides(state.sysctl_conf, wanted_sysctl(plan), "on `sysctl --system`")


def thp_cmdline_setting(kernel_cmdline: str) -> str | None:
    """The kernel's `transparent_hugepage=` boot argument (the last one counts), if any."""
    found = None
    for word in kernel_cmdline.split():
        name, sep, value = word.partition("=")
        if sep and name == "transparent_hugepage":
            found = value
    return found


def thp_refusals(state: KernelState, plan: KernelPlan, kernel_cmdline: str) -> list[str]:
    """Why the wanted THP settings cannot be applied on this host (a kernel with THP assumed)."""
    refusals = []
    wanted = wanted_thp(plan)
    booted = thp_cmdline_setting(kernel_cmdline)
    if "enabled" in wanted and booted is not None and booted != wanted["enabled"]:
        refusals.append(
            f"the kernel command line sets transparent_hugepage={booted}, but thp_enabled is "
            f"{wanted['enabled']}: the boot loader and hostkit would both claim this setting. "
            f"Set thp_enabled: {booted}, or remove transparent_hugepage= from the boot loader "
            "configuration (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub) and reboot."
        )
    for name, value in wanted.items():
        setting = state.thp_enabled if name == "enabled" else state.thp_defrag
        if setting is not None and value not in setting.choices:
            refusals.append(
                f"this kernel does not offer {value!r} in {THP_DIR}/{name} "
                f"(it offers: {', '.join(setting.choices)})"
            )
    return refusals
