"""The probe command: parsed from a lab host's real output, and run here under sh with fake
journalctl/dmesg/systemctl and a local HTTP server that comes up late, like vLLM loading a model."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hostkit.plan.plans import VllmPlan
from hostkit.verify.probes import parse_probes, probe_command
from hostkit_lab.net import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# Kernel log lines as Linux 6.1 prints a global and a cgroup OOM kill.
KERNEL_LOG = """\
[  812.113207] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
[  812.120301] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/vllm.service,task=python3,pid=812,uid=999
[  812.120440] Out of memory: Killed process 812 (python3) total-vm:2125472kB, anon-rss:1611204kB, file-rss:0kB, shmem-rss:0kB, UID:999 pgtables:3280kB oom_score_adj:0
[  900.000001] Memory cgroup out of memory: Killed process 901 (python3) total-vm:1125472kB, anon-rss:1011204kB, file-rss:0kB, shmem-rss:0kB, UID:999 pgtables:2280kB oom_score_adj:0
[  901.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module
"""


def test_parses_a_lab_hosts_probe_output():
    probes = parse_probes((FIXTURES / "debian12-converged.probe.txt").read_text().splitlines())
    assert probes.ooms.source == "journalctl" and probes.ooms.total == 0
    assert probes.unit["ActiveState"] == "active" and probes.unit["MemoryMax"] == "1037041664"
    assert probes.readiness.outcome == "ready" and probes.readiness.probe.serves(MODEL)
    process = probes.process
    assert (process.pid, process.uid, process.user) == (1015, 999, "vllm")
    assert process.argv[1:4] == ("/opt/vllm/bin/vllm", "serve", MODEL)
    assert len(process.api_key_sha256) == 64


def _bin(tmp_path: Path, name: str, script: str) -> None:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path: Path, plan: VllmPlan, ready_timeout_s: int | None = None):
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    started = time.monotonic()
    result = subprocess.run(["sh", "-c", probe_command(plan, ready_timeout_s)], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    return parse_probes(result.stdout.splitlines()), time.monotonic() - started


@pytest.mark.processes
def test_counts_oom_kills_in_the_kernel_log(tmp_path):
    (tmp_path / "kernel.log").write_text(KERNEL_LOG)
    _bin(tmp_path, "journalctl", f"cat {tmp_path / 'kernel.log'}\n")
    probes, _ = _run(tmp_path, VllmPlan(enabled=False))
    assert probes.ooms.source == "journalctl"
    assert probes.ooms.total == 2
    assert probes.ooms.lines[0].startswith("[  812.120440] Out of memory: Killed process 812 (python3)")


@pytest.mark.processes
def test_falls_back_to_dmesg_and_says_when_no_log_is_readable(tmp_path):
    _bin(tmp_path, "journalctl", "exit 1\n")
    _bin(tmp_path, "dmesg", "echo '[    0.000000] Linux version 6.1.0-27-cloud-amd64'\n")
    probes, _ = _run(tmp_path, VllmPlan(enabled=False))
    assert (probes.ooms.source, probes.ooms.total) == ("dmesg", 0)
    _bin(tmp_path, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1\n")
    probes, _ = _run(tmp_path, VllmPlan(enabled=False))
    assert probes.ooms.source is None


class _Vllm(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.end_headers()
        elif self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def late_server():
    """A server that binds its port only after `delay` seconds, as vLLM does while loading."""
    servers = []

    def start(port: int, delay: float):
        def serve():
            time.sleep(delay)
            server = http.server.HTTPServer(("127.0.0.1", port), _Vllm)
            servers.append(server)
            server.serve_forever()

        threading.Thread(target=serve, daemon=True).start()

    yield start
    for server in servers:
        server.shutdown()


# systemctl show's answer for the -p names in "$@": NAME=value lines, or the values alone with --value.
_SHOW = """
case " $* " in *" --value "*) out() { echo "${1#*=}"; } ;; *) out() { echo "$1"; } ;; esac
"""


def _systemctl(tmp_path: Path, active_state: str) -> None:
    _bin(tmp_path, "systemctl", _SHOW + f"""
for word in "$@"; do
  case $word in
    ActiveState) out ActiveState={active_state} ;;
    MainPID) out MainPID=0 ;;
    LoadState) out LoadState=loaded ;;
  esac
done
""")


@pytest.mark.processes
def test_waits_on_the_host_while_the_unit_is_starting(tmp_path, late_server):
    port = free_port()
    _systemctl(tmp_path, "activating")
    late_server(port, delay=3)
    probes, seconds = _run(tmp_path, VllmPlan(enabled=True, host="0.0.0.0", port=port, served_model_name=MODEL), 60)
    readiness = probes.readiness
    assert readiness.outcome == "ready"
    assert readiness.attempts >= 2
    assert readiness.probe.serves(MODEL)
    assert seconds < 30
    assert probes.unit["LoadState"] == "loaded"


@pytest.mark.processes
def test_stops_waiting_at_once_when_the_unit_is_not_starting(tmp_path):
    _systemctl(tmp_path, "inactive")
    probes, seconds = _run(tmp_path, VllmPlan(enabled=True, port=free_port()), 60)
    assert probes.readiness.outcome == "unit inactive"
    assert probes.readiness.attempts == 1
    assert probes.readiness.probe.health is None
    assert probes.process is None
    assert seconds < 20


@pytest.mark.processes
def test_gives_up_at_the_ready_timeout(tmp_path):
    _systemctl(tmp_path, "active")
    probes, _ = _run(tmp_path, VllmPlan(enabled=True, port=free_port()), 1)
    assert probes.readiness.outcome == "timeout"


@pytest.mark.processes
def test_reads_the_main_process_argv_user_and_key_hash(tmp_path):
    argv = [sys.executable, "-c", "import time; time.sleep(30)", "serve", "--port", "8000"]
    child = subprocess.Popen(argv, env={"VLLM_API_KEY": "k3y"})
    try:
        _bin(tmp_path, "systemctl", _SHOW + f"""
for word in "$@"; do
  case $word in
    ActiveState) out ActiveState=active ;;
    MainPID) out MainPID={child.pid} ;;
  esac
done
""")
        probes, _ = _run(tmp_path, VllmPlan(enabled=True, port=free_port()), 0)
    finally:
        child.kill()
        child.wait()
    process = probes.process
    assert process.pid == child.pid
    assert process.argv == tuple(argv)
    assert process.uid == os.geteuid()
    assert process.api_key_sha256 == hashlib.sha256(b"k3y").hexdigest()
    assert "k3y" not in json.dumps(dataclasses.asdict(probes))
