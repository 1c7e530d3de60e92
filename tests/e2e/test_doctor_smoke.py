"""`hostkit doctor` and `hostkit smoke` against a lab host provisioned by the main deploy,
serving the vLLM stand-in (hostkit_lab/standin) through an ssh port-forward.

After a deploy of this module's data on each host it uses: on the shared container host
(`main_container`, systemd only, native speed) a clean doctor run and a clean smoke run; on the
shared `main_host` VM (its swap file, sysctl and kernel cgroups are its own) doctor's reading of
the swap and swappiness the main deploy set, then a smoke run during which a separate process on
the host pushes memory into swap, which the report must show rising during the load and coming
back after it.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from hostkit.fleet.pyinfra_runner import run_pyinfra
from tests.e2e.conftest import MAIN_DEPLOY, REPO, lab_data, lab_inventory, main_host_for
from tests.e2e.lab_shell import sh

pytestmark = pytest.mark.lab

MIB = 2**20
KEY_ENV = "HOSTKIT_E2E_VLLM_KEY"
SERVE_DATA = {
    "vllm_served_model_name": "lab-model",
    # The stand-in sleeps per token: 64 tokens x 40 ms keeps each request ~2.6 s, so a run lasts long
    # enough for the memory push to land inside it.
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2", "VLLM_STANDIN_STEP_DELAY_MS": "40"},
    "vllm_ready_timeout": 240,
}


@pytest.fixture(scope="module")
def served(request, tmp_path_factory):
    """(lab host, inventory path, data): the host of the parameter ("container" or "vm")
    deployed with SERVE_DATA, serving the stand-in."""
    lab_host = main_host_for(request)
    inventory = lab_inventory(tmp_path_factory.mktemp(f"doctor-{request.param}") / "inventory.py", lab_host, SERVE_DATA)
    run = run_pyinfra(inventory, MAIN_DEPLOY, cwd=REPO)
    assert run.ok, run.output[-4000:]
    return lab_host, inventory, {**lab_data(), **SERVE_DATA}


# systemd's part, doctor's and smoke's reading of it: the container host.
ON_CONTAINER = pytest.mark.parametrize("served", ["container"], indirect=True)
# The swap file and the kernel's settings the main deploy made, and memory reclaimed into swap: the VM.
ON_VM = pytest.mark.parametrize("served", ["vm"], indirect=True)


def hostkit(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from hostkit.cli.main import main; main()", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})})


@contextmanager
def forwarded(lab_host, remote_port: int = 8000, address: str = "127.0.0.1", same_port: bool = False):
    """An ssh port-forward from `address` here to the host's vLLM port: on a free port, or
    (`same_port`) on the host's port number, as a URL that names an instance's port needs (a
    loopback address of its own, 127.0.0.N, keeps it from this machine's own listeners)."""
    local_port = remote_port
    if not same_port:
        with socket.socket() as probe:
            probe.bind((address, 0))
            local_port = probe.getsockname()[1]
    argv = lab_host.ssh_argv()
    argv[-1:-1] = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", f"{address}:{local_port}:127.0.0.1:{remote_port}"]
    tunnel = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((address, local_port), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or tunnel.poll() is not None:
                    raise RuntimeError("ssh port-forward did not come up") from None
                time.sleep(0.3)
        yield f"http://{address}:{local_port}"
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)


def smoke(served, url: str, out: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    lab_host, inventory, data = served
    argv = [sys.executable, "-c", "from hostkit.cli.main import main; main()", "smoke", url,
            "--concurrency", "20", "--requests", "60", "--max-tokens", "64", "--api-key-env", KEY_ENV,
            "--watch", lab_host.name, "--inventory", str(inventory), "--settle", "60", "--out", str(out), *extra]
    env = {**os.environ, KEY_ENV: data["vllm_api_key"]}
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env), out


def doctor_json(inventory) -> tuple[subprocess.CompletedProcess, dict]:
    result = hostkit("doctor", str(inventory), "--format", "json")
    (host,) = json.loads(result.stdout)["hosts"]
    return result, host


@ON_CONTAINER
def test_doctor_on_the_provisioned_host(served):
    lab_host, inventory, data = served
    result, host = doctor_json(inventory)
    findings = {finding["code"]: finding["severity"] for finding in host["findings"]}
    assert result.returncode == 0, findings
    assert "critical" not in findings.values()
    inputs = host["inputs"]
    # The container's swap and swappiness are its host's (the VM's own: the test below).
    assert inputs["memory"]["swap_total_bytes"] == 1024 * int(sh(lab_host, "awk '/^SwapTotal:/ {print $2}' /proc/meminfo"))
    assert inputs["tuning"]["swappiness"] == int(sh(lab_host, "cat /proc/sys/vm/swappiness"))
    unit = inputs["unit"]
    # The unit's memory limit and peak are read from its cgroup, which a container's kernel does
    # not give it: the VM's test below.
    assert unit["active_state"] == "active"
    assert "serve" in inputs["vllm"]["argv"] and inputs["vllm"]["tree_rss_bytes"] > 0
    assert host["vllm_settings"]["max_model_len"] == data["vllm_max_model_len"]
    assert host["vllm_settings"]["version_source"] == "inventory"  # the stand-in has no dist-info
    text = hostkit("doctor", str(inventory), "--limit", lab_host.name)
    assert f"== {lab_host.name} ==" in text.stdout and "vllm.service  active/running" in text.stdout


@ON_VM
def test_doctor_reads_the_swap_and_swappiness_the_deploy_set(served):
    result, host = doctor_json(served[1])
    findings = {finding["code"]: finding["severity"] for finding in host["findings"]}
    assert result.returncode == 0 and "critical" not in findings.values(), findings
    assert host["inputs"]["memory"]["swap_total_bytes"] >= 1000 * MIB  # swap_size 1G on the NVMe disk
    assert host["inputs"]["tuning"]["swappiness"] == 10
    unit = host["inputs"]["unit"]  # read from the unit's own cgroup, which a VM's kernel gives it
    assert unit["active_state"] == "active" and unit["max_bytes"] and unit["peak_bytes"]
    assert "memory-limit-missing" not in findings and "memory-limit-near-ram" not in findings


@ON_CONTAINER
def test_clean_smoke_run(served, tmp_path):
    lab_host = served[0]
    with forwarded(lab_host) as url:
        process, out = smoke(served, url, tmp_path)
        output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    report = json.loads((out / "smoke-report.json").read_text())
    assert report["requests"]["succeeded"] == 60 and report["requests"]["failed"] == 0
    assert report["latency_s"]["p50"] >= 64 * 0.04
    assert report["memory"]["samples"] > 10 and report["memory"]["source"] == lab_host.name
    # The unit's cgroup memory and the kernel's log are the container's host's: the VM's test below.
    assert report["oom"]["lines"] == []
    assert (out / "smoke-memory.png").stat().st_size > 20_000


@ON_VM
def test_memory_pushed_during_the_run_shows_the_swap_rise(served, tmp_path):
    lab_host = served[0]
    unit = "/sys/fs/cgroup/system.slice/vllm.service"
    high = lab_host.ssh(f"cat {unit}/memory.high", check=True).stdout.strip()
    # A separate process inside the unit's cgroup allocates 500 MiB in steps and holds it for a
    # while; a lowered MemoryHigh makes the kernel reclaim the unit into swap (under MemoryMax and
    # MemorySwapMax, so nothing is OOM-killed). Few pages to touch: qemu TCG is slow at it.
    pusher = ("import time\nheld = []\nfor _ in range(10):\n    held.append(bytearray(b'\\x01') * (50 * 2**20))\n"
              "time.sleep(20)\n")
    push = (f"systemctl set-property --runtime vllm.service MemoryHigh=250M && "
            f"nohup sh -c 'echo $$ > {unit}/cgroup.procs && exec python3 -c \"$0\"' {shlex.quote(pusher)}"
            " >/dev/null 2>&1 &")
    try:
        with forwarded(lab_host) as url:
            process, out = smoke(served, url, tmp_path, "--requests", "200")
            lab_host.ssh(push, check=True)
            output, _ = process.communicate(timeout=900)
    finally:
        lab_host.ssh(f"systemctl set-property --runtime vllm.service MemoryHigh={high}")
    report = json.loads((out / "smoke-report.json").read_text())
    swap = report["memory"]["swap"]
    assert swap["rise"] > 100 * MIB, (swap, output)
    peak_t = max(report["memory"]["series"], key=lambda s: s["swap_used"])["t"]
    assert peak_t > 0  # after the load started, not in the baseline
    assert swap["recovered"], (swap, output)  # the pusher exited: its swapped pages are gone
    assert report["memory"]["ram"]["unit_peak"] > 0  # the unit's cgroup memory was sampled too
    assert report["oom"]["lines"] == [] and report["oom"]["kernel_log_source"] == "journalctl"
    assert process.returncode == 0, output
