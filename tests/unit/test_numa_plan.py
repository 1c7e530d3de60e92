"""Instances placed on their GPUs' NUMA node (hostkit.plan.numa): the gpu section's numa part,
the plan's note per instance, and the directives in the instance's unit, on the recorded
one-node H200 and a public 2-node 8x H100 topology (fixtures/numa/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hostkit.cli.plan import load_facts_file
from hostkit.desired.vllm_unit import render_unit
from hostkit.facts import gpu as gpu_facts
from hostkit.facts.gpu import GpuFact, parse_gpu_output
from hostkit.facts.platform import PlatformInfo
from hostkit.operations import vllm_service as ops
from hostkit.plan.planner import plan_host
from hostkit.plan.snapshot_facts import gpu_fact
from hostkit.profile.validation import profile_from_data
from tests.unit.test_vllm_unit import local_systemd_version, needs_systemd_analyze

FIXTURES = Path(__file__).parent / "fixtures"
NUMA = FIXTURES / "numa"
TWO_NODES = NUMA / "h100-8gpu-2nodes" / "gpu-section.txt"
ONE_NODE = NUMA / "h200-1gpu" / "gpu-section.txt"
QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
NODE0, NODE1 = "0-47,96-143", "48-95,144-191"


def section(path: Path, edit=lambda line: line):
    return parse_gpu_output([edit(line) for line in path.read_text().splitlines()])


def host_facts(gpus, **update):
    """gpu-a1's recorded facts (fixtures/plan/facts.json) with the GPUs and NUMA nodes of `gpus`."""
    base = load_facts_file(str(FIXTURES / "plan" / "facts.json"))["gpu-a1"]
    return base.model_copy(update={"gpus": [gpu_fact(g, gpus) for g in gpus.gpus], "numa_cpus": gpus.numa_cpus,
                                   **update})


def plan(instances, gpus, **update):
    profile = profile_from_data("gpu-8", {"vllm_model": QWEN7, "vllm_max_model_len": 8192, "vllm_instances": instances})
    return plan_host(profile, host_facts(gpus, **update), host_name="gpu-8")


def numa_notes(host_plan) -> list[str]:
    return [note for note in host_plan.notes if "NUMA" in note]


TP4_PAIR = {"a": {"gpus": [0, 1, 2, 3]}, "b": {"gpus": [4, 5, 6, 7], "vllm_port": 8001}}


# --- the gpu section's numa part ---------------------------------------------------------


def test_the_two_node_section_agrees_with_the_public_topology():
    """Each GPU's node and each node's CPUs as `nvidia-smi topo -m` printed them."""
    facts = section(TWO_NODES)
    rows = [line.split() for line in (NUMA / "h100-8gpu-2nodes" / "topo-m.txt").read_text().splitlines()[1:]]
    assert [(gpu.index, gpu.numa_node) for gpu in facts.gpus] == [(int(row[0][3:]), int(row[-2])) for row in rows]
    assert {int(row[-2]): row[-3] for row in rows} == facts.numa_cpus == {0: NODE0, 1: NODE1}


def test_the_recorded_h200_reports_no_numa_node():
    facts = section(ONE_NODE)
    assert [gpu.numa_node for gpu in facts.gpus] == [-1] and facts.numa_cpus == {0: "0-15"}


def test_a_section_without_the_numa_part_leaves_the_nodes_unread():
    facts = parse_gpu_output((FIXTURES / "gpu" / "h200.txt").read_text().splitlines())
    assert facts.gpus[0].numa_node is None and facts.numa_cpus == {}


@pytest.mark.processes
def test_the_command_reads_numa_node_by_the_bus_id_and_each_nodes_cpulist(tmp_path, monkeypatch):
    """The real command against a stand-in sysfs tree and nvidia-smi: nvidia-smi's upper-case bus id
    with its 8-digit domain finds the device sysfs names in lower case with 4; a device
    without numa_node reads `?`, not a node."""
    pci, nodes = tmp_path / "pci", tmp_path / "node"
    for bus, node in (("0000:18:00.0", "0"), ("0000:9a:00.0", "1")):
        (pci / bus).mkdir(parents=True)
        (pci / bus / "numa_node").write_text(f"{node}\n")
    for node, cpus in ((0, NODE0), (1, NODE1)):
        (nodes / f"node{node}").mkdir(parents=True)
        (nodes / f"node{node}" / "cpulist").write_text(f"{cpus}\n")
    row = "{}, 00000000:{}, NVIDIA H100 80GB HBM3, GPU-{}, 580.159.04, Enabled, 81559, 0, Enabled, 0, [N/A], No, No, Disabled"
    rows = [row.format(0, "18:00.0", 0), row.format(1, "9A:00.0", 1), row.format(2, "C1:00.0", 2)]
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\ncase \"$*\" in *--query-gpu*) printf '%s\\n' " + " ".join(f"'{r}'" for r in rows)
                   + " ;; esac\n")
    smi.chmod(0o755)
    monkeypatch.setattr(gpu_facts, "PCI_DEVICES", str(pci))
    monkeypatch.setattr(gpu_facts, "NUMA_NODES", str(nodes))
    env = {"PATH": f"{smi.parent}:/usr/bin:/bin"}
    result = subprocess.run(["sh", "-c", GpuFact().command()], capture_output=True, text=True, env=env, timeout=60)
    facts = GpuFact().process(result.stdout.splitlines())
    assert [(gpu.index, gpu.numa_node) for gpu in facts.gpus] == [(0, 0), (1, 1), (2, None)]
    assert "gpu 2 ?" in result.stdout.splitlines()
    assert facts.numa_cpus == {0: NODE0, 1: NODE1}


# --- the plan ------------------------------------------------------------------------------


def test_two_tp4_groups_on_a_two_node_host_each_run_on_their_node():
    host_plan = plan(TP4_PAIR, section(TWO_NODES))
    a, b = host_plan.instances.values()
    assert (a.numa_node, a.cpu_affinity, b.numa_node, b.cpu_affinity) == (0, NODE0, 1, NODE1)
    assert numa_notes(host_plan) == [
        f"instance a: NUMA: GPU 0, 1, 2, 3 on node 0: CPUAffinity={NODE0}, NUMAPolicy=preferred NUMAMask=0 "
        "(its memory from node 0 first, from another node when that one runs short)",
        f"instance b: NUMA: GPU 4, 5, 6, 7 on node 1: CPUAffinity={NODE1}, NUMAPolicy=preferred NUMAMask=1 "
        "(its memory from node 1 first, from another node when that one runs short)",
    ]


def test_one_replica_per_gpu_each_on_its_gpus_node():
    replicas = {f"r{i}": {"gpus": [i], "vllm_port": 8000 + i} for i in range(8)}
    host_plan = plan(replicas, section(TWO_NODES))
    assert [(i.numa_node, i.cpu_affinity) for i in host_plan.instances.values()] == [(0, NODE0)] * 4 + [(1, NODE1)] * 4


def test_an_instance_spanning_both_nodes_is_not_placed():
    host_plan = plan({"wide": {"gpus": [2, 3, 4, 5]}, "narrow": {"gpus": [6, 7], "vllm_port": 8001}}, section(TWO_NODES))
    wide, narrow = host_plan.instances.values()
    assert (wide.numa_node, wide.cpu_affinity, narrow.numa_node) == (None, None, 1)
    assert "instance wide: NUMA: not placed: GPUs span nodes 0 and 1" in host_plan.notes
    assert "CPUAffinity" not in render_unit(wide) and "NUMAPolicy" not in render_unit(wide)


def test_the_recorded_one_node_h200_places_nothing():
    host_plan = plan({"a": {"gpus": [0], "vllm_gpu_memory_utilization": 0.4},
                      "b": {"gpus": [0], "vllm_port": 8001, "vllm_gpu_memory_utilization": 0.4}}, section(ONE_NODE))
    assert [i.numa_node for i in host_plan.instances.values()] == [None, None]
    assert numa_notes(host_plan) == [
        f"instance {name}: NUMA: not placed: one node: all CPUs and memory are as near to the GPUs as any"
        for name in ("a", "b")]


def test_numa_node_minus_one_on_a_two_node_host_places_nothing():
    """A GPU whose PCI device has no NUMA node (sysfs -1, as on the recorded H200) on a host of two nodes."""
    unreported = section(TWO_NODES, lambda line: "gpu 5 -1" if line == "gpu 5 1" else line)
    host_plan = plan(TP4_PAIR, unreported)
    a, b = host_plan.instances.values()
    assert (a.numa_node, b.numa_node) == (0, None)
    assert "instance b: NUMA: not placed: numa_node -1: no NUMA affinity reported for GPU 5" in host_plan.notes


def test_nodes_not_read_place_nothing():
    facts = parse_gpu_output((FIXTURES / "gpu" / "8gpu.txt").read_text().splitlines())
    host_plan = plan(TP4_PAIR, facts)
    assert numa_notes(host_plan) == [
        "instance a: NUMA: not placed: the NUMA node of GPU 0, 1, 2, 3 was not read",
        "instance b: NUMA: not placed: the NUMA node of GPU 4, 5, 6, 7 was not read"]


def test_a_container_places_nothing():
    host_plan = plan(TP4_PAIR, section(TWO_NODES), platform=PlatformInfo(container="lxc"))
    assert [i.numa_node for i in host_plan.instances.values()] == [None, None]
    assert "instance a: NUMA: not placed: in a lxc container, whose host's cpuset may leave it none of a node's CPUs" \
        in host_plan.notes


def test_a_node_without_cpus_places_nothing():
    cpuless = section(TWO_NODES, lambda line: line.split(":")[0] + ":" if line.endswith(NODE1) else line)
    host_plan = plan(TP4_PAIR, cpuless)
    assert host_plan.instances["b"].numa_node is None
    assert "instance b: NUMA: not placed: node 1 has no CPUs" in host_plan.notes


def test_vllm_service_is_rendered_as_before_on_a_two_node_host():
    """No instances: vllm.service gets no NUMA directives, the unit of the same host without NUMA facts."""
    profile = profile_from_data("gpu-8", {"vllm_model": QWEN7, "vllm_max_model_len": 8192})
    with_nodes = plan_host(profile, host_facts(section(TWO_NODES)), "gpu-8")
    without = plan_host(profile, host_facts(parse_gpu_output((FIXTURES / "gpu" / "8gpu.txt").read_text().splitlines())),
                        "gpu-8")
    assert render_unit(with_nodes.vllm) == render_unit(without.vllm)
    assert not any("NUMA" in note for note in with_nodes.notes)


# --- the unit --------------------------------------------------------------------------------


def test_a_placed_instances_unit_runs_on_its_node():
    b = plan(TP4_PAIR, section(TWO_NODES)).instances["b"]
    unit = render_unit(b)
    assert "\nLimitMEMLOCK=infinity\n# The CPUs and memory of NUMA node 1, where this instance's GPUs sit" in unit
    assert f"\nCPUAffinity={NODE1}\nNUMAPolicy=preferred\nNUMAMask=1\n" in unit
    old = render_unit(b.model_copy(update={"systemd_version": 239}))
    assert f"\nCPUAffinity={NODE1}\n# NUMAPolicy=preferred: dropped, needs systemd 243 (host: 239)\n" in old


@pytest.mark.processes
@needs_systemd_analyze
def test_systemd_analyze_verify_accepts_a_placed_instances_unit(tmp_path):
    b = plan(TP4_PAIR, section(TWO_NODES)).instances["b"]
    unit = tmp_path / "vllm@b.service"
    unit.write_text(render_unit(b.model_copy(update={"argv": ["/bin/true", *b.argv[1:]],
                                                     "systemd_version": local_systemd_version()})))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    lines = (result.stdout + result.stderr).splitlines()
    assert ops.verify_problems(result.returncode == 0, lines, str(unit)) == [], lines


def test_a_real_one_gpu_h100_reports_numa_node_minus_one_on_one_node():
    """The numa part as the command printed it on a device machine (fixtures/numa/h100-1gpu-device)."""
    recorded = NUMA / "h100-1gpu-device"
    facts = section(recorded / "numa-part.txt")
    assert [(gpu.index, gpu.bus_id, gpu.numa_node) for gpu in facts.gpus] == [(0, "00000000:00:06.0", -1)]
    assert facts.numa_cpus == {0: "0-15"}
    assert "0000:00:06.0 class=0x030200 numa_node=-1" in (recorded / "pci-numa.txt").read_text()
    host_plan = plan({"a": {"gpus": [0], "vllm_gpu_memory_utilization": 0.4},
                      "b": {"gpus": [0], "vllm_port": 8001, "vllm_gpu_memory_utilization": 0.4}}, facts)
    assert numa_notes(host_plan)[0] == "instance a: NUMA: not placed: one node: all CPUs and memory are as near " \
                                       "to the GPUs as any"


def test_a_kernel_without_numa_nodes_places_nothing():
    """No /sys/devices/system/node (a kernel built without NUMA): the GPUs' nodes alone say nothing."""
    nodeless = section(TWO_NODES, lambda line: "" if line.startswith("/sys/devices/system/node/") else line)
    assert nodeless.numa_cpus == {} and nodeless.gpus[0].numa_node == 0
    assert "instance a: NUMA: not placed: the host's NUMA nodes were not read (no /sys/devices/system/node)" \
        in plan(TP4_PAIR, nodeless).notes
