"""vLLM as a systemd service: user, environment file, unit, checks, (re)start; then a readiness gate.

`vllm_service` runs vllm.service, or one of vllm_instances as vllm@NAME.service with its own
environment file; `vllm_units_removed` removes those the plan no longer runs.

`vllm_service` changes only what differs from the plan. A new unit is rendered to
VERIFY_PATH and must pass `systemd-analyze verify`, and its argv must pass the host's own
vLLM argument parser (hostkit/remote/vllm_parse_check.py), before it replaces the installed
unit: a failed check fails the host and leaves the previous unit installed and running.
daemon-reload runs only when the unit file changed. The service restarts only for a change
of what runs (`service_changes`): a directive that needs a restart, the environment file,
the command file replaced since the process started (a new release), or when it is not
running. A changed comment rewrites the unit without a restart; a changed memory limit is
applied to the running unit's cgroup after the daemon-reload (hostkit/remote/vllm_live_limits.sh:
systemd 257 no longer does it on reload). A rerun yields nothing.

The environment file holds the API key. It is uploaded from memory (FileUploadCommand of
a StringIO, which pyinfra logs as "file uploaded: PATH", never the content) into a
root-only directory, never echoed in a command, and compared by sha256. files.put is not
used: with `--diff` it prints the content of changed files.

`vllm_ready` waits for /health and the served model on /v1/models, logs a progress line
about every 10 s, and fails the host with the unit's last journal lines when vLLM is
not ready in plan.ready_timeout_s or its unit failed. It also checks that the memory
limit is in force in the unit's cgroup (memory.max, or memory.limit_in_bytes on v1).

A failing host fails alone, at execute time, through a FunctionCommand that returns
False (see hostkit/operations/gpu.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api import (
    FileUploadCommand,
    FunctionCommand,
    Host,
    State,
    StringCommand,
    operation,
)
from pyinfra.api.exceptions import OperationValueError

from hostkit.remote import host_file
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.vllm_service import (
    ServiceTarget,
    VllmServiceFact,
    VllmServiceState,
    env_file_of,
    unit_path_of,
)
from hostkit.operations.callbacks import current_connector_arguments
from hostkit.paths import CONFIG_DIR, VLLM_UNIT, vllm_unit_of
from hostkit.plan.plans import VllmPlan
from hostkit.vllm.readiness import Observation, wait_until_ready
from hostkit.desired.changes import service_changes
from hostkit.desired.vllm_readiness import CrashWatch, observe
from hostkit.desired.vllm_unit import (
    HOME_DIR,
    VERIFY_DIR,
    VERIFY_PATH,
    UnitError,
    render_env,
    render_unit,
    unknown_uuids,
    unplanned_units,
    verify_path,
)

JOURNAL_LINES = 30

_PARSE_CHECK_EXIT = {2: "the host's vLLM argument parser rejected", 3: "the host's vLLM rejected (its own checks)"}
_CANNOT_CHECK = 4
# The parse check stops after plan.parse_check_timeout_s (vllm_parse_check_timeout): a CLI
# that never reaches argparse's dispatch (a wrapper that serves at once) then fails in
# seconds instead of holding the deploy lock for ever. GNU timeout exits 124, or 137
# after the KILL.
_PARSE_CHECK_KILL_AFTER_S = 5
_TIMED_OUT = (124, 137)


# -- remote commands ------------------------------------------------------------------------


def useradd_command(user: str, if_missing: bool = False) -> str:
    guard = f"id -u {shlex.quote(user)} >/dev/null 2>&1 || " if if_missing else ""
    return guard + (
        f"useradd --system --user-group --home-dir {HOME_DIR} --no-create-home"
        f" --shell /usr/sbin/nologin {shlex.quote(user)}"
    )


def verify_command(instance: str | None = None) -> str:
    return f"systemd-analyze verify {verify_path(instance)} 2>&1"


# systemd 252 warns about MemoryLimit=, the cgroup v1 directive this unit uses on purpose
# (older v1 systemd knows no MemoryMax=); the gate checks memory.limit_in_bytes after start.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_TOLERATED_WARNINGS = ("Unit uses MemoryLimit=; please use MemoryMax= instead.",)


def verify_problems(ok: bool, output_lines: list[str], path: str = VERIFY_PATH, unit: str = VLLM_UNIT) -> list[str]:
    """Failures of `systemd-analyze verify` for our unit. Its warnings (unknown keys, bad
    values "ignoring") exit 0 but mean a directive would silently not apply: refuse them."""
    # systemd 247 colours its messages when TERM names a terminal, even into a pipe.
    output_lines = [_ANSI_ESCAPE.sub("", line) for line in output_lines]
    ours = [
        line for line in output_lines
        if line.startswith((path, f"{unit}:"))
        and not any(warning in line for warning in _TOLERATED_WARNINGS)
    ]
    if not ok:
        return ours or output_lines or ["systemd-analyze verify failed without output"]
    return ours


def parse_check_command(plan: VllmPlan) -> str:
    """Run the host's vLLM argument parser on plan.argv as the service user (parse only),
    stopped after plan.parse_check_timeout_s."""
    script = host_file("vllm_parse_check.py")
    command, *args = plan.argv
    quoted_args = " ".join(shlex.quote(arg) for arg in args)
    return "\n".join((
        f"c={shlex.quote(command)}",
        "(",
        'line=$(head -n1 "$c")',
        'case "$line" in',
        "  '#!'*python*) ;;",
        f'  *) echo "$c is not a Python entry point: cannot run its parser" >&2; exit {_CANNOT_CHECK};;',
        "esac",
        # ${line#??} drops "#!"; unquoted so that "#!/usr/bin/env python3" splits into words.
        f"cd / && exec runuser -u {shlex.quote(plan.user)} -- timeout -k {_PARSE_CHECK_KILL_AFTER_S}"
        f" {plan.parse_check_timeout_s} ${{line#??}} -c {shlex.quote(script)} \"$c\" {quoted_args}",
        ")",
        # pyinfra reports only success or failure: say which failure.
        'rc=$?; echo "hostkit-exit=$rc" >&2; exit $rc',
    ))


def _log_lines(op_host: Host, lines: list[str]) -> None:
    for line in lines:
        op_host.log_styled(f"  {line}", fg="red", log_func=logger.error)


def check_unit_file(state: State, host: Host, plan: VllmPlan, connector_arguments: dict[str, Any]) -> bool:
    unit = service_target(plan).unit
    ok, output = host.run_shell_command(StringCommand(verify_command(plan.instance)), **connector_arguments)
    problems = verify_problems(ok, output.stdout_lines + output.stderr_lines, verify_path(plan.instance), unit)
    if problems:
        host.log_styled(f"{unit}: systemd-analyze verify refused the new unit; the old one stays", fg="red",
                        log_func=logger.error)
        _log_lines(host, problems)
        return False
    return True


def check_flags(state: State, host: Host, plan: VllmPlan, connector_arguments: dict[str, Any]) -> bool:
    unit = service_target(plan).unit
    command = StringCommand(parse_check_command(plan))
    # The remote timeout ends the check; this one only guards against a connection that hangs.
    waited_s = plan.parse_check_timeout_s + _PARSE_CHECK_KILL_AFTER_S + 30
    try:
        ok, output = host.run_shell_command(command, **{**connector_arguments, "_timeout": waited_s})
    except TimeoutError:
        host.log_styled(f"{unit}: the parse check of {plan.argv[0]} gave no answer within {waited_s}s;"
                        " the old unit stays", fg="red", log_func=logger.error)
        return False
    if ok:
        return True
    exit_status = _exit_status(output.stderr_lines)
    if exit_status in _TIMED_OUT:
        host.log_styled(
            f"{unit}: the parse check of {plan.argv[0]} did not end within {plan.parse_check_timeout_s}s"
            " (vllm_parse_check_timeout): importing vLLM took longer than that on this host, or its CLI never"
            " reached argparse's dispatch (a wrapper that serves or waits at once?), so the new command line"
            " cannot be checked; the old unit stays. vllm_command must be vLLM's own console script.",
            fg="red", log_func=logger.error)
        _log_lines(host, output.stderr_lines[-20:])
        return False
    if exit_status == _CANNOT_CHECK:
        host.log_styled(f"{unit}: flags not checked on the host: {output.stderr.strip()}", fg="yellow",
                        log_func=logger.warning)
        return True
    reason = _PARSE_CHECK_EXIT.get(exit_status, f"the host's vLLM (exit status {exit_status}) refused")
    host.log_styled(f"{unit}: {reason} the new command line (the inventory says vLLM {plan.version});"
                    " the old unit stays", fg="red", log_func=logger.error)
    _log_lines(host, output.stderr_lines[-20:])
    return False


def _exit_status(stderr_lines: list[str]) -> int | None:
    """The parse check's exit status, which it prints last (pyinfra reports only success)."""
    for line in reversed(stderr_lines):
        if line.startswith("hostkit-exit="):
            return int(line.split("=", 1)[1])
    return None


def show_journal(op_host: Host, connector_arguments: dict[str, Any], unit: str = VLLM_UNIT) -> None:
    command = StringCommand(f"journalctl -u {unit} -n {JOURNAL_LINES} --no-pager")
    _, output = op_host.run_shell_command(command, **connector_arguments)
    op_host.log_styled(f"last {JOURNAL_LINES} journal lines of {unit}:", fg="red", log_func=logger.error)
    _log_lines(op_host, output.stdout_lines + output.stderr_lines)


def wait_for_vllm(state: State, host: Host, plan: VllmPlan, connector_arguments: dict[str, Any],
                  on_not_ready: Callable[[State, Host, VllmPlan, dict[str, Any]], None] | None = None) -> bool:
    fact = VllmServiceFact()
    target = service_target(plan)
    command = StringCommand(fact.command(target=target))
    watch = CrashWatch()

    def look() -> Observation:
        _, output = host.run_shell_command(command, **connector_arguments)
        return watch.observe(plan, fact.process(output.stdout_lines))

    result = wait_until_ready(look, plan.ready_timeout_s, lambda line: host.log(line))
    # vllm.service's words as before instances: "vLLM".
    named = "vLLM" if plan.instance is None else target.unit
    if result.ready:
        host.log_styled(f"{named} ready after {result.waited_s:.0f}s: {result.last.status}", fg="green")
        return True
    why = result.last.give_up or f"not ready after {plan.ready_timeout_s}s"
    host.log_styled(f"{named}: {why} ({result.last.status})", fg="red", log_func=logger.error)
    show_journal(host, connector_arguments, target.unit)
    if on_not_ready is not None:
        on_not_ready(state, host, plan, connector_arguments)
    return False


# -- operations -------------------------------------------------------------------------------


def service_target(plan: VllmPlan) -> ServiceTarget:
    """What the service fact identifies the planned service by."""
    return ServiceTarget(plan.user, plan.argv[0], plan.host, plan.port, plan.instance)


def _rendered(plan: VllmPlan) -> tuple[str, str]:
    try:
        return render_unit(plan), render_env(plan)
    except UnitError as error:
        raise OperationValueError(f"vLLM unit: {error}") from None


def _current(plan: VllmPlan, scope: SnapshotScope) -> VllmServiceState:
    """The snapshot's vllm section, or a fresh look when it was taken for another target."""
    target = service_target(plan)
    current = snapshot(host, scope).vllm
    if current.target != target:
        current = host.get_fact(VllmServiceFact, target=target)
    return current


@operation()
def vllm_service(plan: VllmPlan, scope: SnapshotScope):
    """
    Install and run vLLM as vllm.service, or as an instance's vllm@NAME.service, changing only
    what differs from the plan.

    + plan: the host's VllmPlan, or an instance's (nothing happens when plan.enabled is false)
    + scope: the host plan's snapshot scope
    """
    if not plan.enabled:
        return
    unit_text, env_text = _rendered(plan)
    current = _current(plan, scope)
    changes = service_changes(current, unit_text, env_text)
    if not changes:
        return
    target = current.target
    unit = target.unit
    for path in current.drop_in_paths:
        host.log_styled(f"{unit}: drop-in {path} also changes the unit", fg="yellow", log_func=logger.warning)
    if changes.install_unit and (why := unknown_uuids(plan)):
        host.log_styled(why, fg="yellow", log_func=logger.warning)
    mark_changed(host, "vllm")
    if changes.restart and current.is_active:
        host.log_styled(f"{unit}: restarts for {', '.join(changes.restart_reasons)}", fg="yellow")
    elif changes.live_limits:
        host.log_styled(f"{unit}: {' '.join(changes.live_limits)} applied to the running unit, no restart",
                        fg="cyan")
    connector_arguments = current_connector_arguments(host)

    # Each remote command is a round trip: the steps on either side of the checks run as one
    # script each (set -e: the first failing step fails the operation).
    # Every instance's operation sees a missing user at prepare; the first one creates it.
    preparing = [useradd_command(plan.user, plan.instance is not None)] if changes.create_user else []
    if changes.fix_env_dir:
        preparing.append(f"install -d -m 0700 -o root -g root {CONFIG_DIR}")
    if changes.install_unit:
        preparing.append(f"install -d -m 0755 {VERIFY_DIR}")
    if preparing:
        yield _script(preparing)
    if changes.install_unit:
        # Checks first: a refused unit leaves the installed one untouched and running.
        yield FileUploadCommand(StringIO(unit_text), verify_path(plan.instance))
        yield FunctionCommand(check_unit_file, (plan, connector_arguments), {})
        yield FunctionCommand(check_flags, (plan, connector_arguments), {})
    installing = []
    env_file = target.env_file
    if changes.write_env:
        # The directory is root-only, so the file is private from the moment it exists.
        staged = _staged(env_file)
        yield FileUploadCommand(StringIO(env_text), staged)
        installing.append(f"chown root:root {staged} && chmod 0600 {staged} && mv -f {staged} {env_file}")
    if changes.fix_env_file:
        installing.append(f"chown root:root {env_file} && chmod 0600 {env_file}")
    if changes.install_unit:
        staged = _staged(target.unit_path)
        installing.append(f"install -m 0644 -o root -g root {verify_path(plan.instance)} {staged}"
                          f" && mv -f {staged} {target.unit_path}")
    if changes.daemon_reload:
        installing.append("systemctl daemon-reload")
    if changes.live_limits and not changes.restart:
        installing.append(f"(\nhk_unit={unit}\n{host_file('vllm_live_limits.sh')})")
    if changes.enable:
        installing.append(f"systemctl enable {unit}")
    if changes.restart:
        # reset-failed first: systemd counts the deploy's restarts with the crashes, and a failed
        # unit, a crash loop or a fifth deploy restart within StartLimitIntervalSec would be
        # refused "start of the service was attempted too often" (seen in the lab). The deploy
        # is the operator asking.
        installing.append(f"systemctl reset-failed {unit}")
        installing.append(f"systemctl restart {unit}")
    if installing:
        yield _script(installing)


def _staged(path: str) -> str:
    """Where a file is written before it replaces `path` (one mv: never half there)."""
    directory, name = path.rsplit("/", 1)
    return f"{directory}/.{name}.new"


@operation()
def vllm_units_removed(planned: list[str] | None, scope: SnapshotScope):
    """
    Stop, disable and remove the vLLM units the plan does not run, each with its environment
    file (hostkit.desired.vllm_unit.unplanned_units): instances left out of vllm_instances, and
    the other form (vllm.service beside instances, instances beside vllm.service). One
    daemon-reload for all; no other unit restarts.

    + planned: the plan's instance names; None when vllm.service is the host's server
    + scope: the host plan's snapshot scope
    """
    unplanned = unplanned_units(planned, snapshot(host, scope).vllm)
    if not unplanned:
        return
    mark_changed(host, "vllm")
    steps = []
    for instance in unplanned:
        unit = vllm_unit_of(instance)
        host.log_styled(f"{unit}: not planned: stopped, disabled and removed", fg="yellow")
        # A unit whose file is gone already (removed by hand) has nothing to stop.
        steps.append(f"systemctl disable --now {unit} 2>/dev/null || true")
        steps.append(f"systemctl reset-failed {unit} 2>/dev/null || true")
        steps.append(f"rm -f {unit_path_of(instance)} {env_file_of(instance)}")
    yield _script([*steps, "systemctl daemon-reload"])


def _script(steps: list[str]) -> str:
    return "\n".join(("set -e", *steps))


@operation()
def vllm_ready(plan: VllmPlan, scope: SnapshotScope, on_not_ready: Callable | None = None):
    """
    Wait until vLLM answers /health and lists the served model on /v1/models.

    Yields nothing when the service is already up to date, ready and memory-limited.

    + plan: the host's VllmPlan (nothing happens when plan.enabled is false)
    + scope: the host plan's snapshot scope
    + on_not_ready: called (state, host, plan, connector arguments) after the journal lines
      when vLLM does not become ready (hostkit.operations.vllm_install.roll_back); the host fails anyway
    """
    if not plan.enabled:
        return
    unit_text, env_text = _rendered(plan)
    current = _current(plan, scope)
    if not service_changes(current, unit_text, env_text) and observe(plan, current).ready:
        return
    yield FunctionCommand(wait_for_vllm, (plan, current_connector_arguments(host), on_not_ready), {})
