"""Planning vllm_instances (hostkit.plan.instances): each instance sized on its own GPUs from
recorded GPU facts of 1-, 2-, 4- and 8-GPU hosts, the host's RAM shared between them, and
what only the facts tell refused by name. Without vllm_instances the plan is today's."""

import json
from pathlib import Path

import pytest

from hostkit.cli.plan import load_facts_file, plan_as_json, plan_as_text
from hostkit.desired.vllm_unit import render_unit
from hostkit.facts.gpu import parse_gpu_output
from hostkit.fleet.inventory import load_inventory
from hostkit.plan.planner import PlanError, plan_host
from hostkit.plan.snapshot_facts import gpu_fact
from hostkit.profile.validation import profile_from_data, validate_inventory
from hostkit.sizes import GIB

FIXTURES = Path(__file__).parent / "fixtures"
BEFORE = FIXTURES / "instances" / "before"
PLAN_FIXTURE = FIXTURES / "plan"
QWEN7, QWEN05, LLAMA70 = "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"
UUID = "GPU-87e77369-5345-4073-ed4b-79c80003dc9{}"  # 8gpu.txt's UUIDs, GPU N ending in N


def gpu_section(count: int):
    """The recorded H200 (h200.txt) for one GPU; the first `count` rows of 8gpu.txt for more."""
    if count == 1:
        return parse_gpu_output((FIXTURES / "gpu" / "h200.txt").read_text().splitlines())
    lines = (FIXTURES / "gpu" / "8gpu.txt").read_text().splitlines()
    rows = [line for line in lines if line[:1].isdigit()]
    kept = [line for line in lines if not line[:1].isdigit() or line in rows[:count]]
    return parse_gpu_output(kept)


def host_facts(count: int, ram_gib: int = 256):
    """gpu-a1's recorded facts (fixtures/plan/facts.json: 256 GiB, NVMe, 16G swap) with `count` GPUs."""
    base = load_facts_file(str(PLAN_FIXTURE / "facts.json"))["gpu-a1"]
    section = gpu_section(count)
    return base.model_copy(update={"gpus": [gpu_fact(g, section) for g in section.gpus], "ram_total_bytes": ram_gib * GIB,
                                   "ram_available_bytes": ram_gib * GIB})


def plan(instances, count=8, ram_gib=256, **host):
    profile = profile_from_data("gpu-8", {"vllm_model": QWEN7, "vllm_max_model_len": 8192, **host,
                                          "vllm_instances": instances})
    return plan_host(profile, host_facts(count, ram_gib), host_name="gpu-8")


def refusal(instances, count=8, **host) -> str:
    with pytest.raises(PlanError) as caught:
        plan(instances, count, **host)
    assert len(caught.value.issues) == 1, caught.value
    return str(caught.value.issues[0])


def replicas(count):
    return {f"r{i}": {"gpus": [i], "vllm_port": 8000 + i} for i in range(count)}


# --- no instances: today's plan --------------------------------------------------------


def test_without_instances_the_plan_and_units_are_todays():
    """Recorded before vllm_instances existed (fixtures/instances/before/, from commit 34e45b5)."""
    profiles = validate_inventory(load_inventory(str(PLAN_FIXTURE / "inventory.py")))
    recorded = load_facts_file(str(PLAN_FIXTURE / "facts.json"))
    for name in ("gpu-a1", "gpu-b1"):
        host_plan = plan_host(profiles[name], recorded[name], host_name=name)
        assert host_plan.instances == {}
        assert render_unit(host_plan.vllm) == (BEFORE / f"{name}.service").read_text()
    profile = profile_from_data("gpu-8", {"vllm_model": LLAMA70, "vllm_tensor_parallel_size": 8,
                                          "vllm_max_model_len": 32768})
    base = recorded["gpu-a1"]
    section = gpu_section(8)
    eight = plan_host(profile, base.model_copy(update={"gpus": [gpu_fact(g, section) for g in section.gpus]}), "gpu-8")
    assert json.dumps(plan_as_json(eight), indent=2) + "\n" == (BEFORE / "gpu-8-tp8.json").read_text()
    assert render_unit(eight.vllm) == (BEFORE / "gpu-8-tp8.service").read_text()


def test_without_instances_hostkit_plan_prints_todays_output(monkeypatch):
    from click.testing import CliRunner

    from hostkit.cli.plan import plan as plan_command

    monkeypatch.chdir(PLAN_FIXTURE)
    for extra, recorded in (((), "plan-fixture.txt"), (("--format", "json"), "plan-fixture.json")):
        result = CliRunner().invoke(plan_command, ["inventory.py", "--facts", "facts.json", *extra])
        assert result.stdout == (BEFORE / recorded).read_text()


def test_gpu_facts_carry_each_gpus_uuid():
    assert [g.uuid for g in host_facts(1).gpus] == ["GPU-87e77369-5345-4073-ed4b-79c80003dc9a"]
    assert [g.uuid for g in host_facts(4).gpus] == [UUID.format(i) for i in range(4)]


# --- good inventories ------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 4, 8])
def test_one_replica_per_gpu(count):
    host_plan = plan(replicas(count), count)
    assert host_plan.vllm is None and list(host_plan.instances) == [f"r{i}" for i in range(count)]
    for i, instance in enumerate(host_plan.instances.values()):
        assert (instance.instance, instance.gpu_indices, instance.port) == (f"r{i}", [i], 8000 + i)
        assert instance.gpu_uuids == [host_facts(count).gpus[i].uuid]
        assert instance.sizing.tensor_parallel_size == 1 and "--tensor-parallel-size" not in instance.argv
    assert instances_ram(host_plan) + 25 * GIB <= 256 * GIB


def instances_ram(host_plan) -> int:
    return sum(instance.memory_max_bytes for instance in host_plan.instances.values())


def test_two_tp4_groups_each_sized_on_its_own_gpus():
    host_plan = plan({"left": {"gpus": [0, 1, 2, 3]}, "right": {"gpus": [4, 5, 6, 7], "vllm_port": 8001}},
                     vllm_model=LLAMA70)
    left, right = host_plan.instances.values()
    assert (left.gpu_indices, right.gpu_indices) == ([0, 1, 2, 3], [4, 5, 6, 7])
    assert right.gpu_uuids == [UUID.format(i) for i in range(4, 8)]
    assert left.sizing.tensor_parallel_size == right.sizing.tensor_parallel_size == 4
    assert "--tensor-parallel-size 4" in " ".join(right.argv)  # TP unset: the number of its GPUs
    assert left.sizing.kv_tokens == right.sizing.kv_tokens
    assert left.memory_max_bytes == right.memory_max_bytes  # the same RAM need: an even split


def test_a_large_model_beside_a_small_one():
    """Llama-3.1-70B's 64 attention heads split over 4 GPUs, not 6 (vLLM refuses TP 6, so the
    planner does too): the large model on 4, a 7B on 2 and two small replicas on one each."""
    with pytest.raises(PlanError, match="6 does not divide the 64 attention heads"):
        plan({"large": {"gpus": [0, 1, 2, 3, 4, 5], "vllm_model": LLAMA70}, "small": {"gpus": [6, 7], "vllm_port": 8001}})
    host_plan = plan({"large": {"gpus": [0, 1, 2, 3], "vllm_model": LLAMA70},
                      "mid": {"gpus": [4, 5], "vllm_port": 8001},
                      "small-a": {"gpus": [6], "vllm_port": 8002, "vllm_model": QWEN05},
                      "small-b": {"gpus": [7], "vllm_port": 8003, "vllm_model": QWEN05}})
    large, mid, small, _ = host_plan.instances.values()
    assert (large.sizing.model, large.sizing.tensor_parallel_size, mid.sizing.tensor_parallel_size) == (LLAMA70, 4, 2)
    assert small.sizing.model == QWEN05 and small.sizing.kv_tokens > mid.sizing.kv_tokens
    # RAM in proportion to need: 4 GPU processes and a frontend against 1 and a frontend.
    assert large.memory_max_bytes > mid.memory_max_bytes > small.memory_max_bytes


def test_two_small_instances_share_one_gpu():
    host_plan = plan({"a": {"gpus": [0]}, "b": {"gpus": [UUID.format(0)], "vllm_port": 8001}},
                     vllm_model=QWEN05, vllm_gpu_memory_utilization=0.4)
    a, b = host_plan.instances.values()
    assert a.gpu_indices == b.gpu_indices == [0] and b.gpu_uuids == [UUID.format(0)]
    assert a.shared_gpus == ["GPU 0 with b: 0.4 + 0.4 = 0.8 of it"]
    assert b.shared_gpus == ["GPU 0 with a: 0.4 + 0.4 = 0.8 of it"]
    assert a.sizing.gpu_memory_utilization == 0.4
    text = plan_as_text(host_plan)
    assert f"          GPUs 0 ({UUID.format(0)})" in text and "          shares GPU 0 with b: 0.4 + 0.4 = 0.8 of it" in text


def test_each_instance_shows_in_hostkit_plan():
    text = plan_as_text(plan({"left": {"gpus": [0, 1, 2, 3]}, "right": {"gpus": [4, 5, 6, 7], "vllm_port": 8001}}))
    assert "instance  right  port 8001  Qwen/Qwen2.5-7B-Instruct" in text
    assert "          GPUs 4 (GPU-87e77369-5345-4073-ed4b-79c80003dc94), 5 (" in text
    assert "          TP 4, gpu_memory_utilization 0.92: KV cache " in text
    assert "note      instance left: KV cache: " in text
    data = plan_as_json(plan(replicas(2), 2))
    assert data["vllm"] is None and data["instances"]["r1"]["gpu_uuids"] == [UUID.format(1)]


def test_hostkit_plan_shows_each_instances_own_watchdog():
    text = plan_as_text(plan({"left": {"gpus": [0, 1, 2, 3], "vllm_watchdog_interval_s": 5},
                              "right": {"gpus": [4, 5, 6, 7], "vllm_port": 8001, "vllm_watchdog": False}},
                             vllm_watchdog_failures=4))
    lines = text.splitlines()
    left = lines.index("instance  left  port 8000  Qwen/Qwen2.5-7B-Instruct")
    right = next(i for i, line in enumerate(lines) if line.startswith("instance  right "))
    # Each under its own instance: left's own interval, the host's failures; right's watchdog off.
    assert ("          watchdog vllm-hostkit-watchdog@left.service: GET /health every 5 s, a one-token completion "
            "every 6 checks (15 s deadline); restarts vllm@left.service after 4 failed checks in a row, "
            "at most 4 an hour") in lines[left:right]
    assert "          watchdog none (vllm_watchdog: false)" in lines[right:]
    assert "vllm-hostkit-watchdog.service" not in text


# --- refused at plan time --------------------------------------------------------------


def test_a_gpu_the_host_lacks_is_refused():
    text = refusal({"a": {"gpus": [0, 1]}, "b": {"gpus": [2, 3], "vllm_port": 8001}}, count=2)
    assert text.startswith("host gpu-8: vllm_instances['b'].gpus: GPU 2, 3 of vllm_instances 'b' is not on this host, "
                           "whose 2 GPU(s) are 0 (GPU-87e77369-5345-4073-ed4b-79c80003dc90), 1 (")
    text = refusal({"a": {"gpus": ["GPU-00000000-0000-0000-0000-000000000000"]}}, count=2)
    assert "GPU GPU-00000000-0000-0000-0000-000000000000 of vllm_instances 'a' is not on this host" in text


def test_an_index_and_a_uuid_naming_one_gpu_are_refused_without_utilization():
    text = refusal({"a": {"gpus": [3]}, "b": {"gpus": [UUID.format(3)], "vllm_port": 8001}})
    assert text == (f"host gpu-8: vllm_instances['b'].gpus: GPU 3 ({UUID.format(3)}) is named by vllm_instances 'a' as 3 "
                    f"and 'b' as '{UUID.format(3)}': one GPU, shared only when every instance on it sets "
                    "vllm_gpu_memory_utilization, summing to at most 1.0 (a unset, b unset)")


def test_ram_oversubscription_is_refused_with_the_numbers():
    text = refusal({"a": {"gpus": [0], "vllm_memory_max": "200G"}, "b": {"gpus": [1], "vllm_port": 8001,
                                                                         "vllm_memory_max": "60G"}})
    assert text == ("host gpu-8: vllm_memory_max: the MemoryMax of vllm_instances 'a' 200G, 'b' 60G and the OS's 25.6G "
                    "make 285.6G, more than RAM 256G + swap 16G = 272G: lower vllm_memory_max, or set it \"auto\"")


def test_auto_limits_share_what_the_others_leave():
    host_plan = plan({"a": {"gpus": [0], "vllm_memory_max": "100G"}, "b": {"gpus": [1], "vllm_port": 8001},
                      "c": {"gpus": [2], "vllm_port": 8002}})
    a, b, c = host_plan.instances.values()
    assert a.memory_max_bytes == 100 * GIB
    assert b.memory_max_bytes == c.memory_max_bytes == 65 * GIB  # (256 - 25.6 - 100) / 2, rounded down
    assert b.memory_swap_max_bytes == 2688 * 2**20  # a third of half the 16G swap file, in 128 MiB steps


def test_an_instances_refusal_is_named_by_its_key_path():
    text = refusal({"a": {"gpus": [0], "vllm_max_model_len": 32768, "vllm_gpu_memory_utilization": 0.1}})
    assert text.startswith("host gpu-8: vllm_instances['a'].vllm_gpu_memory_utilization: one request of 32768 tokens")


# --- the README's example --------------------------------------------------------------


def test_the_readme_example_is_real_hostkit_plan_output(monkeypatch):
    from click.testing import CliRunner

    from hostkit.cli.plan import plan as plan_command

    assert load_facts_file(str(FIXTURES / "instances" / "facts.json"))["gpu-h200-8"] == host_facts(8)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("### Several instances on one host", 1)[1].split("\n## ", 1)[0]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert example in (FIXTURES / "instances" / "eight_gpus.py").read_text()
    monkeypatch.chdir(FIXTURES / "instances")
    result = CliRunner().invoke(plan_command, ["eight_gpus.py", "--facts", "facts.json"])
    assert result.exit_code == 0, result.output
    excerpt = section.split("(excerpt):\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    assert excerpt and [line for line in excerpt if line not in result.stdout.splitlines()] == []
