"""What the planner needs to know about a host, as plain JSON-serialisable data.

Gathered from a host snapshot (hostkit.plan.snapshot_facts) or loaded from a recorded file
(`hostkit plan --facts FILE`, a JSON object {host name: PlanningFacts}).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hostkit.facts.platform import PlatformInfo
from hostkit.paths import VLLM_UNIT


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FilesystemFact(_Facts):
    mountpoint: str
    device: str
    fstype: str
    on_nvme: bool
    size_bytes: int
    avail_bytes: int


class NvmeDeviceFact(_Facts):
    path: str  # e.g. /dev/nvme0n1
    size_bytes: int
    signatures: list[str] = Field(default_factory=list)  # filesystem/partition-table types; empty = blank
    mountpoints: list[str] = Field(default_factory=list)  # of the device and its partitions
    # Where /etc/fstab mounts this device's filesystem (by UUID), mounted now or not.
    fstab_mountpoint: str | None = None
    label: str | None = None  # its filesystem's label
    by_id: str | None = None  # its /dev/disk/by-id link by model and serial; None: udev made none

    @property
    def is_blank(self) -> bool:
        return not self.signatures and not self.mountpoints


class SwapFact(_Facts):
    path: str
    size_bytes: int
    used_bytes: int
    priority: int


class GpuProcessFact(_Facts):
    """A process holding memory on this GPU that runs in none of hostkit's vLLM units."""

    pid: int
    name: str  # "" when the host's /proc does not show the pid
    used_mib: int | None


class GpuMemoryFact(_Facts):
    index: int
    name: str
    uuid: str = ""  # as nvidia-smi prints it (GPU-...); "" in facts recorded before it was kept
    memory_total_mib: int
    memory_used_mib: int
    # Its PCI device's NUMA node (sysfs numa_node): -1 where the platform reports none, None
    # where it was not read.
    numa_node: int | None = None
    # The vLLM unit this GPU is seen by: vllm.service, or an instance's (seen_by).
    unit: str = VLLM_UNIT
    # Held by processes in that unit's cgroup: a serving vLLM's own memory, which its restart
    # frees. The rest of memory_used_mib belongs to others.
    memory_vllm_mib: int = 0
    # Held by hostkit's other vLLM units, by unit name: instances (vllm@NAME.service) beside
    # vllm.service, or an instance's siblings and vllm.service. Their restarts are their own.
    other_units_mib: dict[str, int] = Field(default_factory=dict)
    other_processes: list[GpuProcessFact] = Field(default_factory=list)
    # Why the holders are unknown (the compute-process query failed); all used memory then counts as others'.
    processes_unknown: str | None = None

    @property
    def memory_others_mib(self) -> int:
        return max(0, self.memory_used_mib - self.memory_vllm_mib)

    def seen_by(self, unit: str) -> GpuMemoryFact:
        """This GPU as the vLLM unit `unit` sees it: its own memory is what `unit` holds, and
        what vllm.service and the other instances hold is others'."""
        units = {**self.other_units_mib, self.unit: self.memory_vllm_mib}
        own = units.pop(unit, 0)
        return self.model_copy(update={
            "unit": unit, "memory_vllm_mib": own, "other_units_mib": {name: mib for name, mib in units.items() if mib}})


class InstalledVllmFact(_Facts):
    """The vLLM release in the environment that runs it (hostkit.facts.vllm_release)."""

    package: str | None = None
    version: str | None = None  # None: no vLLM distribution found there
    torch: str | None = None
    cuda: str | None = None  # torch.version.cuda; None: a CPU build or no torch
    where: str | None = None  # the interpreter it was read with
    problem: str | None = None  # why it was not read, with no version (the read timed out)


class PlanningFacts(_Facts):
    ram_total_bytes: int
    ram_available_bytes: int
    cpu_count: int
    cgroup_version: int  # 1 or 2
    systemd_version: int | None = None
    kernel_release: str | None = None  # uname -r
    # The live value of each /proc/sys path the snapshot read (the profile's sysctl keys), None: no such key.
    sysctl_live: dict[str, str | None] = Field(default_factory=dict)
    filesystems: list[FilesystemFact] = Field(default_factory=list)
    nvme_devices: list[NvmeDeviceFact] = Field(default_factory=list)
    swaps: list[SwapFact] = Field(default_factory=list)
    gpus: list[GpuMemoryFact] = Field(default_factory=list)
    # The config.json of each local model directory (vllm_model "/..."), by directory: vllm.service's,
    # or each instance's; and why a directory's was not read (no such file, not JSON, timed out).
    model_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    model_config_errors: dict[str, str] = Field(default_factory=dict)
    # Each NUMA node's CPUs, as sysfs cpulist writes them ("0-55,112-167"); empty: not read
    # (no NVIDIA driver, or facts recorded before they were kept). GpuMemoryFact.numa_node
    # says where each GPU sits.
    numa_cpus: dict[int, str] = Field(default_factory=dict)
    # SELinux, tuned, the probes' python, driver upgrades (hostkit.plan.platform_findings reads it).
    platform: PlatformInfo | None = None
    vllm_installed: InstalledVllmFact | None = None  # behind the host's vllm_command
    # Behind each vllm_command of vllm_instances that is not the host's, by command.
    vllm_releases: dict[str, InstalledVllmFact] = Field(default_factory=dict)
    driver_version: str | None = None  # the NVIDIA driver CUDA talks to (NVML's, else the kernel module's)
