"""The vLLM health watchdog: its decisions (a pure function over state and what a check saw),
its probes against the lab stand-in, the key file it reads, its unit and the operation."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from pyinfra.api import FileUploadCommand, FunctionCommand
from pyinfra.context import ctx_host

from tests.unit.op_host import OpHost
from tests.waiting import wait_for
from hostkit.remote import vllm_watchdog as wd
from hostkit.desired.digest import text_sha256
from hostkit.desired import watchdog as desired
from hostkit.facts.watchdog import WatchdogFact, WatchdogState
from hostkit.operations import watchdog as op
from hostkit.paths import WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT
from hostkit.plan.planner import watchdog_settings
from hostkit.plan.plans import WatchdogSettings
from hostkit.operations.vllm_service import verify_problems
from hostkit.profile.validation import profile_from_data
from tests.unit.test_standin import standins, start  # noqa: F401 (fixture)
from tests.unit.test_vllm_unit import PLAN, local_systemd_version, needs_systemd_analyze

CONFIG = wd.Config(unit="vllm.service", url="http://127.0.0.1:8000", model="m", interval_s=10, failures=3,
                   max_restarts_per_hour=2, completion_every=6, completion_timeout_s=30, lock_stale_after_s=5400)
RUNNING = wd.UnitStatus("active", "running", "success", "inv-1")
HEALTHY = (wd.ProbeResult("/health", True, True, "HTTP 200"),)
HTTP_500 = (wd.ProbeResult("/health", True, False, "HTTP 500"),)
REFUSED = (wd.ProbeResult("/health", False, False, "no answer ([Errno 111] Connection refused)"),)
HUNG = (HEALTHY[0], wd.ProbeResult("/v1/completions", False, False, "no answer in 30s (timed out)"))


def run(checks, state=None, start_at=1_000_000.0, step=10.0):
    """Feed one Seen per check; returns the final decision and every decision's messages."""
    state = state or wd.new_state()
    decisions = []
    for number, seen in enumerate(checks):
        decision = wd.decide(state, seen, start_at + number * step, CONFIG)
        state = decision.state
        decisions.append(decision)
    return decisions


def seen(probes=HEALTHY, unit=RUNNING, lock_age_s=None):
    return wd.Seen(lock_age_s, unit, probes)


def test_restarts_after_n_consecutive_failures_of_a_serving_instance():
    decisions = run([seen(), seen(HTTP_500), seen(HTTP_500), seen(HTTP_500)])
    assert [d.restart for d in decisions] == [False, False, False, True]
    assert decisions[2].messages == ["<4>vllm.service check failed (2/3): /health: HTTP 500"]
    assert decisions[3].messages[-1].startswith("<4>restarting vllm.service: 3 consecutive failed checks "
                                                "(last: /health: HTTP 500); watchdog restart 1 of at most 2")
    state = decisions[3].state
    assert state["restarts"] == [1_000_030.0] and state["restarts_total"] == 1 and state["consecutive_failures"] == 0


def test_a_success_in_between_resets_the_count():
    decisions = run([seen(), seen(HTTP_500), seen(HTTP_500), seen(), seen(HTTP_500), seen(HTTP_500)])
    assert not any(d.restart for d in decisions)
    assert "healthy again after 2 failed check(s)" in decisions[3].messages[0]


def test_an_instance_that_never_answered_is_loading_and_not_counted():
    decisions = run([seen(REFUSED)] * 10)
    assert not any(d.restart for d in decisions)
    assert sum(len(d.messages) for d in decisions) == 1  # journaled once
    assert "has not answered yet (loading): not counted" in decisions[0].messages[0]
    # Once it answered, a refused connection counts (the server died or hung).
    after = run([seen(HEALTHY), *[seen(REFUSED)] * 3], state=decisions[-1].state)
    assert after[-1].restart


def test_a_500_from_the_start_counts_the_server_is_up():
    assert run([seen(HTTP_500)] * 3)[-1].restart


def test_backoff_doubles_the_failures_needed_and_the_hourly_cap_holds():
    state = wd.new_state()
    restarts_at = []
    messages = []
    for number in range(40):
        # A new instance after each restart, failing from its first answer.
        unit = wd.UnitStatus("active", "running", "success", f"inv-{len(restarts_at)}")
        decision = wd.decide(state, seen(HTTP_500, unit), 1_000_000.0 + number * 10, CONFIG)
        state = decision.state
        messages += decision.messages
        if decision.restart:
            restarts_at.append(number)
    assert restarts_at == [2, 8]  # 3 failures, then 6; the cap is 2 an hour
    capped = [m for m in messages if "not restarting" in m]
    assert len(capped) == 1 and capped[0].startswith("<3>not restarting vllm.service: 2 watchdog restart(s) "
                                                     "in the last hour, the cap (vllm_watchdog_max_restarts_per_hour=2)")
    # An hour after the first restart, one more is allowed.
    later = wd.decide(state, seen(HTTP_500, wd.UnitStatus("active", "running", "success", "inv-2")),
                      1_000_020.0 + 3600, CONFIG)
    assert later.restart


def test_a_stopped_unit_stays_stopped():
    inactive = wd.UnitStatus("inactive", "dead", "success", "")
    decisions = run([seen(HTTP_500), seen(HTTP_500), *[seen((), inactive)] * 20])
    assert not any(d.restart for d in decisions)
    assert [m for d in decisions for m in d.messages][-1] == \
        "<6>vllm.service is inactive (stopped, or not started): the watchdog leaves it alone"
    assert decisions[-1].state["consecutive_failures"] == 0


def test_a_unit_at_its_start_limit_stays_failed_and_is_reported_once():
    failed = wd.UnitStatus("failed", "failed", "start-limit-hit", "inv-9")
    decisions = run([seen((), failed)] * 5)
    assert not any(d.restart for d in decisions)
    messages = [m for d in decisions for m in d.messages]
    assert len(messages) == 1 and messages[0].startswith("<3>vllm.service hit its start limit")


def test_starting_stopping_and_auto_restart_are_left_to_systemd():
    for active, sub in (("activating", "auto-restart"), ("activating", "start"), ("deactivating", "stop-sigterm")):
        decisions = run([seen(HTTP_500), seen(HTTP_500), seen((), wd.UnitStatus(active, sub, "", "inv-1")),
                         seen(HTTP_500), seen(HTTP_500)])
        assert not any(d.restart for d in decisions), (active, sub)


def test_the_deploy_lock_pauses_it_and_a_stale_lock_does_not():
    decisions = run([seen(HTTP_500), seen(HTTP_500), seen((), lock_age_s=30), seen(HTTP_500), seen(HTTP_500)])
    assert not any(d.restart for d in decisions)
    assert decisions[2].messages[0].startswith("<6>paused: a hostkit deploy holds /run/vllm-hostkit/deploy.lock")
    stale = run([seen(HTTP_500, lock_age_s=9999)] * 3)
    assert stale[-1].restart and "taken as left over by a dead deploy" in stale[0].messages[0]


def test_a_hung_engine_fails_on_the_completion_probe():
    assert run([seen(HUNG)] * 3)[-1].restart


def test_completions_are_probed_every_few_checks_and_every_check_while_failing():
    state = wd.new_state()
    assert [n for n in range(1, 19) if wd.completion_due(state, n, CONFIG)] == [6, 12, 18]
    assert wd.completion_due({**state, "consecutive_failures": 1}, 7, CONFIG)


def test_state_file_round_trip_and_damaged_files(tmp_path):
    path = tmp_path / "watchdog.json"
    state = run([seen(HTTP_500)] * 3)[-1].state
    wd.save_state(state, str(path))
    assert wd.load_state(str(path)) == state
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    on_disk = json.loads(path.read_text())
    assert isinstance(on_disk["restarts"], list) and on_disk["restarts_total"] == 1
    path.write_text("{not json")
    assert wd.load_state(str(path)) == wd.new_state()
    path.write_text(json.dumps({"restarts": "oops", "restarts_total": 3}))
    assert wd.load_state(str(path))["restarts"] == [] and wd.load_state(str(path))["restarts_total"] == 3


def test_unit_status_parses_systemctl_show():
    status = wd.UnitStatus.parse("ActiveState=failed\nSubState=failed\nResult=start-limit-hit\nInvocationID=\n")
    assert (status.active_state, status.result, status.running) == ("failed", "start-limit-hit", False)


def config_for(base: str, **changes) -> wd.Config:
    return wd.Config(**{**CONFIG.__dict__, "url": base, "model": "lab", "interval_s": 2,
                        "completion_timeout_s": 2, **changes})


@pytest.mark.processes
def test_probes_against_the_stand_in(standins, tmp_path, monkeypatch):  # noqa: F811
    env = tmp_path / "vllm.env"
    env.write_text('VLLM_API_KEY="k"\n')
    monkeypatch.setattr(wd, "ENV_FILE", str(env))
    for fault, health, completion in (("", True, True), ("health-500", False, False),
                                      ("hang-completions", True, False)):
        process, base = start(standins, VLLM_STANDIN_FAULT=fault)
        try:
            config = config_for(base)
            assert wd.probe_health(config).ok is health, fault
            result = wd.probe_completion(config)
            assert result.ok is completion, (fault, result)
            if fault == "hang-completions":
                assert result.detail == "no answer in 2s (timed out)" and not result.answered
            if fault == "":
                env.write_text('VLLM_API_KEY="nope"\n')  # the key is read at each probe
                assert wd.probe_completion(config).detail == "HTTP 401"
                env.write_text('VLLM_API_KEY="k"\n')
        finally:
            process.kill()


# -- plan, unit, operation ------------------------------------------------------------------


def settings(**data) -> WatchdogSettings:
    return watchdog_settings(profile_from_data("h", {"vllm_model": "Qwen/Qwen2.5-0.5B-Instruct", **data}))


def test_the_plan_follows_the_keys_and_names_no_secret():
    plan = desired.watchdog_plan(settings(vllm_watchdog_interval_s=3, vllm_watchdog_failures=2,
                                    vllm_watchdog_max_restarts_per_hour=1), PLAN)
    assert plan.enabled and plan.script_text == desired.script_text()
    exec_start = next(line for line in plan.unit_text.splitlines() if line.startswith("ExecStart="))
    assert exec_start == ("ExecStart=/usr/bin/python3 -I /usr/local/sbin/vllm-watchdog --unit vllm.service "
                          "--url http://127.0.0.1:8000 --model qwen-small --interval 3 --failures 2 "
                          "--max-restarts-per-hour 1 --completion-every 6 --completion-timeout 10 "
                          "--lock-stale-after 3780")
    assert "vllm-hostkit" not in exec_start  # the deploy lock's leftover marker
    assert PLAN.api_key.get_secret_value() not in plan.unit_text
    assert not desired.watchdog_plan(settings(vllm_watchdog=False), PLAN).enabled
    assert not desired.watchdog_plan(settings(), PLAN.model_copy(update={"enabled": False})).enabled
    old = desired.watchdog_plan(settings(), PLAN.model_copy(update={"systemd_version": 239})).unit_text
    assert "\nType=simple\n" in old and "\nProtectHostname=yes\n" not in old


@pytest.mark.processes
@needs_systemd_analyze
def test_systemd_analyze_verify_accepts_the_watchdog_unit(tmp_path):
    if shutil.which("python3") is None or not __import__("os").path.exists("/usr/bin/python3"):
        pytest.skip("no /usr/bin/python3")
    plan = desired.watchdog_plan(settings(), PLAN.model_copy(update={"systemd_version": local_systemd_version()}))
    unit = tmp_path / WATCHDOG_UNIT
    unit.write_text(plan.unit_text)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    lines = (result.stdout + result.stderr).splitlines()
    assert verify_problems(result.returncode == 0, lines, str(unit), WATCHDOG_UNIT) == [], lines


def installed(plan: desired.WatchdogPlan, **unit) -> WatchdogState:
    return WatchdogState(text_sha256(plan.unit_text), text_sha256(plan.script_text),
                            {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
                             "UnitFileState": "enabled", "NeedDaemonReload": "no", **unit})


def commands(plan: desired.WatchdogPlan, current: WatchdogState) -> list:
    fake = OpHost({}, facts={WatchdogFact: current})
    with ctx_host.use(fake):
        return list(op.vllm_watchdog._inner(plan=plan))


def test_operation_converged_yields_nothing_and_changes_only_what_differs():
    plan = desired.watchdog_plan(settings(), PLAN)
    assert commands(plan, installed(plan)) == []
    fresh = commands(plan, WatchdogState(None, None, {"LoadState": "not-found"}))
    uploads = [c for c in fresh if isinstance(c, FileUploadCommand)]
    assert [u.dest for u in uploads] == [op.WATCHDOG_VERIFY_PATH, f"{WATCHDOG_SCRIPT_PATH}.new"]
    assert any(isinstance(c, FunctionCommand) for c in fresh)  # systemd-analyze verify first
    assert "systemctl restart vllm-hostkit-watchdog.service" in str(fresh[-1])
    stopped = commands(plan, installed(plan, ActiveState="inactive"))
    assert len(stopped) == 1 and "systemctl restart" in str(stopped[0])
    assert commands(desired.WatchdogPlan(False), WatchdogState(None, None, {})) == []
    removal = commands(desired.WatchdogPlan(False), installed(plan))
    assert len(removal) == 1 and "disable --now vllm-hostkit-watchdog.service" in str(removal[0])


def test_fact_parses_its_command_output():
    state = WatchdogFact().process(["unit_sha256=abc", "script_sha256=", "ActiveState=active",
                                       "UnitFileState=enabled"])
    assert state.unit_sha256 == "abc" and state.script_sha256 is None and state.active and state.enabled


def test_the_unit_check_callback_gets_state_and_host_from_pyinfra():
    """pyinfra's FunctionCommand passes (state, host) only to parameters of those names."""
    import inspect
    assert list(inspect.signature(op._check_unit).parameters)[:2] == ["state", "host"]


FAKE_SYSTEMCTL = """#!/bin/sh
# systemctl for the watchdog's main loop: `show` prints $DIR/show, `restart` logs and starts a new instance.
case "$1" in
  show) cat "$FAKE_SYSTEMCTL_DIR/show" ;;
  restart) echo "$*" >> "$FAKE_SYSTEMCTL_DIR/restarts"
           printf 'ActiveState=active\\nSubState=running\\nResult=success\\nInvocationID=inv-%s\\n' "$(date +%s%N)" \\
             > "$FAKE_SYSTEMCTL_DIR/show" ;;
esac
"""


@pytest.mark.processes
def test_the_script_restarts_a_500ing_server_and_journals_why(standins, tmp_path):  # noqa: F811
    """The installed script itself, as systemd runs it, against the stand-in; systemctl faked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    (tmp_path / "show").write_text("ActiveState=active\nSubState=running\nResult=success\nInvocationID=inv-1\n")
    env_file = tmp_path / "vllm.env"
    env_file.write_text('VLLM_API_KEY="k"\n')
    process, base = start(standins, VLLM_STANDIN_FAULT="health-500")
    state = tmp_path / "watchdog.json"
    installed = tmp_path / "vllm-hostkit-watchdog.py"
    installed.write_text(desired.script_text())
    argv = ["python3", "-I", str(installed), "--url", base,
            "--model", "lab", "--interval", "1", "--failures", "2", "--max-restarts-per-hour", "1",
            "--state", str(state), "--env-file", str(env_file), "--lock", str(tmp_path / "no.lock")]
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_SYSTEMCTL_DIR": str(tmp_path)}
    try:
        log = tmp_path / "watchdog.log"
        with log.open("w") as out:
            watchdog = subprocess.Popen(argv, env=environment, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: "not restarting" in log.read_text(), 30, "the watchdog to stop at its cap", interval=0.2)
        finally:
            watchdog.terminate()
            watchdog.wait(timeout=10)
        output = log.read_text()
    finally:
        process.kill()
    assert (tmp_path / "restarts").read_text() == "restart --no-block vllm.service\n", output
    assert "<4>restarting vllm.service: 2 consecutive failed checks (last: /health: HTTP 500)" in output
    assert "<3>not restarting vllm.service: 1 watchdog restart(s) in the last hour" in output
    saved = json.loads(state.read_text())
    assert saved["restarts_total"] == 1 and len(saved["restarts"]) == 1
