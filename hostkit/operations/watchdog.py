"""The vLLM health watchdog: hostkit/remote/vllm_watchdog.py run by vllm-hostkit-watchdog.service.

The files as the host should have them are hostkit.desired.watchdog's. `vllm_watchdog` installs the script and the unit, checks the
unit with `systemd-analyze verify` first, and (re)starts the service only when a file
changed or it is not running; a converged host yields nothing. With `vllm_watchdog: false`
(or vLLM disabled) it stops the service and removes both files, if they are there.

The deploy runs it after the readiness gate, while it still holds the deploy lock: the
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
from hostkit.facts.watchdog import WatchdogFact
from hostkit.operations.callbacks import current_connector_arguments
from hostkit.operations.vllm_service import _log_lines, _script, verify_problems
from hostkit.paths import WATCHDOG_SCRIPT_PATH, WATCHDOG_UNIT, WATCHDOG_UNIT_PATH

WATCHDOG_VERIFY_PATH = f"{VERIFY_DIR}/{WATCHDOG_UNIT}"


# -- operation ------------------------------------------------------------------------------


def _check_unit(state, host, connector_arguments) -> bool:
    # pyinfra passes state and host only to callbacks whose parameters have these names.
    ok, output = host.run_shell_command(StringCommand(f"systemd-analyze verify {WATCHDOG_VERIFY_PATH} 2>&1"),
                                        **connector_arguments)
    problems = verify_problems(ok, output.stdout_lines + output.stderr_lines, WATCHDOG_VERIFY_PATH, WATCHDOG_UNIT)
    if problems:
        host.log_styled(f"{WATCHDOG_UNIT}: systemd-analyze verify refused the new unit; the old one stays",
                        fg="red")
        _log_lines(host, problems)
        return False
    return True


@operation()
def vllm_watchdog(plan: WatchdogPlan):
    """
    Install and run the vLLM health watchdog, or remove it when the plan disables it.

    + plan: the host's WatchdogPlan (from watchdog_plan)
    """
    current = host.get_fact(WatchdogFact)
    if not plan.enabled:
        if current.unit_sha256 or current.script_sha256:
            yield _script([f"systemctl disable --now {WATCHDOG_UNIT} 2>/dev/null || true",
                           f"rm -f {WATCHDOG_UNIT_PATH} {WATCHDOG_SCRIPT_PATH}", "systemctl daemon-reload"])
        return
    install_unit = current.unit_sha256 != text_sha256(plan.unit_text)
    install_script = current.script_sha256 != text_sha256(plan.script_text)
    if not (install_unit or install_script or current.unit.get("NeedDaemonReload") == "yes"
            or not current.active or not current.enabled):
        return
    steps = []
    if install_unit:
        yield _script([f"install -d -m 0755 {VERIFY_DIR}"])
        yield FileUploadCommand(StringIO(plan.unit_text), WATCHDOG_VERIFY_PATH)
        yield FunctionCommand(_check_unit, (current_connector_arguments(host),), {})
        staged = f"/etc/systemd/system/.{WATCHDOG_UNIT}.new"
        steps.append(f"install -m 0644 -o root -g root {WATCHDOG_VERIFY_PATH} {staged}"
                     f" && mv -f {staged} {WATCHDOG_UNIT_PATH}")
    if install_script:
        staged = f"{WATCHDOG_SCRIPT_PATH}.new"
        yield FileUploadCommand(StringIO(plan.script_text), staged)
        steps.append(f"chown root:root {staged} && chmod 0755 {staged} && mv -f {staged} {WATCHDOG_SCRIPT_PATH}")
    steps += ["systemctl daemon-reload", f"systemctl enable {WATCHDOG_UNIT}",
              f"systemctl restart {shlex.quote(WATCHDOG_UNIT)}"]
    yield _script(steps)
