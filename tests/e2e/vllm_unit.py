"""The vLLM unit on a lab host as the end-to-end tests watch it: its systemd state, its processes,
and whether hostkit's readiness probe finds it serving."""

from __future__ import annotations

import time

from hostkit.vllm.readiness import Probe, probe_command

CGROUP_PROCS = "/sys/fs/cgroup/system.slice/vllm.service/cgroup.procs"
SHOWN = ("ActiveState", "SubState", "MainPID", "NRestarts", "Result", "InvocationID",
         "ExecMainStartTimestampMonotonic")


def sh(lab_host, command: str, timeout: float = 120) -> str:
    return lab_host.ssh(command, check=True, timeout=timeout).stdout


def show(lab_host, unit: str = "vllm.service") -> dict[str, str]:
    properties = " ".join(f"-p {name}" for name in SHOWN)
    return dict(line.split("=", 1) for line in sh(lab_host, f"systemctl show {unit} {properties}").splitlines())


def serving(lab_host, model: str) -> bool:
    output = lab_host.ssh(probe_command("0.0.0.0", 8000), timeout=60).stdout.strip()
    return bool(output) and Probe.parse(output).serves(model)


def unit_pids(lab_host) -> set[int]:
    return {int(pid) for pid in sh(lab_host, f"cat {CGROUP_PROCS} 2>/dev/null || true").split()}


def alive(lab_host, pids: set[int]) -> set[int]:
    if not pids:
        return set()
    return {int(pid) for pid in sh(lab_host, f"ps -o pid= -p {','.join(map(str, sorted(pids)))} || true").split()}


def until(check, timeout: float, interval: float = 1.0):
    """`check()`'s first truthy result within `timeout` seconds, else its last (falsy) one."""
    deadline = time.monotonic() + timeout
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(interval)
    return result
