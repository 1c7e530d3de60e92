"""What hostkit relies on in vLLM's behaviour, checked against real vLLM 0.32 and the stand-in.

Each test states the real server's behaviour; the same assertions run against
hostkit_lab/standin/vllm_standin.py, so the stand-in cannot drift from what was measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from hostkit.vllm.readiness import Probe, probe_command
from tests.realvllm import server as srv
from tests.realvllm.conftest import record

# The metric names hostkit's stand-in exposes (and dashboards read): all exist in 0.32.
METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
           "vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
           "process_resident_memory_bytes")
EXIT_AFTER_ENGINE_DEATH_S = 30


def probe(server: srv.Server, env_file: str) -> Probe:
    output = subprocess.run(["sh", "-c", probe_command("127.0.0.1", server.port, env_file)],
                            capture_output=True, text=True, timeout=60).stdout
    return Probe.parse(output)


def test_hostkits_readiness_probe_says_ready(vllm_server):
    ready = probe(vllm_server, str(vllm_server.env_file))
    assert ready.serves(vllm_server.model), ready.describe()
    without_key = probe(vllm_server, "/nonexistent")
    assert without_key.health == 200 and without_key.models_status == 401


def test_health_is_200_with_an_empty_body_and_needs_no_key(vllm_server):
    assert srv.get(vllm_server, "/health") == (200, b"")


def test_models_lists_the_served_name_and_needs_the_key(vllm_server):
    assert srv.get(vllm_server, "/v1/models")[0] == 401
    status, body = srv.get(vllm_server, "/v1/models", vllm_server.api_key)
    assert status == 200
    assert [model["id"] for model in json.loads(body)["data"]] == [vllm_server.model]


def test_a_completion_needs_the_key(vllm_server):
    request = {"model": vllm_server.model, "prompt": "Hello, world", "max_tokens": 8}
    assert srv.post(vllm_server, "/v1/completions", request)[0] == 401
    assert srv.post(vllm_server, "/v1/completions", request, "wrong-key")[0] == 401
    status, answer = srv.post(vllm_server, "/v1/completions", request, vllm_server.api_key)
    assert status == 200, answer
    assert answer["object"] == "text_completion" and answer["model"] == vllm_server.model
    assert answer["usage"]["completion_tokens"] == 8 and answer["choices"][0]["finish_reason"] == "length"


def test_an_unknown_model_is_404(vllm_server):
    request = {"model": "no-such-model", "prompt": "x", "max_tokens": 1}
    assert srv.post(vllm_server, "/v1/completions", request, vllm_server.api_key)[0] == 404


def test_metrics_has_the_names_hostkit_relies_on_without_a_key(vllm_server):
    status, body = srv.get(vllm_server, "/metrics")
    assert status == 200
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in body.decode().splitlines() if line[:1] not in "#"}
    assert set(METRICS) <= names, sorted(set(METRICS) - names)
    running = [line for line in body.decode().splitlines() if line.startswith("vllm:num_requests_running{")]
    assert running and all(f'model_name="{vllm_server.model}"' in line for line in running), running


def engine_process(server: srv.Server) -> srv.Proc | None:
    """What the OOM killer would take: the worker (the largest), else the engine process."""
    tree = srv.descendants(server.process.pid)
    for title in ("VLLM::Worker", "VLLM::EngineCore"):
        for proc in tree:
            if proc.title == title or title in proc.cmdline.split(" ")[-2:]:
                return proc
    return None


@pytest.mark.kills_the_engine
@pytest.mark.parametrize("vllm_server", ["real", "standin"], indirect=True)
def test_engine_death_answers_503_then_exits_0(vllm_server):
    """kill -9 of the worker: /health 503, then the API server exits with status 0 (field notes)."""
    victim = engine_process(vllm_server)
    assert victim is not None, f"no engine process under {vllm_server.process.pid}"
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    statuses = []
    while vllm_server.process.poll() is None and time.monotonic() - killed < EXIT_AFTER_ENGINE_DEATH_S:
        try:
            status = srv.get(vllm_server, "/health", timeout=2)[0]
        except OSError:
            status = None
        if not statuses or statuses[-1][1] != status:
            statuses.append((round(time.monotonic() - killed, 2), status))
        time.sleep(0.05)
    try:
        exit_status = vllm_server.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        exit_status = None
    exit_s = time.monotonic() - killed
    time.sleep(1)  # what is left a second later
    left = srv.describe(srv.session_pids(vllm_server.process.pid))
    record(f"engine_death_{vllm_server.kind}", {
        "killed": victim.title, "health_after_kill": statuses, "exit_status": exit_status,
        "exit_s": round(exit_s, 1), "left_after_exit": left})
    assert exit_status == 0, f"exit status {exit_status} after {exit_s:.1f} s; /health: {statuses}"
    assert any(status == 503 for _, status in statuses), f"/health after the kill: {statuses}"
    # A moment of 200 right after the kill (the engine has not noticed yet), then 503 until it exits.
    after = [status for _, status in statuses][[status for _, status in statuses].index(503):]
    assert all(status in (503, None) for status in after), statuses
