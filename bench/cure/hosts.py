"""The hosts of a run: identical lab VMs (the same image, vCPUs, memory and disks), each then
set up one way:

- bare: vLLM as the field reports ran it (host/bare-vllm.service: `Restart=on-failure`, no
  memory limit), no swap, the image's default swappiness (60) and THP;
- githubixx: the same, under githubixx.ai.vllm's unit (host/githubixx-vllm.service:
  `Restart=always`, no memory limit), the best public Ansible role's;
- hostkit: `pyinfra INVENTORY deploys/vllm_host.py` with the lab's real-vLLM data: swap on the
  NVMe, vm.swappiness=10, THP, the unit's memory limits, Restart=always, the watchdog and the
  metrics collector.

Both run the same vLLM build from the same read-only venv image (venv_disk.py), the same model,
flags and API key.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from hostkit.fleet.pyinfra_runner import run_pyinfra, write_inventory
from hostkit_lab import Lab, LabHost, exposition_server, real_vllm
from hostkit_lab.real_vllm.lab_disk import MOUNT_DISK, disk_image, lab_tree

from bench.cure.probes import Tunnel, models_listed
from bench.cure.remote import run, say, script
from bench.cure.venv_disk import MOUNT_VENV, TARGET as VENV_TARGET

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploys" / "vllm_host.py"

SETUPS = ("bare", "githubixx", "hostkit")
# A container shares this machine's kernel and memory: of the failures, only the engine's death
# (scenario 2) means there what it means on a host of its own.
LAB_KINDS = {"vm": (1, 2, 3), "container": (2,)}
# The setups that are one unit file and an env file (host/UNIT); hostkit is its deploy.
UNIT_FILES = {"bare": "bare-vllm.service", "githubixx": "githubixx-vllm.service"}
CPUS = 2  # vLLM's CPU backend keeps one for its scheduler (tests/e2e/test_real_vllm.py)
MEMORY_MB = real_vllm.MEMORY_MB
MODEL = real_vllm.DATA["vllm_served_model_name"]
# The lab's real-vLLM data; the collector's file served over HTTP instead of by node_exporter
# (whose apt install costs minutes under qemu TCG: tests/e2e/test_monitoring.py).
HOSTKIT_DATA = {**real_vllm.DATA, "monitoring_node_exporter": False}
TEXTFILE = "/var/lib/prometheus/node-exporter/hostkit.prom"
DEPLOY_TIMEOUT_S = 3600
PREPARE_TIMEOUT_S = 900
SERVING_POLL_S = 10
SERVE_ENV = "/etc/vllm-serve.env"


@dataclass
class CureHost:
    setup: str  # one of SETUPS
    lab_host: LabHost
    vllm: Tunnel = field(init=False)
    node: Tunnel | None = field(init=False, default=None)  # the collector's file (hostkit only)
    setup_s: float | None = None

    def __post_init__(self):
        self.vllm = Tunnel(self.lab_host, 8000)

    @property
    def name(self) -> str:
        return self.lab_host.name

    def sh(self, command: str, timeout: float = 120, what: str | None = None, check: bool = True) -> str:
        return run(self.lab_host, command, timeout, what or command, check=check)

    def close(self) -> None:
        for tunnel in (self.vllm, self.node):
            if tunnel is not None:
                tunnel.close()


def attachments(lab_kind: str, venv: Path) -> dict:
    """lab.up's arguments for a host of `lab_kind` with the model and real vLLM's venv: a VM's
    disks (the venv's ext4 image), a container's read-only binds (`venv`, the image mounted)."""
    tree = lab_tree()
    if lab_kind == "vm":
        return {"cpus": CPUS, "memory_mb": MEMORY_MB, "disks": (str(disk_image(tree)), str(venv))}
    return {"kind": "container", "binds": (f"{tree}:{real_vllm.DISK_MOUNT}", f"{venv}:{VENV_TARGET.venv}")}


def boot(lab: Lab, setups: list[str], attached: dict) -> list[CureHost]:
    """One host per setup, booted side by side (cure1, cure2, ... in the order of `setups`)."""
    lab_hosts = lab.up(len(setups), prefix="cure", **attached)
    return [CureHost(setup, lab_host) for setup, lab_host in zip(setups, lab_hosts)]


def prepare(host: CureHost) -> None:
    """The same on every host, before its setup: a VM's wheelhouse (model) and venv disks mounted
    (a container has them bound), libnuma1 (which real vLLM's CPU build needs, and hostkit's
    deploy would add) from apt."""
    if host.lab_host.kind == "vm":
        host.sh(f"{MOUNT_DISK} && {MOUNT_VENV}", what="mounting the model and venv disks")
    host.sh("dpkg -s libnuma1 >/dev/null 2>&1 || apt-get install -y -q libnuma1 >/dev/null 2>&1 || "
            "(apt-get update -q >/dev/null && apt-get install -y -q libnuma1 >/dev/null)",
            timeout=PREPARE_TIMEOUT_S, what="apt-get install libnuma1")


def set_up_unit(host: CureHost, key: str) -> None:
    """vllm.service from host/UNIT_FILES[setup], the key in an env file, the vllm user and its cache."""
    host.sh("id vllm >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/vllm vllm")
    host.sh("install -d -o vllm -g vllm /var/lib/vllm/cache")
    env = f"VLLM_API_KEY={key}\nVLLM_CPU_KVCACHE_SPACE={real_vllm.DATA['vllm_env']['VLLM_CPU_KVCACHE_SPACE']}\n"
    # The key through stdin, never in an argv.
    run(host.lab_host, f"umask 077 && cat > {SERVE_ENV}", 60, "writing the unit's env file", stdin=env)
    run(host.lab_host, "cat > /etc/systemd/system/vllm.service", 60, f"writing the {host.setup} unit",
        stdin=script(UNIT_FILES[host.setup]))
    host.sh("systemctl daemon-reload && systemctl enable --now vllm.service", what=f"starting the {host.setup} unit")


def set_up_hostkit(host: CureHost, work: Path) -> None:
    entry = (host.name, {**host.lab_host.pyinfra_data(), **lab_data(), **HOSTKIT_DATA})
    inventory = write_inventory(work / f"inventory-{host.name}.py", [entry])
    deployed = run_pyinfra(inventory, DEPLOY, cwd=REPO, timeout=DEPLOY_TIMEOUT_S)
    # pyinfra's output stays in a file: the bench prints figures, not the deploy.
    (work / f"deploy-{host.name}.log").write_text(deployed.output)
    if not deployed.ok:
        raise RuntimeError(f"{host.name}: the hostkit deploy failed (its output: {work}/deploy-{host.name}.log)")
    served = shlex.quote(Path(exposition_server.__file__).read_text())
    host.sh(f"systemctl stop cure-textfile-http 2>/dev/null; systemd-run --quiet --unit=cure-textfile-http "
            f"python3 -c {served} 9100 {TEXTFILE}", what="serving the collector's file on port 9100")
    host.node = Tunnel(host.lab_host, 9100)
    host.node.ensure()


def set_up(host: CureHost, key: str, work: Path) -> None:
    started = time.monotonic()
    prepare(host)
    if host.setup == "hostkit":
        set_up_hostkit(host, work)
    else:
        set_up_unit(host, key)
    host.setup_s = round(time.monotonic() - started, 1)
    say(f"{host.name}: set up ({host.setup}) in {host.setup_s:.0f} s")


def wait_serving(host: CureHost, key: str, timeout: float = real_vllm.READY_TIMEOUT_S) -> float:
    """Seconds until /v1/models names the model; TimeoutError naming the host past `timeout`."""
    started = time.monotonic()
    last_report = started
    while not models_listed(host.vllm, key, MODEL):
        now = time.monotonic()
        if now - started > timeout:
            state = host.sh("systemctl is-active vllm.service", check=False).strip()
            raise TimeoutError(f"{host.name}: vLLM not serving after {timeout:.0f} s (vllm.service {state})")
        if now - last_report >= 60:
            say(f"{host.name}: waiting for vLLM to serve ({now - started:.0f} s)")
            last_report = now
        time.sleep(SERVING_POLL_S)
    return round(time.monotonic() - started, 1)


def lab_data() -> dict:
    """The shipped lab inventory's data (inventories/lab.py), as bench/run.py reads it."""
    namespace: dict = {}
    exec(compile((REPO / "inventories" / "lab.py").read_text(), "inventories/lab.py", "exec"), namespace)
    return dict(namespace["LAB_DATA"])


def api_key() -> str:
    """The lab inventory's key: the same on every host, never printed."""
    return lab_data()["vllm_api_key"]
