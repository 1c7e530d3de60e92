"""Two instances sharing one GPU, each told its own memory from its sibling's and an
outsider's by cgroup, on two real runs (fixtures/gpu/h100-two-instances*/, README in each): the
engines' cgroups at /system.slice/vllm@NAME.service, then where systemd puts template instances,
/system.slice/system-vllm.slice/vllm@NAME.service."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.facts.snapshot import HostSnapshotFact
from hostkit.monitoring.collector import system_service_of, unit_cgroup_path
from hostkit.plan.planner import PlanError, plan_host
from hostkit.plan.planning_facts import PlanningFacts
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.profile.validation import profile_from_data

GPU_FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
# Each recording and its outsider's pids: while both serve (5 GiB), then grown (19 GiB).
RECORDINGS = {"h100-two-instances": (1613, 1852), "h100-two-instances-slice": (703, 959)}
ENGINE_MIB = 30214  # each stand-in engine, as nvidia-smi listed it
INSTANCES = {"a": {"vllm_port": 8001, "gpus": [0], "vllm_gpu_memory_utilization": 0.4},
             "b": {"vllm_port": 8002, "gpus": [0], "vllm_gpu_memory_utilization": 0.4}}


@pytest.fixture(params=sorted(RECORDINGS))
def recording(request) -> str:
    return request.param


def facts(recording: str, case: str) -> PlanningFacts:
    snapshot = GPU_FIXTURES / recording / f"snapshot-{case}.txt"
    return planning_facts(HostSnapshotFact().process(snapshot.read_text().splitlines()))


def plan(recording: str, case: str, **data):
    profile = profile_from_data("gpu-host", {"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "swap_enabled": False,
                                             "vllm_instances": INSTANCES, **data})
    return plan_host(profile, facts(recording, case), host_name="gpu-host")


def test_each_instance_units_memory_is_its_own_and_the_outsider_is_a_process(recording):
    serving_outsider, _ = RECORDINGS[recording]
    (gpu,) = facts(recording, "serving").gpus
    assert gpu.memory_vllm_mib == 0  # as vllm.service sees it: no process of its own
    assert gpu.other_units_mib == {"vllm@a.service": ENGINE_MIB, "vllm@b.service": ENGINE_MIB}
    assert [(p.pid, p.used_mib) for p in gpu.other_processes] == [(serving_outsider, 5638)]


def test_an_instance_sees_its_sibling_and_vllm_service_as_others(recording):
    (gpu,) = facts(recording, "serving").gpus
    seen = gpu.seen_by("vllm@a.service")
    assert (seen.unit, seen.memory_vllm_mib) == ("vllm@a.service", ENGINE_MIB)
    assert seen.other_units_mib == {"vllm@b.service": ENGINE_MIB}
    assert seen.memory_others_mib == gpu.memory_used_mib - ENGINE_MIB
    assert seen.seen_by("vllm.service") == gpu  # back to vllm.service's view, nothing lost


def test_both_serving_beside_a_small_outsider_each_is_planned_and_told_whose_memory_is_whose(recording):
    serving_outsider, _ = RECORDINGS[recording]
    planned = plan(recording, "serving")
    assert sorted(planned.instances) == ["a", "b"]
    notes = [note for note in planned.notes if "GPU 0:" in note]
    assert notes == [
        "instance a: GPU 0: 64.5G in use: vllm@a.service's own 29.5G, freed by its restart; others' 35.0G: "
        f"pid {serving_outsider} (python3) 5.5G, vllm@b.service 29.5G",
        "instance b: GPU 0: 64.5G in use: vllm@b.service's own 29.5G, freed by its restart; others' 35.0G: "
        f"pid {serving_outsider} (python3) 5.5G, vllm@a.service 29.5G",
    ]


def test_a_grown_outsider_refuses_each_instance_naming_its_sibling_and_the_outsider(recording):
    _, grown_outsider = RECORDINGS[recording]
    with pytest.raises(PlanError) as refused:
        plan(recording, "crowded")
    issues = refused.value.issues
    assert refused.value.host_state_only
    assert [issue.key for issue in issues] == [f"vllm_instances['{name}'].vllm_gpu_memory_utilization" for name in "ab"]
    for issue, (own, sibling) in zip(issues, [("a", "b"), ("b", "a")]):
        # Free is the GPU less the sibling and the outsider: 79.6G - 29.5G - 19.5G.
        assert "GPU 0 has 30.6G free, but 0.4 x 79.6G = 31.9G must be free" in issue.reason
        assert (f"Held outside vllm@{own}.service: pid {grown_outsider} (python3) 19.5G, vllm@{sibling}.service 29.5G; "
                f"vllm@{own}.service's 29.5G not counted") in issue.reason


def test_vllm_service_counts_the_instances_memory_as_others(recording):
    serving_outsider, _ = RECORDINGS[recording]
    profile = profile_from_data("gpu-host", {"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "swap_enabled": False,
                                             "vllm_gpu_memory_utilization": 0.4})
    with pytest.raises(PlanError) as refused:
        plan_host(profile, facts(recording, "serving"), host_name="gpu-host")
    (issue,) = refused.value.issues
    assert f"Held outside the vLLM unit: pid {serving_outsider} (python3) 5.5G, vllm@a.service 29.5G, vllm@b.service 29.5G" in issue.reason


@pytest.mark.parametrize(("lines", "service"), [
    (["0::/system.slice/vllm@a.service"], "vllm@a.service"),
    (["12:memory:/system.slice/vllm@a.service", "1:name=systemd:/system.slice/vllm@a.service"], "vllm@a.service"),
    (["0::/system.slice/vllm.service/worker"], "vllm.service"),
    # Where systemd puts an instance (ControlGroup on a lab host, fixtures/doctor/lab-instances.txt).
    (["0::/system.slice/system-vllm.slice/vllm@a.service"], "vllm@a.service"),
    (["1:name=systemd:/system.slice/system-vllm.slice/vllm@b.service/x"], "vllm@b.service"),
    (["0::/system.slice/system-vllm.slice"], None),
    (["5:memory:/system.slice/vllm@a.service"], None),  # a v1 controller's path alone does not say
    (["0::/system.slice/vllm.slice"], None),
    (["0::/user.slice/user-0.slice/session-1.scope"], None),
    (["0::/"], None),
])
def test_the_service_of_a_process_is_read_from_systemds_hierarchy(lines, service):
    assert system_service_of(lines) == service


def test_an_instances_cgroup_as_planned_is_in_its_prefixs_slice():
    assert unit_cgroup_path("vllm@a.service") == "/system.slice/system-vllm.slice/vllm@a.service"
    assert unit_cgroup_path("vllm.service") == "/system.slice/vllm.service"
