"""Verify the NVIDIA driver and GPUs against the host's policy. Changes nothing.

A failing host must fail alone, at execute time. Raising inside the operation's generator
does not do that in pyinfra 3.10: `_run_host_op` does not catch it, the host's greenlet
re-raises it in `_run_single_op`, and the whole run stops. A `FunctionCommand` that
returns False is an ordinary per-host command failure: pyinfra marks this host failed and
goes on with the others. A passing host yields nothing, so every run reports no change.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, Host, State, operation

from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import SECTION_NAMES, snapshot
from hostkit.plan.gpu_policy import GpuVerdict, evaluate
from hostkit.operations import callbacks
from hostkit.plan.plans import GpuPlan


def gpu_checks_failed(state: State, host: Host, verdict: GpuVerdict) -> bool:
    """Log every failed check with expected and actual values; False fails this host only."""
    host.log_styled(verdict.summary, fg="red", log_func=logger.error)
    for failure in verdict.failures:
        host.log_styled(f"  {failure}", fg="red", log_func=logger.error)
    for warning in verdict.warnings:
        host.log_styled(f"  {warning}", fg="yellow", log_func=logger.warning)
    return False


@operation()
def verify_gpu(plan: GpuPlan, scope: SnapshotScope):
    """
    Check the NVIDIA driver and every GPU against the plan's GPU policy (the `gpu_*` keys).

    + plan: the host plan's GPU part
    + scope: the host plan's snapshot scope
    """
    verdict = evaluate(plan.policy, snapshot(host, scope).gpu)
    if not verdict.ok:
        yield FunctionCommand(gpu_checks_failed, (verdict,), {})
        return
    if host.state.is_executing:
        host.log_styled(f"GPU: {verdict.summary}", fg="green")
        for warning in verdict.warnings:
            host.log_styled(f"GPU: {warning}", fg="yellow", log_func=logger.warning)


@operation()
def refuse_host(reasons: list[str]):
    """
    Fail this host alone, at execute time, for what its present state makes impossible.

    + reasons: one line each, naming what stands in the way (pids, processes, memory)
    """
    yield FunctionCommand(callbacks.fail_host, (reasons,), {})


@operation()
def snapshot_finished(scope: SnapshotScope):
    """
    Fail this host when a remote command of its snapshot ran past its deadline.

    + scope: where the snapshot looks (hostkit.plan.scope); the host may have no plan yet
    """
    taken = snapshot(host, scope)
    timeouts = [
        f"{name}: {line}" for name in sorted(SECTION_NAMES) for line in getattr(taken.section(name), "timeouts", ())
    ]
    if timeouts:
        yield FunctionCommand(callbacks.fail_host, (timeouts,), {})
