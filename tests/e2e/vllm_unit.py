"""The vLLM unit on a lab host as the end-to-end tests watch it: its systemd state, its processes,
and whether hostkit's readiness probe finds it serving."""

from __future__ import annotations

from functools import partial

from hostkit.vllm.readiness import Probe, probe_command
from tests.e2e import lab_shell

# The unit's processes from its cgroup wherever the host mounts it: cgroup v2 at /sys/fs/cgroup,
# a hybrid host's (a container's on one) at unified/, a v1 host's under systemd/.
UNIT_PIDS = ("cg=$(systemctl show -p ControlGroup --value {unit}); for root in /sys/fs/cgroup"
             " /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do [ -f \"$root$cg/cgroup.procs\" ]"
             " && exec cat \"$root$cg/cgroup.procs\"; done; true")
SHOWN = ("ActiveState", "SubState", "MainPID", "NRestarts", "Result", "InvocationID",
         "ExecMainStartTimestampMonotonic")


# What these tests watch answers within seconds: a command that hangs fails after 2 minutes, not 10.
sh = partial(lab_shell.sh, timeout=120)


def show(lab_host, unit: str = "vllm.service") -> dict[str, str]:
    properties = " ".join(f"-p {name}" for name in SHOWN)
    return dict(line.split("=", 1) for line in sh(lab_host, f"systemctl show {unit} {properties}").splitlines())


def serving(lab_host, model: str) -> bool:
    output = lab_host.ssh(probe_command("0.0.0.0", 8000), timeout=60).stdout.strip()
    return bool(output) and Probe.parse(output).serves(model)


def unit_pids(lab_host, unit: str = "vllm.service") -> set[int]:
    return {int(pid) for pid in sh(lab_host, UNIT_PIDS.format(unit=unit)).split()}


def alive(lab_host, pids: set[int]) -> set[int]:
    if not pids:
        return set()
    return {int(pid) for pid in sh(lab_host, f"ps -o pid= -p {','.join(map(str, sorted(pids)))} || true").split()}

