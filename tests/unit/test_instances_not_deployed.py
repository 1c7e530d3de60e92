"""A host with vllm_instances is planned, deployed and verified, but not rolled out by this
version: rollout refuses it, saying so, before any host is touched; the deploy and verify take it."""

from types import SimpleNamespace

import pytest

from hostkit import deploy
from hostkit.fleet.pyinfra_runner import write_inventory
from hostkit.rollout import rollout
from hostkit.verify.targets import targets_from_hosts

SAYS = "gpu-8: several instances are deployed and verified but not yet rolled out by this version: see `hostkit plan`"
TWO = {"vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu_required": False,
       "vllm_instances": {"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}}


def test_the_deploy_takes_it(monkeypatch):
    hosts = [SimpleNamespace(name="gpu-1", data=SimpleNamespace(dict=lambda: {"vllm_model": "m/m"})),
             SimpleNamespace(name="gpu-8", data=SimpleNamespace(dict=lambda: TWO))]
    monkeypatch.setattr(deploy, "state", SimpleNamespace(inventory=hosts))
    assert sorted(deploy.inventory_profiles()["gpu-8"].vllm_instances) == ["a", "b"]


def test_verify_takes_it():
    [target] = targets_from_hosts([("gpu-8", TWO)])
    assert sorted(target.profile.vllm_instances) == ["a", "b"]


def test_rollout_refuses_it(tmp_path):
    path = write_inventory(tmp_path / "inventory.py", [("gpu-8", TWO)])
    with pytest.raises(ValueError, match=SAYS.replace("`", ".")):
        rollout(str(path), "deploy.py", deployer=lambda names, dry: None, gate_check=lambda names: {})
