"""`hostkit rollout` without the CLI: read and check the inventory, then roll it out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hostkit.fleet.inventory import load_inventory
from hostkit.profile.validation import validate_inventory
from hostkit.rollout.batches import (
    DEFAULT_MAX_UNAVAILABLE,
    order_hosts,
    parse_batches,
    parse_max_failed,
    parse_max_unavailable,
)
from hostkit.rollout.drain import Drainer
from hostkit.rollout.endpoints import instance_models
from hostkit.rollout.engine import Deployer, Drain, Gate, RolloutSettings, run_rollout
from hostkit.rollout.gate import ServiceGate, VerifyGate
from hostkit.rollout.pyinfra_batch import PyinfraBatchDeployer
from hostkit.rollout.report import RolloutReport, read_report

GATES = ("verify", "ready", "none")


def rollout(
    inventory: str | Path,
    deploy: str | Path,
    *,
    batches: str = "1,25%,100%",
    max_failed: str = "0",
    max_unavailable: str = DEFAULT_MAX_UNAVAILABLE,
    gate: str = "verify",
    order_key: str | None = None,
    dry: bool = False,
    resume: str | Path | None = None,
    report_path: str | Path | None = None,
    gate_timeout: float | None = None,
    progress: Callable[[str], None] = print,
    deployer: Deployer | None = None,
    gate_check: Gate | None = None,
    drainer: Drain | None = None,
) -> RolloutReport:
    """Roll `deploy` out over `inventory`. Raises ValueError (bad options or resume
    report) or hostkit.profile.validation.ProfileError (bad host data) before any host is touched.

    `deployer`, `gate_check` and `drainer` replace pyinfra, the health gate and the drain
    steps (tests, the bench). Hosts with vllm_instances are rolled out per instance
    (hostkit.rollout.endpoints): the deployer is first asked, dry, which of their instances
    would restart.
    """
    if gate not in GATES:
        raise ValueError(f"--gate {gate!r}: expected one of {', '.join(GATES)}")
    settings = RolloutSettings(
        inventory=str(inventory),
        deploy=str(deploy),
        stages=parse_batches(batches),
        max_failed=parse_max_failed(max_failed),
        gate=gate,
        order_key=order_key,
        dry=dry,
        max_unavailable=parse_max_unavailable(max_unavailable),
    )
    hosts = load_inventory(str(inventory))
    profiles = validate_inventory(hosts)
    ordered = order_hosts(hosts, order_key)
    previous = read_report(resume) if resume else None

    if deployer is None:
        secrets = [s.get_secret_value() for p in profiles.values() for s in (p.vllm_api_key, p.vllm_hf_token) if s]
        deployer = PyinfraBatchDeployer(inventory, deploy, secrets=secrets)
    if gate_check is None and gate != "none" and not dry:
        service_gate = ServiceGate(inventory, profiles, dict(hosts), timeout=gate_timeout)
        gate_check = VerifyGate(inventory, service_gate) if gate == "verify" else service_gate
    if drainer is None and any(profile.rollout_drain_command for profile in profiles.values()):
        drainer = Drainer(inventory, profiles, dict(hosts))
    instances = {name: instance_models(profile) for name, profile in profiles.items() if profile.vllm_instances}
    models = {name: profile.served_model_name if profile.vllm_enabled else None for name, profile in profiles.items()
              if name not in instances}
    return run_rollout(
        ordered,
        settings,
        deployer,
        None if gate == "none" or dry else gate_check,
        report_path=report_path,
        progress=progress,
        previous=previous,
        previous_path=str(resume) if resume else None,
        models=models,
        drainer=drainer,
        instances=instances,
    )
