"""Real vLLM 0.32 only: its process tree, `hostkit smoke` against it, hostkit's parse check on
its CLI, and the recorded start-up log and /metrics that unit tests read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realvllm import server as srv
from tests.realvllm.conftest import REPO, VERSION, record, serve_flags

PARSE_CHECK = REPO / "hostkit" / "remote" / "vllm_parse_check.py"
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "vllm"
STARTUP_LOG = FIXTURES / f"real-{VERSION}-startup.log"
METRICS = FIXTURES / f"real-{VERSION}-metrics.txt"
# HOSTKIT_REALVLLM_RECORD=1 rewrites the two fixtures from this run instead of comparing.
RECORDING = os.environ.get("HOSTKIT_REALVLLM_RECORD") == "1"
PARSE_TIMEOUT_S = 180  # one parse imports vLLM: about 10 s natively


def _rss_mb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


def test_three_processes_api_server_engine_core_and_worker(real_vllm):
    api = srv.proc(real_vllm.process.pid)
    tree = srv.descendants(real_vllm.process.pid)
    titles = [proc.title for proc in tree]
    record("processes", {"api_server": {"comm": api.comm, "cmdline": api.cmdline[:120], "rss_mb": _rss_mb(api.pid)},
                         "children": [{"pid_parent": p.ppid == api.pid, "comm": p.comm, "title": p.title,
                                       "cmdline": p.cmdline[:120], "rss_mb": _rss_mb(p.pid)} for p in tree]})
    assert " serve " in api.cmdline  # the API server keeps vLLM's `serve` command line
    assert titles.count("VLLM::EngineCore") == 1 and titles.count("VLLM::Worker") == 1, titles
    engine = next(proc for proc in tree if proc.title == "VLLM::EngineCore")
    worker = next(proc for proc in tree if proc.title == "VLLM::Worker")
    assert engine.ppid == api.pid and worker.ppid == engine.pid
    assert engine.comm == "VLLM::EngineCor"  # comm is cut at 15 characters; cmdline is whole
    # multiprocessing's resource tracker: a fourth process, a plain python under the API server
    others = [proc for proc in tree if proc.title not in ("VLLM::EngineCore", "VLLM::Worker")]
    assert all(proc.ppid == api.pid and "resource_tracker" in proc.cmdline for proc in others), others


def test_hostkit_smoke_gets_real_completions(real_vllm, tmp_path):
    out = tmp_path / "smoke"
    result = subprocess.run(
        [sys.executable, "-m", "hostkit", "smoke", real_vllm.base, "--concurrency", "4", "--requests", "16",
         "--max-tokens", "16", "--api-key-env", "VLLM_API_KEY", "--local", "--settle", "0",
         "--request-timeout", "60", "--time-limit", "120", "--out", str(out)],
        env={**os.environ, "VLLM_API_KEY": real_vllm.api_key}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "smoke-report.json").read_text())
    assert report["model"] == real_vllm.model and report["requests"]["succeeded"] == 16
    assert report["completion_tokens"]["total"] == 16 * 16  # the model's noise never hits its end token
    assert report["memory"]["samples"] > 0 and (out / "smoke-memory.png").is_file()
    assert real_vllm.api_key not in result.stdout + result.stderr
    record("smoke", {"latency_s": report["latency_s"], "tokens_per_s": report["completion_tokens"]["per_second"]})


def parse_check(python: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    """As hostkit runs it on a host (operations/vllm_service.py): `python -c SCRIPT`, from /."""
    return subprocess.run([str(python), "-c", PARSE_CHECK.read_text(), str(script), *args], capture_output=True, text=True,
                          timeout=PARSE_TIMEOUT_S, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, cwd="/")


@pytest.mark.parametrize("extra, status", [([], 0), (["--no-such-flag"], 2)], ids=["accepted", "unknown-flag"])
def test_the_parse_check_on_hostkits_vllm_entry(realvllm_python, vllm_cli, tiny_model_dir, extra, status):
    """hostkit/remote/vllm_parse_check.py, unchanged, on real vLLM's CLI through hostkit/remote/vllm_cli.py."""
    result = parse_check(realvllm_python, vllm_cli, "serve", str(tiny_model_dir), *serve_flags(8000), *extra)
    assert result.returncode == status, result.stderr[-3000:]


def test_the_vllm_cpu_console_script_fails_where_hostkits_entry_works(realvllm_venv, realvllm_python):
    """Why hostkit/remote/vllm_cli.py exists: the `vllm` script of the vllm-cpu distribution dies in the CLI."""
    stock = realvllm_venv.path / "bin" / "vllm"
    result = parse_check(realvllm_python, stock, "serve", "m")
    assert result.returncode == 3 and "PackageNotFoundError" in result.stderr, result.stderr[-3000:]


def startup_excerpt(log: str) -> list[str]:
    """The start-up lines worth keeping: what ran, the engine's sizes, readiness. No routes, no noise."""
    keep = re.compile(r"non-default args|Initializing a V1 LLM engine|Resolved architecture|max model len"
                      r"|Enforce eager|KV cache|Maximum concurrency|init engine|Starting vLLM server|Supported tasks"
                      r"|Started server process|Application startup complete|Loading weights took")
    lines = log.splitlines()
    ready = next((i for i, line in enumerate(lines) if "Application startup complete" in line), len(lines) - 1)
    return [line for line in lines[:ready + 1] if keep.search(line)]


def metric_names(text: str) -> list[str]:
    return sorted({line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"})


def test_recorded_startup_log_and_metrics_are_real_vllms(real_vllm):
    """tests/unit/fixtures/vllm/real-0.32.0-*: recorded from this server; checked against it each run."""
    excerpt = startup_excerpt(real_vllm.log.read_text(errors="replace"))
    status, body = srv.get(real_vllm, "/metrics")
    assert status == 200
    if RECORDING:
        STARTUP_LOG.write_text("\n".join(excerpt) + "\n")
        METRICS.write_text(body.decode())
    recorded_metrics = METRICS.read_text()
    assert metric_names(body.decode()) == metric_names(recorded_metrics)
    strip = re.compile(r"^\([\w-]+ pid=\d+\) \w+ \d\d-\d\d \d\d:\d\d:\d\d |^INFO: +| \[.*?\] |pid=\d+|\[\d+\]")
    recorded_kinds = {strip.sub("", line)[:20] for line in STARTUP_LOG.read_text().splitlines()}
    live_kinds = {strip.sub("", line)[:20] for line in excerpt}
    assert recorded_kinds <= live_kinds, sorted(recorded_kinds - live_kinds)
