"""vLLM stays alive after the deploy (issue 24), on one lab host with the stand-in: engine death
(exit 0) brought back by systemd, a 500ing and a hung server restarted by the watchdog, the
hourly cap on a server that keeps failing, an operator's stop respected, no old process left.

Short watchdog settings (WATCHDOG below) keep the module a few minutes long. Every test
starts from `fresh_start`: watchdog state cleared, the unit's start limit reset, and the
host converged by the main deploy to the test's data. Times are printed as JSON lines.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from hostkit.doctor.gather import doctor_command, parse_doctor_output
from hostkit.doctor.rules import diagnose
from tests.e2e.vllm_unit import alive, serving, sh, show, unit_pids
from hostkit_lab.standin.install import install_standin
from tests.waiting import wait_for

pytestmark = pytest.mark.lab
HOST_KIND = "container"

WATCHDOG = {"vllm_watchdog_interval_s": 3, "vllm_watchdog_failures": 2, "vllm_watchdog_max_restarts_per_hour": 2}
BASE_ENV = {"VLLM_STANDIN_LOAD_SECONDS": "2", "VLLM_STANDIN_LEFTOVER": "1"}
BASE = {"nvme_device": None, "swap_enabled": False, "vllm_served_model_name": "lab-model",
        "vllm_env": BASE_ENV, "vllm_ready_timeout": 120, **WATCHDOG}
WATCHDOG_UNIT = "vllm-hostkit-watchdog.service"
STATE = "/var/lib/vllm-hostkit/watchdog.json"


@pytest.fixture(scope="module")
def host(shared_lab_host):
    install_standin(shared_lab_host)
    return shared_lab_host


def watchdog_state(lab_host) -> dict:
    return json.loads(sh(lab_host, f"cat {STATE} 2>/dev/null || echo '{{}}'"))


def watchdog_journal(lab_host, since: str) -> str:
    return sh(lab_host, f"journalctl -u {WATCHDOG_UNIT} --since '{since}' -o cat --no-pager")


def host_now(lab_host) -> str:
    return sh(lab_host, "date '+%Y-%m-%d %H:%M:%S'").strip()


def doctor_findings(lab_host, record_as: str) -> dict:
    """`hostkit doctor`'s probe and rules on the host; the raw output is printed for recording."""
    output = sh(lab_host, doctor_command())
    print(f"--- doctor output {record_as} ---\n{output}--- end ---")
    return {finding.code: finding for finding in diagnose(parse_doctor_output(lab_host.name, output.splitlines())).findings}


def report(**figures) -> None:
    print(json.dumps({"test": "watchdog", **figures}))


@pytest.fixture
def fresh_start(host, run_deploy):
    """Converges the host to the test's data with the watchdog's state cleared; returns the
    host's time from which the watchdog's journal is this test's. Taken before the deploy: on
    a loaded machine a fault can begin, and the watchdog act on it, before the deploy ends."""
    def converge(env: dict | None = None) -> str:
        sh(host, f"systemctl stop {WATCHDOG_UNIT} 2>/dev/null; rm -f {STATE}; systemctl reset-failed vllm.service"
                 " 2>/dev/null; true")
        since = host_now(host)
        run = run_deploy(host, {**BASE, "vllm_env": {**BASE_ENV, **(env or {})}})
        assert run.ok, run.output[-4000:]
        assert show(host, WATCHDOG_UNIT)["ActiveState"] == "active"
        assert env or serving(host, "lab-model")  # a fault may already have begun
        return since

    return converge


def test_deploy_installs_the_watchdog_and_a_rerun_changes_nothing(host, run_deploy, fresh_start):
    fresh_start()
    unit = sh(host, "systemctl cat vllm.service")
    assert "\nRestart=always\n" in unit and "\nKillMode=mixed\n" in unit
    # Debian 12's systemd 252 has no RestartSteps= (254): fitted out, and verify accepted the unit.
    assert "\n# RestartSteps=5: dropped, needs systemd 254 (host: 252)\n" in unit
    rerun = run_deploy(host, BASE)
    assert rerun.ok and rerun.changed_on(host.name) == [], rerun.output[-3000:]
    assert "lab-secret" not in sh(host, f"systemctl cat {WATCHDOG_UNIT}; ps auxww")


def test_engine_death_exit_0_is_restarted_by_systemd_and_leaves_no_process(host, fresh_start):
    fresh_start()
    before = show(host)
    old = unit_pids(host)
    assert len(old) >= 2  # the API server and its engine process
    started = time.monotonic()
    sh(host, f"kill -USR1 {before['MainPID']}")
    assert wait_for(lambda: show(host)["MainPID"] not in ("0", before["MainPID"]), 60), "not restarted"
    assert wait_for(lambda: serving(host, "lab-model"), 60), "not serving again"
    back_after_s = time.monotonic() - started
    report(case="engine death, exit 0", serving_again_after_s=round(back_after_s, 1))
    assert back_after_s < 60
    after = show(host)
    assert int(after["NRestarts"]) > int(before["NRestarts"])
    assert not alive(host, old), "a process of the old instance survived the restart"
    journal = sh(host, "journalctl -u vllm.service -n 80 -o cat --no-pager")
    assert "EngineDeadError" in journal
    assert not watchdog_state(host).get("restarts"), "systemd's restart, not the watchdog's"
    died = doctor_findings(host, "engine-death")["vllm-engine-died"]
    assert any("EngineDeadError" in line for line in died.evidence["journal"])


def test_health_500_is_restarted_by_the_watchdog_then_capped(host, fresh_start):
    since = fresh_start({"VLLM_STANDIN_FAULT": "health-500", "VLLM_STANDIN_FAULT_AFTER_S": "10"})
    first = show(host)
    old = unit_pids(host)
    started = time.monotonic()
    assert wait_for(lambda: watchdog_state(host).get("restarts_total", 0) >= 1, 120), \
        watchdog_journal(host, since)
    first_restart_s = time.monotonic() - started
    assert wait_for(lambda: show(host)["InvocationID"] != first["InvocationID"] and not alive(host, old), 90), \
        "a process of the old instance survived the restart"
    # Each new instance fails again after 10 s: restarted up to the hourly cap, then left failing.
    capped = wait_for(lambda: "not restarting vllm.service" in watchdog_journal(host, since), 180, interval=3)
    capped_s = time.monotonic() - started
    journal = watchdog_journal(host, since)
    report(case="health 500", first_watchdog_restart_after_s=round(first_restart_s, 1),
           capped_after_s=round(capped_s, 1))
    assert capped, journal
    assert first_restart_s < 90
    assert "2 watchdog restart(s) in the last hour, the cap (vllm_watchdog_max_restarts_per_hour=2)" in journal
    assert re.search(r"restarting vllm\.service: 2 consecutive failed checks \(last: /health: HTTP 500\)", journal)
    assert re.search(r"restarting vllm\.service: 4 consecutive failed checks", journal)  # backoff
    time.sleep(10)  # several more periods: no third restart
    assert len(watchdog_state(host)["restarts"]) == 2
    restarts = doctor_findings(host, "watchdog-capped")["vllm-watchdog-restarts"]
    assert restarts.evidence["restarts"] and "stopped at its hourly cap" in restarts.problem
    assert any("not restarting vllm.service" in line for line in restarts.evidence["journal"])


def test_hung_completions_are_restarted_by_the_watchdog(host, fresh_start):
    since = fresh_start({"VLLM_STANDIN_FAULT": "hang-completions"})
    started = time.monotonic()
    assert wait_for(lambda: watchdog_state(host).get("restarts_total", 0) >= 1, 120), \
        watchdog_journal(host, since)
    restart_s = time.monotonic() - started
    report(case="hung completions", watchdog_restart_after_s=round(restart_s, 1))
    assert restart_s < 90
    assert "/v1/completions: no answer in 10s (timed out)" in watchdog_journal(host, since)


def test_systemctl_stop_stays_stopped(host, fresh_start):
    fresh_start()
    since = host_now(host)
    sh(host, "systemctl stop vllm.service")
    time.sleep(5 * WATCHDOG["vllm_watchdog_interval_s"])
    assert show(host)["ActiveState"] == "inactive"
    assert not watchdog_state(host).get("restarts")
    assert "vllm.service is inactive (stopped, or not started): the watchdog leaves it alone" in \
        watchdog_journal(host, since)
