"""The rollout loop: canary first, then batch by batch, a health gate after each.

Pure orchestration: deploying a batch and gating it are callables, so the loop is tested
without hosts and the same loop drives pyinfra in production and in the scale bench.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hostkit.rollout.batches import MaxFailed, Stage, split_batches
from hostkit.rollout.pyinfra_batch import BatchDeploy
from hostkit.rollout.report import (
    DONE,
    FAILED,
    IN_PROGRESS,
    PLANNED,
    UNTOUCHED,
    BatchRecord,
    GateResult,
    HostRecord,
    RolloutReport,
    resume_selection,
)

Deployer = Callable[[Sequence[str], bool], BatchDeploy]
Gate = Callable[[Sequence[str]], dict[str, GateResult]]


@dataclass(frozen=True)
class RolloutSettings:
    inventory: str
    deploy: str
    stages: Sequence[Stage]
    max_failed: MaxFailed
    gate: str  # "verify" | "ready" | "none": recorded; the gate callable does the work
    order_key: str | None = None
    dry: bool = False

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
) -> RolloutReport:
    """Roll `ordered` (host names in rollout order) batch by batch; `gate` None: no gate.

    With `previous` (a report), hosts done there are skipped and the rest rolled again.
    The report is written to `report_path` before the first batch and after every batch.
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
    report.batches = [BatchRecord(index, hosts) for index, hosts in enumerate(batches, start=1)]
    for record in report.batches:
        for name in record.hosts:
            report.host(name).batch = record.index
    limit = settings.max_failed.limit(len(pending))
    sizes = ", ".join(str(len(hosts)) for hosts in batches)
    rules = "no gate, nothing changed" if settings.dry else f"gate {settings.gate}; max failed {limit}"
    progress(
        f"{'dry run: ' if settings.dry else ''}{_plural(len(pending), 'host')} in {_plural(len(batches), 'batch')}"
        f"{f' ({sizes})' if batches else ''}; {rules}"
    )

    def save() -> None:
        report.seconds = round(time.monotonic() - started, 3)
        if report_path is not None:
            report.write(report_path)

    save()
    failed_total = 0
    for batch in report.batches:
        label = f"batch {batch.index}/{len(report.batches)}"
        progress(f"{label}: {'planning' if settings.dry else 'deploying'} {_plural(len(batch.hosts), 'host')}: {', '.join(batch.hosts)}")
        for name in batch.hosts:
            report.host(name).state = IN_PROGRESS
        save()

        deployed = deploy_batch(batch.hosts, settings.dry)
        batch.deploy_seconds = deployed.seconds
        for name in batch.hosts:
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


def _would_change_line(record: HostRecord) -> str:
    if record.state == FAILED:
        return f"cannot plan: {record.failure}"
    if not record.would_change:
        return "no change"
    return "would change: " + ", ".join(record.would_change)
