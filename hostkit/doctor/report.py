"""`hostkit doctor` output: a text summary per host, or one JSON document; and the exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hostkit.exit_codes import exit_status
from hostkit.doctor.rules import Diagnosis, Severity
from hostkit.sizes import format_size


def exit_code(diagnoses: Sequence[Diagnosis], unreachable: Sequence[str] = ()) -> int:
    """hostkit.exit_codes' contract: a critical finding is a failing host."""
    return exit_status(any(diagnosis.critical for diagnosis in diagnoses), bool(unreachable))


def _size(value: int | None) -> str:
    return "?" if value is None else format_size(value)


def _facts(diagnosis: Diagnosis) -> list[tuple[str, str]]:
    inputs, settings = diagnosis.inputs, diagnosis.settings
    memory, tuning, unit, vllm = inputs.memory, inputs.tuning, inputs.unit, inputs.vllm
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
        rows.append(("unit memory", f"now {_size(unit.current_bytes)}, peak {_size(unit.peak_bytes)}, {limit}"
                     + (f" ({', '.join(extra)})" if extra else "")))
    else:
        rows.append((unit.unit, "not installed"))
    if vllm is not None:
        rows.append(("vLLM process", f"pid {vllm.pid}, {len(vllm.tree_pids)} process(es), "
                                     f"RSS {_size(vllm.tree_rss_bytes)} (tree)"))
    if settings is not None:
        version = f"{settings.version} ({settings.version_source})" if settings.version else "unknown"
        rows.append(("vLLM version", version))
        shown = " ".join(
            option if value is True else f"{option} {value}" for option, value in settings.options.items()
        )
        source = "running process" if settings.argv_source == "process" else "unit ExecStart, not running"
        rows.append(("vLLM flags", f"{shown or '(none)'}  [{source}]"))
    elif inputs.installed_vllm_version:
        rows.append(("vLLM version", f"{inputs.installed_vllm_version} (installed)"))
    utilization = settings.gpu_memory_utilization if settings else None
    for gpu in inputs.gpus:
        target = (f", utilization target {utilization:g} = {utilization * gpu.total_mib / 1024:.1f} GiB"
                  if utilization else "")
        holders = ", ".join(f"pid {holder.pid} {holder.name or '?'}" for holder in gpu.others)
        others = f", others {gpu.other_mib} MiB ({holders})" if gpu.others else ""
        rows.append((f"GPU {gpu.index}", f"{gpu.used_mib} / {gpu.total_mib} MiB used: vLLM {gpu.vllm_mib} MiB"
                                         f"{others}{target}"))
    if inputs.gpu_query_error:
        rows.append(("GPU", f"nvidia-smi failed: {inputs.gpu_query_error}"))
    log = inputs.kernel_log
    kills = log.oom_kills
    rows.append(("OOM kills", "unknown (kernel log unreadable)" if not log.readable
                 else f"{len(kills)} since boot ({log.source})" if kills else f"none since boot ({log.source})"))
    return rows


def render_text(diagnoses: Sequence[Diagnosis], unreachable: Sequence[str] = ()) -> str:
    blocks = []
    for diagnosis in diagnoses:
        lines = [f"== {diagnosis.inputs.host} =="]
        rows = _facts(diagnosis)
        width = max(len(label) for label, _ in rows)
        lines += [f"  {label:<{width}}  {value}" for label, value in rows]
        for note in diagnosis.inputs.notes:
            lines.append(f"  note: {note}")
        if diagnosis.findings:
            lines.append("")
            for finding in diagnosis.findings:
                lines.append(f"  {finding.severity.value.upper():<8} {finding.code}: {finding.problem}")
                lines.append(f"  {'':<8} fix: {finding.fix}")
                lines += [f"  {'':<8} | {line}" for line in finding.evidence.get("journal", [])]
        else:
            lines.append("  no findings")
        counts = {severity: sum(f.severity is severity for f in diagnosis.findings) for severity in Severity}
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
