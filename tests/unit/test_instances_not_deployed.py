"""A host with vllm_instances is taken by the deploy, verify and rollout (which rolls it out per
instance: tests/unit/test_rollout_instances.py)."""

from types import SimpleNamespace

from hostkit import deploy
from hostkit.fleet.pyinfra_runner import write_inventory
from hostkit.rollout import rollout
from hostkit.rollout.pyinfra_batch import BatchDeploy, HostDeploy
from hostkit.verify.targets import targets_from_hosts

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


def test_rollout_takes_it(tmp_path):
    path = write_inventory(tmp_path / "inventory.py", [("gpu-8", TWO)])
    asked = []

    def deployer(names, dry):
        asked.append((list(names), dry))
        return BatchDeploy({name: HostDeploy(ok=True) for name in names}, 0.1)

    report = rollout(str(path), "deploy.py", gate="none", deployer=deployer, progress=lambda line: None)
    assert report.outcome == "completed" and asked == [(["gpu-8"], True), (["gpu-8"], False)]
    assert [endpoint.unit for endpoint in report.host("gpu-8").endpoints] == ["vllm@a.service", "vllm@b.service"]
