"""The vLLM health watchdog as the host should have it: hostkit/remote/vllm_watchdog.py and the
unit that runs it, rendered from the plan's watchdog settings and its vLLM plan. Shared by the
deploy and `hostkit verify`."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit import templates
from hostkit.desired.deploy_lock import deploy_lock_stale_after_s
from hostkit.desired.directives import fit_unit
from hostkit.desired.vllm_unit import exec_line
from hostkit.paths import VLLM_UNIT, WATCHDOG_SCRIPT_PATH, WATCHDOG_STATE_DIRECTORY
from hostkit.plan.plans import VllmPlan, WatchdogSettings
from hostkit.remote import host_file, host_program
from hostkit.vllm.readiness import probe_address

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
    return host_program(host_file("vllm_watchdog.py"), "http_request.py")


def watchdog_argv(settings: WatchdogSettings, vllm: VllmPlan) -> list[str]:
    address = probe_address(vllm.host)
    url = f"http://[{address}]:{vllm.port}" if ":" in address else f"http://{address}:{vllm.port}"
    interval = settings.interval_s
    return [
        PYTHON, "-I", WATCHDOG_SCRIPT_PATH, "--unit", VLLM_UNIT, "--url", url, "--model", vllm.served_model_name,
        "--interval", str(interval), "--failures", str(settings.failures),
        "--max-restarts-per-hour", str(settings.max_restarts_per_hour),
        "--completion-every", str(COMPLETION_EVERY),
        "--completion-timeout", str(max(COMPLETION_TIMEOUT_MIN_S, 3 * interval)),
        "--lock-stale-after", str(deploy_lock_stale_after_s(vllm.ready_timeout_s)),
    ]


def watchdog_plan(settings: WatchdogSettings, vllm: VllmPlan) -> WatchdogPlan:
    """The watchdog's unit and script as the host should have them; not enabled: none."""
    if not (vllm.enabled and settings.enabled):
        return WatchdogPlan(False)
    unit = templates().get_template("vllm-hostkit-watchdog.service.j2").render(
        vllm_unit=VLLM_UNIT, script_path=WATCHDOG_SCRIPT_PATH, exec_start=exec_line(watchdog_argv(settings, vllm)),
        state_directory=WATCHDOG_STATE_DIRECTORY, state_dir=f"/var/lib/{WATCHDOG_STATE_DIRECTORY}",
    )
    return WatchdogPlan(True, fit_unit(unit, vllm.systemd_version)[0], script_text())
