"""The vLLM host deploy: GPU check, NVMe and swap, kernel tuning, the vLLM service.

Importable by other pyinfra projects (`from hostkit.deploy import vllm_host`), as pyinfra's
own deploy packages are. Bad inventory data and plans that cannot work are refused while
pyinfra prepares, so no host is touched when any host's data is wrong.

The host runs vllm.service, or each of vllm_instances as vllm@NAME.service with a watchdog of
its own; the host-level steps (GPU check, NVMe and swap, kernel tuning, monitoring) run once
either way, the collector reading every server.
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from hostkit.desired.deploy_lock import deploy_lock_stale_after_s
from hostkit.desired.swap import swap_deadline_s
from hostkit.desired.monitoring import monitored_servers
from hostkit.desired.watchdog import host_watchdog_plans
from hostkit.facts.snapshot import snapshot
from hostkit.plan.scope import snapshot_scope
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.operations import (
    driver_hold, gpu, kernel, lock, monitoring, nvme_boot, swap, vllm_install, vllm_service, watchdog,
)
from hostkit.plan.planner import PlanError, plan_host
from hostkit.paths import NVME_UNIT, WATCHDOG_UNIT, vllm_instance_unit
from hostkit.plan.plans import HostPlan
from hostkit.profile.host_profile import HostProfile
from hostkit.profile.validation import ProfileError, validate_inventory

_PROFILES_ATTR = "_hostkit_profiles"


def inventory_profiles() -> dict[str, HostProfile]:
    """Every host's profile, validated once per run for the whole inventory."""
    profiles = getattr(state, _PROFILES_ATTR, None)
    if profiles is None:
        try:
            profiles = validate_inventory((inv_host.name, inv_host.data.dict()) for inv_host in state.inventory)
        except ProfileError as error:
            raise PyinfraError(f"invalid inventory data, nothing was changed on any host:\n{error}") from None
        setattr(state, _PROFILES_ATTR, profiles)
    return profiles


def plan_or_refusal() -> tuple[HostProfile, HostPlan | None, PlanError | None]:
    """The host's plan; or None and the error when only the host's present state stands in
    the way (its GPUs held by another process), which fails this host alone at execute."""
    profile = inventory_profiles()[host.name]
    try:
        plan = plan_host(profile, planning_facts(snapshot(host, snapshot_scope(profile))), host_name=host.name)
    except PlanError as error:
        if error.host_state_only:
            return profile, None, error
        raise PyinfraError(f"cannot plan this host, nothing was changed on any host:\n{error}") from None
    refusal = instances_refusal(plan)
    if refusal:
        raise PyinfraError(f"cannot deploy this host, nothing was changed on any host:\n{refusal}")
    for warning in plan.warnings:
        logger.warning(f"[{host.name}] {warning}")
    return profile, plan, None


def current_plan() -> HostPlan:
    """The host's plan; any PlanError stops the run at prepare."""
    _, plan, refused = plan_or_refusal()
    if refused is not None:
        raise PyinfraError(f"cannot plan this host, nothing was changed on any host:\n{refused}")
    return plan


def instances_refusal(plan: HostPlan) -> str | None:
    """Why the deploy cannot run the plan's instances yet, or None: vllm_install's rollback
    restores vllm.service alone, so instances run releases that hostkit does not install."""
    if any(server.enabled and server.runtime is not None and server.runtime.install
           for server in plan.instances.values()):
        return "vllm_install with vllm_instances: not deployed by this version (its rollback restores vllm.service alone)"
    return None


def lock_stale_after_s(plan: HostPlan) -> int:
    """The deploy lock outlasts every readiness gate, which run one after the other."""
    servers = plan.instances.values() or [plan.vllm]
    return deploy_lock_stale_after_s(sum(server.ready_timeout_s for server in servers))


@deploy("vLLM host")
def vllm_host() -> None:
    profile, plan, refused = plan_or_refusal()
    # Read-only checks first: a host that fails one is left exactly as it was.
    # The scope the snapshot was read with: a refused host has no plan to carry it.
    gpu.snapshot_finished(name="Check the host's facts were read in time", scope=snapshot_scope(profile))
    if plan is None:
        gpu.refuse_host(name="Check the GPUs are free for vLLM", reasons=[issue.reason for issue in refused.issues])
        return
    lock.acquire_deploy_lock(name="Take the deploy lock", stale_after_s=lock_stale_after_s(plan))
    # The GPU check comes first: nothing is (re)started on a host whose driver is broken.
    gpu.verify_gpu(name="Check the GPU driver", plan=plan.gpu, scope=plan.scope)
    driver_hold.hold_driver_packages(name="Hold the NVIDIA driver packages", plan=plan.gpu, scope=plan.scope)
    # A container's host owns its NVMe, swap, sysctl and THP (plans.HOST_SETTINGS): from inside,
    # swapon and /proc/sys writes are refused, and a swap file left there is its host's to keep.
    if not plan.left_to_host:
        if plan.nvme is not None:
            swap.prepare_nvme(name=f"Prepare NVMe {plan.nvme.device} at {plan.nvme.mount}", plan=plan.nvme,
                              scope=plan.scope, _timeout=swap.NVME_PREPARE_DEADLINE_S)
        swap.swap_file(name="Swap file on NVMe", plan=plan.swap, scope=plan.scope,
                       _timeout=swap_deadline_s(plan.swap))
        # After both: it takes over a mounted disk and an active file (make-before-break).
        nvme_boot.nvme_boot(name=f"NVMe and swap at boot ({NVME_UNIT})", nvme=plan.nvme, swap=plan.swap,
                            scope=plan.scope, _timeout=nvme_boot.INSTALL_DEADLINE_S)
        kernel.sysctl_settings(name="Kernel memory sysctls", plan=plan.kernel, scope=plan.scope)
        kernel.transparent_hugepages(name="Transparent hugepages", plan=plan.kernel, scope=plan.scope)
    # Before the vLLM units: a host whose vLLM fails to start is the one to watch.
    monitoring.monitoring(name="Memory monitoring", plan=plan.monitoring, servers=monitored_servers(plan), scope=plan.scope)
    vllm_servers(plan)
    # After the gates: a watchdog judges a vLLM that has served.
    vllm_watchdogs(plan)
    lock.release_deploy_lock(name="Release the deploy lock")


def vllm_watchdogs(plan: HostPlan) -> None:
    """Each server's watchdog; also run when vLLM is disabled, to remove a watchdog installed
    before. Watchdogs of instances not planned go first, as their instances did."""
    if plan.instances or leftover_watchdogs(plan):
        watchdog.instance_watchdogs_removed(name="Remove the watchdogs of instances not planned",
                                            planned=list(plan.instances), scope=plan.scope)
    for wanted in host_watchdog_plans(plan):
        name = "vLLM health watchdog" if wanted.unit == WATCHDOG_UNIT else f"vLLM health watchdog {wanted.unit}"
        watchdog.vllm_watchdog(name=name, plan=wanted)


def vllm_servers(plan: HostPlan) -> None:
    """vllm.service, or the plan's instances, each with its readiness gate."""
    if plan.instances:
        vllm_instances(plan)
        return
    if leftover_instances(plan):
        vllm_service.vllm_units_removed(name="Remove the vLLM instances not planned", planned=None, scope=plan.scope)
    if plan.vllm.enabled:
        # Before the unit: the release that runs must be the one the flags are rendered for.
        vllm_install.vllm_runtime(name="vLLM runtime", plan=plan.vllm, scope=plan.scope)
        vllm_service.vllm_service(name="vLLM systemd unit", plan=plan.vllm, scope=plan.scope)
        # With vllm_install, an upgrade switched in by this run that does not serve goes back.
        vllm_service.vllm_ready(name="vLLM readiness gate", plan=plan.vllm, scope=plan.scope,
                                on_not_ready=vllm_install.roll_back if plan.vllm.runtime.install else None)


def leftover_instances(plan: HostPlan) -> bool:
    """Whether a host going back to vllm.service has instance files left: only then does the
    removal step run, so that a host that never had instances deploys as before them."""
    current = snapshot(host, plan.scope).vllm
    return bool(current.instance_units or current.instance_env_files)


def leftover_watchdogs(plan: HostPlan) -> bool:
    """Whether a host of vllm.service has instances' watchdogs left: only then does their
    removal step run, as with leftover_instances."""
    return bool(snapshot(host, plan.scope).vllm.instance_watchdogs)


def vllm_instances(plan: HostPlan) -> None:
    """Each instance's unit and gate, one instance after the other: the next one (re)starts
    only once the last serves, so a host never has more than one instance down for the deploy,
    and instances sharing a GPU never load at once. Unplanned units go first, as their ports may
    be the new units'."""
    vllm_service.vllm_units_removed(name="Remove the vLLM units not planned", planned=list(plan.instances),
                                    scope=plan.scope)
    # Every instance's release checked against its own vllm_version before any unit restarts.
    for name, server in plan.instances.items():
        vllm_install.vllm_runtime(name=f"vLLM runtime of {vllm_instance_unit(name)}", plan=server, scope=plan.scope)
    for name, server in plan.instances.items():
        unit = vllm_instance_unit(name)
        vllm_service.vllm_service(name=f"vLLM unit {unit}", plan=server, scope=plan.scope)
        vllm_service.vllm_ready(name=f"vLLM readiness gate of {unit}", plan=server, scope=plan.scope)
