"""Several vLLM servers on one host (vllm_instances): the GPUs each one runs on, the GPUs
they share, each one's part of the host's RAM, and the release behind each one's
vllm_command. Pure; the planner plans each instance as its own server with these."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.plan.host_ram import RamNeed, auto_limit, os_reserve
from hostkit.plan.planning_facts import GpuMemoryFact, InstalledVllmFact, PlanningFacts
from hostkit.plan.plans import SwapPlan
from hostkit.profile.host_profile import HostProfile
from hostkit.profile.instances import key_path
from hostkit.sizes import format_size


def about(instance: str, text: str) -> str:
    """A warning or note of one instance, in the host's list."""
    return f"instance {instance}: {text}"


@dataclass(frozen=True)
class ReleaseReading:
    """The release behind an instance's vllm_command, and why the instance cannot be planned
    on it (None: it can); `host_state`: the host stands in the way (the read timed out)."""

    release: InstalledVllmFact | None
    refusal: str | None = None
    host_state: bool = False


def release_reading(command: str, host_command: str, facts: PlanningFacts) -> ReleaseReading:
    """The host's vllm_command's release is vllm_installed; another command's was read beside it
    (vllm_releases). A release not read leaves the flags unchecked against what runs: refused.
    One read with no vLLM distribution found (a user's own build) is checked no further, as
    vllm.service's is not."""
    found = facts.vllm_installed if command == host_command else facts.vllm_releases.get(command)
    if found is None and command != host_command:
        return ReleaseReading(None, f"the vLLM release behind {command} was not read (facts gathered without it): "
                                    "the flags rendered for it cannot be checked against it")
    if found is not None and found.version is None and found.problem:
        return ReleaseReading(found, f"the vLLM release behind {command} could not be read ({found.problem}): "
                                     "the flags rendered for it cannot be checked against it", host_state=True)
    return ReleaseReading(found)


def _named(wanted: int | str, gpu: GpuMemoryFact) -> bool:
    return wanted == gpu.index if isinstance(wanted, int) else wanted.lower() == gpu.uuid.lower()


def resolve_gpus(wanted: list[int | str] | None, gpus: list[GpuMemoryFact],
                 tp: int) -> tuple[list[GpuMemoryFact], list[int | str]]:
    """The facts of the GPUs `wanted` names by index or UUID (None: the lowest `tp`, as
    vllm.service takes), and the names this host has no GPU for."""
    by_index = sorted(gpus, key=lambda gpu: gpu.index)
    if wanted is None:
        return by_index[:tp], []
    found = {name: next((gpu for gpu in by_index if _named(name, gpu)), None) for name in wanted}
    return [gpu for gpu in found.values() if gpu is not None], [name for name, gpu in found.items() if gpu is None]


def unknown_gpus(instance: str, unknown: list[int | str], gpus: list[GpuMemoryFact]) -> str:
    have = ", ".join(f"{gpu.index} ({gpu.uuid or 'UUID unknown'})" for gpu in sorted(gpus, key=lambda gpu: gpu.index))
    return (f"GPU {', '.join(map(str, unknown))} of vllm_instances {instance!r} is not on this host, "
            f"whose {len(gpus)} GPU(s) are {have}")


def shared_gpus(profiles: dict[str, HostProfile],
                placed: dict[str, list[GpuMemoryFact]]) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """The GPUs in more than one instance, found by the GPU itself, whatever index or UUID
    named it: ({instance: what it shares, in words}, [(key, reason)] for a GPU shared
    without each instance's vllm_gpu_memory_utilization, or with more than all of it)."""
    users: dict[int, list[str]] = {}
    gpu_of: dict[int, GpuMemoryFact] = {}
    for name, gpus in placed.items():
        for gpu in gpus:
            users.setdefault(gpu.index, []).append(name)
            gpu_of[gpu.index] = gpu
    said: dict[str, list[str]] = {}
    refusals = []
    for index, names in users.items():
        if len(names) < 2:
            continue
        gpu = gpu_of[index]
        shares = {name: profiles[name].vllm_gpu_memory_utilization for name in names}
        if None in shares.values() or round(sum(shares.values()), 6) > 1:
            named = " and ".join(f"{name!r} as {_spelled(profiles[name], gpu)}" for name in names)
            given = ", ".join(f"{name} {share if share is not None else 'unset'}" for name, share in shares.items())
            refusals.append((key_path(names[-1], "vllm_gpus"), (
                f"GPU {index} ({gpu.uuid}) is named by vllm_instances {named}: one GPU, shared only when every "
                f"instance on it sets vllm_gpu_memory_utilization, summing to at most 1.0 ({given})")))
            continue
        total = round(sum(shares.values()), 6)
        for name in names:
            others = ", ".join(other for other in names if other != name)
            parts = " + ".join(str(shares[other]) for other in names)
            said.setdefault(name, []).append(f"GPU {index} with {others}: {parts} = {total} of it")
    return said, refusals


def _spelled(profile: HostProfile, gpu: GpuMemoryFact) -> str:
    """How an instance's gpus name `gpu`."""
    return next((repr(wanted) for wanted in profile.vllm_gpus or () if _named(wanted, gpu)), f"{gpu.index} (by default)")


@dataclass(frozen=True)
class RamShare:
    """One instance's part of the host's RAM: its automatic MemoryMax, and the fraction of the
    instances' RAM need that is its own (its part of half the swap file)."""

    memory_max: int
    fraction: float
    why: str


def ram_shares(profiles: dict[str, HostProfile], needs: dict[str, RamNeed], ram: int,
               swap: SwapPlan) -> tuple[dict[str, RamShare], str | None]:
    """Each instance's RAM share, and why the instances do not fit the host, or None.

    The OS keeps what vllm_memory_max "auto" keeps for vllm.service (os_reserve); instances
    with a size keep it; one without a limit (null) is counted at its RAM need; the RAM
    left goes to the "auto" ones in proportion to their RAM need (hostkit.plan.host_ram).
    All the limits and the reserve must fit RAM plus the swap file."""
    reserve = os_reserve(ram)
    fixed = {name: p.vllm_memory_max for name, p in profiles.items() if isinstance(p.vllm_memory_max, int)}
    unlimited = {name: needs[name].high for name, p in profiles.items() if p.vllm_memory_max is None}
    auto = [name for name, p in profiles.items() if p.vllm_memory_max == "auto"]
    left = ram - reserve - sum(fixed.values()) - sum(unlimited.values())
    auto_need = sum(needs[name].high for name in auto)
    total_need = sum(need.high for need in needs.values())
    shares = {}
    for name in profiles:
        memory_max = auto_limit(max(0, left) * needs[name].high // auto_need) if name in auto else 0
        others = " and the other instances' own limits" if fixed or unlimited else ""
        why = (f"MemoryMax {format_size(memory_max)}: its part of RAM {format_size(ram)} minus {format_size(reserve)} "
               f"for the OS and sshd{others}, by its RAM need ({format_size(needs[name].high)} of "
               f"{format_size(auto_need)})")
        shares[name] = RamShare(memory_max, needs[name].high / total_need, why)
    limits = {**fixed, **unlimited, **{name: shares[name].memory_max for name in auto}}
    room = ram + (swap.size_bytes if swap.enabled else 0)
    total = sum(limits.values()) + reserve
    if total <= room and (not auto or left > 0):
        return shares, None
    listed = ", ".join(f"{name!r} {format_size(limit)}" + (" (no limit: its RAM need)" if name in unlimited else "")
                       for name, limit in limits.items())
    return shares, (f"the MemoryMax of vllm_instances {listed} and the OS's {format_size(reserve)} make "
                    f"{format_size(total)}, more than RAM {format_size(ram)} + swap "
                    f"{format_size(room - ram)} = {format_size(room)}: lower vllm_memory_max, or set it \"auto\"")
