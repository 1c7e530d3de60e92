"""`hostkit doctor` output: a text summary per host, or one JSON document; and the exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hostkit.exit_codes import exit_status
from hostkit.doctor.inputs import GpuMemory, UnitMemory, VllmProcessTree
from hostkit.doctor.rules import SEVERITY_ORDER, Diagnosis, Finding, InstanceDiagnosis, Severity
from hostkit.doctor.vllm_args import VllmSettings
from hostkit.sizes import format_size


def exit_code(diagnoses: Sequence[Diagnosis], unreachable: Sequence[str] = ()) -> int:
    """hostkit.exit_codes' contract: a critical finding is a failing host."""
    return exit_status(any(diagnosis.critical for diagnosis in diagnoses), bool(unreachable))


def _size(value: int | None) -> str:
    return "?" if value is None else format_size(value)


def _facts(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    inputs, settings = diagnosis.inputs, diagnosis.settings
    rows = _host_rows(diagnosis)
    if diagnosis.instances:
        if inputs.installed_vllm_version:
            rows.append(("vLLM version", f"{inputs.installed_vllm_version} (installed)"))
        for instance in diagnosis.instances:
            rows += _instance_rows(instance)
        rows += _gpu_error_and_oom_rows(diagnosis)
        return rows
    rows += _unit_rows(inputs.unit, inputs.vllm)
    if settings is not None:
        rows += _settings_rows(settings)
    elif inputs.installed_vllm_version:
        rows.append(("vLLM version", f"{inputs.installed_vllm_version} (installed)"))
    rows += _gpu_rows(inputs.gpus, settings)
    return rows + _gpu_error_and_oom_rows(diagnosis)


def _host_rows(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    memory, tuning = diagnosis.inputs.memory, diagnosis.inputs.tuning
    swap = "none"
    if memory.swap_total_bytes:
        share = memory.swap_used_bytes / memory.swap_total_bytes
        swap = f"{_size(memory.swap_total_bytes)}, {_size(memory.swap_used_bytes)} used ({share:.0%})"
    rows = [
        ("RAM", f"{_size(memory.ram_total_bytes)}, {_size(memory.ram_available_bytes)} available"),
        ("swap", swap),
        ("kernel", f"swappiness {tuning.swappiness if tuning.swappiness is not None else '?'}, "
                   f"THP {tuning.thp_enabled or 'n/a'} (defrag {tuning.thp_defrag or 'n/a'}), cgroup v{tuning.cgroup_version}"),
    ]
    return rows


def _unit_rows(unit: UnitMemory, vllm: VllmProcessTree | None, label: str = "") -> list[tuple[str, str]]:
    """The unit's state, memory and process; `label` before each row's name (an instance's unit)."""
    rows = []
    if unit.loaded:
        state = f"{unit.active_state}/{unit.sub_state}"
        if unit.restarts:
            state += f", {unit.restarts} restart(s)"
        if unit.last_exit and unit.active_state != "active":
            state += f", last run {unit.last_exit}"
        rows.append((unit.unit, state))
        limit = "no limit" if unit.max_bytes is None else f"MemoryMax {_size(unit.max_bytes)}"
        extra = []
        if unit.high_bytes is not None:
            extra.append(f"MemoryHigh {_size(unit.high_bytes)}")
        if unit.swap_max_bytes is not None:
            extra.append(f"MemorySwapMax {_size(unit.swap_max_bytes)}")
        if unit.swap_current_bytes:
            extra.append(f"{_size(unit.swap_current_bytes)} in swap")
        rows.append((f"{label}memory" if label else "unit memory",
                     f"now {_size(unit.current_bytes)}, peak {_size(unit.peak_bytes)}, {limit}"
                     + (f" ({', '.join(extra)})" if extra else "")))
    else:
        rows.append((unit.unit, "not installed"))
    if vllm is not None:
        rows.append((f"{label}vLLM process", f"pid {vllm.pid}, {len(vllm.tree_pids)} process(es), "
                                             f"RSS {_size(vllm.tree_rss_bytes)} (tree)"))
    return rows


def _settings_rows(settings: VllmSettings, label: str = "") -> list[tuple[str, str]]:
    version = f"{settings.version} ({settings.version_source})" if settings.version else "unknown"
    shown = " ".join(
        option if value is True else f"{option} {value}" for option, value in settings.options.items()
    )
    source = "running process" if settings.argv_source == "process" else "unit ExecStart, not running"
    return [(f"{label}vLLM version", version), (f"{label}vLLM flags", f"{shown or '(none)'}  [{source}]")]


def _gpu_rows(gpus: tuple[GpuMemory, ...], settings: VllmSettings | None, label: str = "",
              owner: str = "vLLM") -> list[tuple[str, str]]:
    utilization = settings.gpu_memory_utilization if settings else None
    rows = []
    for gpu in gpus:
        target = (f", utilization target {utilization:g} = {utilization * gpu.total_mib / 1024:.1f} GiB"
                  if utilization else "")
        holders = ", ".join(f"pid {holder.pid} {holder.name or '?'}" for holder in gpu.others)
        others = f", others {gpu.other_mib} MiB ({holders})" if gpu.others else ""
        rows.append((f"{label}GPU {gpu.index}",
                     f"{gpu.used_mib} / {gpu.total_mib} MiB used: {owner} {gpu.vllm_mib} MiB{others}{target}"))
    return rows


def _instance_rows(instance: InstanceDiagnosis) -> list[tuple[str, str]]:
    """One of vllm_instances, each row named by its unit: state, OOM kills in its cgroup,
    memory against MemoryMax, process, flags, and its GPUs with what its cgroup holds there."""
    label = f"{instance.unit} "
    unit, log = instance.inputs.unit, instance.inputs.kernel_log
    rows = _unit_rows(unit, instance.inputs.vllm, label)
    in_log = "kernel log unreadable" if not log.readable else \
        f"{sum(kill.in_unit(unit.unit) for kill in log.oom_kills)} in the kernel log since boot"
    rows.append((f"{label}OOM kills", f"{'?' if unit.oom_kills is None else unit.oom_kills} in its cgroup "
                                      f"(memory.events), {in_log}"))
    if instance.settings is not None:
        rows += _settings_rows(instance.settings, label)
    gpus = _gpu_rows(instance.inputs.gpus, instance.settings, label, owner="this unit")
    return rows + (gpus or [(f"{label}GPUs", "none read (no nvidia-smi, or none planned)")])


def _gpu_error_and_oom_rows(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    inputs = diagnosis.inputs
    rows = []
    if inputs.gpu_query_error:
        rows.append(("GPU", f"nvidia-smi failed: {inputs.gpu_query_error}"))
    log = inputs.kernel_log
    kills = log.oom_kills
    rows.append(("OOM kills", "unknown (kernel log unreadable)" if not log.readable
                 else f"{len(kills)} since boot ({log.source})" if kills else f"none since boot ({log.source})"))
    return rows


def _finding_lines(finding: Finding, prefix: str = "") -> list[str]:
    """A finding, its fix and its journal lines; `prefix` names an instance's unit."""
    lines = [f"  {finding.severity.value.upper():<8} {prefix}{finding.code}: {finding.problem}",
             f"  {'':<8} fix: {finding.fix}"]
    return lines + [f"  {'':<8} | {line}" for line in finding.evidence.get("journal", [])]


def render_text(diagnoses: Sequence[Diagnosis], unreachable: Sequence[str] = ()) -> str:
    blocks = []
    for diagnosis in diagnoses:
        lines = [f"== {diagnosis.inputs.host} =="]
        rows = _facts(diagnosis)
        width = max(len(label) for label, _ in rows)
        lines += [f"  {label:<{width}}  {value}" for label, value in rows]
        for note in diagnosis.inputs.notes:
            lines.append(f"  note: {note}")
        named = [("", finding) for finding in diagnosis.findings]
        named += [(f"{instance.unit}: ", finding) for instance in diagnosis.instances for finding in instance.findings]
        named.sort(key=lambda pair: SEVERITY_ORDER[pair[1].severity])  # stable: the host's first, then by unit
        if named:
            lines.append("")
            for prefix, finding in named:
                lines += _finding_lines(finding, prefix)
        else:
            lines.append("  no findings")
        counts = {severity: sum(f.severity is severity for f in diagnosis.all_findings) for severity in Severity}
        lines.append(f"  -> {counts[Severity.CRITICAL]} critical, {counts[Severity.WARNING]} warning(s), "
                     f"{counts[Severity.INFO]} note(s)")
        blocks.append("\n".join(lines))
    for host in unreachable:
        blocks.append(f"== {host} ==\n  UNREACHABLE: could not connect or read the host")
    return "\n\n".join(blocks)


def render_json(diagnoses: Sequence[Diagnosis], unreachable: Sequence[str] = ()) -> str:
    return json.dumps(
        {
            "hosts": [diagnosis.to_dict() for diagnosis in diagnoses],
            "unreachable": list(unreachable),
            "exit_code": exit_code(diagnoses, unreachable),
        },
        indent=2,
        default=str,
    )
