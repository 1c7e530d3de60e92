"""From a host snapshot to the facts the planner reads."""

from __future__ import annotations

from hostkit.facts.gpu import GpuDevice, GpuFacts
from hostkit.facts.snapshot import HostSnapshot
from hostkit.facts.vllm_release import InstalledRelease
from hostkit.monitoring.collector import unit_cgroup_path
from hostkit.plan.planning_facts import (
    FilesystemFact,
    GpuMemoryFact,
    GpuProcessFact,
    InstalledVllmFact,
    NvmeDeviceFact,
    PlanningFacts,
    SwapFact,
)
from hostkit.paths import VLLM_UNIT, is_vllm_unit

# Where systemd puts the unit's processes; hostkit's unit is a system service.
VLLM_UNIT_CGROUP = unit_cgroup_path(VLLM_UNIT)


def gpu_fact(gpu: GpuDevice, facts: GpuFacts, unit_cgroup: str = VLLM_UNIT_CGROUP) -> GpuMemoryFact:
    """One GPU's memory, split by each holder's cgroup into the vLLM unit's, each of hostkit's
    other vLLM units' (instances, by unit name) and everyone else's."""
    own, others = facts.holders(gpu, unit_cgroup)
    units: dict[str, int] = {}
    for process in others:
        if is_vllm_unit(process.service):
            units[process.service] = units.get(process.service, 0) + (process.used_mib or 0)
    known = not facts.processes_error
    return GpuMemoryFact(
        index=gpu.index,
        name=gpu.name,
        uuid=gpu.uuid,
        memory_total_mib=gpu.memory_total_mib or 0,
        memory_used_mib=gpu.memory_used_mib or 0,
        numa_node=gpu.numa_node,
        memory_vllm_mib=sum(p.used_mib or 0 for p in own) if known else 0,
        other_units_mib=units if known else {},
        other_processes=[GpuProcessFact(pid=p.pid, name=p.name, used_mib=p.used_mib)
                         for p in others if not is_vllm_unit(p.service)],
        processes_unknown=facts.processes_error,
    )


def driver_version(gpu: GpuFacts) -> str | None:
    """The driver CUDA talks to: NVML's version, else the kernel module's; None: no driver."""
    return gpu.nvml_version or gpu.module_version


def installed_vllm(snap: HostSnapshot) -> InstalledVllmFact | None:
    section = getattr(snap, "vllm_release", None)  # snapshots recorded before the section had none
    return None if section is None else release_fact(section.release)


def instance_releases(snap: HostSnapshot) -> dict[str, InstalledVllmFact]:
    """The release behind each instance's own vllm_command: every reading but the first, the host's."""
    section = getattr(snap, "vllm_release", None)
    readings = list(section.releases.items())[1:] if section is not None else []
    return {command: release_fact(release) for command, release in readings}


def release_fact(release: InstalledRelease) -> InstalledVllmFact:
    return InstalledVllmFact(package=release.package, version=release.version, torch=release.torch,
                             cuda=release.cuda, where=release.interpreter,
                             problem=release.problem if release.version is None else None)


def planning_facts(snap: HostSnapshot) -> PlanningFacts:
    system, storage, gpu = snap.system, snap.storage, snap.gpu
    platform = getattr(snap, "platform", None)  # snapshots recorded before the section had none
    kernel = getattr(snap, "kernel", None)  # None in snapshots built of fewer sections (tests)
    models = getattr(snap, "model_configs", None)  # snapshots recorded before the section had none
    nvme_disks = [d for d in storage.block_devices if d.type == "disk" and d.on_nvme]
    fstab_by_uuid = {e.spec[len("UUID="):]: e.file for e in storage.fstab if e.spec.startswith("UUID=")}
    nvme_devices = []
    for disk in nvme_disks:
        family = storage.device_and_descendants(disk.path)
        probe = storage.devices.get(disk.path)
        if probe is None:
            signatures = [d.fstype for d in family if d.fstype]
        elif not probe.probed:
            signatures = ["unknown (neither wipefs nor blkid could read it)"]
        else:
            signatures = list(probe.signatures + probe.partitions)
        nvme_devices.append(NvmeDeviceFact(
            path=disk.path,
            size_bytes=disk.size_bytes,
            signatures=signatures,
            mountpoints=[m for d in family for m in d.mountpoints],
            fstab_mountpoint=next((fstab_by_uuid[d.uuid] for d in family if d.uuid in fstab_by_uuid), None),
            label=probe.label if probe is not None else None,
            by_id=storage.model_serial_link(disk.path),
        ))
    return PlanningFacts(
        ram_total_bytes=system.mem_total_bytes,
        ram_available_bytes=system.mem_available_bytes,
        cpu_count=system.cpu_count,
        cgroup_version=system.cgroup_version,
        systemd_version=system.systemd_version or None,
        kernel_release=system.kernel or None,
        sysctl_live=dict(kernel.live) if kernel is not None else {},
        filesystems=[
            FilesystemFact(mountpoint=fs.mountpoint, device=fs.source, fstype=fs.fstype, on_nvme=fs.on_nvme,
                           size_bytes=fs.size_bytes, avail_bytes=fs.avail_bytes)
            for fs in storage.filesystems
        ],
        nvme_devices=nvme_devices,
        swaps=[SwapFact(path=s.path, size_bytes=s.size_bytes, used_bytes=s.used_bytes, priority=s.priority)
               for s in storage.swaps],
        gpus=[gpu_fact(g, gpu) for g in gpu.gpus],
        model_configs=dict(models.configs) if models is not None else {},
        model_config_errors=dict(models.errors) if models is not None else {},
        numa_cpus=dict(gpu.numa_cpus),
        platform=None if platform is None else platform.model_copy(
            update={"lsblk_without_path": storage.lsblk_without_path}),
        vllm_installed=installed_vllm(snap),
        vllm_releases=instance_releases(snap),
        driver_version=driver_version(gpu),
    )
