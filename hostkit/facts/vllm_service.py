"""The vLLM service as installed and running: user, files (by hash), unit state, cgroup memory, readiness.

The service is vllm.service, or one of vllm_instances (vllm@NAME.service, its own
environment file). Either way the fact also lists the instance units hostkit wrote and the
instance environment files, by name: the deploy removes those no longer planned.

The environment file holds the API key: this fact reports its sha256, mode and owner,
never its content. The readiness probe reads the key on the host (hostkit.vllm.readiness).
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from hostkit.facts.deadline import TIMED_OUT, timed_out_lines
from hostkit.facts.parts import to_int
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.paths import (
    CONFIG_DIR, VLLM_ENV_FILE, VLLM_UNIT_PATH, vllm_instance_env_file, vllm_instance_unit, vllm_unit_of,
    watchdog_instance_unit,
)
from hostkit.remote import host_file
from hostkit.vllm.readiness import Probe, probe_command

# cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit value.
_V1_UNLIMITED = 2**63 - 4096
_UNIT_PROPERTIES = (
    "LoadState", "ActiveState", "SubState", "Result", "MainPID", "NRestarts", "UnitFileState",
    "ActiveEnterTimestampMonotonic", "NeedDaemonReload", "ControlGroup", "DropInPaths",
)
UNIT_DIR = VLLM_UNIT_PATH.rsplit("/", 1)[0]
WATCHDOG_INSTANCE_GLOB = f"{UNIT_DIR}/{watchdog_instance_unit('*')}"
# The first line of every unit hostkit renders (templates/vllm.service.j2): a vllm@NAME.service
# without it is someone else's, which the deploy leaves alone.
MANAGED_MARKER = "# Managed by vllm-hostkit"


def unit_path_of(instance: str | None) -> str:
    return f"{UNIT_DIR}/{vllm_unit_of(instance)}"


def env_file_of(instance: str | None) -> str:
    return VLLM_ENV_FILE if instance is None else vllm_instance_env_file(instance)


@dataclass(frozen=True)
class ServiceTarget:
    """Which service user, command and address the fact looks at (the command only identifies the target)."""

    user: str
    command: str
    host: str
    port: int
    instance: str | None = None  # one of vllm_instances; None: vllm.service

    @classmethod
    def of_scope(cls, scope: SnapshotScope) -> ServiceTarget:
        return cls(scope.vllm_user, scope.vllm_command, scope.vllm_host, scope.vllm_port)

    @property
    def unit(self) -> str:
        return vllm_unit_of(self.instance)

    @property
    def unit_path(self) -> str:
        return unit_path_of(self.instance)

    @property
    def env_file(self) -> str:
        return env_file_of(self.instance)

    def as_json(self) -> str:
        # vllm.service's target as before instances: four values.
        words = [self.user, self.command, self.host, self.port]
        return json.dumps(words if self.instance is None else [*words, self.instance])


@dataclass(frozen=True)
class ModeAndOwnership:
    mode: str  # octal, as stat %a prints it: "600"
    owner: str
    group: str

    @classmethod
    def parse(cls, text: str) -> ModeAndOwnership | None:
        words = text.split()
        return cls(*words) if len(words) == 3 else None


@dataclass(frozen=True)
class VllmServiceState:
    target: ServiceTarget
    user_uid: int | None  # None: the service user does not exist
    unit_sha256: str | None  # of VLLM_UNIT_PATH; None: not installed
    env_sha256: str | None
    env_stat: ModeAndOwnership | None
    env_dir_stat: ModeAndOwnership | None
    unit: dict[str, str] = field(default_factory=dict)  # systemctl show properties
    memory_limit_bytes: int | None = None  # effective: memory.max (v2), memory.limit_in_bytes (v1)
    memory_peak_bytes: int | None = None
    oom_kills: int | None = None
    probe: Probe | None = None
    timeouts: tuple[str, ...] = ()  # "WHAT timed out after N s": the unit state is then unknown
    unit_text: str | None = None  # the installed unit file (world-readable, holds no secret)
    # Unix seconds: when the command file was last replaced (ctime: tar and pip cannot set
    # it back), and when the running main process started. None: unknown.
    command_changed_at: int | None = None
    main_started_at: int | None = None
    # Instance names of the vllm@NAME.service files hostkit wrote, of the vllm@NAME.env files
    # and of the vllm-hostkit-watchdog@NAME.service files hostkit wrote, on the host (whichever
    # service the fact looked at).
    instance_units: tuple[str, ...] = ()
    instance_env_files: tuple[str, ...] = ()
    instance_watchdogs: tuple[str, ...] = ()

    @property
    def release_replaced(self) -> bool:
        """The command file was replaced after the running process started (a new release)."""
        if self.command_changed_at is None or self.main_started_at is None or not self.is_active:
            return False
        return self.command_changed_at > self.main_started_at

    @property
    def active_state(self) -> str:
        return self.unit.get("ActiveState", "")

    @property
    def is_active(self) -> bool:
        return self.active_state == "active"

    @property
    def is_enabled(self) -> bool:
        return self.unit.get("UnitFileState") == "enabled"

    @property
    def need_daemon_reload(self) -> bool:
        return self.unit.get("NeedDaemonReload") == "yes"

    @property
    def main_pid(self) -> int:
        return to_int(self.unit.get("MainPID")) or 0

    @property
    def n_restarts(self) -> int:
        return to_int(self.unit.get("NRestarts")) or 0

    @property
    def drop_in_paths(self) -> list[str]:
        return self.unit.get("DropInPaths", "").split()

    def describe(self) -> str:
        state = f"{self.active_state or 'unknown'}/{self.unit.get('SubState', '?')}"
        if self.n_restarts:
            state += f", {self.n_restarts} restarts"
        return state + (f", {self.probe.describe()}" if self.probe else ", no probe (python3 missing?)")


class VllmServiceFact(FactBase):
    """`key=value` lines (hostkit/remote/vllm_service.sh); `unit.<Property>=`, `cgroup.<file>=`;
    the probe's JSON in `probe=`."""

    section = "vllm"
    takes_scope = True

    def command(self, scope: SnapshotScope | None = None, target: ServiceTarget | None = None) -> str:
        target = target or ServiceTarget.of_scope(scope)
        settings = {
            "hk_target": target.as_json(),
            "hk_user": target.user,
            "hk_command": target.command,
            "hk_unit": target.unit,
            "hk_unit_path": target.unit_path,
            "hk_env_file": target.env_file,
            "hk_env_dir": CONFIG_DIR,
            "hk_instance_units": f"{UNIT_DIR}/{vllm_instance_unit('*')}",
            "hk_instance_env_files": vllm_instance_env_file("*"),
            "hk_instance_watchdogs": WATCHDOG_INSTANCE_GLOB,
            "hk_managed": MANAGED_MARKER,
            "hk_properties": " ".join(_UNIT_PROPERTIES),
            "hk_timed_out": TIMED_OUT,
        }
        lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        ready_probe = f"hk_ready_probe() {{ {probe_command(target.host, target.port, target.env_file)}; }}"
        return "\n".join((*lines, SHOW_FUNCTIONS, ready_probe, host_file("vllm_service.sh")))

    def process(self, output: list[str]) -> VllmServiceState:
        values: dict[str, str] = {}
        unit_lines: list[str] = []
        cgroup: dict[str, str] = {}
        listed: dict[str, list[str]] = {"instance_unit": [], "instance_env": [], "instance_watchdog": []}
        for line in output:
            key, _, value = line.partition("=")
            if key in listed:
                listed[key].append(value.strip())
            elif key.startswith("unit."):
                unit_lines.append(line[len("unit."):])
            elif key.startswith("cgroup."):
                cgroup[key[len("cgroup."):]] = value.strip()
            else:
                values[key] = value.strip()
        try:
            target = ServiceTarget(*json.loads(values.get("target", "")))
        except (ValueError, TypeError):
            target = ServiceTarget("", "", "", 0)  # unread: no plan's target, so an operation looks again
        return VllmServiceState(
            target=target,
            user_uid=to_int(values.get("uid") or None),
            unit_sha256=values.get("unit_sha256") or None,
            env_sha256=values.get("env_sha256") or None,
            env_stat=ModeAndOwnership.parse(values.get("env_stat", "")),
            env_dir_stat=ModeAndOwnership.parse(values.get("env_dir_stat", "")),
            unit=parse_show(unit_lines),
            memory_limit_bytes=_memory_limit(cgroup),
            memory_peak_bytes=to_int(cgroup.get("memory.peak") or cgroup.get("memory.max_usage_in_bytes")),
            oom_kills=to_int(cgroup.get("oom_kill")),
            probe=Probe.parse(values["probe"]) if values.get("probe") else None,
            unit_text=_decoded(values.get("unit_text")),
            command_changed_at=to_int(values.get("command_ctime") or None),
            main_started_at=to_int(values.get("main_start", "").lstrip("@") or None),
            timeouts=timed_out_lines(output),
            instance_units=instance_names(listed["instance_unit"], f"{UNIT_DIR}/{vllm_instance_unit('*')}"),
            instance_env_files=instance_names(listed["instance_env"], vllm_instance_env_file("*")),
            instance_watchdogs=instance_names(listed["instance_watchdog"], WATCHDOG_INSTANCE_GLOB),
        )


def instance_names(paths: list[str], pattern: str) -> tuple[str, ...]:
    """The NAME of each path that `pattern` (a path with one `*`) matches, sorted."""
    before, after = pattern.split("*")
    return tuple(sorted(path[len(before):len(path) - len(after)] for path in paths
                        if path.startswith(before) and path.endswith(after) and len(path) > len(pattern) - 1))


def _decoded(text: str | None) -> str | None:
    try:
        return base64.b64decode(text, validate=True).decode() if text is not None else None
    except (ValueError, UnicodeDecodeError):
        return None


def _memory_limit(cgroup: dict[str, str]) -> int | None:
    if "memory.max" in cgroup:
        return to_int(cgroup["memory.max"])  # "max" -> None
    limit = to_int(cgroup.get("memory.limit_in_bytes"))
    return None if limit is None or limit >= _V1_UNLIMITED else limit
