"""Diagnosis rules: from what was read on a host to findings, each with a severity and a fix.

Pure functions of `DoctorInputs` (and the host's profile when doctor runs on an inventory),
so every rule is unit-tested on recorded host output. Fixes name the inventory key that
hostkit renders into the unit, then what it means on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from hostkit.vllm import model_catalog
from hostkit.doctor.inputs import DoctorInputs, InstanceInputs
from hostkit.facts.kernel_log import OomKill
from hostkit.doctor.vllm_args import VllmSettings, effective_settings, removal_note
from hostkit.plan.planner import CHUNKED_PREFILL_BATCH_TOKENS, LONG_CONTEXT_TOKENS
from hostkit.paths import NVME_UNIT, watchdog_unit_of
from hostkit.plan.plans import NvmePlan, SwapPlan, nvme_lifecycle
from hostkit.profile.host_profile import HostProfile
from hostkit.sizes import GIB, format_size
from hostkit.vllm.flags import FlagError, parse_version, runs_v1_by_default

# Swap fill levels: above these the next burst has nowhere to go but the OOM killer.
SWAP_WARNING_FRACTION = 0.80
SWAP_CRITICAL_FRACTION = 0.95
# RAM the unit's limit must leave to the rest of the host (sshd, journald, agents): the
# headroom hostkit's planner leaves with vllm_memory_max "auto", so a deployed limit passes.
HOST_RESERVE_FRACTION = 0.10
HOST_RESERVE_CAP = 2 * GIB
# "Utilization above 0.9 while other processes hold GPU memory" (practitioners: 0.7-0.8 when shared).
SHARED_GPU_UTILIZATION_LIMIT = 0.90
SHARED_GPU_UTILIZATION_ADVICE = 0.80
# max_num_seqs above this is worth lowering when host memory is under pressure (256 -> 64).
MODEST_MAX_NUM_SEQS = 64
UNIT_PEAK_PRESSURE_FRACTION = 0.90  # of MemoryMax
HOST_PRESSURE_FRACTION = 0.80  # of RAM, when the unit has no limit
SWAP_PRESSURE_FRACTION = 0.50
SWAPPINESS_ADVICE = 10
# Used when the installed release is unknown: vLLM's default before 0.20.
ASSUMED_DEFAULT_UTILIZATION = 0.90


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


SEVERITY_ORDER = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class Finding:
    code: str  # stable identifier, e.g. "vllm-oom-killed"
    severity: Severity
    problem: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


@dataclass(frozen=True)
class InstanceDiagnosis:
    """One of vllm_instances: what its rules read (its unit, process, GPUs, flags) and found."""

    instance: InstanceInputs
    inputs: DoctorInputs  # the host as this instance's rules read it (DoctorInputs.of_instance)
    settings: VllmSettings | None
    findings: tuple[Finding, ...]

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def unit(self) -> str:
        return self.instance.unit.unit

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "inputs": asdict(self.instance),
                "vllm_settings": self.settings.to_dict() if self.settings else None,
                "findings": [finding.to_dict() for finding in self.findings]}


@dataclass(frozen=True)
class Diagnosis:
    inputs: DoctorInputs
    settings: VllmSettings | None
    findings: tuple[Finding, ...]  # a host with vllm_instances: the host's own, each instance's below
    instances: tuple[InstanceDiagnosis, ...] = ()

    @property
    def all_findings(self) -> tuple[Finding, ...]:
        return self.findings + tuple(finding for instance in self.instances for finding in instance.findings)

    @property
    def critical(self) -> bool:
        return any(f.severity is Severity.CRITICAL for f in self.all_findings)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "host": self.inputs.host,
            "inputs": self.inputs.to_dict(),
            "vllm_settings": self.settings.to_dict() if self.settings else None,
            "findings": [finding.to_dict() for finding in self.findings],
        }
        if self.instances:
            data["instances"] = [instance.to_dict() for instance in self.instances]
        return data


@dataclass(frozen=True)
class Context:
    inputs: DoctorInputs
    settings: VllmSettings | None
    profile: HostProfile | None
    instance: str | None = None  # one of vllm_instances: its rules read its unit (DoctorInputs.of_instance)

    @property
    def unit(self) -> str:
        return self.inputs.unit.unit


Rule = Callable[[Context], Iterator[Finding]]


def host_reserve(ram_bytes: int) -> int:
    return max(int(ram_bytes * HOST_RESERVE_FRACTION), min(HOST_RESERVE_CAP, ram_bytes // 2))


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "n/a"


# -- what could not be read -----------------------------------------------------------------


def commands_timed_out(ctx: Context) -> Iterator[Finding]:
    """A command that ran past its deadline leaves what it reads unknown; a wedged GPU hangs
    nvidia-smi, a stuck systemd hangs systemctl."""
    if ctx.inputs.timeouts:
        yield Finding(
            "command-timed-out", Severity.CRITICAL,
            "Commands ran past their deadlines, so what they read is unknown: " + "; ".join(ctx.inputs.timeouts) + ".",
            "For nvidia-smi: look for Xid lines (`dmesg | grep -i xid`), then reset the GPU (`nvidia-smi -r`) or reboot; "
            "for systemctl or journalctl: see what blocks systemd (`systemctl list-jobs`).",
            {"timeouts": list(ctx.inputs.timeouts)},
        )


# -- memory and swap ----------------------------------------------------------------------


def no_swap(ctx: Context) -> Iterator[Finding]:
    memory = ctx.inputs.memory
    if memory.swap_total_bytes:
        return
    if ctx.profile is not None and not ctx.profile.swap_enabled:
        yield Finding(
            "no-swap", Severity.INFO,
            "No swap, as the inventory asks (swap_enabled: false): a memory burst goes straight to the OOM killer.",
            "Nothing to do if this host must run without swap (Kubernetes nodes, some GPU health checkers).",
        )
        return
    yield Finding(
        "no-swap", Severity.WARNING,
        f"No swap on a host with {format_size(memory.ram_total_bytes)} of RAM: a short memory burst "
        "is answered by the OOM killer instead of a slowdown.",
        "Add 8-16 GiB of swap (or 1x RAM) on SSD/NVMe: swap_enabled: true and swap_size: auto, then deploy "
        "(by hand: dd, chmod 600, mkswap, swapon, and an /etc/fstab line). Swap is a buffer, never extra GPU memory.",
        {"ram_total_bytes": memory.ram_total_bytes},
    )


def swap_almost_full(ctx: Context) -> Iterator[Finding]:
    memory = ctx.inputs.memory
    if not memory.swap_total_bytes:
        return
    fraction = memory.swap_used_bytes / memory.swap_total_bytes
    if fraction < SWAP_WARNING_FRACTION:
        return
    severity = Severity.CRITICAL if fraction >= SWAP_CRITICAL_FRACTION else Severity.WARNING
    yield Finding(
        "swap-almost-full", severity,
        f"Swap is {fraction:.0%} full ({format_size(memory.swap_used_bytes)} of {format_size(memory.swap_total_bytes)}): "
        "the next burst has nowhere to go but the OOM killer.",
        "Cut host-memory demand rather than adding swap: lower vllm_max_num_seqs, vllm_cpu_offload_gb or "
        "vllm_swap_space, or move other memory users off the host. Watch whether swap falls back after load "
        "(`hostkit smoke --watch`).",
        {"swap_used_bytes": memory.swap_used_bytes, "swap_total_bytes": memory.swap_total_bytes},
    )


def swappiness(ctx: Context) -> Iterator[Finding]:
    tuning, memory = ctx.inputs.tuning, ctx.inputs.memory
    wanted = SWAPPINESS_ADVICE
    if ctx.profile is not None:
        wanted = int(ctx.profile.sysctl.get("vm.swappiness", wanted))
    if tuning.swappiness is None or not memory.swap_total_bytes or tuning.swappiness <= wanted:
        return
    yield Finding(
        "swappiness-high", Severity.INFO,
        f"vm.swappiness is {tuning.swappiness}: the kernel swaps out idle vLLM memory early.",
        f"Set vm.swappiness={wanted} in a file under /etc/sysctl.d (hostkit's sysctl default), then deploy.",
        {"swappiness": tuning.swappiness},
    )


def transparent_hugepages(ctx: Context) -> Iterator[Finding]:
    tuning = ctx.inputs.tuning
    wanted = ctx.profile.thp_enabled if ctx.profile is not None else "madvise"
    if tuning.thp_enabled is None or tuning.thp_enabled == wanted or tuning.thp_enabled != "always":
        return
    yield Finding(
        "thp-always", Severity.INFO,
        "Transparent hugepages are `always`: every anonymous mapping may be backed by huge pages, "
        "which inflates RSS and compaction stalls.",
        f"thp_enabled: {wanted} (hostkit persists it with a oneshot unit), then deploy.",
        {"thp_enabled": tuning.thp_enabled, "thp_defrag": tuning.thp_defrag},
    )


# -- OOM kills --------------------------------------------------------------------------------


def is_vllm_victim(kill: OomKill, unit: str, by_name: bool = True) -> bool:
    """Killed inside the vLLM unit, or (`by_name`) a process vLLM names itself (V1:
    `VLLM::EngineCore`); by name alone no instance of several can tell which was its own."""
    return kill.in_unit(unit) or by_name and (kill.process.startswith("VLLM::") or kill.process == "vllm")


def _is_ctx_victim(ctx: Context, kill: OomKill) -> bool:
    return is_vllm_victim(kill, ctx.unit, by_name=ctx.instance is None)


def vllm_oom_kills(ctx: Context) -> Iterator[Finding]:
    log, unit = ctx.inputs.kernel_log, ctx.inputs.unit
    vllm_kills = [kill for kill in log.oom_kills if _is_ctx_victim(ctx, kill)]
    limit = format_size(unit.max_bytes) if unit.max_bytes else None
    if vllm_kills:
        in_limit = [kill for kill in vllm_kills if kill.cgroup_limit]
        host_wide = [kill for kill in vllm_kills if not kill.cgroup_limit]
        victims = ", ".join(f"{k.process} (pid {k.pid}, {format_size(k.anon_rss_bytes or 0)} anon)" for k in vllm_kills)
        if host_wide:
            problem = (f"The host ran out of memory and the kernel killed vLLM {len(host_wide)} time(s) since boot: "
                       f"{victims}.")
            fix = ("Put a memory limit on the unit (vllm_memory_max, rendered as MemoryMax=) so an OOM stays inside "
                   "the service, keep swap as a buffer, and cut vLLM's host memory: lower vllm_max_num_seqs "
                   "(e.g. 256 -> 64), vllm_cpu_offload_gb, vllm_swap_space.")
        else:
            problem = (f"vLLM hit its unit memory limit{f' (MemoryMax={limit})' if limit else ''} and was OOM-killed "
                       f"{len(in_limit)} time(s) since boot: {victims}.")
            fix = ("Measure the real peak (`hostkit smoke` under load, the unit's memory.peak) and raise "
                   "vllm_memory_max if RAM allows, or cut vLLM's host memory: lower vllm_max_num_seqs (e.g. 256 -> 64), "
                   "vllm_cpu_offload_gb, vllm_swap_space.")
        yield Finding("vllm-oom-killed", Severity.CRITICAL, problem, fix,
                      {"kills": [asdict(kill) for kill in vllm_kills]})
    elif unit.oom_kills:
        yield Finding(
            "vllm-oom-killed", Severity.CRITICAL,
            f"The vLLM unit's memory cgroup counts {unit.oom_kills} OOM kill(s)"
            f"{f' at MemoryMax={limit}' if limit else ''} (the kernel log did not name the victim).",
            "Raise vllm_memory_max if RAM allows, or lower vllm_max_num_seqs (e.g. 256 -> 64).",
            {"memory_events_oom_kill": unit.oom_kills},
        )


def other_oom_kills(ctx: Context) -> Iterator[Finding]:
    """Kills of no vLLM unit's (on a host with vllm_instances: of no instance's), and an unread log."""
    log = ctx.inputs.kernel_log
    if ctx.inputs.instances:
        units = [instance.unit.unit for instance in ctx.inputs.instances]
        other_kills = [kill for kill in log.oom_kills if not any(kill.in_unit(unit) for unit in units)]
    else:
        other_kills = [kill for kill in log.oom_kills if not _is_ctx_victim(ctx, kill)]
    if other_kills:
        victims = ", ".join(f"{k.process} (pid {k.pid})" for k in other_kills)
        yield Finding(
            "oom-kill-other", Severity.WARNING,
            f"The OOM killer killed {len(other_kills)} other process(es) since boot: {victims}.",
            "Find what used the memory (the kill lines in `journalctl -k -b`); a memory limit on the vLLM unit "
            "(vllm_memory_max) keeps vLLM from starving the rest of the host.",
            {"kills": [asdict(kill) for kill in other_kills]},
        )
    if not log.readable:
        yield Finding(
            "kernel-log-unreadable", Severity.INFO,
            "The kernel log could not be read, so OOM kills are unknown (not absent).",
            "Run doctor as root (or a user in the systemd-journal/adm group).",
        )


# -- the unit and its limit ---------------------------------------------------------------------


def _vllm_expected(ctx: Context) -> bool:
    return ctx.profile is None or ctx.profile.vllm_enabled


def unit_state(ctx: Context) -> Iterator[Finding]:
    unit, vllm = ctx.inputs.unit, ctx.inputs.vllm
    if not unit.loaded:
        if vllm is not None:
            yield Finding(
                "vllm-outside-systemd", Severity.WARNING,
                f"vLLM (pid {vllm.pid}) runs outside {ctx.unit}: nothing limits its memory or restarts it.",
                "Run it as hostkit's unit (vllm_enabled: true, then deploy) so MemoryMax= and Restart= apply.",
                {"pid": vllm.pid},
            )
        elif _vllm_expected(ctx):
            yield Finding(
                "vllm-absent", Severity.WARNING if ctx.profile is not None else Severity.INFO,
                f"No {ctx.unit} and no running vLLM server on this host.",
                "Deploy it (vllm_enabled: true) or run doctor on the host that serves.",
            )
        return
    if unit.active_state == "active":
        if unit.restarts:
            yield Finding(
                "vllm-restarted", Severity.WARNING,
                f"{ctx.unit} is running but systemd restarted it {unit.restarts} time(s).",
                f"Read why: `journalctl -u {ctx.unit} -b` (an OOM kill shows here too).",
                {"restarts": unit.restarts},
            )
        return
    if ctx.profile is not None and not ctx.profile.vllm_enabled:
        return
    yield Finding(
        "vllm-not-running", Severity.CRITICAL,
        f"{ctx.unit} is {unit.active_state}/{unit.sub_state} (restarted {unit.restarts or 0} time(s)"
        + (f", last run {unit.last_exit}" if unit.last_exit else "") + "): vLLM is not serving.",
        f"Read the reason in `journalctl -u {ctx.unit} -b`; an option the installed release lacks "
        "(see below) makes vLLM exit at once.",
        {"active_state": unit.active_state, "sub_state": unit.sub_state, "restarts": unit.restarts,
         "last_exit": unit.last_exit},
    )


DAY_S = 86400


def keepalive(ctx: Context) -> Iterator[Finding]:
    """Engine deaths, the health watchdog's restarts, a unit at its start limit (issue 24)."""
    unit, kept = ctx.inputs.unit, ctx.inputs.keepalive
    watchdog_unit = watchdog_unit_of(ctx.instance)
    if unit.loaded and unit.active_state == "failed" and unit.result == "start-limit-hit":
        yield Finding(
            "vllm-start-limit", Severity.CRITICAL,
            f"{ctx.unit} hit its start limit: it kept exiting and systemd gave up; it stays failed "
            "and the health watchdog does not restart it.",
            f"Find the cause in `journalctl -u {ctx.unit} -b`, fix it, then `systemctl reset-failed {ctx.unit}` "
            f"and `systemctl start {ctx.unit}` (or re-run the deploy).",
            {"result": unit.result, "journal": list(kept.watchdog_lines)},
        )
    if kept.engine_death_count:
        yield Finding(
            "vllm-engine-died", Severity.WARNING,
            f"vLLM's engine died in the last 24 h ({kept.engine_death_count} journal line(s) name "
            f"EngineDeadError); the server exited and systemd restarted it.",
            "Often a request ran the GPU out of memory: lower vllm_gpu_memory_utilization or "
            "vllm_max_num_seqs, keep chunked prefill on for long prompts; read the lines before "
            f"the error in `journalctl -u {ctx.unit}`.",
            {"count": kept.engine_death_count, "journal": list(kept.engine_death_lines)},
        )
    restarts = kept.restarts_within(DAY_S)
    capped = [line for line in kept.watchdog_lines if "not restarting" in line]
    if restarts or capped:
        problem = f"The health watchdog restarted {ctx.unit} {len(restarts)} time(s) in the last 24 h"
        problem += ", and then stopped at its hourly cap." if capped else " (a failing or hung server)."
        yield Finding(
            "vllm-watchdog-restarts", Severity.WARNING, problem,
            f"Read its reasons (`journalctl -u {watchdog_unit}`) and vLLM's journal around those times; "
            "a server that fails again after each restart needs a fix, not more restarts.",
            {"restarts": list(restarts), "journal": list(kept.watchdog_lines)},
        )


def memory_limit(ctx: Context) -> Iterator[Finding]:
    unit, memory = ctx.inputs.unit, ctx.inputs.memory
    if not unit.loaded:
        return
    ram = memory.ram_total_bytes
    if unit.max_bytes is None:
        yield Finding(
            "memory-limit-missing", Severity.WARNING,
            f"{ctx.unit} has no memory limit: when vLLM grows, the kernel's OOM killer picks victims "
            "anywhere on the host (sshd included).",
            "Set vllm_memory_max (auto: below RAM, leaving the host its share; rendered as MemoryMax=), then deploy.",
            {"ram_total_bytes": ram},
        )
        return
    reserve = host_reserve(ram)
    if ram and unit.max_bytes > ram - reserve:
        above = unit.max_bytes >= ram
        yield Finding(
            "memory-limit-near-ram", Severity.WARNING,
            f"{ctx.unit}'s limit MemoryMax={format_size(unit.max_bytes)} is "
            + (f"at or above RAM ({format_size(ram)})" if above else f"within {format_size(ram - unit.max_bytes)} of RAM "
               f"({format_size(ram)})")
            + ": the host runs out of memory before the unit reaches its limit, so the OOM kill is host-wide.",
            f"Set vllm_memory_max to at most {format_size(ram - reserve)} (RAM minus {format_size(reserve)} for "
            "the rest of the host), then deploy.",
            {"memory_max_bytes": unit.max_bytes, "ram_total_bytes": ram, "host_reserve_bytes": reserve},
        )


# -- vLLM settings -----------------------------------------------------------------------------


def unknown_options(ctx: Context) -> Iterator[Finding]:
    settings = ctx.settings
    if settings is None or not settings.unknown_options:
        return
    where = "The running command" if settings.argv_source == "process" else f"{ctx.unit}'s ExecStart"
    basis = "installed" if settings.version_source == "installed" else "inventory's vllm_version"
    for option in settings.unknown_options:
        yield Finding(
            "unknown-vllm-option", Severity.CRITICAL,
            f"{where} passes {option}, which vLLM {settings.version} ({basis}) does not have"
            f"{removal_note(option)}: vLLM exits at once on it, so the unit crash-loops.",
            f"Remove {option} (from vllm_extra_args, or set its inventory key to null), or install a vLLM "
            "release that has it; then deploy.",
            {"option": option, "version": settings.version, "version_source": settings.version_source},
        )


def version_mismatch(ctx: Context) -> Iterator[Finding]:
    installed, profile = ctx.inputs.installed_vllm_version, ctx.profile
    if profile is None or not installed or not profile.vllm_enabled:
        return
    try:
        same = parse_version(installed) == parse_version(profile.vllm_version)
    except FlagError:
        return
    if not same:
        yield Finding(
            "vllm-version-mismatch", Severity.WARNING,
            f"The host has vLLM {installed}; the inventory says vllm_version: {profile.vllm_version}, "
            "so hostkit renders flags for a release that is not installed.",
            f"Set vllm_version: {installed} (or install {profile.vllm_version}), then deploy.",
            {"installed": installed, "inventory": profile.vllm_version},
        )


def _utilization(settings: VllmSettings | None) -> float:
    if settings is not None and settings.gpu_memory_utilization is not None:
        return settings.gpu_memory_utilization
    return ASSUMED_DEFAULT_UTILIZATION


def shared_gpu_utilization(ctx: Context) -> Iterator[Finding]:
    utilization = _utilization(ctx.settings)
    if ctx.settings is None and ctx.inputs.vllm is None:
        return
    shared = [gpu for gpu in ctx.inputs.gpus if gpu.other_mib > 0]
    if utilization <= SHARED_GPU_UTILIZATION_LIMIT or not shared:
        return
    starved = [gpu for gpu in shared if utilization * gpu.total_mib + gpu.other_mib > gpu.total_mib]
    given = ctx.settings is not None and not ctx.settings.gpu_memory_utilization_default
    described = f"--gpu-memory-utilization {utilization:g}" + ("" if given else " (vLLM's default)")
    listing = "; ".join(
        f"GPU {gpu.index}: {gpu.other_mib} MiB held by pid(s) {', '.join(map(str, gpu.other_pids))}" for gpu in shared
    )
    problem = f"vLLM claims {described} of each GPU while other processes hold GPU memory ({listing})."
    if starved:
        problem += (" Together they exceed the GPU: vLLM cannot start (or restart) until that memory is free.")
    yield Finding(
        "gpu-utilization-shared", Severity.CRITICAL if starved else Severity.WARNING,
        problem,
        f"Set vllm_gpu_memory_utilization: {SHARED_GPU_UTILIZATION_ADVICE} or lower (0.7-0.8 when other processes "
        "share the GPU), or move the other processes to another GPU; then deploy.",
        {"utilization": utilization, "gpus": [asdict(gpu) for gpu in shared]},
    )


def _claimed_utilization(ctx: Context) -> float | None:
    """The share of each GPU vLLM will claim: its flags (running or configured), else the
    inventory's; None where nothing says vLLM is to run here."""
    if ctx.settings is not None:
        return _utilization(ctx.settings)
    if ctx.profile is not None and ctx.profile.vllm_enabled:
        return ctx.profile.vllm_gpu_memory_utilization
    return None


def gpu_held_outside_vllm(ctx: Context) -> Iterator[Finding]:
    """GPU memory held by processes outside the vLLM unit's cgroup, each named, whether or not
    vLLM runs: vLLM cannot have it, and plan refuses a host where vLLM's share does not fit."""
    claim = _claimed_utilization(ctx)
    for gpu in ctx.inputs.gpus:
        if not gpu.others:
            continue
        holders = ", ".join(
            f"pid {holder.pid} ({holder.name or 'not visible in /proc'}) {holder.used_mib} MiB"
            for holder in sorted(gpu.others, key=lambda holder: -holder.used_mib)
        )
        problem = (f"GPU {gpu.index}: {gpu.other_mib} of {gpu.total_mib} MiB is held outside {ctx.unit}'s "
                   f"cgroup: {holders}.")
        starved = claim is not None and claim * gpu.total_mib + gpu.other_mib > gpu.total_mib
        if starved:
            problem += f" vLLM's {claim:g} of the GPU does not fit beside it: vLLM cannot start there."
        yield Finding(
            "gpu-held-outside-vllm", Severity.CRITICAL if starved else Severity.WARNING, problem,
            "Stop the process or move it to another GPU; if it belongs to vLLM, run it inside the unit.",
            {"gpu": gpu.index, "holders": [asdict(holder) for holder in gpu.others], "claim": claim},
        )


def _model_len(ctx: Context) -> tuple[int | None, str]:
    settings = ctx.settings
    if settings.max_model_len:
        return settings.max_model_len, "--max-model-len"
    spec = model_catalog.lookup(settings.model) if settings.model else None
    if spec is not None:
        return spec.max_position_embeddings, f"{spec.name}'s own context length (no --max-model-len)"
    return None, ""


def _v1_default(version: str | None) -> bool:
    if not version:
        return True  # unknown: assume a current release
    try:
        return runs_v1_by_default(version)
    except FlagError:
        return True


def long_context_chunking(ctx: Context) -> Iterator[Finding]:
    settings = ctx.settings
    if settings is None:
        return
    model_len, source = _model_len(ctx)
    if model_len is None or model_len <= LONG_CONTEXT_TOKENS:
        return
    chunked = settings.chunked_prefill
    fix = (f"Set vllm_enable_chunked_prefill: true and vllm_max_num_batched_tokens: {CHUNKED_PREFILL_BATCH_TOKENS} "
           "(6144 trades a little speed for smaller memory swings); then deploy.")
    evidence = {"max_model_len": model_len, "chunked_prefill": chunked,
                "max_num_batched_tokens": settings.max_num_batched_tokens}
    if chunked is False or (chunked is None and not _v1_default(settings.version)):
        state = "is turned off" if chunked is False else f"is not enabled (vLLM {settings.version} leaves it to itself)"
        yield Finding(
            "long-context-without-chunked-prefill", Severity.WARNING,
            f"max_model_len is {model_len} ({source}) and chunked prefill {state}: one long prompt is prefilled "
            "in a single step, and its activations swing GPU memory (one report: 38 GB -> 22 GB peak with chunking).",
            fix, evidence,
        )
    elif settings.max_num_batched_tokens and settings.max_num_batched_tokens >= model_len:
        yield Finding(
            "long-context-without-chunked-prefill", Severity.WARNING,
            f"Chunked prefill is on, but --max-num-batched-tokens {settings.max_num_batched_tokens} is at least "
            f"max_model_len {model_len}: a whole long prompt still fits in one chunk.",
            fix, evidence,
        )


def _memory_pressure(ctx: Context) -> list[str]:
    inputs = ctx.inputs
    unit, memory = inputs.unit, inputs.memory
    evidence = []
    if any(_is_ctx_victim(ctx, kill) for kill in inputs.kernel_log.oom_kills) or unit.oom_kills:
        evidence.append("vLLM was OOM-killed")
    if unit.max_bytes and unit.peak_bytes and unit.peak_bytes >= UNIT_PEAK_PRESSURE_FRACTION * unit.max_bytes:
        evidence.append(f"the unit's memory peak {format_size(unit.peak_bytes)} reached "
                        f"{_pct(unit.peak_bytes, unit.max_bytes)} of MemoryMax={format_size(unit.max_bytes)}")
    if unit.max_bytes is None and memory.ram_total_bytes:
        used = max(unit.peak_bytes or 0, inputs.vllm.tree_rss_bytes if inputs.vllm else 0)
        if used >= HOST_PRESSURE_FRACTION * memory.ram_total_bytes:
            evidence.append(f"vLLM used {format_size(used)}, {_pct(used, memory.ram_total_bytes)} of RAM")
    if memory.swap_total_bytes and memory.swap_used_bytes >= SWAP_PRESSURE_FRACTION * memory.swap_total_bytes:
        evidence.append(f"swap is {_pct(memory.swap_used_bytes, memory.swap_total_bytes)} used")
    return evidence


def max_num_seqs_for_ram(ctx: Context) -> Iterator[Finding]:
    settings = ctx.settings
    if settings is None:
        return
    seqs = settings.max_num_seqs
    if seqs is not None and seqs <= MODEST_MAX_NUM_SEQS:
        return
    pressure = _memory_pressure(ctx)
    if not pressure:
        return
    shown = str(seqs) if seqs is not None else "vLLM's default (256, or 1024 on large GPUs)"
    lower = max(MODEST_MAX_NUM_SEQS, (seqs or 256) // 4)
    yield Finding(
        "max-num-seqs-high-for-ram", Severity.WARNING,
        f"max_num_seqs is {shown} on a host under memory pressure ({'; '.join(pressure)}): every running "
        "sequence holds host memory in the frontend and scheduler, and concurrency peaks add up.",
        f"Set vllm_max_num_seqs: {lower} (practitioners cut 256 -> 64 under memory pressure), then deploy and "
        "re-check with `hostkit smoke --watch`.",
        {"max_num_seqs": seqs, "pressure": pressure},
    )


# -- the distribution -------------------------------------------------------------------------


def driver_auto_upgrades(ctx: Context) -> Iterator[Finding]:
    platform = ctx.inputs.platform
    if platform is None:
        return
    unprotected = platform.unprotected_driver_packages()
    if not unprotected:
        return
    upgrader = "unattended-upgrades" if platform.package_manager == "apt" else "dnf-automatic"
    fix = ("Set gpu_hold_driver_packages: true and deploy (apt-mark hold), or list them in "
           "Unattended-Upgrade::Package-Blacklist; upgrade the driver on purpose, then reboot."
           if platform.package_manager == "apt" else
           "Lock them (`dnf versionlock add`, python3-dnf-plugin-versionlock) or add them to exclude= in "
           "/etc/dnf/dnf.conf; upgrade the driver on purpose, then reboot.")
    yield Finding(
        "driver-auto-upgrades", Severity.WARNING,
        f"{upgrader} may upgrade the NVIDIA driver packages {', '.join(unprotected)} while the driver runs: "
        "the new library then no longer matches the loaded kernel module, and CUDA fails with "
        "'Driver/library version mismatch' until a reboot.",
        fix,
        {"packages": unprotected, "upgrader": upgrader, "held": platform.held_packages,
         "exclusions": platform.upgrade_exclusions},
    )


# -- hostkit's collector -------------------------------------------------------------------


def collector_metrics(ctx: Context) -> Iterator[Finding]:
    """What hostkit's monitoring collector recorded: the unit's high-water mark (which the
    cgroup loses when the unit restarts), OOM kills and watchdog restarts since boot."""
    from hostkit.monitoring import stale_after_s

    metrics = ctx.inputs.collector
    if metrics is None:
        if ctx.profile is not None and ctx.profile.monitoring_enabled:
            yield Finding("monitoring-missing", Severity.WARNING, "hostkit's memory metrics file is missing.",
                          "Re-run the deploy (monitoring_enabled installs the collector), then "
                          "`systemctl status vllm-hostkit-monitor.timer`.")
        return
    interval = metrics.value("hostkit_collector_interval_seconds") or 15
    if metrics.age_s > stale_after_s(interval):
        yield Finding("monitoring-stale", Severity.WARNING,
                      f"{metrics.path} was last written {metrics.age_s}s ago (the collector runs every {interval:.0f}s).",
                      "`systemctl status vllm-hostkit-monitor.timer vllm-hostkit-monitor.service`; re-run the deploy.",
                      {"age_s": metrics.age_s})
    peak, limit = metrics.value("hostkit_vllm_memory_peak_bytes"), metrics.value("hostkit_vllm_memory_max_bytes")
    unit_ooms = metrics.value("hostkit_vllm_oom_kills_total") or 0
    watchdog = metrics.value("hostkit_vllm_watchdog_restarts_total")
    facts = []
    if peak is not None:
        facts.append(f"unit peak {format_size(int(peak))}" + (f" ({_pct(peak, limit)} of MemoryMax)" if limit else ""))
    facts.append(f"{unit_ooms:.0f} OOM kills in the unit since boot")
    if watchdog is not None:
        facts.append(f"{watchdog:.0f} watchdog restarts")
    evidence = {"peak_bytes": peak, "max_bytes": limit, "unit_oom_kills": unit_ooms, "watchdog_restarts": watchdog}
    if peak is not None and limit and peak > UNIT_PEAK_PRESSURE_FRACTION * limit:
        yield Finding("monitoring-peak-near-limit", Severity.WARNING,
                      f"The collector saw the unit's memory peak at {_pct(peak, limit)} of MemoryMax: " + "; ".join(facts),
                      "Lower vllm_max_num_seqs (or raise vllm_memory_max if RAM allows) and re-run the deploy.",
                      evidence)
        return
    yield Finding("monitoring-summary", Severity.INFO, "hostkit's collector: " + "; ".join(facts) + ".", "", evidence)


def memory_limit_unapplied(ctx: Context) -> Iterator[Finding]:
    """A MemoryMax= that systemd accepts and the kernel does not apply (hostkit.facts.platform
    says why: a container whose host keeps the memory controller from it)."""
    unit, platform = ctx.inputs.unit, ctx.inputs.platform
    if platform is None or not platform.memory_limit_unapplied or not unit.loaded or unit.max_bytes is None:
        return
    where = f"in this {platform.container} container" if platform.container else "on this host"
    yield Finding(
        "memory-limit-unapplied", Severity.WARNING,
        f"{ctx.unit}'s MemoryMax={format_size(unit.max_bytes)} is accepted by systemd but the kernel does not "
        f"apply it {where}: {platform.memory_limit_unapplied}. vLLM can grow until the host runs out of memory.",
        "Limit the container's memory on its host (LXC: limits.memory; systemd-nspawn: MemoryMax= on the "
        "container's unit there, on a cgroup v2 host), or run vLLM on a VM, where hostkit's limit holds.",
        {"memory_max_bytes": unit.max_bytes, "container": platform.container},
    )


def nvme_boot(ctx: Context) -> Iterator[Finding]:
    """The instance-store lifecycle (what the next wiped boot does), and a planned swap file
    that this boot did not bring back."""
    boot = ctx.inputs.nvme_boot
    if boot is None:
        return
    line = nvme_lifecycle(NvmePlan(device=boot.by_id, by_id=boot.by_id, mount=boot.mount, fstype=boot.fstype or "ext4"),
                          SwapPlan(enabled=boot.swap_file is not None, path=boot.swap_file,
                                   size_bytes=boot.swap_size_bytes, boot="unit"))
    evidence = {"by_id": boot.by_id, "swap_file": boot.swap_file, "unit_state": boot.active_state,
                "unit_result": boot.result}
    if boot.swap_file is not None and boot.swap_file not in boot.active_swaps:
        yield Finding(
            "swap-planned-absent", Severity.WARNING,
            f"The swap file {boot.swap_file} is planned but not active: {NVME_UNIT} is {boot.active_state or 'unknown'}"
            f" (result {boot.result or 'unknown'}), so vLLM runs without that swap.",
            f"`journalctl -b -u {NVME_UNIT}` says what it found at {boot.by_id} (a disk with someone else's data is "
            "never formatted); fix that, then re-run the deploy.", evidence)
        return
    yield Finding("instance-store", Severity.INFO, line[0].upper() + line[1:] + ".", "", evidence)


RULES: tuple[Rule, ...] = (
    commands_timed_out,
    unit_state,
    keepalive,
    unknown_options,
    vllm_oom_kills,
    other_oom_kills,
    no_swap,
    swap_almost_full,
    memory_limit,
    memory_limit_unapplied,
    shared_gpu_utilization,
    gpu_held_outside_vllm,
    long_context_chunking,
    max_num_seqs_for_ram,
    version_mismatch,
    swappiness,
    transparent_hugepages,
    driver_auto_upgrades,
    collector_metrics,
    nvme_boot,
)


# The rules of one vLLM unit: run once on a vllm.service host, once per instance on a host
# with vllm_instances, where the others (swap, the kernel, the driver, ...) run once for the host.
UNIT_RULES: frozenset[Rule] = frozenset({
    unit_state,
    keepalive,
    unknown_options,
    vllm_oom_kills,
    memory_limit,
    memory_limit_unapplied,
    shared_gpu_utilization,
    gpu_held_outside_vllm,
    long_context_chunking,
    max_num_seqs_for_ram,
})
HOST_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule not in UNIT_RULES)
INSTANCE_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule in UNIT_RULES)


def vllm_settings(inputs: DoctorInputs, profile: HostProfile | None) -> VllmSettings | None:
    if inputs.installed_vllm_version:
        version, source = inputs.installed_vllm_version, "installed"
    elif profile is not None:
        version, source = profile.vllm_version, "inventory"
    else:
        version, source = None, None
    argv_source = "process" if inputs.vllm is not None else "unit"
    return effective_settings(inputs.vllm_argv, argv_source, version, source)


def _findings(rules: tuple[Rule, ...], ctx: Context) -> tuple[Finding, ...]:
    findings = [finding for rule in rules for finding in rule(ctx)]
    findings.sort(key=lambda finding: SEVERITY_ORDER[finding.severity])
    return tuple(findings)


def diagnose_instance(inputs: DoctorInputs, instance: InstanceInputs, profile: HostProfile | None) -> InstanceDiagnosis:
    view = inputs.of_instance(instance)
    # Its release is its own: what its environment holds, else its own vllm_version.
    own = profile.vllm_instances.get(instance.name) if profile is not None else None
    settings = vllm_settings(view, own or profile)
    return InstanceDiagnosis(instance, view, settings,
                             _findings(INSTANCE_RULES, Context(view, settings, profile, instance.name)))


def diagnose(inputs: DoctorInputs, profile: HostProfile | None = None) -> Diagnosis:
    """vllm.service's host: every rule once. A host with vllm_instances: the host's rules once,
    each instance's unit rules on its own unit, process, GPUs and flags."""
    if inputs.instances:
        return Diagnosis(inputs, None, _findings(HOST_RULES, Context(inputs, None, profile)),
                         tuple(diagnose_instance(inputs, instance, profile) for instance in inputs.instances))
    settings = vllm_settings(inputs, profile)
    return Diagnosis(inputs, settings, _findings(RULES, Context(inputs, settings, profile)))
