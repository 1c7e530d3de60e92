"""From a host snapshot to the facts the planner reads."""

from __future__ import annotations

from collections.abc import Sequence

from hostkit.facts.snapshot import HostSnapshot, snapshot
from hostkit.planning_facts import FilesystemFact, GpuFact, NvmeDeviceFact, PlanningFacts, SwapFact


def planning_facts(snap: HostSnapshot) -> PlanningFacts:
    system, storage, gpu = snap.system, snap.storage, snap.gpu
    platform = getattr(snap, "platform", None)  # snapshots recorded before the section had none
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
        ))
    return PlanningFacts(
        ram_total_bytes=system.mem_total_bytes,
        ram_available_bytes=system.mem_available_bytes,
        cpu_count=system.cpu_count,
        cgroup_version=system.cgroup_version,
        systemd_version=system.systemd_version or None,
        filesystems=[
            FilesystemFact(mountpoint=fs.mountpoint, device=fs.source, fstype=fs.fstype, on_nvme=fs.on_nvme,
                           size_bytes=fs.size_bytes, avail_bytes=fs.avail_bytes)
            for fs in storage.filesystems
        ],
        nvme_devices=nvme_devices,
        swaps=[SwapFact(path=s.path, size_bytes=s.size_bytes, used_bytes=s.used_bytes, priority=s.priority)
               for s in storage.swaps],
        gpus=[GpuFact(index=g.index, name=g.name, memory_total_mib=g.memory_total_mib or 0,
                      memory_used_mib=g.memory_used_mib or 0) for g in gpu.gpus],
        platform=None if platform is None else platform.model_copy(
            update={"lsblk_without_path": storage.lsblk_without_path}),
    )


def gather_planning_facts(inventory_path: str, limit: Sequence[str] | None = None) -> dict[str, PlanningFacts]:
    """Connect to each host, take one snapshot, and return its planning facts."""
    from hostkit.fleet import connected_hosts
    from hostkit.profile import load_inventory, validate_inventory

    profiles = validate_inventory(load_inventory(inventory_path, limit=limit))
    with connected_hosts(inventory_path, limit) as hosts:
        return {h.name: planning_facts(snapshot(h, profiles[h.name])) for h in hosts}
