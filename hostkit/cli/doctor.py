"""`hostkit doctor`: read a vLLM host's memory state and name the risks, each with its fix."""

from __future__ import annotations

from dataclasses import replace

import click

from hostkit.exit_codes import CONTRACT
from hostkit.facts.deadline import NVIDIA_SMI_ENV, NVIDIA_SMI_S
from hostkit.paths import VLLM_UNIT


@click.command(epilog=CONTRACT, help=f"""Find memory risks on vLLM hosts: swap, OOM kills, the unit's limit, GPU
sharing, vLLM flags.

INVENTORY may name `@local` (this host, through pyinfra's local connector). Every command on a
host has a deadline; nvidia-smi's is {NVIDIA_SMI_S} s (environment: {NVIDIA_SMI_ENV}). A host
fails on a critical finding.
""")
@click.argument("inventory", required=False)
@click.option("--local", is_flag=True, help="Diagnose this host (psutil and local probes), not an inventory.")
@click.option("--limit", multiple=True, metavar="HOST", help="Only these inventory hosts or groups (like pyinfra --limit).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--unit", default=VLLM_UNIT, show_default=True, help="The vLLM systemd unit.")
def doctor(inventory: str | None, local: bool, limit: tuple[str, ...], fmt: str, unit: str) -> None:
    from hostkit.doctor.report import exit_code, render_json, render_text

    if local == bool(inventory):
        raise click.UsageError("give either --local or an INVENTORY")
    if local and limit:
        raise click.UsageError("--limit applies to an INVENTORY, not to --local")
    if local:
        import socket

        from hostkit.doctor.gather import GatherError, gather_local
        from hostkit.doctor.rules import diagnose

        try:
            diagnoses, unreachable = [diagnose(gather_local(unit))], []
        except GatherError as error:
            click.echo(f"hostkit doctor: {error}", err=True)
            diagnoses, unreachable = [], [socket.gethostname()]
    else:
        diagnoses, unreachable = _diagnose_inventory(inventory, list(limit), unit)
    click.echo(render_json(diagnoses, unreachable) if fmt == "json" else render_text(diagnoses, unreachable))
    raise SystemExit(exit_code(diagnoses, unreachable))


def _diagnose_inventory(inventory: str, limit: list[str], unit: str):
    from pyinfra.api.exceptions import PyinfraError

    from hostkit.doctor.gather import DEFAULT_METRICS_FILE, GatherError, gather_host
    from hostkit.doctor.rules import Finding, Severity, diagnose
    from hostkit.fleet.connect import connected_hosts
    from hostkit.monitoring import textfile_path
    from hostkit.fleet.inventory import load_inventory
    from hostkit.profile.validation import ProfileError, profile_from_data

    try:
        entries = load_inventory(inventory, limit=limit or None)
    except FileNotFoundError as error:
        raise click.UsageError(str(error)) from None
    if not entries:
        raise click.UsageError(f"no hosts in {inventory}" + (f" matching {', '.join(limit)}" if limit else ""))
    profiles, invalid = {}, {}
    for name, data in entries:
        try:
            profiles[name] = profile_from_data(name, data)
        except ProfileError as error:
            invalid[name] = error
    diagnoses = []
    try:
        with connected_hosts(inventory, limit or None) as hosts:
            for host in hosts:
                profile = profiles.get(host.name)
                metrics = textfile_path(profile.monitoring_textfile_dir) if profile else DEFAULT_METRICS_FILE
                instances, unplanned = planned_instances(host, profile) if profile else ({}, None)
                try:
                    inputs = gather_host(host, unit, profile.vllm_command if profile else None, metrics, instances)
                except GatherError as error:
                    click.echo(f"hostkit doctor: {host.name}: {error}", err=True)
                    continue
                diagnosis = diagnose(inputs, profile)
                if unplanned is not None:
                    diagnosis = replace(diagnosis, findings=(*diagnosis.findings, unplanned))
                if host.name in invalid:
                    diagnosis = replace(diagnosis, findings=(*diagnosis.findings, Finding(
                        "inventory-data-invalid", Severity.WARNING,
                        f"This host's inventory data is invalid, so it was diagnosed without it:\n{invalid[host.name]}",
                        "Fix the data (`hostkit plan` shows every issue).",
                    )))
                diagnoses.append(diagnosis)
    except PyinfraError:
        pass  # pyinfra gives up when no host connects (or one fails mid-way): the rest count as unreachable
    reached = {diagnosis.inputs.host for diagnosis in diagnoses}
    unreachable = [name for name, _ in entries if name not in reached]
    return diagnoses, unreachable


def planned_instances(host, profile):
    """({instance: its GPUs by index}, None) of a host with vllm_instances, planned from the
    snapshot the deploy reads (one more command); ({}, None) without vllm_instances. When the
    plan fails (its GPUs held by another process, say): each instance without its GPUs, and a
    finding that gives the plan's reasons."""
    from hostkit.doctor.rules import Finding, Severity
    from hostkit.facts.snapshot import snapshot
    from hostkit.plan.planner import PlanError, plan_host
    from hostkit.plan.scope import snapshot_scope
    from hostkit.plan.snapshot_facts import planning_facts

    if not profile.vllm_instances:
        return {}, None
    try:
        plan = plan_host(profile, planning_facts(snapshot(host, snapshot_scope(profile))), host_name=host.name)
    except PlanError as error:
        return {name: () for name in profile.vllm_instances}, Finding(
            "instances-unplanned", Severity.WARNING,
            f"This host's vllm_instances cannot be planned, so their GPUs are not shown:\n{error}",
            "Fix what the plan names (`hostkit plan` shows it), then deploy.")
    return {name: tuple(server.gpu_indices) for name, server in plan.instances.items()}, None
