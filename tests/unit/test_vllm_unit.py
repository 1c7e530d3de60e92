"""The vLLM unit: rendering, change decisions, the operations' commands, the fact, readiness.

Operations run as pyinfra runs them (`_inner` with a fake `host` in pyinfra's context)
against fake snapshots. Where systemd-analyze is installed here, rendered units are also
checked with it (verify, and the offline security score).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import SecretStr
from pyinfra.api import FileUploadCommand, FunctionCommand
from pyinfra.api.exceptions import OperationValueError
from pyinfra.context import ctx_host

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.vllm_service import (
    ModeAndOwnership,
    ServiceTarget,
    VllmServiceFact,
    VllmServiceState,
)
from hostkit.operations import vllm_service as ops
from hostkit.paths import VLLM_ENV_FILE, VLLM_UNIT_PATH
from hostkit.plan.plans import VllmPlan
from hostkit.vllm.readiness import Observation, Probe, probe_address, wait_until_ready
from hostkit.desired.changes import ServiceChanges, service_changes
from hostkit.desired.digest import text_sha256
from hostkit.desired.vllm_readiness import CrashWatch, memory_limit_problem, observe
from hostkit.desired.vllm_unit import (
    ENV_DIR_STAT,
    ENV_FILE_STAT,
    VERIFY_PATH,
    UnitError,
    config_word,
    env_file_value,
    exec_word,
    render_env,
    render_unit,
)
from tests.unit.op_host import OpHost

SECRET = "s3cret-Key-4711"
# The service the fact looks at for a host with no inventory data: the keys' defaults.
DEFAULT_TARGET = ServiceTarget.of_scope(snapshot_scope())

PLAN = VllmPlan(
    enabled=True,
    version="0.33.0",
    user="vllm",
    argv=["/opt/vllm/bin/vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct", "--host", "0.0.0.0", "--port", "8000",
          "--served-model-name", "qwen-small", "--max-model-len", "4096"],
    env={"HF_HOME": "/mnt/nvme/vllm/huggingface", "VLLM_CACHE_ROOT": "/mnt/nvme/vllm/vllm"},
    api_key=SecretStr(SECRET),
    memory_max_bytes=6 * 2**30,
    memory_high_bytes=5 * 2**30,
    memory_swap_max_bytes=512 * 2**20,
    cgroup_version=2,
    served_model_name="qwen-small",
    cache_dir="/mnt/nvme/vllm",
    ready_timeout_s=180,
)
READY = Probe(health=200, error="", models_status=200, models=("qwen-small",))
LOADING = Probe(health=None, error="[Errno 111] Connection refused", models_status=None, models=None)


def plan(**changes) -> VllmPlan:
    return PLAN.model_copy(update=changes)


def converged(p: VllmPlan = PLAN, **changes) -> VllmServiceState:
    """A host that runs `p` as hostkit installs it, ready."""
    state = VllmServiceState(
        target=ops.service_target(p),
        user_uid=999,
        unit_sha256=text_sha256(render_unit(p)),
        unit_text=render_unit(p),
        env_sha256=text_sha256(render_env(p)),
        env_stat=ENV_FILE_STAT,
        env_dir_stat=ENV_DIR_STAT,
        unit={"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": "4242",
              "UnitFileState": "enabled", "NeedDaemonReload": "no", "NRestarts": "0", "DropInPaths": ""},
        memory_limit_bytes=p.memory_max_bytes,
        probe=READY,
    )
    return dataclasses.replace(state, **changes)


FRESH = VllmServiceState(
    target=ops.service_target(PLAN), user_uid=None,
    unit_sha256=None, env_sha256=None, env_stat=None, env_dir_stat=None,
    unit={"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "UnitFileState": ""},
)


# -- fake pyinfra host -------------------------------------------------------------------------


def fake_host(state: VllmServiceState, executing: bool = False) -> OpHost:
    """The service's state in the snapshot, and as the fact asked again for another target."""
    return OpHost({"vllm": state}, executing, facts={VllmServiceFact: state})


def run_op(operation, state: VllmServiceState, p: VllmPlan = PLAN, executing: bool = False) -> list:
    fake = fake_host(state, executing)
    with ctx_host.use(fake):
        return list(operation._inner(p, snapshot_scope()))


# -- quoting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("arg", "word"), [
    ("--max-model-len", "--max-model-len"),
    ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
    ("a b", '"a b"'),
    ("50%", "50%%"),
    ("$HOME", '"$$HOME"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    (";", '";"'),
    ("", '""'),
    ('{"k": 1}', '"{\\"k\\": 1}"'),
])
def test_exec_words_survive_systemd_unquoting(arg, word):
    assert exec_word(arg) == word


def test_config_words_keep_dollars_literal_but_escape_specifiers():
    assert config_word("PATH_WITH=$X") == '"PATH_WITH=$X"'
    assert config_word("A=50%") == "A=50%%"
    assert config_word("A=b") == "A=b"


def test_env_file_values_are_double_quoted_with_shell_escapes():
    assert env_file_value('a"b$c`d\\e') == '"a\\"b\\$c\\`d\\\\e"'
    with pytest.raises(UnitError):
        env_file_value("two\nlines")


# -- the rendered unit -------------------------------------------------------------------------


def test_unit_runs_the_plans_argv_as_the_service_user():
    unit = render_unit(PLAN)
    assert "\nUser=vllm\n" in unit
    assert ("\nExecStart=/opt/vllm/bin/vllm serve Qwen/Qwen2.5-0.5B-Instruct --host 0.0.0.0 --port 8000"
            " --served-model-name qwen-small --max-model-len 4096\n") in unit
    assert f"\nEnvironmentFile={VLLM_ENV_FILE}\n" in unit


def test_caches_go_to_the_cache_dir_and_plan_env_wins():
    unit = render_unit(plan(env={"HF_HOME": "/models/hf"}))
    assert "\nEnvironment=HF_HOME=/models/hf\n" in unit
    assert "\nEnvironment=VLLM_CACHE_ROOT=/mnt/nvme/vllm/vllm\n" in unit
    assert "\nEnvironment=XDG_CACHE_HOME=/mnt/nvme/vllm\n" in unit
    assert "\nReadWritePaths=-/mnt/nvme/vllm\n" in unit
    assert "\nRequiresMountsFor=/mnt/nvme/vllm\n" in unit
    assert "\nExecStartPre=+/usr/bin/install -d -o vllm -m 0750 /mnt/nvme/vllm\n" in unit


def test_the_secret_is_in_the_env_file_only():
    assert SECRET not in render_unit(PLAN)
    assert f'\nVLLM_API_KEY="{SECRET}"\n' in render_env(PLAN)
    assert "VLLM_API_KEY" not in render_env(plan(api_key=None))


def test_a_secret_in_argv_is_refused():
    with pytest.raises(UnitError, match="argv"):
        render_unit(plan(argv=[*PLAN.argv, "--api-key", SECRET]))


@pytest.mark.parametrize("changes", [{"user": "root"}, {"user": ""}, {"hardening": "paranoid"},
                                     {"argv": ["vllm", "serve", "m"]}, {"argv": []}, {"cache_dir": "cache"}])
def test_bad_plans_are_refused(changes):
    with pytest.raises(UnitError):
        render_unit(plan(**changes))


def test_cgroup_v2_memory_directives():
    unit = render_unit(PLAN)
    assert f"\nMemoryMax={6 * 2**30}\n" in unit
    assert f"\nMemoryHigh={5 * 2**30}\n" in unit
    assert f"\nMemorySwapMax={512 * 2**20}\n" in unit
    assert "MemoryLimit=" not in unit


def test_cgroup_v1_uses_memory_limit_only():
    unit = render_unit(plan(cgroup_version=1))
    assert f"\nMemoryLimit={6 * 2**30}\n" in unit
    assert "\nMemoryMax=" not in unit and "\nMemoryHigh=" not in unit and "\nMemorySwapMax=" not in unit


def test_no_limit_planned_means_no_memory_directive():
    unit = render_unit(plan(memory_max_bytes=None, memory_high_bytes=None, memory_swap_max_bytes=None))
    assert "\nMemoryMax=" not in unit and "\nMemoryHigh=" not in unit


def test_restart_oom_and_limits():
    unit = render_unit(PLAN)
    for line in ("Restart=always", "RestartSec=10", "RestartSteps=5", "RestartMaxDelaySec=120", "StartLimitIntervalSec=600", "StartLimitBurst=5",
                 "OOMPolicy=stop", "KillMode=mixed", "TimeoutStartSec=180", "LimitNOFILE=1048576",
                 "LimitMEMLOCK=infinity"):
        assert f"\n{line}\n" in unit


def test_ordering_after_network_thp_and_persistenced():
    unit = render_unit(PLAN)
    assert "\nWants=network-online.target\n" in unit
    assert "\nAfter=network-online.target vllm-hostkit-thp.service nvidia-persistenced.service\n" in unit


def test_gpus_stay_reachable():
    unit = render_unit(PLAN)
    assert "\nPrivateDevices=no\n" in unit
    assert "\nDevicePolicy=closed\n" in unit
    assert "\nDeviceAllow=char-nvidia* rw\n" in unit
    assert "\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n" in unit


def test_risky_filters_only_in_strict():
    standard, strict = render_unit(PLAN), render_unit(plan(hardening="strict"))
    for line in ("SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes", "PrivateUsers=yes"):
        assert f"\n{line}\n" in strict
        assert f"\n{line}\n" not in standard
    assert "\nSystemCallFilter=~@clock " in standard


def test_every_directive_is_explained():
    """Each [Service] setting past the basics sits under a comment."""
    lines = render_unit(PLAN).splitlines()
    uncommented = []
    for previous, line in zip(lines, lines[1:]):
        if "=" in line and not line.startswith("#") and not previous.startswith(("#", "[")) and "=" not in previous:
            uncommented.append(line)
    assert uncommented == []


def test_home_paths_get_read_only_home():
    assert "\nProtectHome=yes\n" in render_unit(PLAN)
    home = plan(argv=["/home/ml/venv/bin/vllm", "serve", "m"])
    assert "\nProtectHome=read-only\n" in render_unit(home)


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


def local_systemd_version() -> int | None:
    """This machine's systemd release (`systemd-analyze --version`: "systemd 252 (252.38-1~deb12u1)")."""
    if shutil.which("systemd-analyze") is None:
        return None
    words = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True).stdout.split()
    return int(words[1]) if len(words) > 1 and words[1].isdigit() else None


def _unit_dir(tmp_path: Path, p: VllmPlan) -> Path:
    # verify needs an existing executable; the user need not exist. Rendered for the local
    # systemd, as the deploy renders for the host's.
    unit = tmp_path / "vllm.service"
    unit.write_text(render_unit(p.model_copy(update={"argv": ["/bin/true", *p.argv[1:]],
                                                     "systemd_version": local_systemd_version()})))
    return unit


@pytest.mark.processes
@needs_systemd_analyze
@pytest.mark.parametrize("hardening", ["standard", "strict"])
@pytest.mark.parametrize("cgroup_version", [1, 2])
def test_systemd_analyze_verify_accepts_the_unit(tmp_path, hardening, cgroup_version):
    unit = _unit_dir(tmp_path, plan(hardening=hardening, cgroup_version=cgroup_version))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    lines = (result.stdout + result.stderr).splitlines()
    assert ops.verify_problems(result.returncode == 0, lines, str(unit)) == [], lines


@pytest.mark.processes
@needs_systemd_analyze
@pytest.mark.parametrize(("hardening", "at_most"), [("standard", 2.5), ("strict", 2.0)])
def test_security_exposure_offline(tmp_path, hardening, at_most):
    unit = _unit_dir(tmp_path, plan(hardening=hardening))
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
                            capture_output=True, text=True)
    line = next(line for line in result.stdout.splitlines() if "Overall exposure level" in line)
    exposure = float(line.split(":")[1].split()[0])
    assert exposure <= at_most, result.stdout


# -- what to change ---------------------------------------------------------------------------


def changes(state: VllmServiceState, p: VllmPlan = PLAN) -> ServiceChanges:
    return service_changes(state, render_unit(p), render_env(p))


def test_a_converged_host_needs_nothing():
    assert not changes(converged())


def test_a_fresh_host_needs_everything_but_a_reset():
    found = changes(FRESH)
    assert found == ServiceChanges(create_user=True, fix_env_dir=True, write_env=True, install_unit=True,
                                       daemon_reload=True, enable=True, restart=True,
                                       restart_reasons=("not running",))


def test_one_flag_changes_the_unit_and_restarts():
    found = changes(converged(), plan(argv=[*PLAN.argv, "--max-num-seqs", "64"]))
    assert found == ServiceChanges(install_unit=True, daemon_reload=True, restart=True,
                                       restart_reasons=("ExecStart=",))


def test_a_new_key_rewrites_the_env_file_and_restarts_without_reload():
    found = changes(converged(), plan(api_key=SecretStr("rotated")))
    assert found == ServiceChanges(write_env=True, restart=True, restart_reasons=("the environment file",))


def test_a_stopped_unit_is_started():
    found = changes(converged(unit={**converged().unit, "ActiveState": "inactive"}))
    assert found == ServiceChanges(restart=True, restart_reasons=("not running",))


def test_every_restart_resets_the_start_limit_first():
    """systemd counts the deploy's restarts with the crashes: without reset-failed, a failed unit,
    a crash loop or a fifth deploy restart within StartLimitIntervalSec is refused ("start of
    the service was attempted too often")."""
    looping = converged(unit={**converged().unit, "ActiveState": "activating", "SubState": "auto-restart"})
    failed = converged(unit={**converged().unit, "ActiveState": "failed"})
    assert changes(failed) == ServiceChanges(restart=True, restart_reasons=("not running",))
    for state in (failed, looping, converged()):
        installing = run_op(ops.vllm_service, state, plan(api_key=SecretStr("rotated")), executing=True)[-1]
        assert steps(installing)[-2:] == ["systemctl reset-failed vllm.service", "systemctl restart vllm.service"]


def test_wrong_env_permissions_are_fixed_without_restart():
    found = changes(converged(env_stat=ModeAndOwnership("644", "root", "root"),
                              env_dir_stat=ModeAndOwnership("755", "root", "root")))
    assert found == ServiceChanges(fix_env_dir=True, fix_env_file=True)


def test_a_unit_changed_on_disk_but_not_loaded_is_reloaded():
    found = changes(converged(unit={**converged().unit, "NeedDaemonReload": "yes"}))
    assert found == ServiceChanges(daemon_reload=True)


def test_a_comment_change_rewrites_the_unit_without_restart():
    installed = render_unit(PLAN).replace("# Managed by vllm-hostkit;", "# Managed by an older vllm-hostkit;")
    found = changes(converged(unit_sha256=text_sha256(installed), unit_text=installed))
    assert found == ServiceChanges(install_unit=True, daemon_reload=True)
    assert found.describe() == "install unit, daemon reload"


def test_a_new_release_in_the_inventory_alone_does_not_restart():
    """plan.version only names the release in a comment; the host's binary decides what runs."""
    found = changes(converged(), plan(version="0.32.0"))
    assert found == ServiceChanges(install_unit=True, daemon_reload=True)


def test_a_replaced_vllm_binary_restarts():
    found = changes(converged(command_changed_at=1_800_000_100, main_started_at=1_800_000_000))
    assert found.restart and found.restart_reasons == ("/opt/vllm/bin/vllm replaced since start (a new release)",)
    assert not changes(converged(command_changed_at=1_800_000_000, main_started_at=1_800_000_100))


@pytest.mark.parametrize("limits", [
    {"memory_max_bytes": 7 * 2**30},
    {"memory_high_bytes": 4 * 2**30, "memory_swap_max_bytes": 0},
    {"memory_high_bytes": None},
])
def test_memory_limits_change_live_without_restart(limits):
    found = changes(converged(), plan(**limits))
    assert found.install_unit and found.daemon_reload and not found.restart
    assert found.live_limits and all(name.startswith("Memory") for name in found.live_limits)


def test_cgroup_v1_memory_limit_changes_live():
    v1 = plan(cgroup_version=1)
    found = changes(converged(v1), plan(cgroup_version=1, memory_max_bytes=7 * 2**30))
    assert (found.restart, found.live_limits) == (False, ("MemoryLimit=",))


def test_a_limit_and_a_flag_together_restart_once_and_apply_nothing_live():
    found = changes(converged(), plan(memory_max_bytes=7 * 2**30, argv=[*PLAN.argv, "--max-num-seqs", "64"]))
    assert found.restart_reasons == ("ExecStart=",) and found.live_limits == ()


def test_an_environment_directive_restarts():
    found = changes(converged(), plan(env={**PLAN.env, "VLLM_LOGGING_LEVEL": "DEBUG"}))
    assert found.restart_reasons == ("Environment=",)


def test_an_unreadable_installed_unit_restarts():
    found = changes(converged(unit_sha256="0" * 64, unit_text=None))
    assert found.restart_reasons == ("the unit file",)


# -- the operations ------------------------------------------------------------------------------


def test_a_rerun_yields_nothing():
    assert run_op(ops.vllm_service, converged()) == []
    assert run_op(ops.vllm_ready, converged()) == []


def test_a_disabled_plan_yields_nothing():
    assert run_op(ops.vllm_service, FRESH, VllmPlan(enabled=False)) == []
    assert run_op(ops.vllm_ready, FRESH, VllmPlan(enabled=False)) == []


def steps(command: str) -> list[str]:
    """The steps of a `set -e` script the operation yields as one remote command."""
    first, *rest = command.splitlines()
    assert first == "set -e"
    return rest


def test_fresh_install_checks_before_it_installs_in_four_commands_and_two_uploads():
    commands = run_op(ops.vllm_service, FRESH, executing=True)
    preparing, unit_upload, check_unit, check_flags, env_upload, installing = commands
    assert [step.split()[0] for step in steps(preparing)] == ["useradd", "install", "install"]
    assert isinstance(unit_upload, FileUploadCommand) and unit_upload.dest == VERIFY_PATH
    assert unit_upload.src.getvalue() == render_unit(PLAN)
    assert (check_unit.function, check_flags.function) == (ops.check_unit_file, ops.check_flags)
    assert isinstance(env_upload, FileUploadCommand) and env_upload.dest.endswith("/.vllm.env.new")
    installed = steps(installing)
    assert "mv -f /etc/vllm-hostkit/.vllm.env.new /etc/vllm-hostkit/vllm.env" in installed[0]
    assert VLLM_UNIT_PATH in installed[1] and "install -m 0644" in installed[1]
    assert installed[2:] == ["systemctl daemon-reload", "systemctl enable vllm.service",
                             "systemctl reset-failed vllm.service", "systemctl restart vllm.service"]


def test_the_secret_never_appears_in_a_command_or_its_repr():
    commands = run_op(ops.vllm_service, FRESH, executing=True)
    for command in commands:
        assert SECRET not in repr(command)
        if isinstance(command, FunctionCommand):
            assert all(SECRET not in repr(arg) for arg in command.args)
    env_upload = next(c for c in commands if isinstance(c, FileUploadCommand) and ".vllm.env" in c.dest)
    assert SECRET in env_upload.src.getvalue()
    assert SECRET not in str(PLAN)


def test_only_a_flag_change_restarts_without_checks_of_the_env():
    commands = run_op(ops.vllm_service, converged(), plan(argv=[*PLAN.argv, "--max-num-seqs", "64"]), executing=True)
    preparing, _upload, _check_unit, _check_flags, installing = commands
    assert steps(preparing) == ["install -d -m 0755 /run/vllm-hostkit/verify"]
    assert steps(installing)[-3:] == ["systemctl daemon-reload", "systemctl reset-failed vllm.service",
                                      "systemctl restart vllm.service"]
    assert not any(".vllm.env" in step for step in steps(installing))


def test_a_memory_limit_change_reloads_without_restart_and_says_so():
    fake = fake_host(converged())
    with ctx_host.use(fake):
        commands = list(ops.vllm_service._inner(plan(memory_max_bytes=7 * 2**30), snapshot_scope()))
    installing = "\n".join(steps(commands[-1]))
    # After the reload, the limits written to the running unit's cgroup (systemd 257 no longer does).
    _, live = installing.split("systemctl daemon-reload\n")
    assert live.startswith("(\nhk_unit=vllm.service\n") and "memory.max" in live and live.endswith(")")
    assert "systemctl restart" not in installing
    assert fake.logged == ["vllm.service: MemoryMax= applied to the running unit, no restart"]


def test_bad_plan_is_refused_while_preparing():
    with pytest.raises(OperationValueError):
        run_op(ops.vllm_service, FRESH, plan(user="root"))


def test_a_snapshot_of_another_target_is_not_trusted():
    fake = fake_host(converged(target=dataclasses.replace(DEFAULT_TARGET, user="svc")))
    with ctx_host.use(fake):
        list(ops.vllm_service._inner(PLAN, snapshot_scope()))
    assert fake.facts_asked == [{"target": ops.service_target(PLAN)}]


def test_ready_gate_waits_when_the_service_changes_or_is_not_ready():
    for state in (FRESH, converged(probe=LOADING)):
        commands = run_op(ops.vllm_ready, state)
        assert [c.function for c in commands] == [ops.wait_for_vllm]
        assert commands[0].args[1] == {"_sudo": False}


def test_ready_gate_waits_when_the_memory_limit_is_not_in_force():
    commands = run_op(ops.vllm_ready, converged(memory_limit_bytes=None))
    assert [c.function for c in commands] == [ops.wait_for_vllm]


# -- readiness ----------------------------------------------------------------------------------


def test_observe():
    assert observe(PLAN, converged()).ready
    loading = observe(PLAN, converged(probe=LOADING))
    assert not loading.ready and loading.give_up is None
    wrong_model = converged(probe=dataclasses.replace(READY, models=("other",)))
    assert not observe(PLAN, wrong_model).ready
    failed = observe(PLAN, converged(probe=LOADING, unit={"ActiveState": "failed", "Result": "exit-code"}))
    assert failed.give_up == "vllm.service failed (result: exit-code)"
    restarting = converged(probe=LOADING, unit={"ActiveState": "activating", "SubState": "auto-restart"})
    assert observe(PLAN, restarting).give_up is None


def test_the_gate_gives_up_on_a_crash_it_saw_but_lets_a_pending_restart_happen():
    running = converged(probe=LOADING, unit={"ActiveState": "activating", "SubState": "start", "MainPID": "4242"})
    crashed = converged(probe=LOADING, unit={"ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0"})
    watch = CrashWatch()
    # Waiting to restart when the gate begins: the restart may work now.
    assert watch.observe(PLAN, crashed).give_up is None
    assert watch.observe(PLAN, running).give_up is None
    gave_up = watch.observe(PLAN, crashed)
    assert not gave_up.ready and "exited while loading" in gave_up.give_up
    fresh = CrashWatch()
    assert fresh.observe(PLAN, running).give_up is None
    assert fresh.observe(PLAN, converged()).ready


def test_memory_limit_problem_allows_page_rounding_only():
    assert memory_limit_problem(PLAN, converged()) is None
    assert memory_limit_problem(PLAN, converged(memory_limit_bytes=6 * 2**30 - 4095)) is None
    assert "not in force" in memory_limit_problem(PLAN, converged(memory_limit_bytes=6 * 2**30 - 4096))
    assert "memory.limit_in_bytes is no limit" in memory_limit_problem(
        plan(cgroup_version=1), converged(memory_limit_bytes=None))
    assert memory_limit_problem(plan(memory_max_bytes=None), converged(memory_limit_bytes=None)) is None


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_reports_progress_about_every_ten_seconds_and_times_out():
    clock, lines = FakeClock(), []
    result = wait_until_ready(lambda: Observation(False, "loading"), 35, lines.append,
                              clock=clock, sleep=clock.sleep)
    assert not result.ready and result.waited_s == 35
    assert lines == [f"waiting for vLLM: loading ({s}s of 35s)" for s in (10, 20, 30)]


def test_wait_stops_when_ready_or_hopeless():
    clock = FakeClock()
    answers = iter([Observation(False, "loading")] * 3 + [Observation(True, "ready")])
    result = wait_until_ready(lambda: next(answers), 60, print, clock=clock, sleep=clock.sleep)
    assert result.ready and result.waited_s == 6
    result = wait_until_ready(lambda: Observation(False, "failed", give_up="unit failed"), 60, print,
                              clock=clock, sleep=clock.sleep)
    assert not result.ready and result.last.give_up == "unit failed" and result.waited_s == 0


def test_probe_addresses():
    assert probe_address("0.0.0.0") == "127.0.0.1"
    assert probe_address("::") == "::1"
    assert probe_address("10.1.2.3") == "10.1.2.3"


def test_probe_parsing():
    probe = Probe.parse('{"health": 200, "error": "", "models_status": 200, "models": ["a"]}')
    assert probe.serves("a") and not probe.serves("b") and probe.serves("")
    assert Probe.parse("not json") is None
    assert LOADING.describe() == "/health: [Errno 111] Connection refused"


# -- the fact --------------------------------------------------------------------------------


FACT_OUTPUT = """\
target=["vllm", "/opt/vllm/bin/vllm", "0.0.0.0", 8000]
uid=999
unit_sha256=abc
env_sha256=def
env_stat=600 root root
env_dir_stat=700 root root
unit.LoadState=loaded
unit.ActiveState=active
unit.SubState=running
unit.MainPID=1234
unit.NRestarts=2
unit.UnitFileState=enabled
unit.ActiveEnterTimestampMonotonic=98765432
unit.NeedDaemonReload=no
unit.ControlGroup=/system.slice/vllm.service
unit.DropInPaths=
cgroup.memory.max=6442450944
cgroup.memory.peak=123456
cgroup.oom_kill=1
probe={"health": 200, "error": "", "models_status": 200, "models": ["qwen-small"]}
"""


def test_fact_parses_its_output():
    state = VllmServiceFact().process(FACT_OUTPUT.splitlines())
    assert state.target == DEFAULT_TARGET
    assert state.user_uid == 999
    assert state.env_stat == ModeAndOwnership("600", "root", "root")
    assert state.is_active and state.is_enabled and not state.need_daemon_reload
    assert (state.main_pid, state.n_restarts, state.unit["ActiveEnterTimestampMonotonic"]) == (1234, 2, "98765432")
    assert (state.memory_limit_bytes, state.memory_peak_bytes, state.oom_kills) == (6 * 2**30, 123456, 1)
    assert state.probe.serves("qwen-small")


def test_fact_reads_cgroup_v1_limits_and_unlimited():
    v1 = VllmServiceFact().process(["cgroup.memory.limit_in_bytes=1073741824", "cgroup.memory.max_usage_in_bytes=5"])
    assert (v1.memory_limit_bytes, v1.memory_peak_bytes) == (2**30, 5)
    assert VllmServiceFact().process(["cgroup.memory.limit_in_bytes=9223372036854771712"]).memory_limit_bytes is None
    assert VllmServiceFact().process(["cgroup.memory.max=max"]).memory_limit_bytes is None


@pytest.mark.processes
def test_fact_command_runs_anywhere_and_never_reads_the_env_file_content(tmp_path):
    command = VllmServiceFact().command(scope=snapshot_scope())
    assert "hk_env_file=/etc/vllm-hostkit/vllm.env" in command and "cat /etc/vllm-hostkit" not in command
    uses = [line for line in command.splitlines() if '"$hk_env_file"' in line]
    assert uses and all(any(word in line for word in ("sha256sum", "stat -c", "case ")) for line in uses)
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    state = VllmServiceFact().process(result.stdout.splitlines())
    assert state.target == DEFAULT_TARGET and state.unit_sha256 is None


@pytest.mark.processes
def test_fact_command_matches_hashes_and_modes_to_their_files(tmp_path):
    """sha256sum and stat skip a missing file: their lines are matched by path, not by position."""
    stubs = {
        "id": "echo 999",
        "sha256sum": "echo 'abc  /etc/systemd/system/vllm.service'; echo 'no such file' >&2; exit 1",
        "stat": "case $* in *%Z*) echo 1800000100 ;; *) echo '/etc/vllm-hostkit 700 root root'; exit 1 ;; esac",
        "systemctl": "case $* in *--timestamp=unix*) echo @1800000000 ;; *) printf 'ActiveState=active\\n"
                     r"ControlGroup=/hostkit-test-none\nDropInPaths=/a\\x2db.conf\n' ;; esac",
    }
    for name, body in stubs.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    (tmp_path / "timeout").symlink_to(shutil.which("timeout"))  # coreutils' deadline around systemctl
    result = subprocess.run(["/bin/sh", "-c", VllmServiceFact().command(scope=snapshot_scope())], capture_output=True,
                            text=True, timeout=60, env={"PATH": str(tmp_path)})
    assert result.stdout.splitlines()[1:] == [
        "uid=999", "unit_sha256=abc", "env_sha256=", "env_stat=", "env_dir_stat=700 root root",
        "command_ctime=1800000100", "main_start=@1800000000",
        "unit.ActiveState=active", "unit.ControlGroup=/hostkit-test-none", r"unit.DropInPaths=/a\x2db.conf",
    ]
    state = VllmServiceFact().process(result.stdout.splitlines())
    assert (state.unit_sha256, state.env_sha256, state.env_stat) == ("abc", None, None)
    assert state.env_dir_stat == ModeAndOwnership("700", "root", "root") and state.probe is None
    assert (state.command_changed_at, state.main_started_at, state.release_replaced) == (1800000100, 1800000000, True)


def test_fact_decodes_the_installed_unit():
    state = VllmServiceFact().process(["unit_text=IyB1bml0CltTZXJ2aWNlXQo=", "unit.ActiveState=active"])
    assert state.unit_text == "# unit\n[Service]\n"
    assert VllmServiceFact().process(["unit_text=%%%"]).unit_text is None


def test_fact_follows_the_profile():
    class Profile:
        vllm_user, vllm_command, vllm_host, vllm_port = "svc", "/srv/vllm", "::", 9000

    command = VllmServiceFact().command(scope=snapshot_scope(Profile()))
    assert "user=svc" in command and '"/srv/vllm"' in command and "::1 9000" in command


# -- remote checks, run here -----------------------------------------------------------------------


def test_verify_problems_refuse_warnings_about_our_unit_only():
    lines = [f"{VERIFY_PATH}:40: Unknown key name 'Bogus' in section 'Service', ignoring.",
             "/lib/systemd/system/other.service:3: Something else"]
    assert ops.verify_problems(True, lines) == lines[:1]
    assert ops.verify_problems(True, lines[1:]) == []
    assert ops.verify_problems(False, ["vllm.service: Command /x is not executable: No such file"]) != []
    deprecated = f"{VERIFY_PATH}:49: Unit uses MemoryLimit=; please use MemoryMax= instead. Support for ..."
    assert ops.verify_problems(True, [deprecated]) == []


@pytest.fixture
def installed_standin(tmp_path):
    from hostkit_lab.standin.install import standin_files

    command = tmp_path / "opt" / "bin" / "vllm"
    for name, (content, mode) in standin_files("0.33.0", str(command)).items():
        path = tmp_path / "opt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    return command


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="runuser as root")


@pytest.mark.processes
@needs_root
@pytest.mark.parametrize(("extra", "status"), [([], 0), (["--max-num-seqs", "64"], 0), (["--swap-space", "4"], 2),
                                               (["--bogus-flag"], 2), (["--block-size", "banana"], 2)])
def test_parse_check_command_on_the_standin(installed_standin, extra, status):
    p = plan(user="root", argv=[str(installed_standin), "serve", "m", *extra])
    result = subprocess.run(["sh", "-c", ops.parse_check_command(p)], capture_output=True, text=True, timeout=60)
    assert result.returncode == status, result.stderr
    assert ops._exit_status(result.stderr.splitlines()) == status


@pytest.mark.processes
@needs_root
def test_parse_check_command_cannot_check_a_non_python_command(tmp_path):
    script = tmp_path / "vllm"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    p = plan(user="root", argv=[str(script), "serve", "m"])
    result = subprocess.run(["sh", "-c", ops.parse_check_command(p)], capture_output=True, text=True, timeout=60)
    assert ops._exit_status(result.stderr.splitlines()) == 4


@pytest.mark.processes
@needs_root
def test_parse_check_of_a_cli_that_never_dispatches_ends_at_its_deadline(tmp_path):
    """A Python `vllm` that serves at once (as a wrapper might) never reaches argparse."""
    script = tmp_path / "vllm"
    script.write_text("#!/usr/bin/python3\nimport time\ntime.sleep(3600)\n")
    script.chmod(0o755)
    p = plan(user="root", argv=[str(script), "serve", "m"], parse_check_timeout_s=2)
    started = time.monotonic()
    result = subprocess.run(["sh", "-c", ops.parse_check_command(p)], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 10
    assert result.returncode == 124 and ops._exit_status(result.stderr.splitlines()) in ops._TIMED_OUT


def recorded(name: str) -> VllmServiceState:
    text = (Path(__file__).parent / "fixtures" / "vllm" / name).read_text()
    return VllmServiceFact().process(text.splitlines())


def test_recorded_serving_host_cgroup_v2():
    """Recorded on a Debian 12 lab host (systemd 252, cgroup v2) serving the stand-in."""
    state = recorded("fact-debian12-v2-serving.txt")
    assert state.is_active and state.is_enabled and state.main_pid > 0
    assert state.memory_limit_bytes == 1037041664 and state.memory_peak_bytes > 0 and state.oom_kills == 0
    assert state.env_stat == ENV_FILE_STAT and state.env_dir_stat == ENV_DIR_STAT
    assert state.probe.serves("lab-model")


def test_recorded_serving_host_cgroup_v1():
    state = recorded("fact-debian12-v1-serving.txt")
    assert state.is_active and state.memory_limit_bytes == 1037041664 and state.memory_peak_bytes == 17051648
    assert memory_limit_problem(plan(cgroup_version=1, memory_max_bytes=1037041664), state) is None


def test_recorded_host_without_the_unit_needs_install_and_start():
    state = recorded("fact-debian12-v1-no-unit.txt")
    assert (state.unit_sha256, state.env_stat, state.memory_limit_bytes) == (None, None, None)
    assert state.probe.health is None
    found = changes(state)
    assert found.install_unit and found.write_env and found.enable and found.restart and not found.create_user
