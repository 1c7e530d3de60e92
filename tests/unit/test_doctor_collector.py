"""`hostkit doctor` reading the monitoring collector's metrics file when the host has one."""

from __future__ import annotations

import pytest

import subprocess
from pathlib import Path

from hostkit.doctor.gather import DEFAULT_METRICS_FILE, doctor_command, parse_doctor_output, split_sub_sections
from hostkit.doctor.rules import Severity, diagnose
from hostkit.monitoring import collector
from hostkit.profile.validation import profile_from_data

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"
MIB = 2**20


def with_metrics(age_s: int, peak: int, limit: int = 1200 * MIB, watchdog: int | None = 2):
    """The recorded clean lab host's doctor output plus a metrics sub-section in the collector's format."""
    samples = [("hostkit_vllm_memory_peak_bytes", {}, peak), ("hostkit_vllm_memory_max_bytes", {}, limit),
               ("hostkit_vllm_oom_kills_total", {}, 1), ("hostkit_collector_interval_seconds", {}, 15),
               ("hostkit_gpu_memory_used_bytes", {"gpu": "0"}, 5 * MIB)]
    if watchdog is not None:
        samples.append(("hostkit_vllm_watchdog_restarts_total", {}, watchdog))
    section = ["@@doctor:metrics@@", f"path={DEFAULT_METRICS_FILE}", f"age={age_s}",
               *collector.render(samples).splitlines()]
    lines = (FIXTURES / "lab-clean.txt").read_text().splitlines() + section
    return parse_doctor_output("lab1", lines)


def codes(diagnosis) -> dict[str, Severity]:
    return {finding.code: finding.severity for finding in diagnosis.findings}


def test_the_metrics_file_is_parsed():
    inputs = with_metrics(4, 300 * MIB)
    assert inputs.collector.path == "/var/lib/prometheus/node-exporter/hostkit.prom" and inputs.collector.age_s == 4
    assert inputs.collector.value("hostkit_vllm_memory_peak_bytes") == 300 * MIB
    assert inputs.collector.value('hostkit_gpu_memory_used_bytes{gpu="0"}') == 5 * MIB


def test_a_fresh_file_is_summarised():
    diagnosis = diagnose(with_metrics(4, 300 * MIB))
    (summary,) = [f for f in diagnosis.findings if f.code == "monitoring-summary"]
    assert summary.severity is Severity.INFO
    assert "unit peak 300M (25% of MemoryMax)" in summary.problem
    assert "1 OOM kills in the unit since boot" in summary.problem and "2 watchdog restarts" in summary.problem


def test_a_stale_file_and_a_peak_near_the_limit_are_warnings():
    found = codes(diagnose(with_metrics(136, 1150 * MIB)))
    assert found["monitoring-stale"] is Severity.WARNING
    assert found["monitoring-peak-near-limit"] is Severity.WARNING
    # 3 intervals of 15 s and one run's 90 s deadline
    assert "monitoring-stale" not in codes(diagnose(with_metrics(135, 300 * MIB)))


def test_no_file_is_a_warning_only_where_the_inventory_enables_monitoring():
    inputs = parse_doctor_output("lab1", (FIXTURES / "lab-clean.txt").read_text().splitlines())
    assert inputs.collector is None
    assert "monitoring-missing" not in codes(diagnose(inputs))
    enabled = profile_from_data("lab1", {"vllm_model": "Qwen/Qwen2.5-0.5B-Instruct"})
    disabled = profile_from_data("lab1", {"vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", "monitoring_enabled": False})
    assert codes(diagnose(inputs, enabled))["monitoring-missing"] is Severity.WARNING
    assert "monitoring-missing" not in codes(diagnose(inputs, disabled))


@pytest.mark.processes
def test_the_command_reads_the_profiles_file_only_when_present(tmp_path):
    metrics = tmp_path / "hostkit.prom"

    def metrics_part() -> list[str] | None:
        command = doctor_command(metrics_file=str(metrics), with_proc=False)
        result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120, check=False)
        return split_sub_sections(result.stdout.splitlines()).get("metrics")

    assert metrics_part() is None
    metrics.write_text("hostkit_vllm_up 1\n")
    assert metrics_part()[::2] == [f"path={metrics}", "hostkit_vllm_up 1"]
