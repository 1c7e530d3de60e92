"""vLLM as a systemd service on real lab hosts, with the vLLM stand-in.

Three hosts serve the module: a container and two VMs, one per cgroup version (the Debian 11
and 13 VMs that test_distros.py provisions, conftest.RELEASE_HOSTS). Every test
first converges its host to BASE, so each starts from a serving unit whatever ran before it.
The deploy is tests/e2e/vllm_deploy.py: hostkit's plan, then only the vLLM operations. What
the kernel's cgroup version changes (the memory directives, the limit the kernel enforces,
the OOM kill, the unit's exposure) runs on both VMs; the rest (systemd's part: rendering,
restarts, the readiness gate, secrets) on the container, at native speed.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest

from hostkit.paths import WATCHDOG_UNIT, vllm_instance_env_file, vllm_instance_unit
from hostkit.vllm.readiness import Probe, probe_command
from tests.e2e.conftest import RELEASE_HOSTS, release_host
from tests.e2e.test_instances import DEPLOY as INSTANCES_DEPLOY, FAKE_NVIDIA_SMI, NVIDIA_SMI
from tests.e2e.lab_shell import sh
from hostkit_lab.standin.install import install_standin
from tests.waiting import wait_for

pytestmark = pytest.mark.lab

DEPLOY = Path(__file__).with_name("vllm_deploy.py")
LAB_KEY = "lab-secret-not-for-production"  # inventories/lab.py
BASE = {
    "nvme_device": None,
    "swap_enabled": False,
    "vllm_served_model_name": "lab-model",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 120,
}
UNIT_PROPERTIES = ("ActiveState", "SubState", "MainPID", "ActiveEnterTimestampMonotonic", "NRestarts",
                   "UnitFileState", "User", "ExecMainStartTimestampMonotonic", "InvocationID")
RELEASE_OF_CGROUP = {cgroup: os_name for os_name, cgroup in RELEASE_HOSTS.items()}
# What identifies one run of the service: a restart changes both.
RUN_IDENTITY = ("InvocationID", "MainPID")


@pytest.fixture(scope="module", params=["container", "v2", "v1"])
def vllm_host(lab, shared_hosts, request):
    if request.param != "container":
        lab_host = release_host(shared_hosts, RELEASE_OF_CGROUP[request.param])
        # A main deploy (test_distros.py) left its watchdog on this shared VM: starved of CPU by
        # the other lane, it may restart the unit mid-test, which these tests would blame on
        # the deploy. Its own tests are test_watchdog.py's.
        watching = sh(lab_host, f"systemctl is-active {WATCHDOG_UNIT}; true").strip() == "active"
        sh(lab_host, f"systemctl stop {WATCHDOG_UNIT}; true")
        yield lab_host
        # Unless the VM went with its group's last test (conftest.SharedHosts), which came first.
        if watching and any(lab_host in hosts for hosts in shared_hosts.started.values()):
            sh(lab_host, f"systemctl start {WATCHDOG_UNIT}")
        return
    lab_host = lab.up(1, os_name="debian12", prefix="vllmcx", kind="container")[0]
    install_standin(lab_host)
    yield lab_host
    lab.remove(lab_host.name)


# For tests whose subject is systemd's, not the kernel's.
CONTAINER_ONLY = pytest.mark.parametrize("vllm_host", ["container"], indirect=True)
# For tests of what the kernel's cgroup version changes.
KERNEL_CGROUPS = pytest.mark.parametrize("vllm_host", ["v2", "v1"], indirect=True)


def show(lab_host) -> dict[str, str]:
    properties = " ".join(f"-p {name}" for name in UNIT_PROPERTIES)
    lines = sh(lab_host, f"systemctl show vllm.service {properties}").splitlines()
    return dict(line.split("=", 1) for line in lines)


def probe(lab_host) -> Probe:
    return Probe.parse(sh(lab_host, probe_command("0.0.0.0", 8000)).strip())


def converge(run_deploy, lab_host, **data):
    run = run_deploy(lab_host, {**BASE, **data}, deploy=DEPLOY)
    assert run.ok, run.output[-4000:]
    return run


def journal_cursor(lab_host) -> str:
    output = sh(lab_host, "journalctl -u vllm.service -n 0 --show-cursor --no-pager")
    return output.strip().rsplit("cursor: ", 1)[1]


# systemd's "unit started" journal message: its text names the unit by description before
# systemd 249 and by name after, its ID is the same in every release.
STARTED_MESSAGE_ID = "39f53479d3a045ac8e11786248231fbf"


def starts_since(lab_host, cursor: str) -> int:
    journal = sh(lab_host, f"journalctl -u vllm.service --after-cursor='{cursor}' --no-pager -o json"
                           " --output-fields=MESSAGE_ID,JOB_TYPE,JOB_RESULT")
    entries = [json.loads(line) for line in journal.splitlines() if line.strip()]
    return sum(1 for entry in entries if entry.get("MESSAGE_ID") == STARTED_MESSAGE_ID
               and entry.get("JOB_TYPE") == "start" and entry.get("JOB_RESULT") == "done")


@KERNEL_CGROUPS
def test_installed_enabled_active_ready_as_its_own_user(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    state = show(vllm_host)
    assert (state["ActiveState"], state["UnitFileState"], state["User"]) == ("active", "enabled", "vllm")
    assert sh(vllm_host, f"ps -o user= -p {state['MainPID']}").strip() == "vllm"
    assert probe(vllm_host).serves("lab-model")
    assert sh(vllm_host, "stat -c '%a %U %G' /etc/vllm-hostkit/vllm.env").strip() == "600 root root"
    unit = sh(vllm_host, "systemctl cat vllm.service")
    if vllm_host.cgroup == "v1":
        assert "MemoryLimit=" in unit and "MemoryMax=" not in unit
        limit = sh(vllm_host, "cat /sys/fs/cgroup/memory/system.slice/vllm.service/memory.limit_in_bytes")
    else:
        assert "MemoryMax=" in unit and "MemoryLimit=" not in unit
        limit = sh(vllm_host, "cat /sys/fs/cgroup/system.slice/vllm.service/memory.max")
    planned = int(re.search(r"^Memory(?:Max|Limit)=(\d+)$", unit, re.MULTILINE).group(1))
    assert 0 <= planned - int(limit) < 4096


def run_identity(lab_host) -> tuple[str, ...]:
    state = show(lab_host)
    return tuple(state[name] for name in RUN_IDENTITY)


def cgroup_limit(lab_host) -> int:
    """The running unit's memory limit as the kernel enforces it."""
    if lab_host.cgroup == "v1":
        return int(sh(lab_host, "cat /sys/fs/cgroup/memory/system.slice/vllm.service/memory.limit_in_bytes"))
    return int(sh(lab_host, "cat /sys/fs/cgroup/system.slice/vllm.service/memory.max"))


@CONTAINER_ONLY
def test_rerun_changes_nothing_and_does_not_restart(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    before = show(vllm_host)
    run = converge(run_deploy, vllm_host)
    assert run.changed_on(vllm_host.name) == []
    after = show(vllm_host)
    assert [after[name] for name in (*RUN_IDENTITY, "ActiveEnterTimestampMonotonic")] == [
        before[name] for name in (*RUN_IDENTITY, "ActiveEnterTimestampMonotonic")]


@CONTAINER_ONLY
def test_a_template_comment_change_rewrites_the_unit_and_restarts_nothing(vllm_host, run_deploy):
    """As after an upgrade of hostkit whose template says something else in a comment."""
    converge(run_deploy, vllm_host)
    before = run_identity(vllm_host)
    sh(vllm_host, "sed -i -e 's/^# Managed by vllm-hostkit;/# Managed by an older vllm-hostkit;/'"
                  " -e '/^\\[Service\\]/a # a comment that the template no longer has' /etc/systemd/system/vllm.service")
    assert "an older vllm-hostkit" in sh(vllm_host, "cat /etc/systemd/system/vllm.service")
    run = converge(run_deploy, vllm_host)
    assert run.changed_on(vllm_host.name) != []  # the unit file was rewritten
    assert "older vllm-hostkit" not in sh(vllm_host, "cat /etc/systemd/system/vllm.service")
    assert run_identity(vllm_host) == before
    assert show(vllm_host)["ActiveState"] == "active" and probe(vllm_host).serves("lab-model")


@KERNEL_CGROUPS
def test_a_memory_limit_change_applies_to_the_running_unit_without_restart(vllm_host, run_deploy):
    """daemon-reload alone writes memory.max (v2) or memory.limit_in_bytes (v1) of the running unit."""
    converge(run_deploy, vllm_host)
    before, limit_before = run_identity(vllm_host), cgroup_limit(vllm_host)
    run = converge(run_deploy, vllm_host, vllm_memory_max="700M", vllm_memory_high="600M")
    assert "applied to the running unit, no restart" in run.output
    assert cgroup_limit(vllm_host) == 700 * 2**20 != limit_before
    if vllm_host.cgroup == "v2":
        assert int(sh(vllm_host, "cat /sys/fs/cgroup/system.slice/vllm.service/memory.high")) == 600 * 2**20
    assert run_identity(vllm_host) == before, sh(vllm_host, "journalctl -u vllm.service -n 30 --no-pager")
    converge(run_deploy, vllm_host)  # back to "auto", live as well
    assert cgroup_limit(vllm_host) == limit_before
    assert run_identity(vllm_host) == before, sh(vllm_host, "journalctl -u vllm.service -n 30 --no-pager")


NEVER_DISPATCHES = """#!/usr/bin/python3
# A wrapper that serves at once and never reaches argparse's dispatch.
import time
time.sleep(3600)
"""


@CONTAINER_ONLY
def test_a_vllm_whose_cli_never_dispatches_fails_within_its_deadline_and_releases_the_lock(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    before = run_identity(vllm_host)
    sh(vllm_host, f"mkdir -p /opt/wrapper/bin && printf '%s' {shlex.quote(NEVER_DISPATCHES)} > /opt/wrapper/bin/vllm"
                  " && chmod 0755 /opt/wrapper/bin/vllm")
    started = time.monotonic()
    run = run_deploy(vllm_host, {**BASE, "vllm_command": "/opt/wrapper/bin/vllm", "vllm_parse_check_timeout": 10},
                     deploy=DEPLOY)
    elapsed = time.monotonic() - started
    print(json.dumps({"host": vllm_host.name, "never_dispatching_deploy_s": round(elapsed, 1)}))
    assert not run.ok
    assert "did not end within 10s (vllm_parse_check_timeout): importing vLLM took longer than that on this host, or" \
        " its CLI never reached argparse's dispatch" in run.output
    assert elapsed < 120, elapsed  # a whole deploy; the check itself stops at 10 s
    assert sh(vllm_host, "ls /run/vllm-hostkit/deploy.lock 2>/dev/null; pgrep -f 'wrapper/bin/[v]llm'; true") == ""
    assert run_identity(vllm_host) == before and probe(vllm_host).serves("lab-model")
    assert converge(run_deploy, vllm_host).changed_on(vllm_host.name) == []  # the lock is free


@CONTAINER_ONLY
def test_one_flag_restarts_exactly_once(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    cursor = journal_cursor(vllm_host)
    before = show(vllm_host)
    converge(run_deploy, vllm_host, vllm_max_num_seqs=32)
    assert starts_since(vllm_host, cursor) == 1
    assert show(vllm_host)["MainPID"] != before["MainPID"]
    assert "--max-num-seqs 32" in sh(vllm_host, "systemctl show -p ExecStart --value vllm.service")
    assert converge(run_deploy, vllm_host, vllm_max_num_seqs=32).changed_on(vllm_host.name) == []
    assert starts_since(vllm_host, cursor) == 1


@CONTAINER_ONLY
def test_flags_the_hosts_vllm_rejects_leave_the_running_unit_alone(vllm_host, run_deploy):
    """The inventory says 0.17.1 (which has --swap-space) but the host runs 0.20.0 (which
    rejected it): hostkit's data accepts the flag, the host's own parser does not."""
    converge(run_deploy, vllm_host)
    before, unit_before = show(vllm_host), sh(vllm_host, "sha256sum /etc/systemd/system/vllm.service")
    install_standin(vllm_host, version="0.20.0")
    try:
        run = run_deploy(vllm_host, {**BASE, "vllm_version": "0.17.1", "vllm_swap_space": 4}, deploy=DEPLOY)
        assert not run.ok
        assert "argument parser rejected the new command line" in run.output
        assert "unrecognized arguments: --swap-space" in run.output
        assert sh(vllm_host, "sha256sum /etc/systemd/system/vllm.service") == unit_before
        assert show(vllm_host)["MainPID"] == before["MainPID"]
        assert probe(vllm_host).serves("lab-model")
    finally:
        install_standin(vllm_host)


@CONTAINER_ONLY
def test_a_flag_unknown_to_the_version_is_refused_before_any_change(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    before = show(vllm_host)
    run = run_deploy(vllm_host, {**BASE, "vllm_extra_args": {"--no-such-flag": True}}, deploy=DEPLOY)
    assert not run.ok and "--no-such-flag" in run.output
    assert show(vllm_host)["MainPID"] == before["MainPID"]
    assert probe(vllm_host).serves("lab-model")


@CONTAINER_ONLY
def test_the_secret_stays_out_of_unit_ps_and_pyinfra_output(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    secret = "rotated-e2e-secret-4711"
    run = converge(run_deploy, vllm_host, vllm_api_key=secret)
    debug_run = run_deploy(vllm_host, {**BASE, "vllm_api_key": LAB_KEY}, deploy=DEPLOY,
                           extra=("-vvv", "--debug", "--diff"))
    assert debug_run.ok, debug_run.output[-4000:]
    assert "vllm.env" in debug_run.output  # the upload happened in this run
    for output in (run.output, debug_run.output):
        assert secret not in output and LAB_KEY not in output
    converge(run_deploy, vllm_host, vllm_api_key=secret)
    for command in ("systemctl cat vllm.service", "ps auxww", "systemctl show vllm.service"):
        assert secret not in sh(vllm_host, command), command
    assert probe(vllm_host).serves("lab-model")  # the key in the env file is the one vLLM uses
    unauthorised = sh(vllm_host, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models")
    assert unauthorised == "401"


@KERNEL_CGROUPS
def test_memory_overrun_is_contained_in_the_unit(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    # The Debian 11 VM has the main deploy's swap file. Its kernel keeps cgroup v1 swap accounting
    # off (no memory.memsw.*), so MemoryLimit= bounds RAM alone and the overrun would swap instead
    # of being killed; on v2 MemorySwapMax=0 (BASE plans no swap) does that in the unit.
    swap_off = vllm_host.cgroup == "v1" and sh(vllm_host, "swapon --show --noheadings").strip() != ""
    if swap_off:
        sh(vllm_host, "swapoff -a")
    try:
        overrun_is_contained(vllm_host, run_deploy)
    finally:
        if swap_off:
            sh(vllm_host, "swapon -a")


def overrun_is_contained(vllm_host, run_deploy):
    sshd_before = sh(vllm_host, "systemctl show -p MainPID --value ssh.service").strip()
    sh(vllm_host, "dmesg -C")
    cursor = journal_cursor(vllm_host)
    # No MemoryHigh: reclaim throttling would only slow the overrun down.
    overrun = {"vllm_memory_max": "256M", "vllm_memory_high": None, "vllm_ready_timeout": 45,
               "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2", "VLLM_STANDIN_ALLOCATE_MB": "512"}}
    run = run_deploy(vllm_host, {**BASE, **overrun}, deploy=DEPLOY)
    assert not run.ok
    assert "journal lines of vllm.service" in run.output  # the gate showed why
    assert wait_for(lambda: "oom_memcg=/system.slice/vllm.service" in sh(vllm_host, "dmesg"), 300, interval=5), \
        "no OOM kill in the unit's cgroup"
    kernel = sh(vllm_host, "dmesg")
    assert not re.search(r"\] Out of memory: Killed process", kernel)  # no system-wide OOM
    evidence = "killed by the OOM killer" if vllm_host.cgroup == "v2" else "status=9/KILL"
    journal = wait_for(lambda: evidence in sh(
        vllm_host, f"journalctl -u vllm.service --after-cursor='{cursor}' -o cat --no-pager"), 300, interval=5)
    assert journal, f"no {evidence!r} in the unit's journal"
    assert wait_for(lambda: starts_since(vllm_host, cursor) >= 2, 300, interval=5), "the unit was not restarted"
    assert sh(vllm_host, "systemctl show -p MainPID --value ssh.service").strip() == sshd_before
    converge(run_deploy, vllm_host)
    assert probe(vllm_host).serves("lab-model")


@KERNEL_CGROUPS
def test_security_exposure_is_at_most_2_5(vllm_host, run_deploy):
    converge(run_deploy, vllm_host)
    report = sh(vllm_host, "systemd-analyze security --no-pager vllm.service")
    exposure = float(re.search(r"Overall exposure level for vllm\.service: ([\d.]+)", report).group(1))
    print(json.dumps({"host": vllm_host.name, "cgroup": vllm_host.cgroup, "exposure": exposure}))
    assert exposure <= 2.5, report


# Two instances on the Debian 13 VM (cgroup v2), last on that host: each its own MemoryMax,
# enforced by the kernel; a process that outgrows instance a's is killed inside a's cgroup, a
# comes back by itself (OOMPolicy=stop, then Restart=), and b serves throughout, not restarted.
TWO_INSTANCES = {name: {"gpus": [index], "vllm_port": 8000 + index, "vllm_served_model_name": f"lab-{name}",
                        "vllm_memory_max": "256M", "vllm_memory_high": None}
                 for index, name in enumerate(("a", "b"))}
# Moves itself into the cgroup given, then holds MiB until the kernel kills it.
CGROUP_HOG = """
import sys, time
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:
    procs.write("0")
held = []
while True:
    held.append(bytearray(b"x" * 2**20))
    if len(held) % 64 == 0:
        time.sleep(0.1)
"""


@pytest.mark.parametrize("vllm_host", ["v2"], indirect=True)
def test_an_oom_in_one_instance_leaves_the_other_serving(vllm_host, run_deploy):
    sh(vllm_host, f"cat >{FAKE_NVIDIA_SMI} <<'EOF'\n{NVIDIA_SMI}EOF\nchmod 755 {FAKE_NVIDIA_SMI}")
    run = run_deploy(vllm_host, {**BASE, "vllm_instances": TWO_INSTANCES}, deploy=INSTANCES_DEPLOY)
    assert run.ok, run.output[-6000:]
    units = {name: vllm_instance_unit(name) for name in TWO_INSTANCES}
    cgroups = {name: sh(vllm_host, f"systemctl show -p ControlGroup --value {unit}").strip()
               for name, unit in units.items()}
    for name, cgroup in cgroups.items():
        assert sh(vllm_host, f"cat /sys/fs/cgroup{cgroup}/memory.max").strip() == str(256 * 2**20), cgroup
    before = {name: sh(vllm_host, f"systemctl show -p MainPID,ActiveEnterTimestamp {unit}")
              for name, unit in units.items()}
    sshd_before = sh(vllm_host, "systemctl show -p MainPID --value ssh.service").strip()
    sh(vllm_host, "dmesg -C")
    started = time.monotonic()
    sh(vllm_host, f"systemd-run --quiet --no-block --unit=hostkit-instance-hog python3 -c {shlex.quote(CGROUP_HOG)} "
                  f"/sys/fs/cgroup{cgroups['a']}")
    assert wait_for(lambda: f"oom_memcg={cgroups['a']}" in sh(vllm_host, "dmesg"), 120, interval=2), \
        f"no OOM kill in {cgroups['a']}"
    assert not re.search(r"\] Out of memory: Killed process", sh(vllm_host, "dmesg"))  # none system-wide
    back = wait_for(lambda: (sh(vllm_host, f"systemctl show -p MainPID,ActiveEnterTimestamp {units['a']}") != before["a"]
                             and instance_probe(vllm_host, "a").serves("lab-a")), 180, interval=3)
    assert back, f"{units['a']} did not serve again by itself"
    print(json.dumps({"test": "instance_oom", "serving_again_s": round(time.monotonic() - started, 1)}))
    assert sh(vllm_host, f"systemctl show -p MainPID,ActiveEnterTimestamp {units['b']}") == before["b"]
    assert instance_probe(vllm_host, "b").serves("lab-b")
    assert sh(vllm_host, "systemctl show -p MainPID --value ssh.service").strip() == sshd_before


def instance_probe(lab_host, name: str) -> Probe:
    output = sh(lab_host, probe_command("0.0.0.0", TWO_INSTANCES[name]["vllm_port"], vllm_instance_env_file(name)))
    return Probe.parse(output.strip())
