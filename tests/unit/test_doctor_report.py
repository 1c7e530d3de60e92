"""`hostkit doctor` output and command line: text and JSON on recorded hosts, usage, exit codes."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from hostkit.cli.main import main
from hostkit.doctor.gather import parse_doctor_output
from hostkit.doctor.report import render_json, render_text
from hostkit.doctor.rules import diagnose

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"


def recorded(name: str, host: str):
    return diagnose(parse_doctor_output(host, (FIXTURES / f"{name}.txt").read_text().splitlines()))


def test_text_shows_what_was_read_and_each_finding_with_its_fix():
    text = render_text([recorded("lab-crashloop", "lab1"), recorded("h200-holder-outside", "h200")], ["gpu9"])
    assert "== lab1 ==" in text and "== h200 ==" in text
    assert "vllm.service  activating/auto-restart, 25 restart(s), last run exited, status 2" in text
    assert "MemoryMax 1.2G (MemoryHigh 1.1G, MemorySwapMax 256M)" in text
    assert "--swap-space 4  [unit ExecStart, not running]" in text
    assert "vLLM version  0.20.0 (installed)" in text
    assert "GPU 0         123643 / 143771 MiB used: vLLM 0 MiB, others 123634 MiB (pid 471 python3)" in text
    assert "WARNING  gpu-held-outside-vllm: GPU 0: 123634 of 143771 MiB is held outside vllm.service's cgroup: " \
           "pid 471 (python3) 123634 MiB." in text
    assert "CRITICAL unknown-vllm-option:" in text and "fix: Remove --swap-space" in text
    assert "OOM kills     2 since boot (journalctl)" in text
    assert "gpu9 ==\n  UNREACHABLE" in text


def test_text_of_a_running_host_shows_memory_of_unit_and_tree():
    text = render_text([recorded("lab-clean", "lab1")])
    assert "unit memory   now 153.5M, peak 153.6M, MemoryMax 1.2G" in text
    assert "vLLM process  pid 459, 3 process(es), RSS 168.5M (tree)" in text
    assert "swappiness 10, THP madvise (defrag madvise), cgroup v2" in text


def test_json_carries_inputs_settings_findings_and_exit_code():
    document = json.loads(render_json([recorded("lab-oom", "lab1")]))
    (host,) = document["hosts"]
    assert document["exit_code"] == 1
    assert host["inputs"]["unit"]["peak_bytes"] == 158973952
    assert [kill["pid"] for kill in host["inputs"]["kernel_log"]["oom_kills"]] == [536, 583]
    assert host["vllm_settings"]["max_num_seqs"] == 64
    severities = {finding["code"]: finding["severity"] for finding in host["findings"]}
    assert severities["vllm-oom-killed"] == "critical"
    assert all(finding["fix"] for finding in host["findings"])


def test_usage_needs_local_or_an_inventory():
    runner = CliRunner()
    assert runner.invoke(main, ["doctor"]).exit_code == 2
    assert runner.invoke(main, ["doctor", "--local", "inv.py"]).exit_code == 2
    assert runner.invoke(main, ["doctor", "--local", "--limit", "x"]).exit_code == 2


@pytest.mark.processes
def test_local_run_prints_json():
    result = CliRunner().invoke(main, ["doctor", "--local", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    document = json.loads(result.output)
    assert document["hosts"][0]["inputs"]["memory"]["ram_total_bytes"] > 0


@pytest.mark.processes
def test_inventory_run_through_pyinfra_on_the_local_connector(tmp_path):
    # pyinfra's @local connector runs the same probe through the same API path as ssh hosts;
    # a subprocess keeps gevent's monkey-patching out of this test process.
    inventory = tmp_path / "inventory.py"
    inventory.write_text('hosts = [("@local", {"vllm_enabled": False, "gpu_required": False, "swap_enabled": False})]\n')
    result = subprocess.run(
        [sys.executable, "-c", "from hostkit.cli.main import main; main()", "doctor", str(inventory), "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    document = json.loads(result.stdout)
    (host,) = document["hosts"]
    assert host["host"] == "@local"
    assert host["inputs"]["memory"]["ram_total_bytes"] > 0
    assert document["unreachable"] == []
    codes = {finding["code"]: finding["severity"] for finding in host["findings"]}
    assert codes.get("no-swap") in (None, "info")  # swap_enabled: false in the inventory
    assert result.returncode == document["exit_code"]


@pytest.mark.processes
def test_unreachable_inventory_host_exits_2(tmp_path):
    inventory = tmp_path / "inventory.py"
    # Nothing listens on port 1 of loopback: the connection is refused at once.
    inventory.write_text('hosts = [("gone", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_connect_retries": 0,'
                         ' "vllm_enabled": False})]\n')
    result = subprocess.run(
        [sys.executable, "-c", "from hostkit.cli.main import main; main()", "doctor", str(inventory)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "== gone ==\n  UNREACHABLE" in result.stdout
