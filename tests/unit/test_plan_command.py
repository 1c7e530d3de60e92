import json
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from hostkit.cli.plan import plan
from hostkit.plan.planning_facts import PlanningFacts

FIXTURES = Path(__file__).parent / "fixtures" / "plan"
SECRETS = ("sk-plan-fixture-secret", "hf_plan_fixture_token")


@pytest.fixture(autouse=True)
def in_fixture_dir(monkeypatch):
    # pyinfra reads group_data/ next to the inventory and in the working directory.
    monkeypatch.chdir(FIXTURES)


def run(*args):
    return CliRunner().invoke(plan, list(args), catch_exceptions=False)


def test_plan_from_recorded_facts_shows_every_decision():
    result = run("inventory.py", "--facts", "facts.json")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert [line for line in out.splitlines() if line.startswith("== ")] == ["== gpu-a1", "== gpu-b1", "== cpu-1"]
    assert "swap      /mnt/nvme/vllm-hostkit.swap  16G  priority 10" in out
    assert "vm.max_map_count = 262144  vm.swappiness = 10" in out
    assert "thp       enabled = madvise  defrag = defer" in out
    assert "MemoryMax=230G  MemoryHigh=218G  MemorySwapMax=8G  (cgroup v2)" in out
    assert (
        "command   /opt/vllm/bin/vllm serve Qwen/Qwen2.5-7B-Instruct --host 0.0.0.0 --port 8000 "
        "--served-model-name Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.9 --max-num-seqs 61 "
        "--enable-chunked-prefill --max-num-batched-tokens 8192"
    ) in out
    by_id = "/dev/disk/by-id/nvme-SAMSUNG_MZWLR3T8HBLS-00007_S6EXNA0T000001"
    assert f"nvme      /dev/nvme1n1 ({by_id}): ext4 at /mnt/nvme" in out
    assert (f"          at boot, vllm-hostkit-nvme.service formats a blank {by_id} (ext4, label vllm-hostkit), "
            "mounts it at /mnt/nvme and re-creates the 16G swap file /mnt/nvme/vllm-hostkit.swap") in out
    assert "VLLM_API_KEY=********" in out and "HF_TOKEN=********" in out
    assert "swap      /var/lib/swap/vllm-hostkit.swap  4G" in out
    assert "vllm      disabled" in out
    assert "note      chunked prefill on: context 32768 tokens > 8192" in out
    # Every term of the GPU memory arithmetic, one a line.
    for term in ("driver reserve", "CUDA context", "- weights", "- activation peak", "- non-torch", "- CUDA graphs"):
        assert term in out
    assert "= KV cache 108.2G: 2026288 tokens at 56 KiB/token, 61 x 32768 tokens" in out
    for secret in SECRETS:
        assert secret not in result.output


def test_json_output_is_machine_readable_and_masked():
    result = run("inventory.py", "--facts", "facts.json", "--format", "json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert (document["ok"], document["exit_code"], document["problems"]) == (True, 0, [])
    plans = document["hosts"]
    assert list(plans) == ["gpu-a1", "gpu-b1", "cpu-1"]
    assert plans["gpu-b1"]["nvme"] == {"device": "/dev/nvme1n1", "mount": "/mnt/nvme", "fstype": "ext4",
                                       "by_id": "/dev/disk/by-id/nvme-SAMSUNG_MZWLR3T8HBLS-00007_S6EXNA0T000001"}
    assert plans["gpu-a1"]["swap"]["size_bytes"] == 16 * 1024**3
    assert plans["gpu-b1"]["vllm"]["argv"][:3] == ["/opt/vllm/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert plans["cpu-1"]["vllm"]["enabled"] is False
    assert plans["cpu-1"]["vllm"]["cgroup_version"] == 1
    for secret in SECRETS:
        assert secret not in result.output


@pytest.mark.parametrize(("limit", "hosts"), [(["gpu-b1"], ["gpu-b1"]), (["gpu"], ["gpu-a1", "gpu-b1"]), (["cpu-*", "gpu-a1"], ["gpu-a1", "cpu-1"])])
def test_limit(limit, hosts):
    args = ["inventory.py", "--facts", "facts.json", "--format", "json"]
    for pattern in limit:
        args += ["--limit", pattern]
    assert list(json.loads(run(*args).stdout)["hosts"]) == hosts


def test_bad_inventory_exits_2_with_every_issue_of_every_host():
    result = run("inventory_bad.py", "--facts", "facts.json")
    assert result.exit_code == 2
    assert "host gpu-a1: swap_sise = '16G' is invalid: not a hostkit key; did you mean swap_size?" in result.stderr
    assert "host gpu-a1: vllm_port = 99999 is invalid: allowed 1-65535" in result.stderr
    assert "host gpu-a2: vllm_swap_space = 4.0 is invalid: vLLM 0.20.0 has no --swap-space (removed in 0.18.0)" in result.stderr


def test_plans_that_cannot_work_exit_1_naming_host_and_key():
    result = run("inventory.py", "--facts", "facts_gpu_busy.json")
    assert result.exit_code == 1
    assert "host gpu-a1: vllm_gpu_memory_utilization: GPU 0 has 101.3G free" in result.stderr
    assert "== gpu-b1" in result.stdout  # the other hosts are still shown


def test_json_of_a_refused_host_carries_the_problem():
    result = run("inventory.py", "--facts", "facts_gpu_busy.json", "--format", "json", "--limit", "gpu-a1")
    document = json.loads(result.stdout)
    assert result.exit_code == document["exit_code"] == 1 and document["ok"] is False
    assert document["hosts"] == {}
    assert any("GPU 0 has 101.3G free" in problem for problem in document["problems"])


def test_a_driver_below_the_cuda_builds_floor_exits_1(tmp_path):
    """The H200 report: vllm 0.33.0 built for CUDA 13.0 on driver 570.133.20 printed a
    warning and exited 0; the deploy refuses that host, so plan fails it."""
    from hostkit.fleet.inventory import load_inventory
    from hostkit.profile.validation import validate_inventory

    profile = validate_inventory(load_inventory("inventory.py", limit=["gpu-a1"]))["gpu-a1"]
    facts = json.loads((FIXTURES / "facts.json").read_text())
    facts["gpu-a1"]["vllm_installed"] = {"package": profile.vllm_package, "version": profile.vllm_version,
                                         "torch": "2.11.0", "cuda": "13.0", "where": "/opt/vllm/bin/python3"}
    facts["gpu-a1"]["driver_version"] = "570.133.20"
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = run("inventory.py", "--facts", str(path), "--limit", "gpu-a1", "--format", "json")
    document = json.loads(result.stdout)
    assert result.exit_code == document["exit_code"] == 1
    (problem,) = document["problems"]
    assert problem.startswith("host gpu-a1: the deploy will refuse this host: ") and "570.133.20" in problem
    assert list(document["hosts"]) == ["gpu-a1"]  # the plan is still shown


def test_hosts_missing_from_the_facts_file_are_reported(tmp_path):
    facts = json.loads((FIXTURES / "facts.json").read_text())
    del facts["gpu-b1"]
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = run("inventory.py", "--facts", str(path))
    assert result.exit_code == 2  # its verdict is unknown, as for an unreachable host
    assert "host gpu-b1: no facts" in result.stderr


def test_a_malformed_facts_file_exits_2(tmp_path):
    facts = json.loads((FIXTURES / "facts.json").read_text())
    facts["gpu-a1"]["ram_total_bytes"] = "lots"
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = run("inventory.py", "--facts", str(path))
    assert result.exit_code == 2
    assert "host gpu-a1: ram_total_bytes" in result.stderr


def test_limit_matching_nothing_exits_2():
    result = run("inventory.py", "--facts", "facts.json", "--limit", "nope")
    assert result.exit_code == 2
    assert "no hosts" in result.stderr


def test_without_facts_the_hosts_are_asked_through_hostkit_gather(monkeypatch):
    recorded = {name: PlanningFacts.model_validate(data) for name, data in json.loads((FIXTURES / "facts.json").read_text()).items()}
    calls = []

    def gather_planning_facts(inventory_path, limit):
        calls.append((inventory_path, limit))
        return {name: recorded[name] for name in ("gpu-a1",)}

    fake = types.ModuleType("hostkit.fleet.planning")
    fake.gather_planning_facts = gather_planning_facts
    monkeypatch.setitem(sys.modules, "hostkit.fleet.planning", fake)
    result = run("inventory.py", "--limit", "gpu-a1", "--format", "json")
    assert result.exit_code == 0, result.output
    assert calls == [("inventory.py", ["gpu-a1"])]
    assert list(json.loads(result.stdout)["hosts"]) == ["gpu-a1"]


def test_platform_facts_in_a_facts_file_become_plan_warnings_and_notes(tmp_path):
    """A RHEL 8 host (platform-python, SELinux enforcing, the install guides' no-thp tuned
    profile, dnf-automatic) and an Ubuntu host with unattended-upgrades, as recorded facts."""
    facts = json.loads((FIXTURES / "facts.json").read_text())
    facts["gpu-a1"]["platform"] = {
        "selinux": "enforcing", "python": "/usr/libexec/platform-python", "tuned_profiles": ["no-thp"],
        "tuned_settings": {"vm.transparent_hugepages": "never", "sysctl.vm.swappiness": "30"},
        "package_manager": "dnf", "driver_packages": ["nvidia-driver"], "auto_upgrades": True,
        "lsblk_without_path": True,
    }
    facts["gpu-b1"]["platform"] = {"python": "/usr/bin/python3", "package_manager": "apt", "auto_upgrades": True,
                                   "driver_packages": ["nvidia-driver-570"]}
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = run("inventory.py", "--facts", str(path))
    assert result.exit_code == 0, result.output
    a1, b1, _ = result.stdout.split("\n\n== ")
    assert "WARNING   tuned profile no-thp sets vm.swappiness = 30 (hostkit sets 10)" in a1
    assert "WARNING   tuned profile no-thp sets transparent_hugepages = never (hostkit sets madvise)" in a1
    assert "WARNING   dnf-automatic may upgrade the NVIDIA driver packages nvidia-driver " in a1
    assert "note      python3 is not on PATH: the probes run /usr/libexec/platform-python" in a1
    assert "note      SELinux enforcing: the swap file gets the swapfile_t label" in a1
    assert "note      lsblk has no PATH column (util-linux < 2.33)" in a1
    assert "WARNING   unattended-upgrades may upgrade the NVIDIA driver packages nvidia-driver-570 " in b1
    assert "tuned" not in b1 and "SELinux" not in b1
