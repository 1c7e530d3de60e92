"""The vLLM health watchdogs: hostkit/remote/vllm_watchdog.py run by vllm-hostkit-watchdog.service
for vllm.service, or by vllm-hostkit-watchdog@NAME.service for each of vllm_instances.

The files as the host should have them are hostkit.desired.watchdog's. `vllm_watchdog` installs the script and one unit, checks the
unit with `systemd-analyze verify` first, and (re)starts the service only when a file
changed or it is not running; a converged host yields nothing. With `vllm_watchdog: false`
(or vLLM disabled) it stops the service and removes its unit, and the script unless another
watchdog runs it. `instance_watchdogs_removed` removes the watchdogs of instances no longer planned.

The deploy runs them after the readiness gates, while it still holds the deploy lock: a
watchdog then sees the lock and waits for the deploy to end before it judges vLLM.
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand, operation

from hostkit.desired.digest import text_sha256
from hostkit.desired.vllm_unit import VERIFY_DIR
from hostkit.desired.watchdog import WatchdogPlan
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.watchdog import WatchdogFact
from hostkit.operations.callbacks import current_connector_arguments
from hostkit.operations.vllm_service import _log_lines, _script, verify_problems
from hostkit.paths import (
    SYSTEMD_UNIT_DIR, WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT, watchdog_instance_state_path, watchdog_instance_unit,
)

def verify_path(unit: str) -> str:
    """Where a new unit is checked by systemd-analyze verify before it replaces the old one."""
    return f"{VERIFY_DIR}/{unit}"


WATCHDOG_VERIFY_PATH = verify_path(WATCHDOG_UNIT)


# -- operation ------------------------------------------------------------------------------


def _check_unit(state, host, unit, connector_arguments) -> bool:
    # pyinfra passes state and host only to callbacks whose parameters have these names.
    path = verify_path(unit)
    ok, output = host.run_shell_command(StringCommand(f"systemd-analyze verify {path} 2>&1"), **connector_arguments)
    problems = verify_problems(ok, output.stdout_lines + output.stderr_lines, path, unit)
    if problems:
        host.log_styled(f"{unit}: systemd-analyze verify refused the new unit; the old one stays", fg="red")
        _log_lines(host, problems)
        return False
    return True


@operation()
def vllm_watchdog(plan: WatchdogPlan):
    """
    Install and run one vLLM health watchdog, or remove it when the plan disables it.

    + plan: the watchdog's WatchdogPlan (from watchdog_plan)
    """
    unit = plan.unit
    current = host.get_fact(WatchdogFact, unit=unit)
    if not plan.enabled:
        if current.unit_sha256 or (current.script_sha256 and not plan.keep_script):
            removed = plan.unit_path if plan.keep_script else f"{plan.unit_path} {WATCHDOG_SCRIPT_PATH}"
            yield _script([f"systemctl disable --now {unit} 2>/dev/null || true",
                           f"rm -f {removed}", "systemctl daemon-reload"])
        return
    install_unit = current.unit_sha256 != text_sha256(plan.unit_text)
    install_script = current.script_sha256 != text_sha256(plan.script_text)
    if not (install_unit or install_script or current.unit.get("NeedDaemonReload") == "yes"
            or not current.active or not current.enabled):
        return
    steps = []
    if install_unit:
        yield _script([f"install -d -m 0755 {VERIFY_DIR}"])
        yield FileUploadCommand(StringIO(plan.unit_text), verify_path(unit))
        yield FunctionCommand(_check_unit, (unit, current_connector_arguments(host)), {})
        staged = f"{SYSTEMD_UNIT_DIR}/.{unit}.new"
        steps.append(f"install -m 0644 -o root -g root {verify_path(unit)} {staged}"
                     f" && mv -f {staged} {plan.unit_path}")
    if install_script:
        staged = f"{WATCHDOG_SCRIPT_PATH}.new"
        yield FileUploadCommand(StringIO(plan.script_text), staged)
        steps.append(f"chown root:root {staged} && chmod 0755 {staged} && mv -f {staged} {WATCHDOG_SCRIPT_PATH}")
    steps += ["systemctl daemon-reload", f"systemctl enable {unit}", f"systemctl restart {shlex.quote(unit)}"]
    yield _script(steps)


@operation()
def instance_watchdogs_removed(planned: list[str], scope: SnapshotScope):
    """
    Stop, disable and remove the watchdog units, and their state files, of instances the plan
    does not run (left out of vllm_instances, or a host back to vllm.service). The script stays.

    + planned: the plan's instance names (empty on a host of vllm.service)
    + scope: the host plan's snapshot scope
    """
    unplanned = [name for name in snapshot(host, scope).vllm.instance_watchdogs if name not in planned]
    if not unplanned:
        return
    mark_changed(host, "vllm")
    steps = []
    for name in unplanned:
        unit = watchdog_instance_unit(name)
        host.log_styled(f"{unit}: its instance is not planned: stopped, disabled and removed", fg="yellow")
        steps += [f"systemctl disable --now {unit} 2>/dev/null || true",
                  f"systemctl reset-failed {unit} 2>/dev/null || true",
                  f"rm -f {SYSTEMD_UNIT_DIR}/{unit} {watchdog_instance_state_path(name)}"]
    yield _script([*steps, "systemctl daemon-reload"])
