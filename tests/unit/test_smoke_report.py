"""Memory sampling, the swap verdict, and the smoke report (JSON, PNG, text) of a whole run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
import time

import pytest
from click.testing import CliRunner
from smoke_fake_server import fake_server

from hostkit.cli.main import main
from tests.waiting import wait_for
from hostkit.facts.kernel_log import KernelLog
from hostkit.smoke import run as smoke_run_module
from hostkit.smoke.load import LoadResult, RequestResult
from hostkit.smoke.report import report_dict, summary_text, write_report
from hostkit.smoke.run import SmokeRun, smoke_run
from hostkit.smoke.sampler import (
    LocalSampler,
    MemorySample,
    SshSampler,
    parse_sample_line,
    sampler_script,
)

MIB, GIB = 2**20, 2**30
OOM = (
    "2026-11-29T22:58:41+0000 doc1 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/system.slice/vllm.service,task_memcg=/system.slice/vllm.service,task=python3,pid=536,uid=0",
    "2026-11-29T22:58:41+0000 doc1 kernel: Memory cgroup out of memory: Killed process 536 (python3) total-vm:1754544kB, "
    "anon-rss:1224216kB, file-rss:3096kB, shmem-rss:0kB, UID:0 pgtables:2684kB oom_score_adj:0",
)


def test_sample_line():
    sample = parse_sample_line("s MemTotal:2025980 MemAvailable:1648528 SwapTotal:1048572 SwapFree:958000 161 -", 5.0)
    assert sample == MemorySample(5.0, 2025980 * 1024, 1648528 * 1024, 1048572 * 1024, 958000 * 1024, 161, None)
    assert sample.swap_used == (1048572 - 958000) * 1024
    assert parse_sample_line("s MemTotal:1 MemAvailable:x SwapTotal:1 SwapFree:1 - -", 0) is None
    assert parse_sample_line("Connection closed", 0) is None


@pytest.mark.processes
def test_sampler_script_streams_samples_through_a_long_running_command():
    # `sh -c SCRIPT` stands in for `ssh HOST SCRIPT`: the same one long-running command and reader.
    sampler = SshSampler(["sh", "-c"], "here")
    sampler.start()
    deadline = time.monotonic() + 10
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    samples = sampler.stop()
    assert len(samples) >= 3
    assert all(s.ram_total > 0 and s.ram_available <= s.ram_total for s in samples)
    assert samples[1].t - samples[0].t == pytest.approx(0.5, abs=0.4)


@pytest.mark.processes
def test_sampler_script_ends_by_itself():
    script = sampler_script(interval=0, max_samples=2)
    lines = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False).stdout
    assert len(lines.splitlines()) == 2


@pytest.mark.processes
def test_local_sampler_uses_psutil():
    psutil = pytest.importorskip("psutil")
    sampler = LocalSampler()
    sampler.start()
    wait_for(lambda: sampler.samples, 10, "a first sample", interval=0.05)
    samples = sampler.stop()
    assert samples and samples[0].ram_total == psutil.virtual_memory().total
    assert sampler.kernel_log().source in ("journalctl", "dmesg", None)


def synthetic_run(swap_path_mib, *, failed: int = 0, oom=(), load_s: float = 10.0, watch="lab1") -> SmokeRun:
    """Samples every 0.5 s from t=-2 s; swap follows `swap_path_mib(t)` where t is seconds since load start."""
    start = 1_800_000_000.0
    results = [RequestResult(i * 0.1, 1.0 + i * 0.01, True, 200, None, 16) for i in range(20 - failed)]
    results += [RequestResult(0.0, 0.1, False, 500, "HTTP 500") for _ in range(failed)]
    load = LoadResult("m", 20, 20, start, start + load_s, results)
    samples = []
    for step in range(-4, int((load_s + 20) * 2)):
        t = step / 2
        swap_used = int(swap_path_mib(t) * MIB)
        samples.append(MemorySample(start + t, 2 * GIB, 2 * GIB - (600 + (400 if 0 <= t <= load_s else 0)) * MIB,
                                    GIB, GIB - swap_used, 300 * MIB, None))
    return SmokeRun("http://127.0.0.1:8000", load, watch, samples, tuple(oom), "journalctl", 30)


def test_swap_that_rises_and_falls_back_passes():
    run = synthetic_run(lambda t: 10 + (500 if 2 <= t <= 12 else 0))
    swap = run.swap()
    assert (swap.baseline, swap.peak, swap.final) == (10 * MIB, 510 * MIB, 10 * MIB)
    assert swap.rise == 500 * MIB and swap.recovered
    assert run.ok and run.problems() == [] and run.warnings() == []


def test_swap_that_stays_up_is_a_warning_not_a_failure():
    run = synthetic_run(lambda t: 10 + (500 if t >= 2 else 0))
    assert not run.swap().recovered
    assert run.ok
    assert "did not come back" in run.warnings()[0]


def test_failed_requests_and_oom_lines_fail_the_run():
    assert synthetic_run(lambda t: 0, failed=3).problems() == ["3 of 20 requests failed"]
    oom_run = synthetic_run(lambda t: 0, oom=OOM)
    assert not oom_run.ok and "OOM" in oom_run.problems()[0]
    assert oom_run.oom_kills[0].pid == 536


def test_no_samples_from_the_watched_host_fails_the_run():
    run = synthetic_run(lambda t: 0)
    run.samples = []
    assert run.problems() == ["no memory samples came from lab1"]


# matplotlib runs fc-list when it builds its font cache, the first time on a machine.
@pytest.mark.processes
def test_report_json_and_chart(tmp_path):
    run = synthetic_run(lambda t: 10 + 500 * max(0.0, min(1.0, (t - 1) / 4)) * (1 if t < 14 else 0.1), oom=OOM)
    report_path, chart_path = write_report(run, {"concurrency": 20}, tmp_path)
    report = json.loads(report_path.read_text())
    assert report["requests"] == {"planned": 20, "sent": 20, "succeeded": 20, "failed": 0, "not_sent": 0,
                                  "hit_time_limit": False, "errors": {}}
    assert report["latency_s"]["p50"] == pytest.approx(1.095)
    assert report["latency_s"]["p95"] == pytest.approx(1.1805)
    assert report["memory"]["swap"]["rise"] == 500 * MIB and report["memory"]["swap"]["recovered"]
    assert report["memory"]["ram"]["unit_peak"] == 300 * MIB
    assert report["memory"]["series"][0]["t"] == -2.0
    assert report["oom"]["kills"][0]["memcg"] == "/system.slice/vllm.service"
    assert report["ok"] is False and report["chart"] == "smoke-memory.png"
    png = chart_path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


def test_without_matplotlib_the_report_is_written_with_no_chart(tmp_path, monkeypatch):
    """matplotlib is the `chart` extra: a plain install still writes the JSON report."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "matplotlib" else real_find_spec(name, *args))
    run = synthetic_run(lambda t: 10 + (500 if 2 <= t <= 12 else 0))
    report_path, chart_path = write_report(run, {"concurrency": 20}, tmp_path)
    assert chart_path is None and json.loads(report_path.read_text())["chart"] is None
    assert list(tmp_path.iterdir()) == [report_path]


def test_summary_text():
    text = summary_text(synthetic_run(lambda t: 10 + (500 if 2 <= t <= 12 else 0)))
    assert "20 succeeded, 0 failed (20 planned, 20 concurrent, model m)" in text
    assert "latency p50 1.10 s, p95 1.18 s" in text
    assert "swap used 10M -> peak 510M -> 10M after (back toward baseline)" in text
    assert text.endswith("PASS")


class ServerDrivenSampler:
    """Swap follows the fake server's requests in flight: what a host does when load pushes memory."""

    label = "fake-host"

    def __init__(self, server, oom_after=()):
        self.server = server
        self.samples: list[MemorySample] = []
        self.oom_after = oom_after
        self.reads = 0
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.is_set():
            used = self.server.in_flight * 100 * MIB
            self.samples.append(MemorySample(time.time(), 2 * GIB, GIB, GIB, GIB - used))
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        return list(self.samples)

    def kernel_log(self):
        self.reads += 1
        return KernelLog("journalctl", tuple(self.oom_after) if self.reads > 1 else ())


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(smoke_run_module, "BASELINE_S", 0.2)
    monkeypatch.setattr(smoke_run_module, "TAIL_S", 0.2)
    monkeypatch.setattr(smoke_run_module, "INTERVAL_S", 0.05)


def run_against(base, sampler, **overrides):
    settings = dict(concurrency=4, requests=8, max_tokens=8, api_key=None, request_timeout=10, time_limit=60,
                    settle_s=5, sampler=sampler)
    settings.update(overrides)
    return smoke_run(base, base, "fake-model", **settings)


def test_whole_run_sees_swap_rise_during_the_load_and_come_back(quick):
    with fake_server(delay_s=0.2) as (base, server):
        sampler = ServerDrivenSampler(server)
        run = run_against(base, sampler)
    swap = run.swap()
    assert swap.baseline == 0 and swap.peak >= 300 * MIB and swap.final == 0 and swap.recovered
    assert run.load.started_at <= swap.peak_t <= run.load.ended_at
    assert run.ok and sampler.reads == 2


def test_oom_logged_during_the_run_is_reported(quick):
    with fake_server() as (base, server):
        run = run_against(base, ServerDrivenSampler(server, oom_after=OOM))
    assert run.oom_lines == OOM and not run.ok
    assert report_dict(run, {}, None)["oom"]["lines"] == list(OOM)


@pytest.mark.processes
def test_smoke_command_writes_report_and_chart(tmp_path):
    with fake_server(delay_s=0.05) as (base, _):
        result = CliRunner().invoke(main, ["smoke", base, "--concurrency", "3", "--requests", "6", "--local",
                                           "--settle", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "6 succeeded, 0 failed" in result.output and "PASS" in result.output
    report = json.loads((tmp_path / "smoke-report.json").read_text())
    assert report["memory"]["source"] == "local" and report["memory"]["samples"] >= 4
    assert (tmp_path / "smoke-memory.png").exists()


def test_smoke_command_exits_nonzero_on_failed_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("SMOKE_KEY", "k")
    with fake_server(fail_every=2, api_key="k") as (base, _):
        result = CliRunner().invoke(main, ["smoke", base + "/v1", "--requests", "4", "--api-key-env", "SMOKE_KEY",
                                           "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAIL: 2 of 4 requests failed" in result.output
    assert "memory not watched" in result.output
    assert not (tmp_path / "smoke-memory.png").exists()


def test_smoke_command_usage():
    runner = CliRunner()
    assert runner.invoke(main, ["smoke", "http://127.0.0.1:1", "--local", "--watch", "h"]).exit_code == 2
    assert runner.invoke(main, ["smoke", "http://127.0.0.1:1", "--api-key-env", "HOSTKIT_NO_SUCH_VAR"]).exit_code == 2
