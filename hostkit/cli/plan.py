"""`hostkit plan`: what hostkit would do to each host, without changing anything.

Exit status (hostkit.exit_codes): 0 when every host has a plan, 1 when a host's plan
cannot work (vLLM would refuse to start, the swap file does not fit) or the deploy would
refuse the host (a driver below the CUDA build's floor), 2 for bad input (inventory data,
facts file) or a host without facts (unreachable).
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import click
from pydantic import ValidationError

from hostkit.exit_codes import CONTRACT, EXIT_OK, exit_status
from hostkit.plan.planner import PlanError, masked_env, plan_host
from hostkit.plan.planning_facts import PlanningFacts
from hostkit.paths import SYSCTL_FILE, THP_UNIT, VLLM_ENV_FILE, VLLM_UNIT, vllm_unit_of, watchdog_unit_of
from hostkit.plan.plans import (
    INSTANCE_FIELDS, HostPlan, VllmPlan, VllmRuntimePlan, VllmSizing, WatchdogSettings, left_to_host,
    nvme_lifecycle,
)
from hostkit.fleet.inventory import load_inventory
from hostkit.profile.host_profile import HostProfile
from hostkit.profile.validation import ProfileError, validate_inventory
from hostkit.sizes import format_size
from hostkit.desired.vllm_unit import service_environment, unit_notes
from hostkit.desired.watchdog import COMPLETION_EVERY, completion_timeout_s


class InputError(click.ClickException):
    exit_code = 2


# How the planner words a warning about what the deploy will refuse (hostkit.plan.planner).
DEPLOY_REFUSES = "the deploy will refuse this host: "


def load_facts_file(path: str) -> dict[str, PlanningFacts]:
    """{host name: PlanningFacts} from a JSON file, as `--facts` takes it."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read facts file {path}: {error}") from None
    if not isinstance(raw, dict):
        raise InputError(f"facts file {path}: expected a JSON object {{host name: facts}}")
    facts, problems = {}, []
    for name, data in raw.items():
        try:
            facts[name] = PlanningFacts.model_validate(data)
        except ValidationError as error:
            for detail in error.errors():
                where = ".".join(str(part) for part in detail["loc"])
                problems.append(f"facts file {path}: host {name}: {where}: {detail['msg']}")
    if problems:
        raise InputError("\n".join(problems))
    return facts


def _gather(inventory: str, limit: tuple[str, ...]) -> dict[str, PlanningFacts]:
    from hostkit.fleet.planning import gather_planning_facts

    return gather_planning_facts(inventory, list(limit) or None)


def plan_all(profiles: dict[str, HostProfile], facts: dict[str, PlanningFacts]) -> tuple[dict[str, HostPlan], list[str]]:
    """Plans by host, and the problems of hosts that cannot be planned."""
    plans: dict[str, HostPlan] = {}
    problems: list[str] = []
    for name, profile in profiles.items():
        if name not in facts:
            problems.append(f"host {name}: no facts (unreachable, or missing from the facts file)")
            continue
        try:
            plans[name] = _with_unit_notes(plan_host(profile, facts[name], host_name=name))
        except PlanError as error:
            problems.extend(str(issue) for issue in error.issues)
    return plans, problems


def plan_as_json(plan: HostPlan) -> dict[str, Any]:
    # Keys only a container's plan sets are left out elsewhere: a VM's JSON reads as it always did.
    absent: dict[str, Any] = {}
    if plan.container is None:
        absent["container"] = True
    if not plan.instances:
        absent["instances"] = True
    if plan.vllm is not None:
        absent["vllm"] = set(INSTANCE_FIELDS) | ({"memory_limit_unapplied"} if plan.vllm.memory_limit_unapplied is None else set())
    data = plan.model_dump(mode="json", exclude=absent)
    if plan.container is not None:
        data["left_to_host"] = list(plan.left_to_host)
    if plan.vllm is not None:
        data["vllm"]["env"] = masked_env(service_environment(plan.vllm))
    for name, instance in plan.instances.items():
        data["instances"][name]["env"] = masked_env(service_environment(instance))
    return data


def plan_as_text(plan: HostPlan) -> str:
    lines = [f"== {plan.host}"]
    if plan.container is not None:
        lines.extend(f"{setting:<10}{left_to_host(plan.container)}" for setting in plan.left_to_host)
    else:
        lines.extend(_host_setting_lines(plan))
    vllm = plan.vllm
    if vllm is None:
        lines.extend(line for instance in plan.instances.values() for line in instance_lines(instance))
    elif not vllm.enabled:
        lines.append("vllm      disabled")
    else:
        limits = [
            f"{name}={'-' if value is None else format_size(value)}"
            for name, value in (
                ("MemoryMax", vllm.memory_max_bytes),
                ("MemoryHigh", vllm.memory_high_bytes),
                ("MemorySwapMax", vllm.memory_swap_max_bytes),
            )
        ]
        lines.append(f"unit      {VLLM_UNIT}  User={vllm.user}  {'  '.join(limits)}  (cgroup v{vllm.cgroup_version})")
        lines.append(f"command   {shlex.join(vllm.argv)}")
        lines.extend(runtime_lines(vllm.runtime))
        env = masked_env(service_environment(vllm))
        for variable, secret in (("VLLM_API_KEY", vllm.api_key), ("HF_TOKEN", vllm.hf_token)):
            if secret is not None:
                env[variable] = "********"
        lines.append(f"env       {'  '.join(f'{k}={v}' for k, v in sorted(env.items()))}  ({VLLM_ENV_FILE})")
        if vllm.sizing is not None:
            lines.extend(_sizing_lines(vllm.sizing))
    lines.extend(f"WARNING   {warning}" for warning in plan.warnings)
    lines.extend(f"note      {note}" for note in plan.notes)
    return "\n".join(lines)


def _limits(vllm: VllmPlan) -> str:
    return "  ".join(f"{name}={'-' if value is None else format_size(value)}" for name, value in (
        ("MemoryMax", vllm.memory_max_bytes), ("MemoryHigh", vllm.memory_high_bytes),
        ("MemorySwapMax", vllm.memory_swap_max_bytes)))


def instance_lines(vllm: VllmPlan) -> list[str]:
    """One instance of vllm_instances: its GPUs, port, model, sizing and limits."""
    gpus = ", ".join(f"{index} ({uuid})" for index, uuid in zip(vllm.gpu_indices, vllm.gpu_uuids))
    lines = [f"instance  {vllm.instance}  port {vllm.port}  {vllm.served_model_name}",
             f"          GPUs {gpus}"]
    s = vllm.sizing
    if s is not None:
        lines.append(f"          TP {s.tensor_parallel_size}, gpu_memory_utilization {s.gpu_memory_utilization}: "
                     f"KV cache {format_size(max(0, s.kv_budget_bytes))}/GPU, {s.kv_tokens} tokens, "
                     f"{s.max_concurrent_at_max_model_len} x {s.max_model_len}")
    else:
        lines.append("          not sized (model or GPUs unknown: see the notes)")
    lines.append(f"          {_limits(vllm)}")
    lines.extend(f"          shares {shared}" for shared in vllm.shared_gpus)
    lines.append(f"          command {shlex.join(vllm.argv)}")
    if vllm.runtime is not None:
        lines.append(f"          release {vllm.runtime.target}, installed: {installed_release(vllm.runtime)}")
    lines.append(f"          watchdog {watchdog_text(vllm.watchdog, vllm)}")
    return lines


def watchdog_text(settings: WatchdogSettings | None, vllm: VllmPlan) -> str:
    """The health watchdog of one vLLM server: its unit, how often it probes what, and when it
    restarts the server (hostkit.desired.watchdog's argv). Shown for each of vllm_instances;
    vllm.service's plan text stays as it was before them (tests/unit/fixtures/instances/before)."""
    if settings is None or not settings.enabled:
        return "none (vllm_watchdog: false)"
    return (f"{watchdog_unit_of(vllm.instance)}: GET /health every {settings.interval_s} s, a one-token completion "
            f"every {COMPLETION_EVERY} checks ({completion_timeout_s(settings)} s deadline); restarts "
            f"{vllm_unit_of(vllm.instance)} after {settings.failures} failed checks in a row, at most "
            f"{settings.max_restarts_per_hour} an hour")


def _host_setting_lines(plan: HostPlan) -> list[str]:
    """NVMe, swap, sysctl and THP, as hostkit sets them on a VM or bare metal."""
    lines = []
    if plan.nvme is not None:
        lines.append(f"nvme      {plan.nvme.device} ({plan.nvme.by_id}): {plan.nvme.fstype} at {plan.nvme.mount}"
                     " (formatted only if blank)")
        lines.append(f"          {nvme_lifecycle(plan.nvme, plan.swap)}")
    swap = plan.swap
    if swap.enabled:
        lines.append(f"swap      {swap.path}  {format_size(swap.size_bytes)}  priority {swap.priority}")
    else:
        lines.append("swap      none")
    lines.append(f"          {swap.reason}")
    sysctl = "  ".join(f"{name} = {value}" for name, value in sorted(plan.kernel.sysctl.items()))
    lines.append(f"sysctl    {sysctl}  ({SYSCTL_FILE}, conflicts: {plan.kernel.sysctl_conflicts})")
    lines.append(f"thp       enabled = {plan.kernel.thp_enabled}  defrag = {plan.kernel.thp_defrag}  ({THP_UNIT})")
    return lines


def _with_unit_notes(plan: HostPlan) -> HostPlan:
    """The plan with what its unit goes without on the host's systemd, which rendering the unit tells."""
    if plan.vllm is None:
        return plan  # no vllm.service: the instances' units are not rendered by this version
    return plan.model_copy(update={"notes": [*plan.notes, *unit_notes(plan.vllm)]})


def installed_release(runtime: VllmRuntimePlan) -> str:
    return runtime.installed or "unknown (no vLLM distribution found)"


def runtime_lines(runtime: VllmRuntimePlan | None) -> list[str]:
    if runtime is None:
        return []
    installed = installed_release(runtime)
    if runtime.install:
        lines = [f"release   {runtime.target} into {runtime.venv}, from {runtime.source}",
                 f"          installed now: {installed}"]
    else:
        lines = [f"release   {runtime.target} (vllm_install: false), installed: {installed}"]
    if runtime.os_packages:
        lines.append(f"packages  adds {', '.join(runtime.os_packages)}, from {runtime.os_packages_source}, "
                     "before the venv is made")
    driver = f"NVIDIA driver {runtime.driver}" if runtime.driver else "no NVIDIA driver"
    if runtime.cuda and runtime.driver_floor:
        lines.append(f"driver    the CUDA {runtime.cuda} build needs driver {runtime.driver_floor} or newer; host: {driver}")
    elif runtime.installed and not runtime.cuda:
        lines.append(f"driver    a CPU build needs no driver; host: {driver}")
    elif runtime.install:
        lines.append(f"driver    host: {driver}; the new release's CUDA build is checked against it after pip, before it serves")
    else:
        lines.append(f"driver    host: {driver}; no installed vLLM to read a CUDA build from")
    return lines


def _sizing_lines(s: VllmSizing) -> list[str]:
    """The GPU memory arithmetic, one term a line, as vLLM will do it at start-up."""
    lines = [
        f"gpu       TP {s.tensor_parallel_size}, {format_size(s.gpu_memory_bytes)}/GPU (vLLM sees "
        f"{format_size(s.gpu_seen_bytes)}) x {s.gpu_memory_utilization} = "
        f"{format_size(int(s.gpu_seen_bytes * s.gpu_memory_utilization))} for vLLM"
    ]
    for term in s.terms:
        sign = "-" if term.subtracted else " "
        aside = "" if term.subtracted else " (not subtracted)"
        lines.append(f"          {sign} {term.name:<16} {format_size(term.bytes):>7}  {term.why}{aside}")
    lines.append(
        f"          = KV cache {format_size(max(0, s.kv_budget_bytes))}: {s.kv_tokens} tokens at "
        f"{s.kv_bytes_per_token // 1024} KiB/token, {s.max_concurrent_at_max_model_len} x {s.max_model_len} tokens"
        + (
            f", {s.kv_tokens // s.expected_tokens_per_request} x {s.expected_tokens_per_request} (expected)"
            if s.expected_tokens_per_request
            else ""
        )
    )
    return lines


@click.command("plan", epilog=CONTRACT)
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", multiple=True, help="Only these hosts or groups (pyinfra --limit patterns); repeatable.")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--facts",
    "facts_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Plan from recorded facts (JSON {host: facts}) instead of connecting to the hosts.",
)
def plan(inventory: str, limit: tuple[str, ...], output_format: str, facts_file: str | None) -> None:
    """Show what hostkit would set up on each host of INVENTORY, and why."""
    hosts = load_inventory(inventory, limit=list(limit) or None)
    if not hosts:
        raise InputError(f"no hosts in {inventory}" + (f" match --limit {' '.join(limit)}" if limit else ""))
    try:
        profiles = validate_inventory(hosts)
    except ProfileError as error:
        raise InputError(f"invalid inventory data:\n{error}") from None
    facts = load_facts_file(facts_file) if facts_file else _gather(inventory, limit)
    plans, problems = plan_all(profiles, facts)

    # The deploy refuses these hosts at execute time: they fail the plan as a refused plan does.
    refusals = [f"host {name}: {warning}" for name, p in plans.items() for warning in p.warnings
                if DEPLOY_REFUSES in warning]  # an instance's warning names the instance first
    unreachable = [name for name in profiles if name not in facts]
    status = exit_status(bool(problems or refusals), bool(unreachable))
    if output_format == "json":
        click.echo(json.dumps({"ok": status == EXIT_OK, "exit_code": status, "problems": problems + refusals,
                               "hosts": {name: plan_as_json(p) for name, p in plans.items()}}, indent=2))
    elif plans:
        click.echo("\n\n".join(plan_as_text(p) for p in plans.values()))
    if problems or refusals:
        click.echo("cannot plan:\n" + "\n".join(problems + refusals), err=True)
    sys.exit(status)
