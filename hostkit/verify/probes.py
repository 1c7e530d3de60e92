"""The one extra remote command of a verification: what the snapshot does not hold.

- readiness: hostkit.vllm.readiness's probe (/health, then /v1/models with the API key read on
  the host) repeated on the host until /health answers 200, while vllm.service is starting
  (activating, or active with the model still loading), for at most the plan's ready
  timeout. The waiting happens on the host: one remote command however long it takes.
- unit: `systemctl show vllm.service` for the properties the checks read.
- process: the main PID's argv (from /proc, NUL-separated, so exact), its effective uid
  and user, and a sha256 of the VLLM_API_KEY in its environment (the key never leaves
  the host).
- watchdog: the installed health watchdog of the unit, vllm.service's or the instance's
  (hostkit.operations.watchdog's fact); host-watchdog, on a host with vllm_instances:
  vllm.service's watchdog, which the host should no longer have (a deploy that failed or
  stopped before removing it leaves it running beside the instances' own).
- oom: the `Killed process` lines of the kernel log since boot, the first OOM_LINE_LIMIT of
  them (hostkit.facts.kernel_log); an unreadable log is "unknown", never "clean".

Taken after the snapshot, and after waiting for readiness, so the unit's state and the
process are those of a server that has finished starting.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from hostkit.remote import host_file
from hostkit.facts.kernel_log import KILL_LINES, KernelLog, kernel_log_command, parse_kernel_log
from hostkit.facts.parts import parse_int, split_on_marker
from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.facts.watchdog import WatchdogFact, WatchdogState
from hostkit.facts.vllm_service import env_file_of
from hostkit.paths import WATCHDOG_UNIT, vllm_unit_of, watchdog_unit_of
from hostkit.plan.plans import VllmPlan
from hostkit.vllm.readiness import Probe
from hostkit.vllm.readiness import probe_command as readiness_probe_command

MARKER = "@@hostkit-probe:"
OOM_LINE_LIMIT = 20
POLL_INTERVAL_S = 2
UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "User",
    "MemoryMax",
    "MemoryHigh",
    "MemorySwapMax",
    "MemoryLimit",
    "NeedDaemonReload",
    "FragmentPath",
    "DropInPaths",
    "NRestarts",
)
# An instance's unit also shows its Environment=: the GPUs (CUDA_VISIBLE_DEVICES) systemd
# gives it, as loaded.
INSTANCE_UNIT_PROPERTIES = (*UNIT_PROPERTIES, "Environment")


@dataclass(frozen=True)
class Readiness:
    probe: Probe | None  # the last probe; None: no answer at all (no python3 on the host)
    outcome: str  # "ready", "timeout", "unit <state>" (stopped waiting: the unit is not starting)
    attempts: int
    waited_s: int


@dataclass(frozen=True)
class VllmProcess:
    pid: int
    argv: tuple[str, ...]
    uid: int | None
    user: str
    api_key_sha256: str | None  # of VLLM_API_KEY in the process environment; None when unset


@dataclass(frozen=True)
class Probes:
    ooms: KernelLog  # its lines are the `Killed process` lines; total counts them all
    unit: dict[str, str] = field(default_factory=dict)  # systemctl show; empty when vLLM is not planned
    readiness: Readiness | None = None
    process: VllmProcess | None = None
    watchdog: WatchdogState | None = None  # None when vLLM is not planned
    host_watchdog: WatchdogState | None = None  # vllm.service's, read on a host with vllm_instances


def _mark(name: str) -> str:
    return f"echo '{MARKER}{name}@@'"


# hostkit.vllm.readiness's probe prints one JSON line; json.dumps spells a ready /health this way.
_READY = '"health": 200'


def probe_command(plan: VllmPlan, ready_timeout_s: int | None = None, host_parts: bool = True) -> str:
    """The probe script for a host with this vLLM plan (vllm.service's, or an instance's);
    `ready_timeout_s` overrides the plan's wait. `host_parts`: read the host's own parts too
    (its OOM kills; beside an instance, vllm.service's watchdog), which a host with instances
    reads once, with its first instance."""
    parts = [_mark("oom"), kernel_log_command(KILL_LINES, OOM_LINE_LIMIT)] if host_parts else []
    if host_parts and plan.instance is not None:
        parts += [_mark("host-watchdog"), WatchdogFact().command(WATCHDOG_UNIT)]
    if plan.enabled:
        wait = plan.ready_timeout_s if ready_timeout_s is None else ready_timeout_s
        properties = UNIT_PROPERTIES if plan.instance is None else INSTANCE_UNIT_PROPERTIES
        settings = {
            "hk_unit": vllm_unit_of(plan.instance),
            "hk_wait": str(wait),
            "hk_mark": MARKER,
            "hk_ready": _READY,
            "hk_interval": str(POLL_INTERVAL_S),
            "hk_properties": " ".join(properties),
        }
        probe = readiness_probe_command(plan.host, plan.port, env_file_of(plan.instance))
        parts += [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        parts += [SHOW_FUNCTIONS, f"hk_ready_probe() {{ {probe}; }}", host_file("verify_readiness.sh")]
        parts += [_mark("watchdog"), WatchdogFact().command(watchdog_unit_of(plan.instance))]
    parts.append("true")
    return "\n".join(parts)


def _parse_readiness(lines: list[str]) -> Readiness:
    values: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        values[key] = value.strip()
    return Readiness(
        probe=Probe.parse(values["probe"]) if values.get("probe") else None,
        outcome=values.get("outcome", "unknown"),
        attempts=parse_int(values.get("attempts", "0"), 0, signed=True),
        waited_s=parse_int(values.get("waited", "0"), 0, signed=True),
    )


def _parse_process(lines: list[str]) -> VllmProcess | None:
    values: dict[str, str] = {}
    argv: list[str] = []
    for line in lines:
        if line.startswith("arg "):
            argv.append(line[len("arg "):])
        elif line == "arg":
            argv.append("")
        else:
            key, _, value = line.partition(" ")
            values[key] = value.strip()
    if "pid" not in values:
        return None
    uid = values.get("uid", "")
    return VllmProcess(
        pid=parse_int(values["pid"], 0, signed=True),
        argv=tuple(argv),
        uid=int(uid) if uid.isdigit() else None,
        user=values.get("user", ""),
        api_key_sha256=values.get("api_key_sha256") or None,
    )


def parse_probes(output: list[str]) -> Probes:
    parts = split_on_marker(output, MARKER)
    readiness = None
    if "readiness" in parts:
        readiness = _parse_readiness(parts["readiness"])
    return Probes(
        ooms=parse_kernel_log(parts.get("oom", [])),
        unit=parse_show(parts.get("unit", [])),
        readiness=readiness,
        process=_parse_process(parts.get("process", [])),
        watchdog=WatchdogFact().process(parts["watchdog"]) if "watchdog" in parts else None,
        host_watchdog=WatchdogFact().process(parts["host-watchdog"]) if "host-watchdog" in parts else None,
    )
