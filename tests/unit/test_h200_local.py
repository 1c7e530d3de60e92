"""hostkit's plan on facts recorded on a real H200 through `@local` (fixtures/gpu/h200-local):
GPU memory held in vLLM's unit's cgroup is vLLM's own, and a driver below the CUDA build's
floor makes plan exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hostkit.cli.plan import plan as plan_command
from hostkit.plan.planner import plan_host
from hostkit.plan.planning_facts import PlanningFacts
from hostkit.profile.validation import profile_from_data

RECORDED = Path(__file__).parent / "fixtures" / "gpu" / "h200-local"
DATA = {"gpu_required": True, "swap_enabled": False, "monitoring_enabled": False,
        "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "vllm_gpu_memory_utilization": 0.85}


def recorded_facts() -> dict:
    return json.loads((RECORDED / "facts.json").read_text())


def test_the_units_own_gpu_memory_does_not_stand_in_vllms_way():
    facts = PlanningFacts.model_validate(recorded_facts()["@local"])
    (gpu,) = facts.gpus
    assert (gpu.memory_used_mib, gpu.memory_vllm_mib, gpu.other_processes) == (41487, 41478, [])
    plan = plan_host(profile_from_data("@local", DATA), facts, host_name="@local")
    assert plan.vllm.enabled and plan.container == "docker"


def test_a_driver_below_the_cuda_builds_floor_exits_1_on_the_h200s_facts(tmp_path):
    facts = recorded_facts()
    facts["@local"]["driver_version"] = "570.133.20"
    facts["@local"]["vllm_installed"] = {"package": "vllm", "version": "0.33.0", "torch": "2.11.0", "cuda": "13.0",
                                         "where": "/opt/vllm/bin/python3"}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    (tmp_path / "inventory.py").write_text(f"hosts = [('@local', {DATA!r})]\n")
    result = CliRunner().invoke(plan_command, [str(tmp_path / "inventory.py"), "--facts", str(tmp_path / "facts.json"),
                                               "--format", "json"])
    document = json.loads(result.stdout)
    assert result.exit_code == document["exit_code"] == 1
    (problem,) = document["problems"]
    assert "vllm 0.33.0 is built for CUDA 13.0, which needs NVIDIA driver 580.65.06 or newer" in problem
    assert json.loads((RECORDED / "plan-driver.json").read_text())["problems"] == document["problems"]
