"""What several instances on one host may not do together, found before any host is
touched: each issue names the host, the instances and the key. What only the host's facts
tell (an index and a UUID naming one GPU, a GPU the host lacks, host RAM) is the planner's."""

from __future__ import annotations

from hostkit.profile.host_profile import ALLOWED, HostProfile
from hostkit.profile.instances import INSTANCES_KEY, key_path
from hostkit.profile.issues import DataIssue

SHARED_ALLOWED = "vllm_gpu_memory_utilization set in every instance on a shared GPU, summing to at most 1.0"


def instance_issues(host: str, profile: HostProfile) -> list[DataIssue]:
    """The host's instances against each other; and vllm_gpus, which only instances use."""
    found = profile.vllm_instances
    if not found:
        if profile.vllm_gpus is None:
            return []
        return [DataIssue(host, "vllm_gpus", profile.vllm_gpus, f"null without {INSTANCES_KEY}",
                          reason="vllm.service sees every GPU: pinning GPUs is for the instances of vllm_instances")]
    if not profile.vllm_enabled:
        return [DataIssue(host, INSTANCES_KEY, sorted(found), "{} while vllm_enabled is false",
                          reason="vllm_enabled false runs no vLLM")]
    return [*_port_issues(host, found), *_gpu_count_issues(host, found), *_shared_gpu_issues(host, found)]


def _port_issues(host: str, found: dict[str, HostProfile]) -> list[DataIssue]:
    first: dict[int, str] = {}
    issues = []
    for name, instance in found.items():
        other = first.setdefault(instance.vllm_port, name)
        if other != name:
            issues.append(DataIssue(
                host, key_path(name, "vllm_port"), instance.vllm_port, "a port no other instance listens on",
                reason=f"vllm_instances {other!r} and {name!r} both listen on port {instance.vllm_port}"))
    return issues


def _gpu_count_issues(host: str, found: dict[str, HostProfile]) -> list[DataIssue]:
    """Each instance's GPUs named when there are several, and as many as its TP size."""
    issues = []
    for name, instance in found.items():
        gpus, tp = instance.vllm_gpus, instance.vllm_tensor_parallel_size
        if gpus is None and len(found) > 1:
            others = ", ".join(repr(other) for other in found if other != name)
            issues.append(DataIssue(
                host, key_path(name, "vllm_gpus"), None, ALLOWED["vllm_gpus"].removeprefix("null or "),
                reason=f"beside vllm_instances {others}, each instance names its GPUs, so that none takes another's"))
        elif gpus is not None and tp is not None and tp != len(gpus):
            issues.append(DataIssue(
                host, key_path(name, "vllm_tensor_parallel_size"), tp, f"{len(gpus)} (one per GPU of its gpus) or unset",
                reason=f"vllm_instances {name!r} has {len(gpus)} GPUs ({gpus}) and vLLM runs one TP worker on each"))
    return issues


def _shared_gpu_issues(host: str, found: dict[str, HostProfile]) -> list[DataIssue]:
    """GPUs in several instances' gpus: each instance there sets its utilization, and they
    fit the GPU together (vLLM's --gpu-memory-utilization is the fraction of the GPU one
    instance may take, whatever another takes). One issue per set of instances sharing."""
    sharers: dict[int | str, list[str]] = {}
    for name, instance in found.items():
        for gpu in instance.vllm_gpus or ():
            sharers.setdefault(gpu.lower() if isinstance(gpu, str) else gpu, []).append(name)
    shared: dict[tuple[str, ...], list[int | str]] = {}
    for gpu, names in sharers.items():
        if len(names) > 1:
            shared.setdefault(tuple(names), []).append(gpu)
    issues = []
    for names, gpus in shared.items():
        which = f"GPU{'s' if len(gpus) > 1 else ''} {', '.join(map(str, gpus))}"
        shares = {name: found[name].vllm_gpu_memory_utilization for name in names}
        listed = " and ".join(repr(name) for name in names)
        unset = [name for name, share in shares.items() if share is None]
        if unset:
            issues.append(DataIssue(
                host, key_path(unset[0], "vllm_gpu_memory_utilization"), None, SHARED_ALLOWED,
                reason=f"{which} in the gpus of vllm_instances {listed}, and {', '.join(map(repr, unset))} "
                       "sets no vllm_gpu_memory_utilization: vLLM's default would take most of the GPU for each"))
        elif round(sum(shares.values()), 6) > 1:
            total = round(sum(shares.values()), 6)
            issues.append(DataIssue(
                host, key_path(names[-1], "vllm_gpu_memory_utilization"), shares[names[-1]], SHARED_ALLOWED,
                reason=f"{which} shared by vllm_instances "
                       + " and ".join(f"{name!r} ({share})" for name, share in shares.items())
                       + f": {total} of one GPU"))
    return issues
