"""When the planned vLLM service counts as ready: it serves the planned model with its memory
limit in force. Pure: no host access; the readiness gate (hostkit.operations.vllm_service)
polls the host with it, `hostkit verify` reports the memory limit.
"""

from __future__ import annotations

from hostkit.facts.vllm_service import VllmServiceState
from hostkit.plan.plans import VllmPlan
from hostkit.vllm.readiness import Observation

PAGE_SIZE = 4096


def memory_limit_problem(plan: VllmPlan, current: VllmServiceState) -> str | None:
    """Why the unit's cgroup does not enforce plan.memory_max_bytes, or None."""
    wanted = plan.memory_max_bytes
    if wanted is None or plan.memory_limit_unapplied:
        # None also in a container whose kernel does not apply the limit: the plan warned, and
        # only the container's host can limit vLLM there.
        return None
    effective = current.memory_limit_bytes
    knob = "memory.limit_in_bytes" if plan.cgroup_version == 1 else "memory.max"
    # The kernel rounds the limit down to whole pages.
    if effective is None or not 0 <= wanted - effective < PAGE_SIZE:
        shown = "no limit" if effective is None else str(effective)
        return f"the unit's cgroup {knob} is {shown}, expected {wanted}: the memory limit is not in force"
    return None


def observe(plan: VllmPlan, current: VllmServiceState) -> Observation:
    """Readiness of the service in `current`, for the readiness gate."""
    status = current.describe()
    if current.probe is not None and current.probe.serves(plan.served_model_name):
        problem = memory_limit_problem(plan, current)
        return Observation(ready=problem is None, status=status, give_up=problem)
    if current.active_state == "failed":
        return Observation(False, status, give_up=f"{current.target.unit} failed (result: {current.unit.get('Result', '?')})")
    if current.active_state == "inactive":
        return Observation(False, status, give_up=f"{current.target.unit} is not running")
    return Observation(False, status)


class CrashWatch:
    """`observe`, and give up once a process seen running exits while the gate waits.

    Restart= would only repeat the crash until the timeout (a large model's timeout is long).
    A unit already waiting to restart when the gate begins gets its restart: the deploy may
    just have fixed what made it fail (a mount, a flag).
    """

    def __init__(self) -> None:
        self.seen_running = False

    def observe(self, plan: VllmPlan, current: VllmServiceState) -> Observation:
        observation = observe(plan, current)
        if observation.ready or observation.give_up:
            return observation
        if current.unit.get("SubState") == "auto-restart":
            if self.seen_running:
                return Observation(False, observation.status,
                                   give_up=f"{current.target.unit} exited while loading and would only be"
                                           " restarted into the same failure")
        elif current.main_pid:
            self.seen_running = True
        return observation
