"""What differs between distributions and bites hostkit: SELinux, the python the probes run,
tuned's active profile, the automatic upgrades of NVIDIA driver packages, and the packages
the vLLM install needs (hostkit.plan.os_packages decides which).

One shell script (hostkit/remote/platform.sh) prints parts between
`%%hostkit-platform:NAME` lines; `process` turns them into a PlatformInfo. tuned profiles
come as their tuned.conf text (each line behind `| `) and are resolved here the way tuned
applies them: included profiles first, then the including profile's own values; of several
active profiles, the later wins.

The container and cgroup parts say whether the host is a container (LXC, systemd-nspawn,
docker...), whose own host then owns swap, sysctl, THP and the disks, and whether the kernel
applies a unit's memory limit there (a container's host may keep the memory controller).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pyinfra.api import FactBase

from hostkit.remote import host_file
from hostkit.facts.parts import split_on_marker

PART_MARKER = "%%hostkit-platform:"
# Packages whose upgrade replaces the driver's userspace library, or its kernel module for
# the next boot: either leaves the running module and NVML at different versions.
DRIVER_PACKAGE = re.compile(
    r"^(nvidia-|libnvidia-|linux-(modules|objects|signatures)-nvidia-|kmod-nvidia|cuda-drivers)"
)


class PlatformInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    selinux: Literal["enforcing", "permissive", "disabled"] = "disabled"
    python: str | None = None  # the interpreter the host-side probes use; None: none found
    tuned_profiles: list[str] | None = None  # active profiles; None: tuned is not running
    # tuned's effective settings as "plugin.option" (e.g. "vm.transparent_hugepages",
    # "sysctl.vm.swappiness"); profiles named but not found on the host are listed apart.
    tuned_settings: dict[str, str] = Field(default_factory=dict)
    tuned_missing: list[str] = Field(default_factory=list)
    package_manager: Literal["apt", "dnf"] | None = None
    driver_packages: list[str] = Field(default_factory=list)  # installed NVIDIA driver packages
    held_packages: list[str] = Field(default_factory=list)  # of those, the ones apt will not upgrade
    auto_upgrades: bool = False  # unattended-upgrades or dnf-automatic runs on a timer
    # Patterns that keep packages out of the automatic upgrades: unattended-upgrades'
    # Package-Blacklist (regular expressions), dnf's versionlock entries and exclude=.
    upgrade_exclusions: list[str] = Field(default_factory=list)
    # util-linux before 2.33 (RHEL 8 has 2.32) has no lsblk PATH column: the storage fact
    # derived device paths from names (hostkit.facts.storage), and says so here.
    lsblk_without_path: bool = False
    # systemd-detect-virt --container's name for the container the host is ("lxc",
    # "systemd-nspawn", "docker"...); None: not a container (a VM or bare metal), or not read.
    container: str | None = None
    # Why the kernel does not apply a unit's memory limit here (systemd accepts MemoryMax= all
    # the same); None: it does, or this was not read.
    memory_limit_unapplied: str | None = None
    # python3 on PATH, resolved (/usr/bin/python3.11): the interpreter of the release venvs.
    python3: str | None = None
    # Installed, of the packages the vLLM install may need (python3.X-venv, libnuma1, numactl-libs).
    runtime_packages: list[str] = Field(default_factory=list)

    def unprotected_driver_packages(self) -> list[str]:
        """Driver packages the automatic upgrades may replace: not held, not excluded."""
        if not self.auto_upgrades:
            return []
        return [name for name in self.driver_packages
                if name not in self.held_packages and not _excluded(name, self.upgrade_exclusions, self.package_manager)]


def _excluded(name: str, patterns: list[str], manager: str | None) -> bool:
    for pattern in patterns:
        if manager == "apt":
            try:
                if re.match(pattern, name):  # unattended-upgrades matches its blacklist with re.match
                    return True
            except re.error:
                continue
        elif any(_glob(word, name) for word in pattern.replace(",", " ").split()):
            return True
    return False


def _glob(pattern: str, name: str) -> bool:
    """dnf's exclude= globs; a versionlock entry (NAME-EPOCH:VERSION-RELEASE.ARCH) names its package."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None or pattern.startswith(name + "-")


def script() -> str:
    return host_file("platform.sh")


class PlatformFact(FactBase):
    """SELinux mode, probe python, tuned profile and settings, driver packages and their upgrades."""

    section = "platform"

    def command(self) -> str:
        return script()

    def process(self, output: list[str]) -> PlatformInfo:
        parts = split_on_marker(output, PART_MARKER)
        return PlatformInfo(
            selinux=_selinux(parts.get("selinux", [])),
            python=next((line.strip() for line in parts.get("python", []) if line.strip()), None),
            **_tuned(parts.get("tuned", [])),
            **_packages(parts.get("packages", [])),
            container=_container(parts.get("container", [])),
            memory_limit_unapplied=_memory_limit_unapplied(parts.get("cgroup")),
        )


def _container(lines: list[str]) -> str | None:
    """`SOURCE NAME` (hostkit/remote/platform.sh); systemd-detect-virt says `none` outside one."""
    words = next((line.split() for line in lines if line.strip()), [])
    name = words[1] if len(words) > 1 else None
    return None if name in (None, "none") else name


def _memory_limit_unapplied(lines: list[str] | None) -> str | None:
    if lines is None:  # an older script, or a recording made before this part
        return None
    controllers = next((line.split()[1:] for line in lines if line.startswith("controllers")), None)
    if controllers is not None:
        if "memory" in controllers:
            return None
        return ("cgroup v2 without the memory controller (/sys/fs/cgroup/cgroup.controllers: "
                f"{' '.join(controllers) or 'empty'}): the container's host did not delegate it")
    mounts = [line.split()[1:] for line in lines if line.startswith("memory-mount ")]
    if not mounts:
        return "no cgroup v1 memory hierarchy is mounted: the kernel has no memory controller to apply it with"
    if all("ro" in words[1].split(",") for words in mounts if len(words) > 1):
        return (f"the cgroup v1 memory hierarchy ({mounts[0][0]}) is mounted read-only, as systemd-nspawn "
                "mounts it on a hybrid-cgroup host: the unit gets no memory cgroup of its own")
    return None


def _selinux(lines: list[str]) -> str:
    value = next((line[len("enforce="):].strip() for line in lines if line.startswith("enforce=")), None)
    return {"1": "enforcing", "0": "permissive"}.get(value or "", "disabled")


def _tuned(lines: list[str]) -> dict:
    active = next((line[len("active"):].split() for line in lines if line.startswith("active")), None)
    if active is None:
        return {}
    profiles: dict[str, list[str]] = {}
    missing: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if line.startswith("profile "):
            current = profiles.setdefault(line[len("profile "):].strip(), [])
        elif line.startswith("missing "):
            missing.append(line[len("missing "):].strip())
        elif line.startswith("|") and current is not None:
            current.append(line[2:] if line.startswith("| ") else line[1:])
    parsed = {name: parse_tuned_conf(text) for name, text in profiles.items()}
    settings: dict[str, str] = {}
    for name in active:
        settings.update(_effective(name, parsed, ()))
    return {"tuned_profiles": active, "tuned_settings": settings, "tuned_missing": missing}


def _effective(name: str, parsed: dict[str, tuple[list[str], dict[str, str]]], seen: tuple[str, ...]) -> dict[str, str]:
    if name in seen or name not in parsed:
        return {}
    includes, own = parsed[name]
    settings: dict[str, str] = {}
    for included in includes:
        settings.update(_effective(included, parsed, (*seen, name)))
    settings.update(own)
    return settings


def parse_tuned_conf(lines: list[str]) -> tuple[list[str], dict[str, str]]:
    """(included profiles, {"plugin.option": value}) of one tuned.conf. A section's plugin is
    its `type=` when it has one, else the section's name."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), {})
        elif current is not None and "=" in line:
            key, _, value = line.partition("=")
            current[key.strip()] = value.strip()
    includes = [word.strip() for word in sections.get("main", {}).get("include", "").split(",") if word.strip()]
    settings = {}
    for section, options in sections.items():
        if section in ("main", "variables"):
            continue
        plugin = options.get("type", section)
        settings.update({f"{plugin}.{key}": value for key, value in options.items() if key != "type"})
    return includes, settings


def _packages(lines: list[str]) -> dict:
    python3 = next((line.split(None, 1)[1].strip() for line in lines if line.startswith("python3 ")), None)
    manager = next((line.split()[1] for line in lines if line.startswith("manager ")), None)
    if manager not in ("apt", "dnf"):
        return {"python3": python3}
    installed, held, exclusions, runtime = [], [], [], []
    auto_upgrader = False
    timers: dict[str, str] = {}
    config: dict[str, str] = {}
    for line in lines:
        words = line.split()
        if words[:1] == ["package"] and len(words) >= 2 and DRIVER_PACKAGE.match(words[1]):
            installed.append(words[1])
            if words[2:3] == ["hold"]:
                held.append(words[1])
        elif words[:1] == ["installed"] and len(words) == 2:
            runtime.append(words[1])
        elif words[:1] == ["auto-upgrader"]:
            auto_upgrader = True
        elif words[:1] == ["timer"]:
            timers[words[1] if len(words) > 1 else ""] = words[2] if len(words) > 2 else ""
        elif words[:1] == ["config"] and len(words) >= 2:
            config[words[1]] = words[2] if len(words) > 2 else ""
        elif words[:1] in (["blocklist"], ["versionlock"], ["exclude"]) and len(words) > 1:
            exclusions.append(line.split(None, 1)[1].strip())
    enabled = {name for name, state in timers.items() if state in ("enabled", "enabled-runtime")}
    if manager == "apt":
        # APT::Periodic values are intervals in days: "0" turns the step off.
        periodic = config.get("APT::Periodic::Enable", "1") != "0"
        auto = (auto_upgrader and "apt-daily-upgrade.timer" in enabled and periodic
                and config.get("APT::Periodic::Unattended-Upgrade", "0") != "0")
    else:
        applies = config.get("apply_updates", "no") in ("yes", "true", "1", "on")
        auto = auto_upgrader and ("dnf-automatic-install.timer" in enabled
                                  or ("dnf-automatic.timer" in enabled and applies))
    return {"package_manager": manager, "driver_packages": installed, "held_packages": held,
            "auto_upgrades": auto, "upgrade_exclusions": exclusions, "python3": python3, "runtime_packages": runtime}
