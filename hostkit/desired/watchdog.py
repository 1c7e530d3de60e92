"""The vLLM health watchdogs as the host should have them: hostkit/remote/vllm_watchdog.py and
the unit that runs it for each vLLM server (vllm.service's vllm-hostkit-watchdog.service, or
vllm-hostkit-watchdog@NAME.service for each of vllm_instances), rendered from the plan's
watchdog settings and the server's plan. Shared by the deploy and `hostkit verify`."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit import templates
from hostkit.desired.deploy_lock import deploy_lock_stale_after_s
from hostkit.desired.directives import fit_unit
from hostkit.desired.vllm_unit import exec_line
from hostkit.paths import (
    SYSTEMD_UNIT_DIR,
    VLLM_UNIT,
    WATCHDOG_SCRIPT_PATH,
    WATCHDOG_STATE_DIRECTORY,
    WATCHDOG_UNIT,
    vllm_unit_of,
    watchdog_state_path_of,
    watchdog_unit_of,
)
from hostkit.plan.plans import HostPlan, VllmPlan, WatchdogSettings
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
    unit: str = WATCHDOG_UNIT
    unit_text: str = ""
    script_text: str = ""
    # Not enabled: whether the script stays, for the host's other watchdogs.
    keep_script: bool = False

    @property
    def unit_path(self) -> str:
        return f"{SYSTEMD_UNIT_DIR}/{self.unit}"


def script_text() -> str:
    return host_program(host_file("vllm_watchdog.py"), "http_request.py")


def completion_timeout_s(settings: WatchdogSettings) -> int:
    return max(COMPLETION_TIMEOUT_MIN_S, 3 * settings.interval_s)


def watchdog_argv(settings: WatchdogSettings, vllm: VllmPlan) -> list[str]:
    address = probe_address(vllm.host)
    url = f"http://[{address}]:{vllm.port}" if ":" in address else f"http://{address}:{vllm.port}"
    interval = settings.interval_s
    # An instance by its name: the script derives its env and state files, whose paths would
    # put vllm-hostkit in the argv (the deploy lock's leftover marker).
    watched = ["--unit", VLLM_UNIT] if vllm.instance is None else ["--instance", vllm.instance]
    return [
        PYTHON, "-I", WATCHDOG_SCRIPT_PATH, *watched, "--url", url, "--model", vllm.served_model_name,
        "--interval", str(interval), "--failures", str(settings.failures),
        "--max-restarts-per-hour", str(settings.max_restarts_per_hour),
        "--completion-every", str(COMPLETION_EVERY),
        "--completion-timeout", str(completion_timeout_s(settings)),
        "--lock-stale-after", str(deploy_lock_stale_after_s(vllm.ready_timeout_s)),
    ]


def watchdog_plan(settings: WatchdogSettings | None, vllm: VllmPlan) -> WatchdogPlan:
    """The watchdog's unit and script as the host should have them for one vLLM server;
    not enabled (or no settings planned): none."""
    unit = watchdog_unit_of(vllm.instance)
    if not (vllm.enabled and settings is not None and settings.enabled):
        return WatchdogPlan(False, unit, keep_script=vllm.instance is not None)
    instance = vllm.instance
    text = templates().get_template("vllm-hostkit-watchdog.service.j2").render(
        instance=instance, vllm_unit=vllm_unit_of(instance),
        script_path=WATCHDOG_SCRIPT_PATH, exec_start=exec_line(watchdog_argv(settings, vllm)),
        state_directory=WATCHDOG_STATE_DIRECTORY,
        state_file=watchdog_state_path_of(instance),
    )
    return WatchdogPlan(True, unit, fit_unit(text, vllm.systemd_version)[0], script_text())


def host_watchdog_plans(plan: HostPlan) -> list[WatchdogPlan]:
    """Every watchdog of the host: vllm.service's; or on a host with instances, each one's, after
    vllm.service's removed (the script kept while an instance's watchdog runs it)."""
    if not plan.instances:
        return [watchdog_plan(plan.watchdog, plan.vllm)]
    instances = [watchdog_plan(server.watchdog, server) for server in plan.instances.values()]
    return [WatchdogPlan(False, keep_script=any(wanted.enabled for wanted in instances)), *instances]
