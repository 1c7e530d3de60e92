"""What the planner decides for one host. Pure data: operations read it, `hostkit plan` prints it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from hostkit.facts.scope import SnapshotScope
from hostkit.paths import DEFAULT_CACHE_DIR, NVME_LABEL, NVME_UNIT
from hostkit.plan.gpu_policy import GpuPolicy
from hostkit.plan.scope import snapshot_scope
from hostkit.profile.host_profile import HostProfile
from hostkit.sizes import format_size
from hostkit.vllm.runtime import InstallTarget

# What a container's own host sets for it: a container shares its host's kernel (sysctl, THP,
# swap) and sees only the disks its host gives it. The plan of a container leaves them out.
HOST_SETTINGS = ("nvme", "swap", "sysctl", "thp")
# The VllmPlan fields only an instance of vllm_instances sets: vllm.service's JSON leaves them out.
INSTANCE_FIELDS = frozenset({"instance", "gpu_indices", "gpu_uuids", "shared_gpus", "watchdog", "numa_node",
                             "cpu_affinity"})


def left_to_host(container: str) -> str:
    """Why a container's plan leaves out a setting of HOST_SETTINGS."""
    return f"left to the container's host ({container} container)"


def _profile_default(key: str):
    """The inventory key's declared default: a plan made without a profile value says the same."""
    return HostProfile.model_fields[key].default


def nvme_lifecycle(nvme: "NvmePlan", swap: "SwapPlan") -> str:
    """What the next boot with a wiped disk does, in one line (plan, verify, doctor)."""
    text = (f"at boot, {NVME_UNIT} formats a blank {nvme.by_id} ({nvme.fstype}, label {NVME_LABEL}), "
            f"mounts it at {nvme.mount}")
    if swap.enabled and swap.boot == "unit":
        text += f" and re-creates the {format_size(swap.size_bytes)} swap file {swap.path}"
    return text + "; a disk with anything else on it is left alone"


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True)


class NvmePlan(_Plan):
    """Prepare a blank NVMe device: make a filesystem, mount it; NVME_UNIT does it again at
    each boot that finds the disk blank (instance store after a stop/start)."""

    device: str
    mount: str
    # The device's /dev/disk/by-id link from its model and serial: the name the boot unit finds
    # it by (nvmeXnY names can change order between boots).
    by_id: str
    fstype: str = "ext4"


class SwapPlan(_Plan):
    enabled: bool
    path: str | None = None  # None when disabled
    size_bytes: int = 0
    priority: int = 10
    reason: str = ""
    # How the file comes back at boot: "fstab", a line there; "unit", NVME_UNIT (a file under
    # nvme_mount, whose disk may come back blank: it is made again then).
    boot: str = "fstab"


class KernelPlan(_Plan):
    sysctl: dict[str, str]
    sysctl_conflicts: str = "error"  # "error" | "warn"
    thp_enabled: str | None = None
    thp_defrag: str | None = None


class MemoryTermPlan(_Plan):
    """One term of the GPU memory arithmetic (see hostkit.plan.vllm_memory for its source)."""

    name: str
    bytes: int
    why: str
    subtracted: bool = True  # False: outside vLLM's budget, shown for the record


class VllmSizing(_Plan):
    """GPU memory arithmetic behind the vLLM settings, per GPU (see hostkit.plan.vllm_memory)."""

    model: str
    tensor_parallel_size: int
    gpu_memory_utilization: float
    gpu_memory_bytes: int  # nvidia-smi's memory.total of the smallest GPU used
    gpu_seen_bytes: int  # what vLLM sees of it
    weights_bytes_per_gpu: int
    activation_peak_bytes: int
    terms: list[MemoryTermPlan] = Field(default_factory=list)
    kv_bytes_per_token: int
    kv_budget_bytes: int
    kv_tokens: int
    max_model_len: int
    max_concurrent_at_max_model_len: int
    expected_tokens_per_request: int | None = None


class VllmRuntimePlan(_Plan):
    """The vLLM release: what the host has, what it gets, and what driver that needs."""

    install: bool  # vllm_install: hostkit installs `target` with pip
    target: str  # "vllm==0.33.0"
    source: str | None = None  # where pip gets it (install only)
    venv: str | None = None  # install only
    installed: str | None = None  # what the host runs now, described; None: unknown
    cuda: str | None = None  # the installed build's CUDA (the target's is known after pip)
    driver: str | None = None
    driver_floor: str | None = None  # the oldest driver for `cuda`
    # OS packages the deploy adds before the venv is made, "name (why)" (hostkit.plan.os_packages),
    # and from where.
    os_packages: list[str] = Field(default_factory=list)
    os_packages_source: str | None = None
    # What the deploy acts on (hostkit.operations.vllm_install); the fields above describe it
    # for `hostkit plan`, whose JSON leaves these out. install_target: the release pip installs
    # and from where, None when the host's own vLLM runs; os_package_files: the packages'
    # files on the host (vllm_os_package_files), installed instead of from its repositories.
    install_target: InstallTarget | None = Field(default=None, exclude=True)
    os_package_files: tuple[str, ...] = Field(default=(), exclude=True)


class WatchdogSettings(_Plan):
    """The health watchdog's judgement: how often it checks, after how many failures it
    restarts vLLM, and its hourly cap."""

    enabled: bool = _profile_default("vllm_watchdog")
    interval_s: int = _profile_default("vllm_watchdog_interval_s")
    failures: int = _profile_default("vllm_watchdog_failures")
    max_restarts_per_hour: int = _profile_default("vllm_watchdog_max_restarts_per_hour")


class VllmPlan(_Plan):
    enabled: bool
    version: str = ""
    user: str = _profile_default("vllm_user")
    argv: list[str] = Field(default_factory=list)  # the full ExecStart, never a secret
    env: dict[str, str] = Field(default_factory=dict)  # vllm_env: non-secret, over the cache variables (units.vllm_unit.service_environment)
    api_key: SecretStr | None = None
    hf_token: SecretStr | None = None  # HF_TOKEN, in the environment file only, like the API key
    memory_max_bytes: int | None = None
    memory_high_bytes: int | None = None
    memory_swap_max_bytes: int | None = None
    cgroup_version: int = 2
    systemd_version: int | None = None  # the unit uses only directives it has (hostkit.desired.directives)
    host: str = _profile_default("vllm_host")
    port: int = _profile_default("vllm_port")
    served_model_name: str = ""
    cache_dir: str = DEFAULT_CACHE_DIR
    ready_timeout_s: int = _profile_default("vllm_ready_timeout")
    parse_check_timeout_s: int = _profile_default("vllm_parse_check_timeout")
    hardening: str = _profile_default("vllm_hardening")  # "standard" | "strict"
    sizing: VllmSizing | None = None  # None when the model or the GPUs are unknown
    runtime: VllmRuntimePlan | None = None
    # In a container whose kernel will not apply MemoryMax= (hostkit.facts.platform says why):
    # the plan warns, and the readiness gate and verify do not hold the unapplied limit against it.
    memory_limit_unapplied: str | None = None
    # One of vllm_instances (HostPlan.instances): its name, its GPUs by index and by UUID (what
    # its unit will put in CUDA_VISIBLE_DEVICES, which survives renumbering), the GPUs it
    # shares with other instances, said in words, and its own watchdog's settings (the host's
    # vllm_watchdog* keys, or the instance's). None and empty for vllm.service, whose watchdog
    # is HostPlan.watchdog.
    instance: str | None = None
    gpu_indices: list[int] = Field(default_factory=list)
    gpu_uuids: list[str] = Field(default_factory=list)
    shared_gpus: list[str] = Field(default_factory=list)
    watchdog: WatchdogSettings | None = None
    # The NUMA node of all its GPUs and that node's CPUs, which its unit runs on and takes its
    # memory from first (hostkit.plan.numa); None where it is not placed (the plan's note says why).
    numa_node: int | None = None
    cpu_affinity: str | None = None


class GpuPlan(_Plan):
    """What the deploy and verify hold the GPUs to (the gpu_* keys, hostkit.plan.gpu_policy),
    and whether the deploy holds the NVIDIA driver packages (hostkit.operations.driver_hold)."""

    policy: GpuPolicy = GpuPolicy()
    hold_driver_packages: bool = _profile_default("gpu_hold_driver_packages")


class MonitoringPlan(_Plan):
    """hostkit's memory collector (hostkit.monitoring): how often it runs, the directory of its
    metrics file, and whether hostkit runs node_exporter to serve that file. Not enabled:
    what hostkit installed for monitoring is removed."""

    enabled: bool = _profile_default("monitoring_enabled")
    interval_s: int = _profile_default("monitoring_interval_s")
    textfile_dir: str = _profile_default("monitoring_textfile_dir")
    node_exporter: bool = _profile_default("monitoring_node_exporter")


class HostPlan(_Plan):
    host: str
    nvme: NvmePlan | None
    swap: SwapPlan
    kernel: KernelPlan
    # vllm.service; None when vllm_instances plans several servers (`instances`), which the
    # single-unit paths (deploy, verify, rollout) refuse before they read a plan.
    vllm: VllmPlan | None
    watchdog: WatchdogSettings = WatchdogSettings()
    gpu: GpuPlan = GpuPlan()
    monitoring: MonitoringPlan = MonitoringPlan()
    # Where the host's snapshot looks (hostkit.plan.scope), as the plan was made from it: the
    # operations read the snapshot with it, not with the profile. Plumbing, not a decision:
    # `hostkit plan --format json` leaves it out.
    scope: SnapshotScope = Field(default_factory=snapshot_scope, exclude=True)
    warnings: list[str] = Field(default_factory=list)  # something may go wrong: read before deploying
    notes: list[str] = Field(default_factory=list)  # why values are what they are
    # The container the host is ("systemd-nspawn", "lxc"...); None: a VM or bare metal. A
    # container's HOST_SETTINGS are its host's: no NVMe, swap off and no sysctl or THP in the
    # plan, and the deploy and verify leave them alone.
    container: str | None = None
    # vllm_instances by name; empty without them, when `vllm` is the host's one server.
    instances: dict[str, VllmPlan] = Field(default_factory=dict)

    @property
    def left_to_host(self) -> tuple[str, ...]:
        return HOST_SETTINGS if self.container else ()
