"""Each server sized on its own model (issue 35): the snapshot reads the config.json of every
local model directory the plan sizes, in one command, and each instance of vllm_instances is
sized on its own directory's config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
import subprocess

import pytest

from hostkit.facts.model_config import ModelConfigFact, parse_model_configs
from hostkit.facts.snapshot import MARKER, HostSnapshotFact, parse_sections
from hostkit.plan.planner import plan_host
from hostkit.plan.scope import snapshot_scope
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.profile.validation import profile_from_data
from hostkit.sizes import KIB
from tests.unit.test_planner import QWEN7_CONFIG, facts, h200

# Llama-3.1-8B-Instruct's config.json on Hugging Face (the dimensions the sizing reads).
LLAMA8_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256,
}
TWO_MODELS = {"qwen": {"gpus": [0], "vllm_model": "/models/qwen7"},
              "llama": {"gpus": [1], "vllm_model": "/models/llama8", "vllm_port": 8001}}


def profile(data):
    return profile_from_data("gpu-a1", {"vllm_max_model_len": 8192, **data})


# --- which directories --------------------------------------------------------------------


def test_the_scope_holds_each_instances_local_model_directory_once():
    instances = {**TWO_MODELS, "qwen-b": {"gpus": [2], "vllm_model": "/models/qwen7", "vllm_port": 8002},
                 "hub": {"gpus": [3], "vllm_model": "Qwen/Qwen2.5-7B-Instruct", "vllm_port": 8003}}
    assert snapshot_scope(profile({"vllm_model": "/models/unused", "vllm_instances": instances})).model_dirs \
        == ("/models/llama8", "/models/qwen7")


def test_without_instances_the_scope_holds_vllm_services_model():
    assert snapshot_scope(profile({"vllm_model": "/models/qwen7"})).model_dirs == ("/models/qwen7",)
    assert snapshot_scope(profile({"vllm_model": "Qwen/Qwen2.5-7B-Instruct"})).model_dirs == ()
    assert snapshot_scope().model_dirs == ()


# --- the command and its parser -------------------------------------------------------------


@pytest.mark.processes
def test_one_command_reads_each_directorys_config_json(tmp_path):
    good, spaced, bad, listed, missing = (tmp_path / name for name in ("good", "with space", "bad", "list", "missing"))
    for directory in (good, spaced, bad, listed):
        directory.mkdir()
    (good / "config.json").write_text(json.dumps(QWEN7_CONFIG, indent=2))  # a trailing line without newline
    (spaced / "config.json").write_text(json.dumps(LLAMA8_CONFIG) + "\n")
    (bad / "config.json").write_text("{\"hidden_size\": 4096,\n")
    (listed / "config.json").write_text("[1, 2]\n")
    scope = dataclasses.replace(snapshot_scope(), model_dirs=tuple(map(str, (good, spaced, bad, listed, missing))))
    result = subprocess.run(["sh", "-c", ModelConfigFact().command(scope)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == ""
    read = ModelConfigFact().process(result.stdout.splitlines())
    assert read.configs == {str(good): QWEN7_CONFIG, str(spaced): LLAMA8_CONFIG}
    assert read.errors[str(bad)].startswith("not JSON (")
    assert read.errors[str(listed)] == "not a JSON object"
    assert read.errors[str(missing)] == f"head: cannot open '{missing}/config.json' for reading: No such file or directory"


def test_a_read_that_timed_out_says_so():
    lines = ["@@model:dir@@/mnt/nfs/model", "@@hostkit-timeout@@ reading /mnt/nfs/model/config.json timed out after 10 s",
             "", "@@model:rc@@ 124"]
    assert parse_model_configs(lines).errors == {"/mnt/nfs/model": "reading /mnt/nfs/model/config.json timed out after 10 s"}


def test_the_planning_facts_carry_the_snapshots_configs():
    """A real snapshot (fixtures/gpu/h100-two-instances), recorded before the section existed,
    with the section added: its configs and errors reach the planner by directory."""
    recorded = (Path(__file__).parent / "fixtures" / "gpu" / "h100-two-instances" / "snapshot-serving.txt").read_text()
    section = [f"{MARKER} model_configs", "@@model:dir@@/models/qwen7", json.dumps(QWEN7_CONFIG), "@@model:rc@@ 0",
               "@@model:dir@@/models/gone", "head: cannot open '/models/gone/config.json' for reading: No such file "
               "or directory", "", "@@model:rc@@ 1"]
    host_facts = planning_facts(HostSnapshotFact().process(recorded.splitlines() + section))
    assert host_facts.model_configs == {"/models/qwen7": QWEN7_CONFIG}
    assert host_facts.model_config_errors == {"/models/gone": "head: cannot open '/models/gone/config.json' for "
                                                              "reading: No such file or directory"}
    older = planning_facts(HostSnapshotFact().process(recorded.splitlines()))
    assert (older.model_configs, older.model_config_errors) == ({}, {})
    assert parse_sections([])["model_configs"].configs == {}


# --- the plan: each instance on its own model -----------------------------------------------


def test_two_instances_of_different_local_models_are_each_sized_on_their_own_config():
    host_facts = facts(gpus=[h200(0), h200(1)],
                       model_configs={"/models/qwen7": QWEN7_CONFIG, "/models/llama8": LLAMA8_CONFIG})
    host_plan = plan_host(profile({"vllm_model": "/models/qwen7", "vllm_instances": TWO_MODELS}), host_facts, "gpu-a1")
    qwen, llama = host_plan.instances["qwen"].sizing, host_plan.instances["llama"].sizing
    # KV bytes/token = 2 x layers x KV heads x head_dim x 2 bytes: Qwen 2x28x4x128x2, Llama 2x32x8x128x2.
    assert (qwen.model, qwen.kv_bytes_per_token) == ("/models/qwen7", 56 * KIB)
    assert (llama.model, llama.kv_bytes_per_token) == ("/models/llama8", 128 * KIB)
    assert llama.weights_bytes_per_gpu > qwen.weights_bytes_per_gpu


def test_an_instance_whose_config_was_not_read_is_not_sized_and_says_why():
    host_facts = facts(gpus=[h200(0), h200(1)], model_configs={"/models/qwen7": QWEN7_CONFIG},
                       model_config_errors={"/models/llama8": "head: cannot open '/models/llama8/config.json' for "
                                                              "reading: No such file or directory"})
    host_plan = plan_host(profile({"vllm_instances": TWO_MODELS}), host_facts, "gpu-a1")
    assert host_plan.instances["qwen"].sizing is not None and host_plan.instances["llama"].sizing is None
    assert ("instance llama: /models/llama8/config.json was not read (head: cannot open '/models/llama8/config.json' "
            "for reading: No such file or directory): GPU memory sizing skipped") in host_plan.warnings
