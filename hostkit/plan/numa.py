"""Where an instance of vllm_instances runs: the CPUs and memory of its GPUs' NUMA node. Pure.

Each GPU's PCI device sits on one NUMA node (sysfs numa_node). An instance whose GPUs all
sit on one node N, on a host of several nodes, runs on N's CPUs (CPUAffinity=) and takes
its memory from N first (NUMAPolicy=preferred, NUMAMask=N): the host-side work of the
engine (the tokenizer, the scheduler, pinned buffers for copies to and from its GPUs) then
stays beside them instead of crossing the socket interconnect.

preferred, not bind: under bind a node that runs out of memory OOM-kills the instance while
the other node has memory free (set_mempolicy(2): MPOL_BIND allocates from the given
nodes only; MPOL_PREFERRED falls back to other nodes). systemd.exec(5) (systemd 243 on;
hostkit's hosts have 247 to 257): NUMAPolicy= takes default, preferred, bind, interleave or
local; NUMAMask= the node list, a single node for preferred; CPUAffinity= a list of CPUs or
ranges, sched_setaffinity(2)'s mask.

Nothing is placed where it is not safe or not known to help, and the plan says why: one
node (every CPU is as near as any other), a GPU whose node the platform does not report
(numa_node -1, as in most VMs), GPUs on several nodes, a node without CPUs, and a
container, whose CPUs and memory nodes its host's cpuset may narrow to none of N's (the
unit would then fail to start).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hostkit.plan.planning_facts import GpuMemoryFact

# A cpulist as sysfs writes it and CPUAffinity= reads it: "0-55,112-167".
_CPULIST = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


@dataclass(frozen=True)
class NumaPlacement:
    node: int
    cpus: str  # the node's cpulist


def placement(gpus: list[GpuMemoryFact], numa_cpus: dict[int, str],
              container: str | None) -> tuple[NumaPlacement | None, str]:
    """Where an instance on `gpus` runs (None: left to the kernel), and the plan's note saying why."""
    named = ", ".join(str(gpu.index) for gpu in gpus)
    if container:
        return None, (f"NUMA: not placed: in a {container} container, whose host's cpuset may leave it none of "
                      "a node's CPUs")
    if not gpus:
        return None, "NUMA: not placed: its GPUs are unknown"
    unread = [str(gpu.index) for gpu in gpus if gpu.numa_node is None]
    if unread:
        return None, f"NUMA: not placed: the NUMA node of GPU {', '.join(unread)} was not read"
    if not numa_cpus:
        return None, "NUMA: not placed: the host's NUMA nodes were not read (no /sys/devices/system/node)"
    if len(numa_cpus) == 1:
        return None, "NUMA: not placed: one node: all CPUs and memory are as near to the GPUs as any"
    unreported = [str(gpu.index) for gpu in gpus if gpu.numa_node < 0]
    if unreported:
        return None, f"NUMA: not placed: numa_node -1: no NUMA affinity reported for GPU {', '.join(unreported)}"
    nodes = sorted({gpu.numa_node for gpu in gpus})
    if len(nodes) > 1:
        return None, f"NUMA: not placed: GPUs span nodes {', '.join(map(str, nodes[:-1]))} and {nodes[-1]}"
    node = nodes[0]
    cpus = numa_cpus.get(node, "")
    if not _CPULIST.fullmatch(cpus):
        return None, f"NUMA: not placed: node {node} has no CPUs{f' ({cpus!r})' if cpus else ''}"
    return NumaPlacement(node, cpus), (
        f"NUMA: GPU {named} on node {node}: CPUAffinity={cpus}, NUMAPolicy=preferred NUMAMask={node} "
        f"(its memory from node {node} first, from another node when that one runs short)")
