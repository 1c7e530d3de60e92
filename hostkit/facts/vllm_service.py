"""The vLLM service as installed and running: user, files (by hash), unit state, cgroup memory, readiness.

The environment file holds the API key: this fact reports its sha256, mode and owner,
never its content. The readiness probe reads the key on the host (hostkit.vllm.readiness).
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api import FactBase

from hostkit.facts.deadline import DEADLINE_FUNCTION, SYSTEMCTL_S, TIMED_OUT, timed_out_lines
from hostkit.facts.parts import to_int
from hostkit.plan.plans import VLLM_ENV_FILE, VLLM_UNIT, VllmPlan
from hostkit.vllm.readiness import Probe, probe_command
from hostkit.units.vllm_unit import ENV_DIR, UNIT_PATH

# cgroup v1 reports "no limit" as the largest page-aligned signed 64-bit value.
_V1_UNLIMITED = 2**63 - 4096
_UNIT_PROPERTIES = (
    "LoadState", "ActiveState", "SubState", "Result", "MainPID", "NRestarts", "UnitFileState",
    "ActiveEnterTimestampMonotonic", "NeedDaemonReload", "ControlGroup", "DropInPaths",
)


@dataclass(frozen=True)
class ServiceTarget:
    """Which service user, command and address the fact looks at (the command only identifies the target)."""

    user: str = "vllm"
    command: str = "/opt/vllm/bin/vllm"
    host: str = "0.0.0.0"
    port: int = 8000

    @classmethod
    def from_profile(cls, profile: Any) -> ServiceTarget:
        if profile is None:
            return cls()
        return cls(profile.vllm_user, profile.vllm_command, profile.vllm_host, profile.vllm_port)

    @classmethod
    def from_plan(cls, plan: VllmPlan) -> ServiceTarget:
        command = plan.argv[0] if plan.argv else cls.command
        return cls(plan.user, command, plan.host, plan.port)


@dataclass(frozen=True)
class FileStat:
    mode: str  # octal, as stat %a prints it: "600"
    owner: str
    group: str

    @classmethod
    def parse(cls, text: str) -> FileStat | None:
        words = text.split()
        return cls(*words) if len(words) == 3 else None


@dataclass(frozen=True)
class VllmServiceState:
    target: ServiceTarget
    user_uid: int | None  # None: the service user does not exist
    unit_sha256: str | None  # of UNIT_PATH; None: not installed
    env_sha256: str | None
    env_stat: FileStat | None
    env_dir_stat: FileStat | None
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
    """`key=value` lines; `unit.<Property>=`, `cgroup.<file>=`; the probe's JSON in `probe=`."""

    section = "vllm"
    takes_profile = True

    def command(self, profile: Any = None, target: ServiceTarget | None = None) -> str:
        target = target or ServiceTarget.from_profile(profile)
        described = json.dumps([target.user, target.command, target.host, target.port])
        properties = " ".join(f"-p {name}" for name in _UNIT_PROPERTIES)
        return "\n".join((
            f"echo target={shlex.quote(described)}",
            f"user={shlex.quote(target.user)}",
            'echo "uid=$(id -u -- "$user" 2>/dev/null)"',
            # One sha256sum and one stat for both files (every process is slow on a slow
            # host); each skips a missing file, so their lines are matched by path.
            f"hk_sums=$(sha256sum {VLLM_ENV_FILE} {UNIT_PATH} 2>/dev/null)",
            f"hk_stats=$(stat -c '%n %a %U %G' {VLLM_ENV_FILE} {ENV_DIR} 2>/dev/null)",
            "unit_sha256= env_sha256= env_stat= env_dir_stat=",
            "while read -r hk_sum hk_path; do",
            f"  case $hk_path in {UNIT_PATH}) unit_sha256=$hk_sum ;; {VLLM_ENV_FILE}) env_sha256=$hk_sum ;; esac",
            "done <<EOF",
            "$hk_sums",
            "EOF",
            "while read -r hk_path hk_stat; do",
            f"  case $hk_path in {VLLM_ENV_FILE}) env_stat=$hk_stat ;; {ENV_DIR}) env_dir_stat=$hk_stat ;; esac",
            "done <<EOF",
            "$hk_stats",
            "EOF",
            "printf '%s\\n' \"unit_sha256=$unit_sha256\" \"env_sha256=$env_sha256\" \"env_stat=$env_stat\" \"env_dir_stat=$env_dir_stat\"",
            DEADLINE_FUNCTION,
            f"[ -r {UNIT_PATH} ] && echo \"unit_text=$(base64 -w0 {UNIT_PATH})\"",
            f"echo \"command_ctime=$(stat -L -c %Z -- {shlex.quote(target.command)} 2>/dev/null)\"",
            f"echo \"main_start=$(hk_deadline {SYSTEMCTL_S} 'systemctl show {VLLM_UNIT} ExecMainStartTimestamp' systemctl show --timestamp=unix -p ExecMainStartTimestamp --value {VLLM_UNIT} 2>/dev/null)\"",
            f"hk_show=$(hk_deadline {SYSTEMCTL_S} 'systemctl show {VLLM_UNIT}' systemctl show {VLLM_UNIT} {properties}"
            " 2>/dev/null)",
            "cg=",
            "while IFS= read -r hk_line; do",
            "  [ -n \"$hk_line\" ] || continue",
            f"  case $hk_line in {TIMED_OUT}*) printf '%s\\n' \"$hk_line\"; continue ;; esac",
            "  printf 'unit.%s\\n' \"$hk_line\"",
            "  case $hk_line in ControlGroup=*) cg=${hk_line#ControlGroup=} ;; esac",
            "done <<EOF",
            "$hk_show",
            "EOF",
            'if [ -n "$cg" ]; then',
            # v2 files, then v1's (memory controller hierarchy).
            "  for f in /sys/fs/cgroup$cg/memory.max /sys/fs/cgroup$cg/memory.peak \\",
            "    /sys/fs/cgroup/memory$cg/memory.limit_in_bytes /sys/fs/cgroup/memory$cg/memory.max_usage_in_bytes; do",
            '    [ -r "$f" ] && { v=; read -r v < "$f"; echo "cgroup.${f##*/}=$v"; }',
            "  done",
            '  for f in /sys/fs/cgroup$cg/memory.events /sys/fs/cgroup/memory$cg/memory.oom_control; do',
            '    [ -r "$f" ] && while read -r k v; do [ "$k" != oom_kill ] || echo "cgroup.oom_kill=$v"; done < "$f"',
            "  done",
            "fi",
            f"hk_probe=$({probe_command(target.host, target.port)})",
            "[ -z \"$hk_probe\" ] || printf 'probe=%s\\n' \"$hk_probe\"",
            "true",
        ))

    def process(self, output: list[str]) -> VllmServiceState:
        values: dict[str, str] = {}
        unit: dict[str, str] = {}
        cgroup: dict[str, str] = {}
        for line in output:
            key, _, value = line.partition("=")
            if key.startswith("unit."):
                unit[key[len("unit."):]] = value
            elif key.startswith("cgroup."):
                cgroup[key[len("cgroup."):]] = value.strip()
            else:
                values[key] = value.strip()
        try:
            target = ServiceTarget(*json.loads(values.get("target", "")))
        except (ValueError, TypeError):
            target = ServiceTarget()
        return VllmServiceState(
            target=target,
            user_uid=to_int(values.get("uid") or None),
            unit_sha256=values.get("unit_sha256") or None,
            env_sha256=values.get("env_sha256") or None,
            env_stat=FileStat.parse(values.get("env_stat", "")),
            env_dir_stat=FileStat.parse(values.get("env_dir_stat", "")),
            unit=unit,
            memory_limit_bytes=_memory_limit(cgroup),
            memory_peak_bytes=to_int(cgroup.get("memory.peak") or cgroup.get("memory.max_usage_in_bytes")),
            oom_kills=to_int(cgroup.get("oom_kill")),
            probe=Probe.parse(values["probe"]) if values.get("probe") else None,
            unit_text=_decoded(values.get("unit_text")),
            command_changed_at=to_int(values.get("command_ctime") or None),
            main_started_at=to_int(values.get("main_start", "").lstrip("@") or None),
            timeouts=timed_out_lines(output),
        )


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
