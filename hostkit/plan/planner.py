"""From a validated host profile and the host's facts to what hostkit will make true.

Pure: no I/O. `plan_host` raises PlanError for plans that cannot work (vLLM would refuse
to start, the swap file does not fit); everything else it cannot vouch for becomes a
warning, and every value it chose for you gets a note saying why.

Rules, so that `hostkit plan` output can be checked by hand:
- swap_size "auto": 1x RAM clamped to [8 GiB, 16 GiB], capped to the filesystem's free
  space (an existing hostkit swap file at the same path counts as free) minus a reserve
  of max(1 GiB, 5% of the filesystem).
- swap_dir "auto": the NVMe device named by nvme_device when it is blank or already
  mounted at nvme_mount, else the mounted NVMe-backed filesystem with the most free space.
- vllm_memory_max "auto": RAM minus max(10% of RAM, min(2 GiB, half of RAM)) for the OS
  and sshd. vllm_memory_high "auto": MemoryMax minus max(5%, min(1 GiB, 10%)) of it, so
  the kernel reclaims before the hard limit kills. vllm_memory_swap_max "auto": half the
  hostkit swap file (the other half stays for the rest of the host), 0 without swap.
  Each "auto" limit is rounded down to a whole GiB (to 128 MiB below 8 GiB), so that a
  MemTotal that drifts by a few MiB (a kernel update) or a slightly resized swap file
  leaves it where it was. MemoryHigh= and MemorySwapMax= are cgroup v2 only.
- vLLM sizing, per GPU (hostkit.plan.vllm_memory, every term with its source): KV cache =
  utilization x (nvidia-smi total - driver reserve) - weights / TP - activation peak of the
  profiled batch - non-torch memory (communication buffers when TP > 1) - CUDA graphs (from
  0.21); KV bytes/token = 2 x layers x max(1, kv_heads // TP) x head_dim x KV dtype bytes.
  Weights follow config.json's quantization_config or vllm_quantization, with the
  embeddings and output layer unquantized. max_num_seqs "auto" = how many requests of
  vllm_expected_tokens_per_request (default: max_model_len) fit, at most 256. Chunked
  prefill "auto" turns on above 8192 tokens of context, with max_num_batched_tokens
  "auto" = 8192 (the field-tested value).
- vllm_instances: each instance planned by these rules on its own GPUs, its own model's
  config.json and the release behind its own vllm_command (refused where that was not read);
  with "auto", its MemoryMax is its part of what the OS leaves, in proportion
  to its RAM need, and its MemorySwapMax that part of half the swap file
  (hostkit.plan.instances). An instance whose GPUs all sit on one NUMA node of several runs
  on that node's CPUs and prefers its memory (hostkit.plan.numa).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from hostkit.plan import instances, numa, sysctl_values, vllm_memory
from hostkit.plan.host_ram import RamNeed, auto_limit, os_reserve, ram_need
from hostkit.plan.instances import RamShare
from hostkit.vllm import model_catalog
from hostkit.vllm.model_catalog import ModelConfigError, ModelSpec
from hostkit.plan.planning_facts import FilesystemFact, GpuMemoryFact, NvmeDeviceFact, PlanningFacts
from hostkit.plan.platform_findings import platform_findings
from hostkit.plan.scope import snapshot_scope
from hostkit.paths import DEFAULT_CACHE_DIR, NVME_LABEL, NVME_UNIT, SWAP_FILE_NAME, VLLM_UNIT, vllm_instance_unit
from hostkit.plan.gpu_policy import GpuPolicy
from hostkit.plan.plans import (
    GpuPlan,
    HostPlan,
    KernelPlan,
    MemoryTermPlan,
    MonitoringPlan,
    NvmePlan,
    SwapPlan,
    VllmPlan,
    VllmRuntimePlan,
    VllmSizing,
    WatchdogSettings,
    left_to_host,
)
from hostkit.profile.host_profile import HostProfile, mask
from hostkit.sizes import GIB, MIB, format_size
from hostkit.plan.swap_filesystems import reserve_bytes, swap_file_refusal
from hostkit.vllm.flags import ENGINE_OPTIONS, FlagError, FlagSet, flags_for, known_versions, parse_version
from hostkit.plan.os_packages import needed_os_packages, package_source
from hostkit.vllm.runtime import InstallTarget, driver_floor, driver_problem, mismatch_problem, release_matches

SWAP_AUTO_MIN = 8 * GIB
SWAP_AUTO_MAX = 16 * GIB
SWAP_MIN = 1 * GIB
LONG_CONTEXT_TOKENS = 8192
CHUNKED_PREFILL_BATCH_TOKENS = 8192
AUTO_MAX_NUM_SEQS_CAP = 256
# Weight bytes per parameter for quantization methods whose size is known.
QUANT_BYTES_PER_PARAM = {
    "fp8": 1.0,
    "fbgemm_fp8": 1.0,
    "ptpc_fp8": 1.0,
    "experts_int8": 1.0,
    # 4-bit groups of 128 with an fp16 scale and a packed zero point each.
    "awq": 0.5 + 2.5 / 128,
    "awq_marlin": 0.5 + 2.5 / 128,
    "gptq": 0.5 + 2.5 / 128,
    "gptq_marlin": 0.5 + 2.5 / 128,
    "marlin": 0.5 + 2.5 / 128,
    # In-flight 4-bit: blocks of 64 with a doubly quantized absmax.
    "bitsandbytes": 0.5 + 1 / 64,
}
KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}


@dataclass(frozen=True)
class PlanIssue:
    host: str
    key: str
    reason: str
    # The host's present state stands in the way, not the data (another process holds its
    # GPUs): the deploy fails that host alone at execute time instead of stopping the run.
    host_state: bool = False

    def __str__(self) -> str:
        return f"host {self.host}: {self.key}: {self.reason}"


class PlanError(Exception):
    def __init__(self, issues: list[PlanIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))

    @property
    def host_state_only(self) -> bool:
        return all(issue.host_state for issue in self.issues)


@dataclass
class _Findings:
    host: str
    issues: list[PlanIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def refuse(self, key: str, reason: str, host_state: bool = False) -> None:
        self.issues.append(PlanIssue(self.host, key, reason, host_state))

    def take(self, instance: str, theirs: "_Findings") -> None:
        """An instance's findings, its keys and words named by the instance."""
        self.issues.extend(PlanIssue(self.host, instances.key_path(instance, issue.key), issue.reason, issue.host_state)
                           for issue in theirs.issues)
        self.warnings.extend(instances.about(instance, warning) for warning in theirs.warnings)
        self.notes.extend(instances.about(instance, note) for note in theirs.notes)


def plan_host(profile: HostProfile, facts: PlanningFacts, host_name: str = "this host") -> HostPlan:
    """The plan for one host; PlanError lists everything that cannot work."""
    found = _Findings(host_name)
    container = facts.platform.container if facts.platform is not None else None
    if container:
        # The container's host owns these (HOST_SETTINGS): nothing of them is planned or checked.
        nvme = None
        swap = SwapPlan(enabled=False, priority=profile.swap_priority, reason=left_to_host(container))
        kernel = KernelPlan(sysctl={}, sysctl_conflicts=profile.sysctl_conflicts)
    else:
        nvme = _plan_nvme(profile, facts, found)
        swap = _plan_swap(profile, facts, nvme, found)
        kernel = KernelPlan(
            sysctl=dict(profile.sysctl),
            sysctl_conflicts=profile.sysctl_conflicts,
            thp_enabled=profile.thp_enabled,
            thp_defrag=profile.thp_defrag,
        )
    for key, value in kernel.sysctl.items():
        problem = sysctl_values.value_problem(key, value, facts.kernel_release, facts.sysctl_live)
        if problem:
            found.refuse(f"sysctl[{key!r}]", problem)
    if profile.vllm_instances:
        vllm, planned = None, _plan_instances(profile, facts, nvme, swap, found)
    else:
        vllm, planned = _plan_vllm(profile, facts, nvme, swap, found), {}
    if facts.platform is not None:
        warnings, notes = platform_findings(profile, facts.platform, swap.enabled, kernel_settings=not container)
        found.warnings.extend(warnings)
        found.notes.extend(notes)
    if found.issues:
        raise PlanError(found.issues)
    return HostPlan(
        host=host_name, nvme=nvme, swap=swap, kernel=kernel, vllm=vllm, watchdog=watchdog_settings(profile),
        gpu=gpu_plan(profile), monitoring=monitoring_plan(profile), scope=snapshot_scope(profile),
        warnings=found.warnings, notes=found.notes, container=container, instances=planned,
    )


def watchdog_settings(profile: HostProfile) -> WatchdogSettings:
    return WatchdogSettings(
        enabled=profile.vllm_watchdog,
        interval_s=profile.vllm_watchdog_interval_s,
        failures=profile.vllm_watchdog_failures,
        max_restarts_per_hour=profile.vllm_watchdog_max_restarts_per_hour,
    )


def gpu_plan(profile: HostProfile) -> GpuPlan:
    return GpuPlan(
        policy=GpuPolicy(
            required=profile.gpu_required,
            count=profile.gpu_count,
            min_driver=profile.gpu_min_driver,
            require_persistence=profile.gpu_require_persistence,
            max_ecc_uncorrected=profile.gpu_max_ecc_uncorrected,
            max_retired_pages_pending=profile.gpu_max_retired_pages_pending,
            max_remapped_rows_pending=profile.gpu_max_remapped_rows_pending,
            tolerated_xids=frozenset(profile.gpu_tolerated_xids),
        ),
        hold_driver_packages=profile.gpu_hold_driver_packages,
    )


def monitoring_plan(profile: HostProfile) -> MonitoringPlan:
    return MonitoringPlan(
        enabled=profile.monitoring_enabled,
        interval_s=profile.monitoring_interval_s,
        textfile_dir=profile.monitoring_textfile_dir,
        node_exporter=profile.monitoring_node_exporter,
    )


# --- NVMe and swap -------------------------------------------------------------------


def _plan_nvme(p: HostProfile, facts: PlanningFacts, found: _Findings) -> NvmePlan | None:
    if p.nvme_device is None:
        return None
    # By name, or by its by-id link: with several disks, names can change order between boots.
    device = next((d for d in facts.nvme_devices if p.nvme_device in (d.path, d.by_id)), None)
    if device is None:
        seen = ", ".join(d.path for d in facts.nvme_devices) or "none"
        found.refuse("nvme_device", f"{p.nvme_device} is not on this host (NVMe devices: {seen})")
        return None
    if device.by_id is None:
        found.refuse(
            "nvme_device",
            f"{device.path} has no /dev/disk/by-id link by model and serial: {NVME_UNIT} could not tell it "
            "from another disk at boot, where nvmeXnY names can change order. Unset nvme_device and set swap_dir",
        )
        return None
    others = [d.path for d in facts.nvme_devices if d.path != device.path]
    if others:
        found.notes.append(f"nvme_device: {device.path} ({device.by_id}) is the one used; "
                           f"{', '.join(others)} left alone (no striping)")
    mount = posixpath.normpath(p.nvme_mount)
    plan = NvmePlan(device=device.path, mount=mount, by_id=device.by_id)
    if device.is_blank:
        found.notes.append(f"{device.path} is blank: it gets an ext4 filesystem labelled {NVME_LABEL}, "
                           f"mounted at {mount}")
        return plan
    if mount in device.mountpoints:
        if device.label != NVME_LABEL:
            found.notes.append(f"{device.path} at {mount} gets the label {NVME_LABEL} (online), "
                               f"which {NVME_UNIT} knows it by")
        return plan
    if not device.mountpoints and (device.label == NVME_LABEL or device.fstab_mountpoint == mount):
        # hostkit's own filesystem, not mounted (the boot unit failed, or fstab timed out before it).
        found.notes.append(f"{device.path} is hostkit's filesystem for {mount} but not mounted: it is mounted again")
        return plan
    holds = ", ".join(device.signatures) or "partitions"
    where = f"mounted at {', '.join(device.mountpoints)}" if device.mountpoints else "not mounted"
    found.refuse(
        "nvme_device",
        f"{device.path} holds {holds} and is {where}, not at {mount}: hostkit formats only blank devices. "
        "Wipe it, mount it at nvme_mount yourself, or unset nvme_device",
    )
    return None


@dataclass(frozen=True)
class _SwapTarget:
    directory: str
    mountpoint: str
    fstype: str
    size_bytes: int
    avail_bytes: int
    why: str
    on_planned_nvme: bool = False  # under nvme_mount: the boot unit brings the file back


def _fs_for(path: str, filesystems: list[FilesystemFact]) -> FilesystemFact | None:
    """The filesystem holding `path`: the mount with the longest matching mountpoint."""
    path = posixpath.normpath(path)
    best = None
    for fs in filesystems:
        mount = posixpath.normpath(fs.mountpoint)
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            if best is None or len(mount) > len(posixpath.normpath(best.mountpoint)):
                best = fs
    return best


def _best_nvme_fs(facts: PlanningFacts) -> FilesystemFact | None:
    usable = [fs for fs in facts.filesystems if fs.on_nvme and swap_file_refusal(fs.fstype) is None]
    return max(usable, key=lambda fs: fs.avail_bytes, default=None)


def _nvme_target(nvme: NvmePlan, facts: PlanningFacts, directory: str, why: str) -> _SwapTarget:
    mounted = next((fs for fs in facts.filesystems if posixpath.normpath(fs.mountpoint) == nvme.mount), None)
    if mounted is not None:
        return _SwapTarget(directory, nvme.mount, mounted.fstype, mounted.size_bytes, mounted.avail_bytes, why, True)
    device: NvmeDeviceFact = next(d for d in facts.nvme_devices if d.path == nvme.device)
    return _SwapTarget(directory, nvme.mount, nvme.fstype, device.size_bytes, device.size_bytes, why, True)


def _swap_target(p: HostProfile, facts: PlanningFacts, nvme: NvmePlan | None, found: _Findings) -> _SwapTarget | None:
    if p.swap_dir != "auto":
        directory = posixpath.normpath(p.swap_dir)
        if nvme is not None and (directory == nvme.mount or directory.startswith(nvme.mount + "/")):
            return _nvme_target(nvme, facts, directory, f"swap_dir {directory} is on {nvme.device}")
        fs = _fs_for(directory, facts.filesystems)
        if fs is None:
            found.refuse("swap_dir", f"no mounted filesystem holds {directory}")
            return None
        return _SwapTarget(directory, fs.mountpoint, fs.fstype, fs.size_bytes, fs.avail_bytes, f"swap_dir is {directory}")
    if nvme is not None:
        return _nvme_target(nvme, facts, nvme.mount, f"swap_dir auto: the NVMe device {nvme.device} at {nvme.mount}")
    fs = _best_nvme_fs(facts)
    if fs is None:
        found.refuse(
            "swap_dir",
            "swap_dir is auto but no NVMe-backed filesystem is mounted and nvme_device names no blank NVMe device. "
            "Set swap_dir to an absolute directory on a local SSD (e.g. swap_dir = \"/var/lib/swap\"), "
            "or set nvme_device to a blank NVMe device (e.g. nvme_device = \"/dev/nvme1n1\")",
        )
        return None
    return _SwapTarget(
        fs.mountpoint, fs.mountpoint, fs.fstype, fs.size_bytes, fs.avail_bytes,
        f"swap_dir auto: {fs.mountpoint} is the NVMe-backed filesystem with the most free space",
    )


def _plan_swap(p: HostProfile, facts: PlanningFacts, nvme: NvmePlan | None, found: _Findings) -> SwapPlan:
    if not p.swap_enabled:
        return SwapPlan(enabled=False, priority=p.swap_priority, reason="swap_enabled is false")
    target = _swap_target(p, facts, nvme, found)
    if target is None:
        return SwapPlan(enabled=True, priority=p.swap_priority, reason="no usable directory")
    refusal = swap_file_refusal(target.fstype)
    if refusal is not None:
        found.refuse("swap_dir", f"{target.directory} is on {target.fstype}, which cannot hold a swap file: {refusal}")
        return SwapPlan(enabled=True, priority=p.swap_priority, reason="unusable filesystem")
    path = posixpath.join(target.directory, SWAP_FILE_NAME)
    existing = sum(s.size_bytes for s in facts.swaps if s.path == path)
    reserve = reserve_bytes(target.size_bytes)
    # A resize writes the new file before the old one goes, so a new size must fit beside it.
    room_for_new = target.avail_bytes - reserve
    room = (
        f"{format_size(target.avail_bytes)} free on {target.mountpoint}"
        f" ({target.fstype}), {format_size(reserve)} kept spare"
    )
    others = [s for s in facts.swaps if s.path != path]
    if others:
        listed = ", ".join(f"{s.path} ({format_size(s.size_bytes)})" for s in others)
        found.notes.append(f"other swap already active: {listed}; hostkit adds {path} at priority {p.swap_priority}")

    if p.swap_size == "auto":
        wanted = min(max(facts.ram_total_bytes, SWAP_AUTO_MIN), SWAP_AUTO_MAX)
        size = _round_down(min(wanted, room_for_new), MIB)
        if existing and size <= existing <= wanted:
            # Keep a file that was capped by free space earlier: no resize churn as space varies.
            size = existing
        if size < SWAP_MIN:
            found.refuse("swap_size", f"auto: less than {format_size(SWAP_MIN)} fits in {target.directory} ({room})")
            return SwapPlan(enabled=True, path=path, priority=p.swap_priority, reason="no room")
        reason = f"auto: 1x RAM ({format_size(facts.ram_total_bytes)}) clamped to 8G-16G = {format_size(wanted)}"
        if size < wanted:
            reason += f", capped to {format_size(size)} by free space ({room})"
    else:
        size = p.swap_size
        if size < SWAP_MIN:
            found.refuse("swap_size", f"{format_size(size)} is below {format_size(SWAP_MIN)}; set swap_enabled = False for no swap")
        elif size != existing and size > room_for_new:
            found.refuse("swap_size", f"{format_size(size)} does not fit in {target.directory} ({room})")
        reason = f"swap_size {format_size(size)}"
    reason += f"; {target.why}"
    if target.fstype == "btrfs":
        found.notes.append(f"{target.directory} is btrfs: the swap file must be NOCOW")
    return SwapPlan(enabled=True, path=path, size_bytes=size, priority=p.swap_priority, reason=reason,
                    boot="unit" if target.on_planned_nvme else "fstab")


def _round_down(value: int, unit: int) -> int:
    return max(0, value) // unit * unit


# --- vLLM ------------------------------------------------------------------------------


def _plan_instances(
    p: HostProfile, facts: PlanningFacts, nvme: NvmePlan | None, swap: SwapPlan, found: _Findings
) -> dict[str, VllmPlan]:
    """Each of vllm_instances planned as its own server on its own GPUs, the host's RAM
    shared between them (hostkit.plan.instances)."""
    if not facts.gpus:
        found.refuse("vllm_instances", "no GPUs seen on this host: the instances' GPUs cannot be placed")
        return {}
    placed: dict[str, list[GpuMemoryFact]] = {}
    for name, instance in p.vllm_instances.items():
        gpus, unknown = instances.resolve_gpus(instance.vllm_gpus, facts.gpus, instance.tensor_parallel_size)
        if unknown:
            found.refuse(instances.key_path(name, "vllm_gpus"), instances.unknown_gpus(name, unknown, facts.gpus))
        placed[name] = [gpu.seen_by(vllm_instance_unit(name)) for gpu in gpus]
    shared, refusals = instances.shared_gpus(p.vllm_instances, placed)
    for key, reason in refusals:
        found.refuse(key, reason)
    needs = {name: _ram_need(instance, flags_for(instance.vllm_version)) for name, instance in p.vllm_instances.items()}
    shares, refusal = instances.ram_shares(p.vllm_instances, needs, facts.ram_total_bytes, swap)
    if refusal:
        found.refuse("vllm_memory_max", refusal)
    plans = {}
    for name, instance in p.vllm_instances.items():
        own = _Findings(found.host)
        own.notes.extend(_gpu_memory_note(gpu) for gpu in placed[name] if gpu.memory_used_mib)
        reading = instances.release_reading(instance.vllm_command, p.vllm_command, facts)
        if reading.refusal:
            own.refuse("vllm_command", reading.refusal, host_state=reading.host_state)
        # The instance's own release, as its runtime part and the deploy's check read it.
        seen = facts.model_copy(update={"vllm_installed": reading.release})
        plan = _plan_vllm(instance, seen, nvme, swap, own, placed[name] or None, shares.get(name))
        near, why = numa.placement(placed[name], facts.numa_cpus, facts.platform.container if facts.platform else None)
        own.notes.append(why)
        found.take(name, own)
        plans[name] = plan.model_copy(update={
            "instance": name, "gpu_indices": [gpu.index for gpu in placed[name]],
            "gpu_uuids": [gpu.uuid for gpu in placed[name]], "shared_gpus": shared.get(name, []),
            "watchdog": watchdog_settings(instance),
            "numa_node": near.node if near else None, "cpu_affinity": near.cpus if near else None,
        })
    return plans


def _plan_vllm(
    p: HostProfile, facts: PlanningFacts, nvme: NvmePlan | None, swap: SwapPlan, found: _Findings,
    gpus: list[GpuMemoryFact] | None = None, share: RamShare | None = None,
) -> VllmPlan:
    """The plan of one vLLM server: vllm.service's, or an instance's on `gpus` with `share`
    of the host's RAM (None: the lowest GPUs, all the RAM the OS leaves)."""
    if not p.vllm_enabled:
        return VllmPlan(enabled=False, version=p.vllm_version, user=p.vllm_user, cgroup_version=facts.cgroup_version)
    release = flags_for(p.vllm_version)
    _note_flag_source(release, found)
    memory_max, memory_high, memory_swap_max = _memory_limits(p, facts, swap, found, share)
    tp = p.tensor_parallel_size
    spec = _model_spec(p, facts, found)
    batch = _batch_choice(p, release, spec)
    sizing = _size_gpu(p, release, batch, facts, spec, tp, found, gpus)
    _check_host_ram(_ram_need(p, release), memory_max, facts, found)

    cache_dir = _cache_dir(nvme, facts)
    return VllmPlan(
        enabled=True,
        version=p.vllm_version,
        user=p.vllm_user,
        argv=_argv(p, release, batch, sizing, found),
        env=dict(p.vllm_env),
        api_key=p.vllm_api_key,
        hf_token=p.vllm_hf_token,
        memory_max_bytes=memory_max,
        memory_high_bytes=memory_high,
        memory_swap_max_bytes=memory_swap_max,
        cgroup_version=facts.cgroup_version,
        systemd_version=facts.systemd_version,
        host=p.vllm_host,
        port=p.vllm_port,
        served_model_name=p.served_model_name,
        cache_dir=cache_dir,
        ready_timeout_s=p.vllm_ready_timeout,
        parse_check_timeout_s=p.vllm_parse_check_timeout,
        hardening=p.vllm_hardening,
        sizing=sizing,
        runtime=_runtime_plan(p, facts, found),
        memory_limit_unapplied=_memory_limit_unapplied(facts, memory_max, found),
    )


def _memory_limit_unapplied(facts: PlanningFacts, memory_max: int | None, found: _Findings) -> str | None:
    """Why a container's kernel will not apply MemoryMax=, warned about; None elsewhere. On a VM
    or bare metal hostkit owns the kernel: an unapplied limit there stays a failure to fix."""
    platform = facts.platform
    if memory_max is None or platform is None or not platform.container or not platform.memory_limit_unapplied:
        return None
    found.warnings.append(
        f"MemoryMax {format_size(memory_max)} is accepted by systemd but not applied by the kernel in this "
        f"{platform.container} container: {platform.memory_limit_unapplied}. Only a limit that the container's "
        "host sets on the whole container holds vLLM's memory (LXC: limits.memory; systemd-nspawn: MemoryMax= "
        "on the container's unit on its host)"
    )
    return platform.memory_limit_unapplied


def install_target(p: HostProfile) -> InstallTarget | None:
    """The release hostkit installs (vllm_install); None: the host's own vLLM runs, which
    hostkit checks but does not install."""
    return InstallTarget.from_profile(p) if p.vllm_install else None


def _runtime_plan(p: HostProfile, facts: PlanningFacts, found: _Findings) -> VllmRuntimePlan:
    """The release the host has and gets. What the deploy refuses (hostkit.operations.vllm_install)
    is a warning here: the host's state, not the data, stands in the way."""
    installed = facts.vllm_installed
    have = installed if installed is not None and installed.version else None
    described = None
    if have is not None:
        build = f"CUDA {have.cuda}" if have.cuda else "CPU build" if have.torch else "no torch"
        described = f"{have.package} {have.version} ({build}; {have.where})"
    target = install_target(p)
    runs_target = have is not None and (not p.vllm_install or (have.package == p.vllm_package
                                                               and release_matches(have.version, p.vllm_version)))
    # A venv is made unless the target is in service (switching back to a kept one makes none
    # either, which the installed release does not show).
    os_packages = needed_os_packages(target, facts.platform, new_venv=not runs_target)
    if have is not None and not p.vllm_install:
        problem = mismatch_problem(have.version, p.vllm_version, have.where or p.vllm_command)
        if problem:
            found.warnings.append(f"the deploy will refuse this host: {problem}")
    if runs_target and have.cuda:
        problem = driver_problem(f"{have.package} {have.version}", have.cuda, facts.driver_version)
        if problem:
            found.warnings.append(f"the deploy will refuse this host: {problem}")
    return VllmRuntimePlan(
        install=p.vllm_install,
        target=target.requirement if target else f"vLLM {p.vllm_version} at {p.vllm_command}",
        source=target.source() if target else None,
        venv=target.venv if target else None,
        installed=described,
        cuda=have.cuda if have is not None else None,
        driver=facts.driver_version,
        driver_floor=driver_floor(have.cuda) if have is not None and have.cuda else None,
        os_packages=[package.describe() for package in os_packages],
        os_packages_source=package_source(p.vllm_os_package_files, facts.platform) if os_packages else None,
        install_target=target,
        os_package_files=tuple(p.vllm_os_package_files),
    )


def _note_flag_source(release: FlagSet, found: _Findings) -> None:
    version, recorded = release.requested, release.recorded
    newest = known_versions()[-1]
    if parse_version(version)[:3] > parse_version(newest)[:3]:
        found.warnings.append(
            f"vLLM {version} is newer than {newest}, the newest release whose options hostkit knows: "
            f"the command line uses only options {newest} has; check it with `vllm serve --help`"
        )
    elif recorded != version:
        found.notes.append(f"vLLM {version}: options taken from {recorded}, the nearest recorded release at or below it")


def _memory_limits(
    p: HostProfile, facts: PlanningFacts, swap: SwapPlan, found: _Findings, share: RamShare | None = None
) -> tuple[int | None, int | None, int | None]:
    ram = facts.ram_total_bytes
    memory_max = p.vllm_memory_max
    if memory_max == "auto" and share is not None:
        memory_max = share.memory_max
        found.notes.append(share.why)
    elif memory_max == "auto":
        headroom = os_reserve(ram)
        memory_max = auto_limit(ram - headroom)
        found.notes.append(
            f"MemoryMax {format_size(memory_max)}: RAM {format_size(ram)} minus {format_size(headroom)} for the OS and sshd"
        )
    elif memory_max is None:
        found.warnings.append("vllm_memory_max is null: vLLM runs without a memory limit, so an OOM hits the whole host")
    elif memory_max > ram:
        found.warnings.append(f"vllm_memory_max {format_size(memory_max)} exceeds RAM {format_size(ram)}: it limits nothing")

    if facts.cgroup_version == 1:
        for key in ("vllm_memory_high", "vllm_memory_swap_max"):
            if getattr(p, key) not in ("auto", None):
                found.warnings.append(f"{key} is ignored: this host uses cgroup v1, where only MemoryMax= applies")
        found.notes.append("cgroup v1: no MemoryHigh= or MemorySwapMax= (cgroup v2 only)")
        return memory_max, None, None

    memory_high = p.vllm_memory_high
    if memory_high == "auto":
        if memory_max is None:
            memory_high = None
        else:
            gap = max(memory_max // 20, min(GIB, memory_max // 10))
            memory_high = auto_limit(memory_max - gap)
            found.notes.append(
                f"MemoryHigh {format_size(memory_high)}: reclaim starts {format_size(memory_max - memory_high)} below MemoryMax"
            )
    elif memory_high is not None and memory_max is not None and memory_high > memory_max:
        found.refuse(
            "vllm_memory_high",
            f"{format_size(memory_high)} is above MemoryMax {format_size(memory_max)}; lower it or set vllm_memory_max",
        )

    memory_swap_max = p.vllm_memory_swap_max
    if memory_swap_max == "auto":
        if swap.enabled and share is not None:
            memory_swap_max = auto_limit(int(swap.size_bytes // 2 * share.fraction))
            found.notes.append(f"MemorySwapMax {format_size(memory_swap_max)}: its share ({share.fraction:.0%}) of half the "
                               "swap file; the other half stays for the rest of the host")
        elif swap.enabled:
            memory_swap_max = auto_limit(swap.size_bytes // 2)
            found.notes.append(
                f"MemorySwapMax {format_size(memory_swap_max)}: half the swap file; the rest stays for the rest of the host"
            )
        else:
            memory_swap_max = 0
            found.notes.append("MemorySwapMax 0: hostkit plans no swap, so vLLM gets none")
    return memory_max, memory_high, memory_swap_max


def _model_spec(p: HostProfile, facts: PlanningFacts, found: _Findings) -> ModelSpec | None:
    model = p.vllm_model or ""
    if p.model_is_local_dir:
        config = facts.model_configs.get(model)
        if config is None:
            why = facts.model_config_errors.get(model)
            found.warnings.append(f"{model}/config.json was not read{f' ({why})' if why else ''}: "
                                  "GPU memory sizing skipped")
            return None
        try:
            return model_catalog.spec_from_hf_config(model, config)
        except ModelConfigError as error:
            found.warnings.append(f"{error}: GPU memory sizing skipped")
            return None
    spec = model_catalog.lookup(model)
    if spec is None:
        found.warnings.append(f"{model} is not in hostkit's model table: GPU memory sizing skipped")
    return spec


def _weight_layout(p: HostProfile, spec: ModelSpec) -> tuple[int, float] | None:
    """(bytes per parameter of the unquantized parts, of the decoder's linear layers), or
    None when a size is unknown. A pre-quantized checkpoint's quantization_config wins over
    vllm_quantization (vLLM refuses a flag that contradicts it)."""
    dtype_bytes = spec.dtype_bytes if p.vllm_dtype in (None, "auto") else model_catalog.DTYPE_BYTES.get(p.vllm_dtype)
    if dtype_bytes is None:
        return None
    if spec.quantization is not None:
        return dtype_bytes, spec.quantization.bytes_per_param
    if p.vllm_quantization:
        linear = QUANT_BYTES_PER_PARAM.get(p.vllm_quantization)
        return None if linear is None else (dtype_bytes, linear)
    return dtype_bytes, dtype_bytes


def _kv_dtype_bytes(p: HostProfile, spec: ModelSpec) -> int | None:
    if p.vllm_kv_cache_dtype in (None, "auto"):
        if p.vllm_dtype in (None, "auto"):
            return spec.dtype_bytes
        return model_catalog.DTYPE_BYTES.get(p.vllm_dtype)
    return KV_DTYPE_BYTES.get(p.vllm_kv_cache_dtype)


def _size_gpu(p: HostProfile, release: FlagSet, batch: _BatchChoice, facts: PlanningFacts, spec: ModelSpec | None,
              tp: int, found: _Findings, gpus: list[GpuMemoryFact] | None = None) -> VllmSizing | None:
    """vLLM's GPU memory arithmetic on the GPUs it will use (`gpus`, an instance's; else the
    lowest); None where it cannot be done or cannot work (`found` says why)."""
    used_gpus = _used_gpus(facts, spec, tp, found, gpus)
    if used_gpus is None:
        return None
    utilization = p.vllm_gpu_memory_utilization or release.default("--gpu-memory-utilization")
    _check_free_at_start(used_gpus, utilization, found)
    if spec is None:
        return None
    settings = _memory_settings(p, release, batch, spec, tp, utilization, used_gpus[0].name, found)
    if settings is None:
        return None
    gpu_memory = min(g.memory_total_mib for g in used_gpus) * MIB
    estimate = vllm_memory.estimate(spec, settings, gpu_memory)
    if not _one_request_fits(estimate, settings, found):
        return None
    return _sizing(p, spec, settings, gpu_memory, estimate)


def _used_gpus(facts: PlanningFacts, spec: ModelSpec | None, tp: int, found: _Findings,
               gpus: list[GpuMemoryFact] | None = None) -> list[GpuMemoryFact] | None:
    """The `tp` GPUs vLLM uses: `gpus` (an instance's, placed from its vllm_gpus), else the
    lowest indexes; None when the model does not split over `tp` of them or the host has
    fewer (refused), or no GPU was seen (warned)."""
    problem = spec.tp_problem(tp) if spec is not None else None
    if problem:
        found.refuse("vllm_tensor_parallel_size", f"{problem}; vLLM refuses to start")
        return None
    if not facts.gpus:
        found.warnings.append("no GPUs seen on this host: GPU memory checks skipped")
        return None
    if tp > len(facts.gpus):
        found.refuse("vllm_tensor_parallel_size", f"{tp} GPUs needed, the host has {len(facts.gpus)}")
        return None
    return gpus if gpus is not None else sorted(facts.gpus, key=lambda g: g.index)[:tp]


def _check_free_at_start(used_gpus: list[GpuMemoryFact], utilization: float, found: _Findings) -> None:
    """vLLM refuses to start unless `utilization` of each GPU's memory is free; what another
    process holds is the host's present state, so the refusal fails this host alone."""
    for gpu in used_gpus:
        # hostkit's own serving vLLM frees its memory when it restarts: only others' counts.
        total, free = gpu.memory_total_mib * MIB, (gpu.memory_total_mib - gpu.memory_others_mib) * MIB
        if free < total * utilization:
            fits = int(free / total * 100) / 100
            found.refuse(
                "vllm_gpu_memory_utilization",
                f"GPU {gpu.index} has {format_size(free)} free, but {utilization} x {format_size(total)} = "
                f"{format_size(int(total * utilization))} must be free at start-up; vLLM refuses to start. "
                f"{_gpu_holders(gpu)}. Lower it to {fits} or stop what uses the GPU",
                host_state=True,
            )


def _memory_settings(
    p: HostProfile, release: FlagSet, batch: _BatchChoice, spec: ModelSpec, tp: int, utilization: float,
    gpu_name: str, found: _Findings,
) -> vllm_memory.EngineSettings | None:
    """The engine settings that move the arithmetic, as the command line passes them; None
    (warned) when a weight or KV cache dtype's size is unknown."""
    layout = _weight_layout(p, spec)
    kv_bytes = _kv_dtype_bytes(p, spec)
    if layout is None or kv_bytes is None:
        found.warnings.append("weight or KV cache dtype size unknown for these settings: KV cache sizing skipped")
        return None
    return vllm_memory.EngineSettings(
        release=parse_version(release.requested)[:3],
        tensor_parallel_size=tp,
        gpu_memory_utilization=utilization,
        max_model_len=batch.max_model_len,
        max_num_batched_tokens=batch.batched,
        max_num_seqs=p.vllm_max_num_seqs if isinstance(p.vllm_max_num_seqs, int) else None,
        chunked_prefill=batch.chunked,
        enforce_eager=bool(p.vllm_extra_args.get("--enforce-eager")),
        gpu_name=gpu_name,
        weight_dtype_bytes=layout[0],
        linear_bytes_per_param=layout[1],
        kv_dtype_bytes=kv_bytes,
        cpu_offload_bytes=int((p.vllm_cpu_offload_gb or 0) * GIB),
    )


def _kv_arithmetic(estimate: vllm_memory.GpuMemoryEstimate, utilization: float) -> str:
    """The KV cache's sum, term by term, as `hostkit plan` and a refusal show it."""
    subtracted = " - ".join(f"{t.name} {format_size(t.bytes)}" for t in estimate.terms if t.subtracted and t.bytes)
    return (
        f"{utilization} x {format_size(estimate.gpu_seen_bytes)} - {subtracted}"
        f" = {format_size(max(0, estimate.kv_bytes))} for KV cache per GPU, at {estimate.kv_bytes_per_token // 1024} KiB/token"
    )


def _one_request_fits(estimate: vllm_memory.GpuMemoryEstimate, settings: vllm_memory.EngineSettings,
                      found: _Findings) -> bool:
    """Whether the KV cache holds one request of max_model_len, which vLLM refuses to start
    without; noted with how many fit, or refused."""
    arithmetic = _kv_arithmetic(estimate, settings.gpu_memory_utilization)
    fit_tokens, max_model_len = estimate.kv_tokens, settings.max_model_len
    if fit_tokens < max_model_len:
        key = "vllm_max_model_len" if fit_tokens > 0 else "vllm_gpu_memory_utilization"
        found.refuse(
            key,
            f"one request of {max_model_len} tokens does not fit in the KV cache ({arithmetic} = {fit_tokens} tokens); "
            "vLLM refuses to start. Lower vllm_max_model_len, raise vllm_tensor_parallel_size or "
            "vllm_gpu_memory_utilization, or use vllm_kv_cache_dtype fp8",
        )
        return False
    found.notes.append(f"KV cache: {arithmetic} = {fit_tokens} tokens, "
                       f"{fit_tokens // max_model_len} requests of {max_model_len} tokens")
    return True


def _sizing(p: HostProfile, spec: ModelSpec, settings: vllm_memory.EngineSettings, gpu_memory: int,
            estimate: vllm_memory.GpuMemoryEstimate) -> VllmSizing:
    return VllmSizing(
        model=spec.name,
        tensor_parallel_size=settings.tensor_parallel_size,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        gpu_memory_bytes=gpu_memory,
        gpu_seen_bytes=estimate.gpu_seen_bytes,
        weights_bytes_per_gpu=estimate.term("weights").bytes,
        activation_peak_bytes=estimate.term("activation peak").bytes,
        terms=[
            MemoryTermPlan(name=t.name, bytes=t.bytes, why=t.why, subtracted=t.subtracted) for t in estimate.terms
        ],
        kv_bytes_per_token=estimate.kv_bytes_per_token,
        kv_budget_bytes=estimate.kv_bytes,
        kv_tokens=estimate.kv_tokens,
        max_model_len=settings.max_model_len,
        max_concurrent_at_max_model_len=estimate.kv_tokens // settings.max_model_len,
        expected_tokens_per_request=p.vllm_expected_tokens_per_request,
    )


@dataclass(frozen=True)
class _BatchChoice:
    """The context length, chunked prefill and max_num_batched_tokens that the command line
    passes, "auto" resolved (None: left to vLLM). `batched` is before the max_num_seqs floor,
    which only the sizing can give."""

    max_model_len: int | None
    chunked: bool | None
    batched: int | None
    in_chunks: bool  # whether vLLM prefills in chunks: asked to, or left to a V1 engine, which does


def _batch_choice(p: HostProfile, release: FlagSet, spec: ModelSpec | None) -> _BatchChoice:
    max_model_len = p.vllm_max_model_len or (spec.max_position_embeddings if spec else None)
    chunked = p.vllm_enable_chunked_prefill
    if chunked == "auto":
        chunked = auto_chunked_prefill(max_model_len)
    in_chunks = chunked is True or (chunked is None and release.runs_v1_by_default)
    batched = p.vllm_max_num_batched_tokens
    if batched == "auto":
        # A chunk when prompts are prefilled in chunks, else a whole prompt.
        batched = CHUNKED_PREFILL_BATCH_TOKENS if in_chunks else max_model_len
    return _BatchChoice(max_model_len, chunked, batched, in_chunks)


def auto_chunked_prefill(max_model_len: int | None) -> bool | None:
    """vllm_enable_chunked_prefill "auto": on for long contexts; None (vLLM's default) when
    the context length is unknown."""
    return None if max_model_len is None else max_model_len > LONG_CONTEXT_TOKENS


def _gpu_holders(gpu: GpuMemoryFact) -> str:
    """Who holds the memory that is not the vLLM unit's, for the refusal."""
    if gpu.processes_unknown:
        return f"Held by processes unknown ({gpu.processes_unknown.splitlines()[0]})"
    unit = "the vLLM unit" if gpu.unit == VLLM_UNIT else gpu.unit
    own = f"; {unit}'s {format_size(gpu.memory_vllm_mib * MIB)} not counted" if gpu.memory_vllm_mib else ""
    return f"Held outside {unit}: {_holder_list(gpu) or 'no process listed (driver or another container)'}{own}"


def _holder_list(gpu: GpuMemoryFact) -> str:
    """The other processes, largest first, then hostkit's other vLLM units, by cgroup."""
    processes = [
        f"pid {p.pid} ({p.name or 'not visible in /proc'}) {'?' if p.used_mib is None else format_size(p.used_mib * MIB)}"
        for p in sorted(gpu.other_processes, key=lambda p: -(p.used_mib or 0))
    ]
    units = [f"{unit} {format_size(mib * MIB)}" for unit, mib in sorted(gpu.other_units_mib.items())]
    return ", ".join(processes + units)


def _gpu_memory_note(gpu: GpuMemoryFact) -> str:
    """Whose memory an instance's GPU holds, by cgroup: its unit's own, which its restart
    frees, and the rest, beside which it must fit."""
    if gpu.processes_unknown:
        return f"GPU {gpu.index}: {format_size(gpu.memory_used_mib * MIB)} in use, {_gpu_holders(gpu)}"
    others = _holder_list(gpu) or "none listed (driver or another container)"
    return (f"GPU {gpu.index}: {format_size(gpu.memory_used_mib * MIB)} in use: {gpu.unit}'s own "
            f"{format_size(gpu.memory_vllm_mib * MIB)}, freed by its restart; others' "
            f"{format_size(gpu.memory_others_mib * MIB)}: {others}")


def _ram_need(p: HostProfile, release: FlagSet) -> RamNeed:
    if release.runs_v1_by_default:
        return ram_need(p.tensor_parallel_size, p.vllm_cpu_offload_gb, v0_engine=False, swap_space=None)
    swap_space = p.vllm_swap_space if p.vllm_swap_space is not None else release.default("--swap-space")
    return ram_need(p.tensor_parallel_size, p.vllm_cpu_offload_gb, v0_engine=True, swap_space=swap_space)


def _check_host_ram(need: RamNeed, memory_max: int | None, facts: PlanningFacts, found: _Findings) -> None:
    estimate = need.describe()
    if memory_max is not None and need.high > memory_max:
        found.warnings.append(
            f"{estimate}, more than MemoryMax {format_size(memory_max)}: the unit may be OOM-killed. "
            "Measure the unit's memory.peak under load and adjust"
        )
    elif need.high > facts.ram_total_bytes:
        found.warnings.append(f"{estimate}, more than the host's RAM {format_size(facts.ram_total_bytes)}")
    else:
        found.notes.append(estimate)


def _cache_dir(nvme: NvmePlan | None, facts: PlanningFacts) -> str:
    if nvme is not None:
        return f"{nvme.mount}/vllm-cache"
    fs = _best_nvme_fs(facts)
    if fs is not None and posixpath.normpath(fs.mountpoint) != "/":
        return f"{posixpath.normpath(fs.mountpoint)}/vllm-cache"
    return DEFAULT_CACHE_DIR


def _engine_settings(p: HostProfile, batch: _BatchChoice, sizing: VllmSizing | None, found: _Findings) -> dict:
    """{option: value} for the engine keys, with "auto" resolved (None = not passed), and a
    note or warning for each "auto"."""
    seqs = _auto_max_num_seqs(p, sizing, found) if p.vllm_max_num_seqs == "auto" else p.vllm_max_num_seqs
    if p.vllm_enable_chunked_prefill == "auto":
        if batch.chunked is None:
            found.warnings.append("vllm_enable_chunked_prefill auto: context length unknown, left to vLLM's default")
        else:
            found.notes.append(
                f"chunked prefill {'on' if batch.chunked else 'off'}: context {batch.max_model_len} tokens"
                f" {'>' if batch.chunked else '<='} {LONG_CONTEXT_TOKENS}"
            )
    batched = batch.batched
    if p.vllm_max_num_batched_tokens == "auto":
        if batched is None:
            found.warnings.append("vllm_max_num_batched_tokens auto: context length unknown, left to vLLM's default")
        else:
            batched = max(batched, seqs if isinstance(seqs, int) else 0)  # vLLM refuses fewer tokens than sequences
            why = ("prompts are prefilled in chunks of this size" if batch.in_chunks
                   else "without chunked prefill a whole prompt fits one batch")
            found.notes.append(f"max_num_batched_tokens {batched}: {why}")
    # An instance's TP defaults to the number of its GPUs, which vLLM must be told.
    tp = p.vllm_tensor_parallel_size or (p.tensor_parallel_size if p.tensor_parallel_size > 1 else None)
    resolved = {"vllm_max_num_seqs": seqs, "vllm_enable_chunked_prefill": batch.chunked,
                "vllm_max_num_batched_tokens": batched, "vllm_tensor_parallel_size": tp}
    return {option: resolved.get(key, getattr(p, key)) for key, option in ENGINE_OPTIONS.items()}


def _auto_max_num_seqs(p: HostProfile, sizing: VllmSizing | None, found: _Findings) -> int | None:
    if sizing is None:
        found.warnings.append("vllm_max_num_seqs auto: model or GPUs unknown, left to vLLM's default")
        return None
    cap = AUTO_MAX_NUM_SEQS_CAP
    if isinstance(p.vllm_max_num_batched_tokens, int):
        cap = min(cap, p.vllm_max_num_batched_tokens)  # vLLM refuses more sequences than batch tokens
    expected = sizing.expected_tokens_per_request
    fitting = sizing.kv_tokens // expected if expected else sizing.max_concurrent_at_max_model_len
    seqs = max(1, min(cap, fitting))
    sized_for = f"{expected} tokens (vllm_expected_tokens_per_request)" if expected else f"{sizing.max_model_len} tokens"
    found.notes.append(f"max_num_seqs {seqs}: requests of {sized_for} that fit in the KV cache (at most {cap})")
    found.notes.append(_cap_meaning(seqs, sizing))
    return seqs


def _cap_meaning(seqs: int, sizing: VllmSizing) -> str:
    """What a max_num_seqs cap means against the KV cache: how many of the capped requests
    can be at max_model_len, and at the expected length, before vLLM preempts."""
    full = sizing.kv_tokens // sizing.max_model_len
    text = (
        f"max_num_seqs {seqs} against {sizing.kv_tokens} KV tokens: {min(seqs, full)} of them can be at "
        f"max_model_len {sizing.max_model_len} at once"
    )
    if sizing.expected_tokens_per_request:
        expected = sizing.expected_tokens_per_request
        text += f", {min(seqs, sizing.kv_tokens // expected)} at the expected {expected} tokens"
    if seqs > full:
        text += "; longer requests beyond that wait or are preempted (vLLM's scheduler)"
    return text


def _argv(p: HostProfile, release: FlagSet, batch: _BatchChoice, sizing: VllmSizing | None,
          found: _Findings) -> list[str]:
    model = p.vllm_model or ""
    if release.entry_point == "serve":
        head = [p.vllm_command, "serve", model]
    else:
        head = [p.vllm_command, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    options = {
        "--host": p.vllm_host,
        "--port": p.vllm_port,
        "--served-model-name": p.served_model_name,
        **_engine_settings(p, batch, sizing, found),
    }
    try:
        words = release.render(options)
        for option, value in p.vllm_extra_args.items():
            words.extend(release.render({option: value}))
    except FlagError as error:
        found.refuse("vllm_version", str(error))
        return head
    return head + words


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the values of secret-looking names hidden, for display."""
    return {name: mask(name, value) for name, value in env.items()}
