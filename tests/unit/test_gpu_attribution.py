"""Whose GPU memory is it: the snapshot's compute processes and cgroups, on a real H200 run.

The fixtures in fixtures/gpu/h200-serving/ are one run on an H200 machine (README there):
a PyTorch process holding 86% of the GPU inside /system.slice/vllm.service, then in a
sibling cgroup /system.slice/vllm.service-other, then in the root cgroup.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hostkit.facts import deadline
from hostkit.facts.gpu import GpuFact, GpuProcess, parse_compute_apps, parse_gpu_output
from hostkit.facts.snapshot import HostSnapshotFact
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.plan.planner import PlanError, plan_host
from hostkit.profile.validation import profile_from_data

RUN = Path(__file__).parent / "fixtures" / "gpu" / "h200-serving"
HOLDER = 471
UUID = "GPU-23837db4-23c6-7c04-d7c3-9c9ed6b1f60a"


def snapshot(case: str):
    return HostSnapshotFact().process((RUN / f"snapshot-{case}.txt").read_text().splitlines())


def plan(case: str, **data):
    profile = profile_from_data("h200", {"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "swap_enabled": False,
                                         "vllm_gpu_memory_utilization": 0.85, **data})
    return plan_host(profile, planning_facts(snapshot(case)), host_name="h200")


def test_the_snapshot_records_each_compute_process_with_its_cgroup():
    gpu = snapshot("in-unit").gpu
    assert gpu.processes == (
        GpuProcess(pid=HOLDER, gpu_uuid=UUID, used_mib=123634, name="python3", cgroups=("0::/system.slice/vllm.service",)),
    )
    assert gpu.processes_error is None and gpu.timeouts == ()
    assert snapshot("outside").gpu.processes[0].cgroups == ("0::/",)


def test_raw_nvidia_smi_agrees_with_the_snapshot():
    raw = (RUN / "raw-nvidia-smi.txt").read_text().splitlines()
    apps = raw[raw.index("$ nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits") + 1]
    assert parse_compute_apps([apps])[0] == (GpuProcess(HOLDER, UUID, 123634),)


@pytest.mark.parametrize(
    ("case", "vllm_mib", "others_mib"),
    [("in-unit", 123634, 9), ("other-unit", 0, 123643), ("outside", 0, 123643)],
)
def test_memory_is_split_by_cgroup(case, vllm_mib, others_mib):
    (gpu,) = planning_facts(snapshot(case)).gpus
    assert (gpu.memory_used_mib, gpu.memory_vllm_mib, gpu.memory_others_mib) == (123643, vllm_mib, others_mib)


def test_a_serving_host_plans_clean():
    assert plan("in-unit").vllm.sizing.gpu_memory_utilization == 0.85


@pytest.mark.parametrize("case", ["other-unit", "outside"])
def test_memory_held_outside_the_unit_is_refused_naming_pid_process_and_memory(case):
    with pytest.raises(PlanError) as caught:
        plan(case)
    (issue,) = caught.value.issues
    assert issue.host_state and caught.value.host_state_only
    assert issue.key == "vllm_gpu_memory_utilization"
    assert "GPU 0 has 19.7G free" in issue.reason
    assert f"pid {HOLDER} (python3) 120.7G" in issue.reason


def test_bad_data_beside_a_busy_gpu_still_stops_the_run():
    with pytest.raises(PlanError) as caught:
        plan("outside", vllm_tensor_parallel_size=2)
    assert not caught.value.host_state_only


@pytest.mark.parametrize(
    ("lines", "inside"),
    [
        (["0::/system.slice/vllm.service"], True),
        (["0::/system.slice/vllm.service/payload"], True),
        (["0::/system.slice/vllm.service-other"], False),
        (["0::/"], False),
        # cgroup v1: systemd's own named hierarchy says which unit; a controller path alone does not.
        (["12:memory:/system.slice/vllm.service", "1:name=systemd:/system.slice/vllm.service"], True),
        (["12:memory:/system.slice/vllm.service", "1:name=systemd:/user.slice"], False),
        # hybrid: v1 controllers plus the unified line
        (["4:memory:/system.slice/vllm.service", "1:name=systemd:/system.slice/vllm.service",
          "0::/system.slice/vllm.service"], True),
        ([], False),
    ],
)
def test_unit_membership_in_v1_and_v2_forms(lines, inside):
    assert GpuProcess(1, UUID, 1, "python3", tuple(lines)).in_cgroup("/system.slice/vllm.service") is inside


def test_a_pid_that_proc_does_not_show_counts_as_others_and_says_so():
    output = (RUN / "snapshot-in-unit.txt").read_text().replace(
        f"{HOLDER}, 123634, {UUID}", f"{HOLDER}, 123634, {UUID}\n9999, 2000, {UUID}"
    )
    facts = planning_facts(HostSnapshotFact().process(output.splitlines()))
    (gpu,) = facts.gpus
    assert [(p.pid, p.name, p.used_mib) for p in gpu.other_processes] == [(9999, "", 2000)]


def test_a_failed_process_query_counts_everything_as_others():
    output = (RUN / "snapshot-in-unit.txt").read_text().replace("@@gpu:apps-rc@@ 0", "@@gpu:apps-rc@@ 124").replace(
        f"{HOLDER}, 123634, {UUID}", f"{deadline.TIMED_OUT} nvidia-smi --query-compute-apps timed out after 30 s"
    )
    facts = planning_facts(HostSnapshotFact().process(output.splitlines()))
    assert facts.gpus[0].memory_vllm_mib == 0
    profile = profile_from_data("h200", {"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "swap_enabled": False,
                                         "vllm_gpu_memory_utilization": 0.85})
    with pytest.raises(PlanError, match=r"Held by processes unknown \(nvidia-smi --query-compute-apps timed out after 30 s\)"):
        plan_host(profile, facts, host_name="h200")


@pytest.mark.parametrize(("case", "vllm_mib", "others_mib"), [("in-unit", 123634, 0), ("outside", 0, 123634)])
def test_doctor_splits_the_same_recorded_section_as_plan(case, vllm_mib, others_mib):
    from hostkit.doctor.gather import parse_gpus

    lines = snapshot_section(case)
    (gpu,), problem = parse_gpus(lines, "/system.slice/vllm.service")
    (planned,) = planning_facts(snapshot(case)).gpus
    assert problem is None and (gpu.vllm_mib, gpu.other_mib) == (vllm_mib, others_mib)
    assert gpu.vllm_mib == planned.memory_vllm_mib


def snapshot_section(case: str) -> list[str]:
    lines = (RUN / f"snapshot-{case}.txt").read_text().splitlines()
    start = lines.index("@@hostkit-section@@ gpu") + 1
    return lines[start:next(i for i in range(start, len(lines)) if lines[i].startswith("@@hostkit-section@@"))]


def run_gpu_section(tmp_path: Path, nvidia_smi: str) -> list[str]:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + nvidia_smi + "\n")
    fake.chmod(0o755)
    result = subprocess.run(["sh", "-c", GpuFact().command()], capture_output=True, text=True,
                            env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check=False)
    assert result.returncode == 0
    return result.stdout.splitlines()


@pytest.mark.processes
def test_command_reads_comm_and_cgroup_of_listed_pids(tmp_path):
    with subprocess.Popen(["sleep", "60"]) as sleeper:
        try:
            lines = run_gpu_section(
                tmp_path,
                f"case \"$*\" in *compute-apps*) echo '{sleeper.pid}, 500, {UUID}'; echo '99999999, 5, {UUID}';; esac",
            )
        finally:
            sleeper.kill()
    facts = parse_gpu_output(lines)
    by_pid = {p.pid: p for p in facts.processes}
    own_cgroup = Path(f"/proc/{sleeper.pid}/cgroup")
    assert by_pid[sleeper.pid].name == "sleep"
    assert by_pid[sleeper.pid].cgroups and not own_cgroup.exists()
    assert by_pid[99999999].name == "" and by_pid[99999999].cgroups == ()


@pytest.mark.processes
def test_a_hanging_nvidia_smi_is_cut_at_its_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr("hostkit.facts.gpu.NVIDIA_SMI_S", 1)
    lines = run_gpu_section(tmp_path, "sleep 30")
    facts = parse_gpu_output(lines)
    assert facts.nvidia_smi_error == "nvidia-smi --query-gpu timed out after 1 s"
    assert facts.processes_error == "nvidia-smi --query-compute-apps timed out after 1 s"
    assert facts.timeouts == (
        "nvidia-smi --query-gpu timed out after 1 s",
        "nvidia-smi --query-compute-apps timed out after 1 s",
    )


# --- the deploy's per-host refusal, run by pyinfra itself ---------------------------------


def run_ops_on(monkeypatch, snapshots: dict, reasons_by_host: dict[str, list[str]]):
    """snapshot_finished, then refuse_host where the planner refused, then a marker op."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.operation import add_op
    from pyinfra.api.operations import run_ops
    from pyinfra.operations import python

    import hostkit.operations.gpu as gpu_operations
    from hostkit.plan.scope import snapshot_scope

    monkeypatch.setattr(gpu_operations, "snapshot", lambda host, scope: snapshots[host.name])
    inventory = Inventory((list(snapshots), {}))
    state = State(inventory, Config())
    for host in inventory:
        state.activate_host(host)
    reached: list[str] = []
    add_op(state, gpu_operations.snapshot_finished, scope=snapshot_scope())
    refused = [inventory.get_host(name) for name in reasons_by_host]
    if refused:
        for host in refused:
            add_op(state, gpu_operations.refuse_host, host=host, reasons=reasons_by_host[host.name])
    add_op(state, python.call, function=lambda: reached.append("after"), name="after")
    try:
        run_ops(state)
    finally:
        failed = {host.name for host in state.failed_hosts}
    return failed, reached


def test_a_host_whose_gpu_others_hold_fails_alone_at_execute(monkeypatch, caplog):
    with pytest.raises(PlanError) as caught:
        plan("outside")
    failed, reached = run_ops_on(
        monkeypatch,
        {"serving": snapshot("in-unit"), "busy": snapshot("outside")},
        {"busy": [issue.reason for issue in caught.value.issues]},
    )
    assert failed == {"busy"} and reached == ["after"]
    assert f"pid {HOLDER} (python3) 120.7G" in caplog.text


def test_a_snapshot_command_past_its_deadline_fails_its_host(monkeypatch, caplog):
    stuck = (RUN / "snapshot-in-unit.txt").read_text().replace(
        "unit_sha256=", f"{deadline.TIMED_OUT} systemctl show vllm.service timed out after 20 s\nunit_sha256=", 1
    )
    failed, reached = run_ops_on(
        monkeypatch,
        {"stuck": HostSnapshotFact().process(stuck.splitlines()), "fine": snapshot("in-unit")},
        {},
    )
    assert failed == {"stuck"} and reached == ["after"]
    assert "vllm: systemctl show vllm.service timed out after 20 s" in caplog.text


def test_the_real_deploy_failed_the_busy_host_at_execute_naming_the_pid():
    """The recorded pyinfra run on the H200 (fixtures/gpu/h200-serving/pyinfra-deploy.txt)."""
    text = (RUN / "pyinfra-deploy.txt").read_text()
    dry, busy = text.split("=== holder outside")
    assert "0::/system.slice/vllm.service" in dry and "Ready: deploys/vllm_host.py" in dry and "exit status: 0" in dry
    assert "Beginning operation run" in busy and "Check the GPUs are free for vLLM" in busy
    assert "Held outside the vLLM unit: pid 456 (python3) 120.7G" in busy and "exit status: 1" in busy
    assert "Take the deploy lock" not in busy and "cannot access '/run/vllm-hostkit'" in busy
