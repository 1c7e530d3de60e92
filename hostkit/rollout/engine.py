"""The rollout loop: canary first, then batch by batch, a health gate after each.

Pure orchestration: deploying a batch and gating it are callables, so the loop is tested
without hosts and the same loop drives pyinfra in production and in the scale bench.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hostkit.rollout.batches import (
    DEFAULT_MAX_UNAVAILABLE,
    MaxFailed,
    MaxUnavailable,
    Stage,
    limit_unavailable,
    parse_max_unavailable,
    split_batches,
)
from hostkit.rollout.pyinfra_batch import BatchDeploy
from hostkit.rollout.report import (
    DONE,
    FAILED,
    IN_PROGRESS,
    PLANNED,
    UNTOUCHED,
    BatchRecord,
    GateCheck,
    GateResult,
    HostRecord,
    RolloutReport,
    resume_selection,
)

Deployer = Callable[[Sequence[str], bool], BatchDeploy]
Gate = Callable[[Sequence[str]], dict[str, GateResult]]


class Drain(Protocol):
    """Takes hosts out of service and back (hostkit.rollout.drain.Drainer)."""

    def drains(self, name: str) -> bool: ...

    def drain(self, names: Sequence[str]) -> dict[str, list[GateCheck]]: ...

    def undrain(self, names: Sequence[str]) -> dict[str, GateCheck]: ...


@dataclass(frozen=True)
class RolloutSettings:
    inventory: str
    deploy: str
    stages: Sequence[Stage]
    max_failed: MaxFailed
    gate: str  # "verify" | "ready" | "none": recorded; the gate callable does the work
    order_key: str | None = None
    dry: bool = False
    max_unavailable: MaxUnavailable = parse_max_unavailable(DEFAULT_MAX_UNAVAILABLE)

    @property
    def batches_spec(self) -> str:
        return ",".join(str(stage) for stage in self.stages)


def halt_reason(batch_hosts: Sequence[str], batch_failed: Sequence[str], failed_total: int, limit: int) -> str | None:
    """Why the rollout stops after this batch, or None to go on.

    A batch where no host came up proves the new configuration wrong whatever
    --max-failed allows (a failed canary stops a rollout); otherwise the rollout stops
    once its failed hosts exceed --max-failed.
    """
    if batch_hosts and len(batch_failed) == len(batch_hosts):
        return f"no host of the batch passed ({', '.join(batch_failed)} failed)"
    if failed_total > limit:
        return f"{failed_total} failed host(s) exceed --max-failed {limit} ({', '.join(batch_failed)} failed in this batch)"
    return None


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else ('es' if word.endswith('ch') else 's')}"


def run_rollout(
    ordered: Sequence[str],
    settings: RolloutSettings,
    deploy_batch: Deployer,
    gate: Gate | None,
    report_path: str | Path | None = None,
    progress: Callable[[str], None] = print,
    previous: RolloutReport | None = None,
    previous_path: str | None = None,
    models: Mapping[str, str | None] | None = None,
    drainer: Drain | None = None,
) -> RolloutReport:
    """Roll `ordered` (host names in rollout order) batch by batch; `gate` None: no gate.

    With `previous` (a report), hosts done there are skipped and the rest rolled again.
    The report is written to `report_path` before the first batch and after every batch.
    `models` (host -> served model, None: serves nothing) splits batches further so that
    none takes more than settings.max_unavailable of a model's hosts; `drainer` takes a
    batch's hosts out of service before its deploy and back after its gate.
    """
    started = time.monotonic()
    report = RolloutReport(
        inventory=settings.inventory,
        deploy=settings.deploy,
        batches_spec=settings.batches_spec,
        max_failed=str(settings.max_failed),
        gate=settings.gate,
        order_key=settings.order_key,
        dry=settings.dry,
        resumed_from=previous_path,
        max_unavailable=str(settings.max_unavailable) if models is not None else None,
    )
    pending = list(ordered)
    if previous is not None:
        skipped, pending = resume_selection(previous, ordered)
        for name in skipped:
            record = previous.host(name)
            record.previous_run = True
            report.hosts.append(record)
        if skipped:
            progress(f"resume: {_plural(len(skipped), 'host')} already done, skipped: {', '.join(skipped)}")
    report.hosts.extend(HostRecord(name) for name in pending)

    batches = split_batches(pending, settings.stages)
    if models is not None:
        batches = limit_unavailable(batches, models, settings.max_unavailable)
    report.batches = [BatchRecord(index, hosts) for index, hosts in enumerate(batches, start=1)]
    for record in report.batches:
        for name in record.hosts:
            report.host(name).batch = record.index
    limit = settings.max_failed.limit(len(pending))
    sizes = ", ".join(str(len(hosts)) for hosts in batches)
    rules = "no gate, nothing changed" if settings.dry else f"gate {settings.gate}; max failed {limit}"
    if models is not None:
        rules += f"; at most {settings.max_unavailable} of a model's hosts at once"
    progress(
        f"{'dry run: ' if settings.dry else ''}{_plural(len(pending), 'host')} in {_plural(len(batches), 'batch')}"
        f"{f' ({sizes})' if batches else ''}; {rules}"
    )

    def save() -> None:
        report.seconds = round(time.monotonic() - started, 3)
        if report_path is not None:
            report.write(report_path)

    def step(name: str, what: str) -> None:
        report.host(name).timeline.append([what, round(time.monotonic() - started, 3)])

    def fail(name: str, failure: str) -> None:
        record = report.host(name)
        record.state, record.failure = FAILED, failure

    save()
    failed_total = 0
    for batch in report.batches:
        label = f"batch {batch.index}/{len(report.batches)}"
        progress(f"{label}: {'planning' if settings.dry else 'deploying'} {_plural(len(batch.hosts), 'host')}: {', '.join(batch.hosts)}")
        for name in batch.hosts:
            report.host(name).state = IN_PROGRESS
        save()

        to_deploy = list(batch.hosts)
        if drainer is not None and not settings.dry:
            to_deploy = _drain(batch.hosts, drainer, report, step, fail, lambda line: progress(f"{label}: {line}"))
            save()
        for name in to_deploy:
            step(name, "deploy")
        deployed = deploy_batch(to_deploy, settings.dry) if to_deploy else BatchDeploy({}, 0.0)
        batch.deploy_seconds = deployed.seconds
        for name in to_deploy:
            record, result = report.host(name), deployed.hosts[name]
            record.deploy_seconds = deployed.seconds
            record.changed, record.errors, record.would_change = result.changed, result.errors, result.would_change
            if not result.ok:
                record.state, record.failure = FAILED, result.failure

        if settings.dry:
            batch.outcome = PLANNED
            for name in batch.hosts:
                record = report.host(name)
                if record.state != FAILED:
                    record.state = PLANNED
                progress(f"  {name}: {_would_change_line(record)}")
            save()
            continue

        deployed_ok = [name for name in batch.hosts if report.host(name).state != FAILED]
        changed = sum(1 for name in deployed_ok if report.host(name).changed)
        progress(
            f"{label}: deployed in {deployed.seconds:.1f}s: {changed}/{len(batch.hosts)} changed"
            + "".join(f"; {name} FAILED: {report.host(name).failure}" for name in batch.hosts if name not in deployed_ok)
        )

        if gate is not None and deployed_ok:
            for name in deployed_ok:
                step(name, "gate")
            gate_started = time.monotonic()
            gated = gate(deployed_ok)
            batch.gate_seconds = round(time.monotonic() - gate_started, 3)
            for name in deployed_ok:
                record, result = report.host(name), gated[name]
                record.gate, record.gate_seconds = result, result.seconds
                if not result.passed:
                    record.state, record.failure = FAILED, f"gate: {result.failure}"
            passed = [name for name in deployed_ok if report.host(name).state != FAILED]
            progress(
                f"{label}: gate {settings.gate} passed on {len(passed)}/{len(deployed_ok)} in {batch.gate_seconds:.1f}s"
                + "".join(f"; {name} FAILED {report.host(name).failure}" for name in deployed_ok if name not in passed)
            )

        if drainer is not None:
            back = [name for name in batch.hosts if report.host(name).state != FAILED and drainer.drains(name)]
            undrained = drainer.undrain(back)
            for name, check in undrained.items():
                report.host(name).drain.append(check)
                step(name, "undrain")
                if not check.passed:
                    fail(name, f"undrain: {check.detail}")
            if undrained:
                progress(f"{label}: undrained " + ", ".join(
                    name if check.passed else f"{name} FAILED ({check.detail})" for name, check in undrained.items()))
            kept = [name for name in batch.hosts if drainer.drains(name) and report.host(name).state == FAILED
                    and not any(check.name == "undrain" for check in report.host(name).drain)]
            if kept:
                progress(f"{label}: left drained (failed after their drain): {', '.join(kept)}")

        batch.failed = [name for name in batch.hosts if report.host(name).state == FAILED]
        for name in batch.hosts:
            if report.host(name).state != FAILED:
                report.host(name).state = DONE
        failed_total += len(batch.failed)
        reason = halt_reason(batch.hosts, batch.failed, failed_total, limit)
        batch.outcome = "failed" if reason else "passed"
        if reason:
            report.outcome = "halted"
            report.halt_reason = f"{label}: {reason}"
            untouched = report.names_in(UNTOUCHED)
            progress(f"rollout halted after {label}: {reason}; {_plural(len(untouched), 'host')} left untouched")
            save()
            return report
        save()

    report.outcome = "planned" if settings.dry else "completed"
    save()
    return report


def _drain(names: Sequence[str], drainer: Drain, report: RolloutReport, step: Callable[[str, str], None],
           fail: Callable[[str, str], None], progress: Callable[[str], None]) -> list[str]:
    """Drain a batch's hosts; the ones to deploy. A host whose drain fails is put back into
    service at once (undrained): it was not touched."""
    refused = []
    for name, checks in drainer.drain(names).items():
        report.host(name).drain.extend(checks)
        step(name, "drain")
        failed = [check for check in checks if not check.passed]
        if failed:
            fail(name, f"{failed[0].name}: {failed[0].detail}")
            refused.append(name)
        else:
            progress(f"drained {name}: {'; '.join(check.detail for check in checks)}")
    for name, check in drainer.undrain(refused).items():
        report.host(name).drain.append(check)
        step(name, "undrain")
    if refused:
        progress("not deployed, drain failed: " + "; ".join(f"{name}: {report.host(name).failure}" for name in refused))
    return [name for name in names if name not in refused]


def _would_change_line(record: HostRecord) -> str:
    if record.state == FAILED:
        return f"cannot plan: {record.failure}"
    if not record.would_change:
        return "no change"
    return "would change: " + ", ".join(record.would_change)
