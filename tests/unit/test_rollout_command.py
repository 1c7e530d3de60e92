"""`hostkit rollout` and `hostkit.rollout.rollout` up to the point where hosts are touched."""

import json

import pytest
from click.testing import CliRunner

from hostkit.cli.main import main
from hostkit.profile.validation import ProfileError
from hostkit.fleet.pyinfra_runner import write_inventory
from hostkit.rollout import fleet_rollout, rollout
from hostkit.rollout.pyinfra_batch import BatchDeploy, HostDeploy
from hostkit.rollout.report import GateResult

GOOD = {"vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu_required": False, "vllm_api_key": "k-123456"}


class Recorder:
    def __init__(self):
        self.batches = []

    def __call__(self, names, dry):
        self.batches.append((list(names), dry))
        return BatchDeploy({name: HostDeploy(ok=True, would_change=["Swap file"] if dry else []) for name in names}, 0.5)


@pytest.fixture
def inventory(tmp_path):
    def write(*hosts):
        return str(write_inventory(tmp_path / "inventory.py", list(hosts)))
    return write


def test_bad_data_on_any_host_stops_the_rollout_before_any_host_is_touched(inventory, tmp_path):
    path = inventory(("a", GOOD), ("b", GOOD), ("c", {**GOOD, "swap_sise": "8G"}))
    deployer = Recorder()
    with pytest.raises(ProfileError, match="swap_sise"):
        rollout(path, "deploy.py", deployer=deployer, gate_check=lambda names: {}, report_path=tmp_path / "r.json")
    assert deployer.batches == []
    assert not (tmp_path / "r.json").exists()


def test_the_command_refuses_bad_data_with_exit_2(inventory, tmp_path, monkeypatch):
    path = inventory(("a", {**GOOD, "vllm_port": 0}))
    (tmp_path / "deploy.py").write_text("")
    monkeypatch.setattr(fleet_rollout, "PyinfraBatchDeployer", lambda *a, **k: pytest.fail("must not deploy"))
    result = CliRunner().invoke(main, ["rollout", path, "--deploy", str(tmp_path / "deploy.py"), "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 2
    assert "no host was touched" in result.output and "vllm_port" in result.output


@pytest.mark.parametrize(("option", "value"), [("--batches", "0,100%"), ("--max-failed", "x"),
                                               ("--max-unavailable", "0"), ("--max-unavailable", "150%")])
def test_the_command_refuses_bad_options_with_exit_2(inventory, tmp_path, option, value):
    path = inventory(("a", GOOD))
    (tmp_path / "deploy.py").write_text("")
    result = CliRunner().invoke(main, ["rollout", path, "--deploy", str(tmp_path / "deploy.py"), option, value])
    assert result.exit_code == 2 and option in result.output


def test_dry_run_plans_all_batches_in_order_key_order_without_a_gate(inventory, tmp_path):
    path = inventory(("a", {**GOOD, "rollout_order": 3}), ("b", {**GOOD, "rollout_order": 1}), ("c", {**GOOD, "rollout_order": 2}))
    deployer, lines = Recorder(), []
    report = rollout(path, "deploy.py", dry=True, order_key="rollout_order", batches="1,100%", max_unavailable="100%",
                     deployer=deployer,
                     gate_check=lambda names: pytest.fail("a dry run has no gate"), report_path=tmp_path / "r.json",
                     progress=lines.append)
    assert deployer.batches == [(["b"], True), (["c", "a"], True)]
    assert report.outcome == "planned" and report.order_key == "rollout_order"
    assert "  c: would change: Swap file" in lines
    assert json.loads((tmp_path / "r.json").read_text())["dry"] is True


def test_gate_none_runs_no_gate(inventory, tmp_path):
    path = inventory(("a", GOOD), ("b", GOOD))
    report = rollout(path, "deploy.py", gate="none", deployer=Recorder(),
                     gate_check=lambda names: pytest.fail("--gate none"), report_path=tmp_path / "r.json")
    assert report.outcome == "completed" and all(host.gate is None for host in report.hosts)


def test_a_drain_command_that_is_not_a_string_or_list_stops_the_rollout_before_any_host(inventory, tmp_path):
    path = inventory(("a", GOOD), ("b", {**GOOD, "rollout_drain_command": {"run": "lb"}}))
    deployer = Recorder()
    with pytest.raises(ProfileError, match="host b: rollout_drain_command"):
        rollout(path, "deploy.py", deployer=deployer, gate_check=lambda names: {}, report_path=tmp_path / "r.json")
    assert deployer.batches == []


def test_the_default_batches_take_a_quarter_of_a_models_hosts_at_most(inventory, tmp_path):
    hosts = [(f"a{i}", GOOD) for i in range(8)] + [(f"b{i}", {**GOOD, "vllm_served_model_name": "other"}) for i in range(4)]
    deployer = Recorder()
    rollout(inventory(*hosts), "deploy.py", deployer=deployer, report_path=tmp_path / "r.json",
            gate_check=lambda names: {name: GateResult.of([], 0) for name in names}, progress=lambda line: None)
    for names, _ in deployer.batches:
        assert sum(name.startswith("a") for name in names) <= 2 and sum(name.startswith("b") for name in names) <= 1
    assert sorted(name for names, _ in deployer.batches for name in names) == sorted(name for name, _ in hosts)
