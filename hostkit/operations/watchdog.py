"""The vLLM health watchdog: hostkit/remote/vllm_watchdog.py run by vllm-hostkit-watchdog.service.

`watchdog_plan` is pure (profile and vLLM plan in, file contents out) and shared by the
deploy and `hostkit verify`. `vllm_watchdog` installs the script and the unit, checks the
unit with `systemd-analyze verify` first, and (re)starts the service only when a file
changed or it is not running; a converged host yields nothing. With `vllm_watchdog: false`
(or vLLM disabled) it stops the service and removes both files, if they are there.

The deploy runs it after the readiness gate, while it still holds the deploy lock: the
watchdog then sees the lock and waits for the deploy to end before it judges vLLM.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, FileUploadCommand, FunctionCommand, StringCommand, operation

from hostkit.remote import host_file
from hostkit import templates
from hostkit.operations import lock
from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.operations.callbacks import current_connector_arguments
from hostkit.operations.vllm_service import _log_lines, _script, text_sha256, verify_problems
from hostkit.paths import VLLM_UNIT
from hostkit.plan.plans import VllmPlan
from hostkit.vllm.readiness import probe_address
from hostkit.units.directives import fit_unit
from hostkit.units.vllm_unit import VERIFY_DIR, exec_line

WATCHDOG_UNIT = "vllm-hostkit-watchdog.service"
WATCHDOG_UNIT_PATH = f"/etc/systemd/system/{WATCHDOG_UNIT}"
WATCHDOG_VERIFY_PATH = f"{VERIFY_DIR}/{WATCHDOG_UNIT}"
SCRIPT_PATH = "/usr/local/sbin/vllm-watchdog"
STATE_DIRECTORY = "vllm-hostkit"
STATE_PATH = f"/var/lib/{STATE_DIRECTORY}/watchdog.json"
PYTHON = "/usr/bin/python3"
# A completion probe about once a minute at the default interval; its deadline grows with the
# interval (a loaded server queues the probe behind real requests).
COMPLETION_EVERY = 6
COMPLETION_TIMEOUT_MIN_S = 10


@dataclass(frozen=True)
class WatchdogPlan:
    enabled: bool
    unit_text: str = ""
    script_text: str = ""


def script_text() -> str:
    return host_file("vllm_watchdog.py")


def watchdog_argv(profile: Any, vllm: VllmPlan) -> list[str]:
    address = probe_address(vllm.host)
    url = f"http://[{address}]:{vllm.port}" if ":" in address else f"http://{address}:{vllm.port}"
    interval = profile.vllm_watchdog_interval_s
    return [
        PYTHON, "-I", SCRIPT_PATH, "--unit", VLLM_UNIT, "--url", url, "--model", vllm.served_model_name,
        "--interval", str(interval), "--failures", str(profile.vllm_watchdog_failures),
        "--max-restarts-per-hour", str(profile.vllm_watchdog_max_restarts_per_hour),
        "--completion-every", str(COMPLETION_EVERY),
        "--completion-timeout", str(max(COMPLETION_TIMEOUT_MIN_S, 3 * interval)),
        # The deploy lock's own staleness rule (hostkit/operations/lock.py).
        "--lock-stale-after", str(lock.STALE_AFTER_S + vllm.ready_timeout_s),
    ]


def watchdog_plan(profile: Any, vllm: VllmPlan) -> WatchdogPlan:
    if not (vllm.enabled and profile.vllm_watchdog):
        return WatchdogPlan(False)
    unit = templates().get_template("vllm-hostkit-watchdog.service.j2").render(
        vllm_unit=VLLM_UNIT, script_path=SCRIPT_PATH, exec_start=exec_line(watchdog_argv(profile, vllm)),
        state_directory=STATE_DIRECTORY, state_dir=f"/var/lib/{STATE_DIRECTORY}",
    )
    return WatchdogPlan(True, fit_unit(unit, vllm.systemd_version)[0], script_text())


# -- fact -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchdogState:
    unit_sha256: str | None
    script_sha256: str | None
    unit: dict[str, str]

    @property
    def active(self) -> bool:
        return self.unit.get("ActiveState") == "active"

    @property
    def enabled(self) -> bool:
        return self.unit.get("UnitFileState") == "enabled"


_SHOW = ("LoadState", "ActiveState", "SubState", "UnitFileState", "NeedDaemonReload")


def _sha_line(name: str, path: str) -> str:
    return f"echo {name}=$(sha256sum {path} 2>/dev/null | cut -d' ' -f1)"


class WatchdogFact(FactBase):
    """The installed watchdog: file hashes and unit state."""

    def command(self) -> str:
        return "\n".join((SHOW_FUNCTIONS, _sha_line("unit_sha256", WATCHDOG_UNIT_PATH),
                          _sha_line("script_sha256", SCRIPT_PATH), f"hk_show {WATCHDOG_UNIT} {' '.join(_SHOW)}",
                          "true"))

    def process(self, output: list[str]) -> WatchdogState:
        values = parse_show(output)
        return WatchdogState(values.pop("unit_sha256", "") or None, values.pop("script_sha256", "") or None, values)


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
                           f"rm -f {WATCHDOG_UNIT_PATH} {SCRIPT_PATH}", "systemctl daemon-reload"])
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
        staged = f"{SCRIPT_PATH}.new"
        yield FileUploadCommand(StringIO(plan.script_text), staged)
        steps.append(f"chown root:root {staged} && chmod 0755 {staged} && mv -f {staged} {SCRIPT_PATH}")
    steps += ["systemctl daemon-reload", f"systemctl enable {WATCHDOG_UNIT}",
              f"systemctl restart {shlex.quote(WATCHDOG_UNIT)}"]
    yield _script(steps)
