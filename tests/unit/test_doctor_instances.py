"""`hostkit doctor` on a host with vllm_instances: each instance read from its own parts,
diagnosed on its own unit, process, GPUs and flags, and shown by its unit; the host's
findings once. On the probe output recorded on a lab container host (fixtures/doctor/lab-instances.txt)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit.doctor.gather import doctor_command, parse_doctor_output, split_sub_sections
from hostkit.doctor.report import exit_code, render_json, render_text
from hostkit.doctor.rules import UNIT_RULES, diagnose

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
PLANNED = {"a": (0,), "b": (1,), "c": (2,)}  # each instance's GPUs by index, as the plan placed them
UUID = "GPU-1ab0c0de-0000-4000-8000-00000000000{}"


def lines(name: str = "lab-instances") -> list[str]:
    return (FIXTURES / f"{name}.txt").read_text().splitlines()


def recorded(output: list[str] | None = None, instances=PLANNED):
    return parse_doctor_output("lab", output if output is not None else lines(), instances=instances)


def by_name(inputs):
    return {instance.name: instance for instance in inputs.instances}


def test_each_instance_is_read_from_its_own_parts():
    instances = by_name(recorded())
    assert list(instances) == ["a", "b", "c"]
    a, b, c = instances["a"], instances["b"], instances["c"]
    assert (a.unit.unit, a.unit.active_state, a.unit.main_pid, a.unit.restarts) == ("vllm@a.service", "active", 257, 0)
    assert a.unit.control_group == "/system.slice/system-vllm.slice/vllm@a.service"
    assert a.vllm.pid == 257 and a.vllm.tree_pids == (257, 303) and "8000" in a.vllm.argv
    assert c.vllm.pid == 515 and "lab-c" in c.vllm.argv
    assert [(gpu.index, gpu.uuid) for gpu in a.gpus] == [(0, UUID.format(0))]
    assert [(gpu.index, gpu.uuid) for gpu in c.gpus] == [(2, UUID.format(2))]
    # Stopped: no main process, and no other instance's server taken for its own.
    assert (b.unit.active_state, b.unit.main_pid, b.vllm) == ("inactive", None, None)
    assert "--port" in b.unit.exec_start and "8001" in b.unit.exec_start
    assert a.keepalive.engine_death_count == 0


def test_without_instances_the_host_is_read_as_vllm_services():
    inputs = recorded(instances=None)
    assert inputs.instances == () and inputs.unit.unit == "vllm.service" and not inputs.unit.loaded
    assert "instances" not in inputs.to_dict()
    assert "hk_instances=''" in doctor_command()
    assert ("hk_instances='vllm@a.service vllm-hostkit-watchdog@a.service /var/lib/vllm-hostkit/watchdog@a.json "
            "vllm@b.service vllm-hostkit-watchdog@b.service /var/lib/vllm-hostkit/watchdog@b.json'") in doctor_command(
        instances=("a", "b"))


def test_host_rules_once_and_each_instances_unit_rules_on_its_own():
    diagnosis = diagnose(recorded())
    host_codes = [finding.code for finding in diagnosis.findings]
    assert host_codes == ["no-swap", "kernel-log-unreadable"]  # no vllm-absent: vllm.service is not planned
    codes = {instance.name: [(f.severity.value, f.code) for f in instance.findings] for instance in diagnosis.instances}
    # The container's systemd has no memory controller: each instance's limit is missing on the host.
    assert codes == {"a": [("warning", "memory-limit-missing")],
                     "b": [("critical", "vllm-not-running"), ("warning", "memory-limit-missing")],
                     "c": [("warning", "memory-limit-missing")]}
    assert diagnosis.critical and exit_code([diagnosis]) == 1
    settings = {instance.name: instance.settings.options["--served-model-name"] for instance in diagnosis.instances}
    assert settings == {"a": "lab-a", "b": "lab-b", "c": "lab-c"}
    assert diagnosis.instances[1].settings.argv_source == "unit"  # b: its ExecStart, nothing running
    assert {rule.__name__ for rule in UNIT_RULES} >= {"unit_state", "vllm_oom_kills", "memory_limit"}


def test_text_shows_each_instance_by_its_unit_and_the_host_once():
    text = render_text([diagnose(recorded())])
    assert text.count("no-swap:") == 1 and text.count("  RAM ") == 1
    for index, name in enumerate("abc"):
        assert f"  vllm@{name}.service GPU {index}  " in text
        assert f"vllm@{name}.service: memory-limit-missing: vllm@{name}.service has no memory limit" in text
        assert f"vllm@{name}.service OOM kills" in text and f"vllm@{name}.service memory " in text
    assert "vllm@a.service               active/running" in text
    assert "vllm@b.service               inactive/dead, last run exited, status 0" in text
    assert "CRITICAL vllm@b.service: vllm-not-running: vllm@b.service is inactive/dead" in text
    assert text.index("CRITICAL") < text.index("WARNING  no-swap")  # the worst first, whoever has it
    assert "-> 1 critical, 4 warning(s), 1 note(s)" in text


def test_json_carries_each_instance_with_its_inputs_settings_and_findings():
    document = json.loads(render_json([diagnose(recorded())]))
    (host,) = document["hosts"]
    assert document["exit_code"] == 1
    assert [(i["name"], i["unit"]) for i in host["instances"]] == [("a", "vllm@a.service"), ("b", "vllm@b.service"),
                                                                   ("c", "vllm@c.service")]
    a = host["instances"][0]
    assert a["inputs"]["unit"]["main_pid"] == 257 and a["inputs"]["gpus"][0]["uuid"] == UUID.format(0)
    assert a["vllm_settings"]["options"]["--port"] == "8000"
    assert [finding["code"] for finding in host["instances"][1]["findings"]] == ["vllm-not-running",
                                                                               "memory-limit-missing"]
    assert host["vllm_settings"] is None and "instances" not in host["inputs"]  # once, under "instances"


def with_gpu_processes(output: list[str]) -> list[str]:
    """The recording, as if a (pid 257) held 1000 MiB of GPU 0, c (pid 515) 500 MiB of it too
    (a shared GPU), and pid 999 of another service 200 MiB: the gpu section's apps and procs
    parts in the form the snapshot's reader parses."""
    apps = output.index("@@gpu:apps@@") + 1
    output = output[:apps] + [f"257, 1000, {UUID.format(0)}", f"515, 500, {UUID.format(0)}",
                              f"999, 200, {UUID.format(0)}"] + output[apps + 1:]
    procs = output.index("@@gpu:procs@@") + 1
    return output[:procs] + [
        "257 comm python3", "257 cgroup 0::/system.slice/system-vllm.slice/vllm@a.service",
        "515 comm python3", "515 cgroup 0::/system.slice/system-vllm.slice/vllm@c.service",
        "999 comm python3", "999 cgroup 0::/system.slice/trainer.service",
    ] + output[procs:]


def test_gpu_memory_is_split_by_each_instances_cgroup():
    instances = by_name(recorded(with_gpu_processes(lines()), instances={"a": (0,), "c": (0, 2)}))
    (a_gpu0,) = instances["a"].gpus
    assert (a_gpu0.used_mib, a_gpu0.vllm_mib, a_gpu0.other_mib, a_gpu0.other_pids) == (0, 1000, 200, (999,))
    c_gpu0, c_gpu2 = instances["c"].gpus
    # The instance beside it on the GPU is neither its memory nor held outside vLLM.
    assert (c_gpu0.vllm_mib, c_gpu0.other_mib, c_gpu0.other_pids) == (500, 200, (999,))
    assert (c_gpu2.index, c_gpu2.vllm_mib, c_gpu2.other_mib) == (2, 0, 0)
    diagnosis = diagnose(recorded(with_gpu_processes(lines()), instances={"a": (0,), "c": (0, 2)}))
    held = {instance.name: [f.evidence["holders"] for f in instance.findings if f.code == "gpu-held-outside-vllm"]
            for instance in diagnosis.instances}
    assert held == {"a": [[{"pid": 999, "name": "python3", "used_mib": 200}]],
                    "c": [[{"pid": 999, "name": "python3", "used_mib": 200}]]}


def with_kills_in(output: list[str], unit: str) -> list[str]:
    """The recording with fixtures/doctor/lab-oom.txt's kernel log (a memcg kill of pid 536 in
    vllm.service, a global kill of pid 583 in hog.service), vllm.service's cgroup named `unit`."""
    oom = split_sub_sections(lines("lab-oom"))["oom"]
    oom = [line.replace("/system.slice/vllm.service", f"/system.slice/system-vllm.slice/{unit}") for line in oom]
    at = output.index("@@doctor:oom@@") + 1
    return output[:at] + oom + output[at + 1:]


def test_an_oom_kill_in_one_instances_cgroup_is_that_instances_alone():
    diagnosis = diagnose(recorded(with_kills_in(lines(), "vllm@a.service")))
    killed = {instance.name: [f.evidence["kills"][0]["pid"] for f in instance.findings if f.code == "vllm-oom-killed"]
              for instance in diagnosis.instances}
    assert killed == {"a": [536], "b": [], "c": []}
    others = [f.evidence["kills"] for f in diagnosis.findings if f.code == "oom-kill-other"]
    assert [[kill["pid"] for kill in kills] for kills in others] == [[583]]  # the host's, once
    text = render_text([diagnosis])
    assert "CRITICAL vllm@a.service: vllm-oom-killed: vLLM hit its unit memory limit" in text
    assert "vllm@a.service OOM kills     ? in its cgroup (memory.events), 1 in the kernel log since boot" in text
    assert "vllm@c.service OOM kills     ? in its cgroup (memory.events), 0 in the kernel log since boot" in text


@pytest.mark.processes
def test_an_inventory_host_whose_instances_cannot_be_planned_shows_them_without_gpus(tmp_path):
    """Through pyinfra's @local connector: this machine has no GPU 5, so the plan cannot place
    the instance, and doctor still reads its unit (absent here), naming the plan's reason."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text('hosts = [("@local", {"gpu_required": False, "swap_enabled": False, "monitoring_enabled": False,'
                         ' "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "vllm_instances": {"solo": {"gpus": [5]}}})]\n')
    result = subprocess.run(
        [sys.executable, "-c", "from hostkit.cli.main import main; main()", "doctor", str(inventory), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    (host,) = json.loads(result.stdout)["hosts"]
    (instance,) = host["instances"]
    assert (instance["name"], instance["unit"], instance["inputs"]["gpus"]) == ("solo", "vllm@solo.service", [])
    assert "vllm-absent" in {finding["code"] for finding in instance["findings"]}
    (unplanned,) = [finding for finding in host["findings"] if finding["code"] == "instances-unplanned"]
    # A GPU-less machine, or one with fewer than six GPUs.
    assert ("the instances' GPUs cannot be placed" in unplanned["problem"]
            or "GPU 5 of vllm_instances 'solo' is not on this host" in unplanned["problem"]), unplanned["problem"]
    assert result.returncode == 0  # warnings only


# --- each instance's own watchdog (vllm-hostkit-watchdog@NAME.service) ------------------------
# lab-instances-watched.txt: tests/e2e/test_instances_watched.py's host after b's watchdog
# restarted it (its /health answered 500), recorded with doctor_command(instances=("a", "b", "c")).
B_RESTART = ("2026-12-07T06:42:42+0000 m2024x1 python3[815]: restarting vllm@b.service: 2 consecutive failed checks "
             "(last: /health: HTTP 500); watchdog restart 1 of at most 2 an hour")


def test_each_instances_watchdog_is_read_from_its_own_journal_and_state_file():
    instances = by_name(recorded(lines("lab-instances-watched")))
    b = instances["b"].keepalive
    assert (b.watchdog_lines, b.watchdog_restarts, b.checked_at) == ((B_RESTART,), (1796625762.6765733,), 1796625766)
    for name in "ac":
        assert (instances[name].keepalive.watchdog_lines, instances[name].keepalive.watchdog_restarts) == ((), ())


def test_a_watchdog_restart_is_found_under_its_instance_alone_naming_its_watchdog():
    diagnosis = diagnose(recorded(lines("lab-instances-watched")))
    found = {instance.name: [f for f in instance.findings if f.code == "vllm-watchdog-restarts"]
             for instance in diagnosis.instances}
    assert {name: len(findings) for name, findings in found.items()} == {"a": 0, "b": 1, "c": 0}
    assert "vllm-watchdog-restarts" not in [f.code for f in diagnosis.findings]
    [finding] = found["b"]
    assert finding.problem == ("The health watchdog restarted vllm@b.service 1 time(s) in the last 24 h "
                               "(a failing or hung server).")
    assert finding.fix.startswith("Read its reasons (`journalctl -u vllm-hostkit-watchdog@b.service`)")
    assert finding.evidence == {"restarts": [1796625762.6765733], "journal": [B_RESTART]}
    text = render_text([diagnosis])
    assert "WARNING  vllm@b.service: vllm-watchdog-restarts: The health watchdog restarted vllm@b.service" in text
    assert f"| {B_RESTART}" in text
    assert json.loads(render_json([diagnosis]))["hosts"][0]["instances"][1]["inputs"]["keepalive"][
        "watchdog_restarts"] == [1796625762.6765733]


def _watchdog_lines(instance: str) -> list[str]:
    """An instance's watchdog's journal as vllm_watchdog.py words it (its own decide()): a
    failed check, a restart, the hourly cap, the unit's start limit and failure, in short-iso."""
    from hostkit.remote import vllm_watchdog as wd

    unit, _, _ = wd.instance_files(instance)
    config = wd.Config(unit, "http://127.0.0.1:8001", "lab-b", 2, 1, 1, 6, 10, 5400)
    running = wd.UnitStatus("active", "running", "success", "inv1")
    failing = wd.Seen(None, running, (wd.ProbeResult("/health", True, False, "HTTP 500"),))
    state = {**wd.new_state(), "serving_invocation": "inv1"}
    messages = []
    for seen, now in ((failing, 1000.0), (failing, 1010.0), (failing, 1020.0),
                      (wd.Seen(None, wd.UnitStatus("failed", "failed", "start-limit-hit", "inv2")), 1020.0),
                      (wd.Seen(None, wd.UnitStatus("failed", "failed", "exit-code", "inv3")), 1030.0)):
        decision = wd.decide(state, seen, now, config)
        state, messages = decision.state, messages + decision.messages
    stamp = "2026-12-07T06:42:42+0000 m2024x1 python3[815]: "
    return [stamp + message[len(wd.INFO):] for message in messages]


@pytest.mark.processes
def test_the_one_watchdog_reader_keeps_an_instances_decisions(tmp_path):
    """The doctor command itself, run here with a journalctl that answers for b's watchdog alone:
    its decisions (restart, cap, start limit, failure) come under b, its failed checks do not."""
    journal = _watchdog_lines("b")
    decisions = [line for line in journal if " check failed " not in line]
    assert [line.split(": ", 1)[1].split(" ")[0] for line in decisions] == [
        "restarting", "not", "vllm@b.service", "vllm@b.service"]
    assert len(journal) == len(decisions) + 3  # 1/1, 1/2 and 2/2: failed checks, not decisions
    (tmp_path / "journal.txt").write_text("\n".join(journal) + "\n")
    fake = tmp_path / "journalctl"
    fake.write_text(f'#!/bin/sh\n[ "$2" = vllm-hostkit-watchdog@b.service ] && cat {tmp_path}/journal.txt\ntrue\n')
    fake.chmod(0o755)
    script = doctor_command(with_proc=False, instances=("a", "b"))
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120, check=False,
                            env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    parts = split_sub_sections(result.stdout.splitlines())
    assert parts["watchdog vllm@a.service"] == []
    assert parts["watchdog vllm@b.service"] == [f"line {line}" for line in decisions]
    kept = parse_doctor_output("here", result.stdout.splitlines(), instances={"a": (), "b": ()}).instances[1].keepalive
    assert len(kept.watchdog_lines) == 4 and "not restarting vllm@b.service" in kept.watchdog_lines[1]
