"""Recorded real vLLM 0.32 output (tests/realvllm records it; fixtures/vllm/real-0.32.0-*) against
what the stand-in serves, so that the stand-in's /metrics stays a subset of the real one."""

from __future__ import annotations

import threading
from pathlib import Path

from hostkit_lab.standin.vllm_standin import metrics

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


def names(text: str) -> set[str]:
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}


def test_every_metric_the_standin_serves_is_one_real_vllm_serves():
    state = {"served": "tiny", "running": 0, "succeeded": 0, "prompt_tokens": 0, "generation_tokens": 0,
             "lock": threading.Lock()}
    real = (FIXTURES / "real-0.32.0-metrics.txt").read_text()
    assert names(metrics(state)) <= names(real), sorted(names(metrics(state)) - names(real))
    assert 'vllm:num_requests_running{engine="0",model_name="tiny"}' in real


def test_the_recorded_start_up_says_what_ran():
    log = (FIXTURES / "real-0.32.0-startup.log").read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in log
    assert "Enforce eager set" in log and "Application startup complete" in log
