"""The smoke report: a JSON document, a PNG chart next to it, and a short text summary."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hostkit.sizes import format_size
from hostkit.smoke.load import percentile
from hostkit.smoke.run import SmokeRun

REPORT_NAME = "smoke-report.json"
CHART_NAME = "smoke-memory.png"


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def latency_summary(run: SmokeRun) -> dict[str, float | None]:
    latencies = run.load.latencies()
    return {
        "p50": percentile(latencies, 0.50),
        "p95": percentile(latencies, 0.95),
        "max": latencies[-1] if latencies else None,
        "mean": sum(latencies) / len(latencies) if latencies else None,
    }


def report_dict(run: SmokeRun, settings: dict[str, Any], chart: str | None) -> dict[str, Any]:
    load = run.load
    duration = load.ended_at - load.started_at
    swap, ram = run.swap(), run.ram()
    memory: dict[str, Any] | None = None
    if swap is not None and ram is not None:
        memory = {
            "source": run.watch,
            "samples": len(run.samples),
            "ram": {"total": ram.total, "baseline_used": ram.baseline_used, "peak_used": ram.peak_used,
                    "final_used": ram.final_used, "unit_peak": ram.unit_peak},
            "swap": {"total": swap.total, "baseline_used": swap.baseline, "peak_used": swap.peak,
                     "final_used": swap.final, "rise": swap.rise, "left_over": swap.left_over,
                     "recovered": swap.recovered},
            "series": [
                {"t": round(s.t - load.started_at, 3), "ram_used": s.ram_used, "swap_used": s.swap_used,
                 "unit_current": s.unit_current, "unit_swap": s.unit_swap}
                for s in run.samples
            ],
        }
    return {
        "url": run.url,
        "model": load.model,
        "settings": settings,
        "started_at": _iso(load.started_at),
        "ended_at": _iso(load.ended_at),
        "duration_s": round(duration, 3),
        "requests": {
            "planned": load.planned,
            "sent": len(load.results),
            "succeeded": load.succeeded,
            "failed": load.failed,
            "not_sent": load.not_sent,
            "hit_time_limit": load.hit_deadline,
            "errors": load.errors(),
        },
        "latency_s": latency_summary(run),
        "completion_tokens": {
            "total": load.completion_tokens,
            "per_second": load.completion_tokens / duration if duration > 0 else None,
        },
        "memory": memory,
        "oom": {
            "kernel_log_source": run.kernel_log_source,
            "lines": list(run.oom_lines),
            "kills": [{"pid": k.pid, "process": k.process, "memcg": k.memcg, "cgroup_limit": k.cgroup_limit}
                      for k in run.oom_kills],
        },
        "chart": chart,
        "ok": run.ok,
        "problems": run.problems(),
        "warnings": run.warnings(),
    }


def chart_available() -> bool:
    """matplotlib is an extra (vllm-hostkit[chart]): the chart is optional, the report is not."""
    return importlib.util.find_spec("matplotlib") is not None


def write_report(run: SmokeRun, settings: dict[str, Any], out_dir: Path) -> tuple[Path, Path | None]:
    """smoke-report.json and, when memory was watched and matplotlib is installed, smoke-memory.png
    in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chart_path = None
    if run.samples and chart_available():
        from hostkit.smoke.chart import render_chart

        chart_path = out_dir / CHART_NAME
        render_chart(run, chart_path)
    report_path = out_dir / REPORT_NAME
    report = report_dict(run, settings, chart_path.name if chart_path else None)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return report_path, chart_path


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def summary_text(run: SmokeRun) -> str:
    load = run.load
    latency = latency_summary(run)
    lines = [
        f"{load.succeeded} succeeded, {load.failed} failed"
        + (f", {load.not_sent} not sent (time limit)" if load.not_sent else "")
        + f" ({load.planned} planned, {load.concurrency} concurrent, model {load.model})",
        f"latency p50 {_seconds(latency['p50'])}, p95 {_seconds(latency['p95'])}, max {_seconds(latency['max'])}",
    ]
    for error, count in load.errors().items():
        lines.append(f"  {count} x {error}")
    swap, ram = run.swap(), run.ram()
    if swap is not None and ram is not None:
        lines.append(f"RAM used {format_size(ram.baseline_used)} -> peak {format_size(ram.peak_used)} of "
                     f"{format_size(ram.total)}" + (f"; vLLM unit peak {format_size(ram.unit_peak)}" if ram.unit_peak else ""))
        lines.append(f"swap used {format_size(swap.baseline)} -> peak {format_size(swap.peak)} -> "
                     f"{format_size(swap.final)} after ({'back toward baseline' if swap.recovered else 'still up'})")
    elif run.watch is None:
        lines.append("memory not watched (give --watch HOST or --local)")
    if run.oom_lines:
        lines.append("OOM during the run:")
        lines += [f"  {line}" for line in run.oom_lines]
    elif run.kernel_log_source:
        lines.append(f"no OOM lines during the run ({run.kernel_log_source})")
    for warning in run.warnings():
        lines.append(f"warning: {warning}")
    lines.append("PASS" if run.ok else "FAIL: " + "; ".join(run.problems()))
    return "\n".join(lines)
