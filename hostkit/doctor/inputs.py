"""What `hostkit doctor` reads from a host, as plain data (the rules never touch a host)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hostkit.facts.kernel_log import KernelLog
from hostkit.facts.platform import PlatformInfo

# cgroup "no limit": v2 prints `max`; v1 prints PAGE_COUNTER_MAX rounded to pages, about 2**63.
UNLIMITED_FLOOR = 2**60


@dataclass(frozen=True)
class HostMemory:
    ram_total_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int


@dataclass(frozen=True)
class KernelTuning:
    swappiness: int | None
    thp_enabled: str | None  # the selected value, e.g. "madvise"; None without THP support
    thp_defrag: str | None
    cgroup_version: int  # 1 or 2


@dataclass(frozen=True)
class UnitMemory:
    """The vLLM unit as systemd and its memory cgroup report it. None: not reported / not set."""

    unit: str
    loaded: bool  # systemd knows the unit
    active_state: str | None = None
    sub_state: str | None = None
    main_pid: int | None = None
    restarts: int | None = None
    current_bytes: int | None = None
    peak_bytes: int | None = None
    max_bytes: int | None = None  # None: no limit
    high_bytes: int | None = None
    swap_current_bytes: int | None = None
    swap_max_bytes: int | None = None  # None: no limit
    oom_kills: int | None = None  # memory.events oom_kill (cgroup v2)
    control_group: str | None = None  # systemd's ControlGroup; None without systemd or while stopped
    exec_start: tuple[str, ...] = ()  # the configured command line, split on spaces by systemd's printing
    last_exit: str | None = None  # how the last main process ended, e.g. "exited, status 2"
    result: str | None = None  # systemd's Result, e.g. "start-limit-hit"


@dataclass(frozen=True)
class VllmProcessTree:
    """The vLLM server's root process (the unit's main process, else one found by its command
    line) and every process below it: V1 runs its engine in child processes."""

    pid: int
    argv: tuple[str, ...]
    argv_exact: bool  # from /proc/PID/cmdline; False when read from `ps` (split on spaces)
    tree_pids: tuple[int, ...]
    tree_rss_bytes: int  # summed RSS of the process and its descendants (shared pages count twice)


@dataclass(frozen=True)
class GpuHolder:
    """A process holding GPU memory outside the vLLM unit's cgroup."""

    pid: int
    name: str  # /proc/PID/comm; "" when /proc does not show the pid (another pid namespace)
    used_mib: int  # 0 when nvidia-smi says [N/A]


@dataclass(frozen=True)
class GpuMemory:
    index: int
    uuid: str
    total_mib: int
    used_mib: int
    vllm_mib: int  # held by processes in the vLLM unit's cgroup
    other_mib: int  # held by any other process
    others: tuple[GpuHolder, ...] = ()

    @property
    def other_pids(self) -> tuple[int, ...]:
        return tuple(sorted(holder.pid for holder in self.others))


@dataclass(frozen=True)
class KeepAlive:
    """What kept vLLM alive lately: engine deaths in its journal, the health watchdog's restarts."""

    checked_at: float | None = None  # the host's clock (unix time) when read
    engine_death_count: int = 0  # journal lines naming EngineDeadError in the last 24 h
    engine_death_lines: tuple[str, ...] = ()  # the last few of them
    watchdog_lines: tuple[str, ...] = ()  # the watchdog's last decisions (restarts, cap, start limit)
    watchdog_restarts: tuple[float, ...] = ()  # from its state file (unix times)

    def restarts_within(self, seconds: float) -> tuple[float, ...]:
        if self.checked_at is None:
            return self.watchdog_restarts
        return tuple(stamp for stamp in self.watchdog_restarts if self.checked_at - stamp < seconds)


@dataclass(frozen=True)
class CollectorMetrics:
    """hostkit's monitoring collector's metrics file (hostkit.monitoring), as read on the host."""

    path: str
    age_s: int  # seconds since the collector last wrote it
    samples: dict[str, float]  # `name{labels}` -> value, as the file spells them

    def value(self, name: str) -> float | None:
        return self.samples.get(name)


@dataclass(frozen=True)
class NvmeBoot:
    """hostkit's NVMe boot unit as the host has it: what it brings back at boot (its settings,
    written by the deploy from the plan), how its last run ended, and the swap active now."""

    by_id: str
    mount: str
    fstype: str
    swap_file: str | None  # None: no swap file under the mount
    swap_size_bytes: int
    active_state: str | None
    result: str | None  # systemd's Result of its last run ("success", "exit-code", ...)
    active_swaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceInputs:
    """One of vllm_instances as read on its host: its unit and memory cgroup, its server's
    process tree (None: its unit has no main process), its GPUs as planned with their memory
    split by its cgroup, its journal's engine deaths and its own watchdog's restarts
    (vllm-hostkit-watchdog@NAME.service's journal and state file), and the vLLM release of the
    environment its command runs from (each instance may run its own; None: none found there)."""

    name: str
    unit: UnitMemory
    vllm: VllmProcessTree | None
    gpus: tuple[GpuMemory, ...] = ()
    keepalive: KeepAlive = field(default_factory=KeepAlive)
    installed_vllm_version: str | None = None


@dataclass(frozen=True)
class DoctorInputs:
    host: str
    memory: HostMemory
    tuning: KernelTuning
    kernel_log: KernelLog
    unit: UnitMemory
    vllm: VllmProcessTree | None
    installed_vllm_version: str | None  # from the vLLM environment's dist-info; None: not found
    gpus: tuple[GpuMemory, ...] = ()
    gpu_query_error: str | None = None  # nvidia-smi present but failing
    platform: PlatformInfo | None = None
    notes: tuple[str, ...] = field(default=())  # what could not be read
    keepalive: KeepAlive = field(default_factory=KeepAlive)
    collector: CollectorMetrics | None = None  # None: no metrics file on the host
    nvme_boot: NvmeBoot | None = None  # None: no NVMe boot unit installed
    timeouts: tuple[str, ...] = ()  # "WHAT timed out after N s", one per command that hit its deadline
    instances: tuple[InstanceInputs, ...] = ()  # vllm_instances as planned; none: vllm.service's host

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["platform"] = self.platform.model_dump() if self.platform is not None else None
        data["kernel_log"]["oom_kills"] = [asdict(kill) for kill in self.kernel_log.oom_kills]
        del data["instances"]  # each instance's inputs go with its diagnosis (Diagnosis.instances)
        return data

    def of_instance(self, instance: InstanceInputs) -> DoctorInputs:
        """This host as one instance's rules read it: the host's memory, kernel and log, the
        instance's unit, process tree, GPUs, journal and release."""
        return replace(self, unit=instance.unit, vllm=instance.vllm, gpus=instance.gpus,
                       keepalive=instance.keepalive, installed_vllm_version=instance.installed_vllm_version,
                       instances=())

    @property
    def vllm_argv(self) -> tuple[str, ...]:
        """The running command line, else the unit's configured one (a crash-looping unit has no process)."""
        if self.vllm is not None:
            return self.vllm.argv
        return self.unit.exec_start
