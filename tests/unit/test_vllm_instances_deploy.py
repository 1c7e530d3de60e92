"""The deploy of vllm_instances (issue 35): each instance's unit and environment file, the
operations' commands on recorded-fact plans, the removal of units the plan no longer runs,
and what the deploy refuses. vllm.service's path is unchanged (test_vllm_unit.py and
test_instances_plan.py's recorded units hold it byte for byte)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pyinfra.api import FileUploadCommand
from pyinfra.context import ctx_host

from hostkit import deploy
from hostkit.desired.digest import text_sha256
from hostkit.desired.vllm_unit import (
    ENV_DIR_STAT, ENV_FILE_STAT, render_env, render_unit, unknown_uuids, unplanned_units,
)
from hostkit.desired.watchdog import host_watchdog_plans
from hostkit.facts.vllm_service import MANAGED_MARKER, ServiceTarget, VllmServiceFact, VllmServiceState
from hostkit.operations import vllm_service as ops
from hostkit.plan.scope import snapshot_scope
from hostkit.vllm.readiness import Probe
from tests.unit.op_host import OpHost
from hostkit.plan.planner import plan_host
from hostkit.profile.validation import profile_from_data
from tests.unit.test_instances_plan import QWEN05, UUID, host_facts, plan

SECRET = "instance-secret-4711"
TWO = {"a": {"gpus": [0, 1]}, "b": {"gpus": [2], "vllm_port": 8001, "vllm_model": QWEN05}}


@pytest.fixture(scope="module")
def host_plan():
    return plan(TWO, vllm_api_key=SECRET)


def fresh(target: ServiceTarget, **changes) -> VllmServiceState:
    state = VllmServiceState(target=target, user_uid=None, unit_sha256=None, env_sha256=None, env_stat=None,
                             env_dir_stat=None, unit={"LoadState": "not-found", "ActiveState": "inactive"})
    return dataclasses.replace(state, **changes)


def converged(p, **changes) -> VllmServiceState:
    unit = render_unit(p)
    return fresh(ops.service_target(p), user_uid=999, unit_sha256=text_sha256(unit), unit_text=unit,
                 env_sha256=text_sha256(render_env(p)), env_stat=ENV_FILE_STAT, env_dir_stat=ENV_DIR_STAT,
                 unit={"ActiveState": "active", "SubState": "running", "MainPID": "42", "UnitFileState": "enabled",
                       "NeedDaemonReload": "no"},
                 memory_limit_bytes=p.memory_max_bytes,
                 probe=Probe(health=200, error="", models_status=200, models=(p.served_model_name,)), **changes)


def run(operation, *args, snapshot: VllmServiceState, asked: VllmServiceState | None = None, executing=True):
    """`operation`'s commands; the snapshot's vllm section (vllm.service's) and what the fact
    answers when asked for the instance."""
    fake = OpHost({"vllm": snapshot}, executing, facts={VllmServiceFact: asked or snapshot})
    with ctx_host.use(fake):
        return list(operation._inner(*args)), fake


# -- the units -----------------------------------------------------------------------------------


def test_each_instance_unit_names_its_gpus_by_uuid_its_env_file_port_and_limit(host_plan):
    a, b = host_plan.instances["a"], host_plan.instances["b"]
    unit_a, unit_b = render_unit(a), render_unit(b)
    assert f"Environment=CUDA_VISIBLE_DEVICES={UUID.format(0)},{UUID.format(1)}\n" in unit_a
    assert f"Environment=CUDA_VISIBLE_DEVICES={UUID.format(2)}\n" in unit_b
    assert "EnvironmentFile=/etc/vllm-hostkit/vllm@a.env\n" in unit_a
    assert "EnvironmentFile=/etc/vllm-hostkit/vllm@b.env\n" in unit_b
    assert "--port 8000 " in unit_a and "--port 8001 " in unit_b
    assert "Description=vLLM OpenAI-compatible server, instance a (vllm-hostkit)\n" in unit_a
    assert f"MemoryMax={a.memory_max_bytes}\n" in unit_a and f"MemoryMax={b.memory_max_bytes}\n" in unit_b
    assert a.memory_max_bytes != b.memory_max_bytes  # each its own share of RAM
    assert unit_a.startswith(MANAGED_MARKER)
    for text in (unit_a, unit_b):
        assert SECRET not in text
    assert SECRET not in " ".join(a.argv + b.argv)


def test_each_instance_env_file_holds_its_secret_and_names_its_unit(host_plan):
    env = render_env(host_plan.instances["b"])
    assert f'VLLM_API_KEY="{SECRET}"' in env
    assert "# Secrets for vllm@b.service." in env


def test_a_gpu_without_uuid_is_named_by_index_and_said(host_plan):
    a = host_plan.instances["a"].model_copy(update={"gpu_uuids": [UUID.format(0), ""]})
    assert f"Environment=CUDA_VISIBLE_DEVICES={UUID.format(0)},1\n" in render_unit(a)
    assert unknown_uuids(a).startswith("vllm@a.service: GPU 1 has no UUID in the facts")
    assert unknown_uuids(host_plan.instances["b"]) is None


def test_each_instance_gets_its_own_watchdog_and_vllm_service_none(host_plan):
    main, *instances = host_watchdog_plans(host_plan)
    assert (main.unit, main.enabled, main.keep_script) == ("vllm-hostkit-watchdog.service", False, True)
    assert [(w.unit, w.enabled) for w in instances] == [("vllm-hostkit-watchdog@a.service", True),
                                                        ("vllm-hostkit-watchdog@b.service", True)]
    assert not any("watchdog" in warning for warning in host_plan.warnings)
    classic = plan_host(profile_from_data("gpu-8", {"vllm_model": QWEN05}), host_facts(8), host_name="gpu-8")
    assert [(w.unit, w.enabled) for w in host_watchdog_plans(classic)] == [("vllm-hostkit-watchdog.service", True)]


# -- the operations ------------------------------------------------------------------------------


def test_a_fresh_instance_installs_its_own_files_and_restarts_only_itself(host_plan):
    b = host_plan.instances["b"]
    commands, fake = run(ops.vllm_service, b, snapshot_scope(), snapshot=fresh(ServiceTarget("", "", "", 0)),
                         asked=fresh(ops.service_target(b)))
    preparing, unit_upload, _, _, env_upload, installing = commands
    assert preparing.splitlines()[1].startswith("id -u vllm >/dev/null 2>&1 || useradd ")
    assert isinstance(unit_upload, FileUploadCommand) and unit_upload.dest == "/run/vllm-hostkit/verify/vllm@b.service"
    assert env_upload.dest == "/etc/vllm-hostkit/.vllm@b.env.new"
    assert installing.splitlines()[1:] == [
        "chown root:root /etc/vllm-hostkit/.vllm@b.env.new && chmod 0600 /etc/vllm-hostkit/.vllm@b.env.new"
        " && mv -f /etc/vllm-hostkit/.vllm@b.env.new /etc/vllm-hostkit/vllm@b.env",
        "install -m 0644 -o root -g root /run/vllm-hostkit/verify/vllm@b.service"
        " /etc/systemd/system/.vllm@b.service.new && mv -f /etc/systemd/system/.vllm@b.service.new"
        " /etc/systemd/system/vllm@b.service",
        "systemctl daemon-reload", "systemctl enable vllm@b.service",
        "systemctl reset-failed vllm@b.service", "systemctl restart vllm@b.service",
    ]
    assert fake.facts_asked == [{"target": ops.service_target(b)}]
    for command in commands:
        assert SECRET not in repr(command) and SECRET not in str(command)


def test_a_converged_instance_yields_nothing(host_plan):
    for p in host_plan.instances.values():
        state = converged(p)
        for operation in (ops.vllm_service, ops.vllm_ready):
            assert run(operation, p, snapshot_scope(), snapshot=fresh(ServiceTarget("", "", "", 0)), asked=state)[0] == []


def test_an_instance_whose_unit_is_unchanged_is_not_restarted_when_another_changes(host_plan):
    a, b = host_plan.instances["a"], host_plan.instances["b"]
    changed_b = b.model_copy(update={"argv": [*b.argv, "--max-num-seqs", "8"]})
    assert run(ops.vllm_service, a, snapshot_scope(), snapshot=converged(b), asked=converged(a))[0] == []
    commands, _ = run(ops.vllm_service, changed_b, snapshot_scope(), snapshot=converged(a), asked=converged(b))
    assert "systemctl restart vllm@b.service" in commands[-1] and "vllm@a" not in " ".join(map(str, commands))


# -- the fact ------------------------------------------------------------------------------------


def test_the_fact_looks_at_the_instances_unit_env_file_and_port(host_plan):
    target = ops.service_target(host_plan.instances["b"])
    command = VllmServiceFact().command(target=target)
    assert "hk_unit=vllm@b.service\n" in command and "hk_unit_path=/etc/systemd/system/vllm@b.service\n" in command
    assert "hk_env_file=/etc/vllm-hostkit/vllm@b.env\n" in command and " 8001 /etc/vllm-hostkit/vllm@b.env" in command
    assert json.loads(target.as_json())[-1] == "b"
    assert json.loads(ServiceTarget.of_scope(snapshot_scope()).as_json()) == ["vllm", "/opt/vllm/bin/vllm", "0.0.0.0", 8000]


def test_the_fact_lists_the_instances_files_by_name(host_plan):
    target = ops.service_target(host_plan.instances["b"])
    state = VllmServiceFact().process([
        f"target={target.as_json()}",
        "instance_unit=/etc/systemd/system/vllm@b.service", "instance_unit=/etc/systemd/system/vllm@a.service",
        "instance_env=/etc/vllm-hostkit/vllm@a.env", "instance_env=/etc/vllm-hostkit/vllm@old.env",
    ])
    assert state.target == target
    assert (state.instance_units, state.instance_env_files) == (("a", "b"), ("a", "old"))
    watched = VllmServiceFact().process(["instance_watchdog=/etc/systemd/system/vllm-hostkit-watchdog@c.service",
                                         "instance_watchdog=/etc/systemd/system/vllm-hostkit-watchdog@a.service"])
    assert (watched.instance_watchdogs, watched.instance_units) == (("a", "c"), ())
    assert "hk_instance_watchdogs='/etc/systemd/system/vllm-hostkit-watchdog@*.service'\n" in VllmServiceFact().command(
        snapshot_scope())


# -- removal -------------------------------------------------------------------------------------

CLASSIC_UNIT = f"{MANAGED_MARKER}; edits are overwritten on the next run.\n[Service]\n"


def on_host(instances=(), envs=(), classic: str | None = None) -> VllmServiceState:
    return fresh(ServiceTarget.of_scope(snapshot_scope()), instance_units=tuple(instances),
                 instance_env_files=tuple(envs), unit_text=classic,
                 unit_sha256=text_sha256(classic) if classic else None)


def test_an_instance_left_out_is_removed_and_the_others_left_alone():
    assert unplanned_units(["a", "c"], on_host(["a", "b", "c"], ["a", "b", "c"])) == ["b"]
    assert unplanned_units(["a"], on_host(["a"], ["a", "gone"])) == ["gone"]  # an env file alone
    assert unplanned_units(["a", "b"], on_host(["a", "b"], ["a", "b"])) == []


def test_switching_form_removes_the_other_one():
    assert unplanned_units(["a"], on_host(classic=CLASSIC_UNIT)) == [None]
    assert unplanned_units(None, on_host(["a", "b"], ["a"], classic=CLASSIC_UNIT)) == ["a", "b"]
    # A vllm.service hostkit did not write stays.
    assert unplanned_units(["a"], on_host(classic="[Service]\nExecStart=/bin/true\n")) == []


def test_the_removal_stops_disables_and_removes_each_unplanned_unit_in_one_command():
    commands, fake = run(ops.vllm_units_removed, ["a"], snapshot_scope(),
                         snapshot=on_host(["a", "b"], ["a", "b"], classic=CLASSIC_UNIT))
    assert commands == ["\n".join((
        "set -e",
        "systemctl disable --now vllm.service 2>/dev/null || true",
        "systemctl reset-failed vllm.service 2>/dev/null || true",
        "rm -f /etc/systemd/system/vllm.service /etc/vllm-hostkit/vllm.env",
        "systemctl disable --now vllm@b.service 2>/dev/null || true",
        "systemctl reset-failed vllm@b.service 2>/dev/null || true",
        "rm -f /etc/systemd/system/vllm@b.service /etc/vllm-hostkit/vllm@b.env",
        "systemctl daemon-reload",
    ))]
    assert "vllm@a" not in commands[0]
    assert run(ops.vllm_units_removed, ["a", "b"], snapshot_scope(), snapshot=on_host(["a", "b"], ["a", "b"]))[0] == []


# -- what the deploy refuses ---------------------------------------------------------------------


def test_the_deploy_takes_instances_of_several_releases_and_refuses_vllm_install(host_plan):
    """Each instance's own release: tests/unit/test_instances_releases.py."""
    assert deploy.instances_refusal(host_plan) is None
    two = plan({**TWO, "b": {**TWO["b"], "vllm_version": "0.20.0"}})
    assert deploy.instances_refusal(two) is None
    installed = plan(TWO, vllm_install=True)
    assert deploy.instances_refusal(installed).startswith("vllm_install with vllm_instances")


def test_the_deploy_lock_outlasts_every_gate(host_plan):
    timeouts = sum(p.ready_timeout_s for p in host_plan.instances.values())
    assert deploy.lock_stale_after_s(host_plan) == deploy.deploy_lock_stale_after_s(timeouts)


# -- the deploy's steps --------------------------------------------------------------------------


class Recorder:
    """An operations module whose every operation records its step's name and arguments."""

    def __init__(self, steps: list):
        self.steps = steps

    def __getattr__(self, operation):
        return lambda **kwargs: self.steps.append((operation, kwargs))


def deploy_steps(monkeypatch, host_plan, on_host_now: VllmServiceState | None = None) -> list:
    steps: list = []
    for module in ("driver_hold", "gpu", "kernel", "lock", "monitoring", "nvme_boot", "swap", "vllm_install",
                   "vllm_service", "watchdog"):
        monkeypatch.setattr(deploy, module, Recorder(steps))
    monkeypatch.setattr(deploy, "plan_or_refusal", lambda: (None, host_plan, None))
    monkeypatch.setattr(deploy, "snapshot_scope", lambda profile: host_plan.scope)
    monkeypatch.setattr(deploy, "snapshot", lambda op_host, scope: dataclasses.make_dataclass(
        "Taken", [("vllm", VllmServiceState)])(on_host_now or on_host()))
    deploy.vllm_host.__wrapped__()
    return steps


def names(steps) -> list[str]:
    return [kwargs["name"] for _, kwargs in steps]


CLASSIC_STEPS = [
    "Check the host's facts were read in time", "Take the deploy lock", "Check the GPU driver",
    "Hold the NVIDIA driver packages", "Swap file on NVMe",
    "NVMe and swap at boot (vllm-hostkit-nvme.service)", "Kernel memory sysctls", "Transparent hugepages",
    "Memory monitoring", "vLLM runtime", "vLLM systemd unit", "vLLM readiness gate", "vLLM health watchdog",
    "Release the deploy lock",
]


def classic_plan():
    return plan_host(profile_from_data("gpu-8", {"vllm_model": QWEN05}), host_facts(8), host_name="gpu-8")


def test_vllm_service_hosts_deploy_the_steps_they_did(monkeypatch):
    host_plan = classic_plan()
    steps = deploy_steps(monkeypatch, host_plan)
    assert names(steps) == CLASSIC_STEPS
    assert dict(steps)["vllm_service"]["plan"] is host_plan.vllm


def test_a_vllm_service_host_with_instance_files_left_removes_them_first(monkeypatch):
    steps = deploy_steps(monkeypatch, classic_plan(), on_host(["a"], ["a"]))
    at = CLASSIC_STEPS.index("vLLM runtime")
    assert names(steps) == [*CLASSIC_STEPS[:at], "Remove the vLLM instances not planned", *CLASSIC_STEPS[at:]]
    assert dict(steps)["vllm_units_removed"]["planned"] is None


def test_a_vllm_service_host_with_instance_watchdogs_left_removes_them_first(monkeypatch):
    steps = deploy_steps(monkeypatch, classic_plan(), dataclasses.replace(on_host(), instance_watchdogs=("a",)))
    at = CLASSIC_STEPS.index("vLLM health watchdog")
    assert names(steps) == [*CLASSIC_STEPS[:at], "Remove the watchdogs of instances not planned", *CLASSIC_STEPS[at:]]
    assert dict(steps)["instance_watchdogs_removed"]["planned"] == []


def test_an_instance_host_runs_each_unit_and_gate_in_turn_then_each_watchdog(monkeypatch, host_plan):
    steps = deploy_steps(monkeypatch, host_plan)
    at = CLASSIC_STEPS.index("vLLM runtime")
    assert names(steps) == [
        *CLASSIC_STEPS[:at], "Remove the vLLM units not planned",
        "vLLM runtime of vllm@a.service", "vLLM runtime of vllm@b.service",  # both before any unit restarts
        "vLLM unit vllm@a.service", "vLLM readiness gate of vllm@a.service",
        "vLLM unit vllm@b.service", "vLLM readiness gate of vllm@b.service",
        "Remove the watchdogs of instances not planned", "vLLM health watchdog",
        "vLLM health watchdog vllm-hostkit-watchdog@a.service", "vLLM health watchdog vllm-hostkit-watchdog@b.service",
        "Release the deploy lock",
    ]
    by_name = {kwargs["name"]: kwargs for _, kwargs in steps}
    assert by_name["Remove the vLLM units not planned"]["planned"] == ["a", "b"]
    assert by_name["Remove the watchdogs of instances not planned"]["planned"] == ["a", "b"]
    assert by_name["vLLM unit vllm@b.service"]["plan"] is host_plan.instances["b"]
    assert by_name["vLLM runtime of vllm@b.service"]["plan"] is host_plan.instances["b"]
    assert by_name["Memory monitoring"]["servers"] == [host_plan.instances["a"], host_plan.instances["b"]]
    assert by_name["vLLM health watchdog"]["plan"].enabled is False  # vllm.service's, removed if there
    assert by_name["vLLM health watchdog vllm-hostkit-watchdog@b.service"]["plan"].enabled
