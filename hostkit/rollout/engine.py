"""The rollout loop: canary first, then batch by batch, a health gate after each.

Pure orchestration: deploying a batch and gating it are callables, so the loop is tested
without hosts and the same loop drives pyinfra in production and in the scale bench.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hostkit.rollout.batches import (
    DEFAULT_MAX_UNAVAILABLE,
    MaxFailed,
    MaxUnavailable,
    Stage,
    limit_down,
    model_limits,
    parse_max_unavailable,
    split_batches,
)
from hostkit.rollout.endpoints import Endpoint, down_at_once, over_budget, restarting
from hostkit.rollout.pyinfra_batch import BatchDeploy
from hostkit.rollout.report import (
    DONE,
    FAILED,
    IN_PROGRESS,
    PLANNED,
    UNTOUCHED,
    BatchRecord,
    EndpointRecord,
    GateCheck,
    GateResult,
    HostRecord,
    RolloutReport,
    resume_selection,
)

Deployer = Callable[[Sequence[str], bool], BatchDeploy]
Gate = Callable[[Sequence[str]], dict[str, GateResult]]


class Drain(Protocol):
    """Takes hosts, or some of their instances, out of service and back (hostkit.rollout.drain.Drainer).

    `instances` (host -> instance names) is passed only for a batch with hosts of
    vllm_instances: of those hosts, only the instances listed are drained and undrained."""

    def drains(self, name: str) -> bool: ...

    def drain(self, names: Sequence[str],
              instances: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[GateCheck]]: ...

    def undrain(self, names: Sequence[str],
                instances: Mapping[str, Sequence[str]] | None = None) -> dict[str, GateCheck]: ...


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
    instances: Mapping[str, Mapping[str, str]] | None = None,
) -> RolloutReport:
    """Roll `ordered` (host names in rollout order) batch by batch; `gate` None: no gate.

    With `previous` (a report), hosts done there are skipped and the rest rolled again.
    The report is written to `report_path` before the first batch and after every batch.
    `models` (host -> served model, None: serves nothing) splits batches further so that
    none takes more than settings.max_unavailable of a model's hosts; `instances` (host ->
    instance name -> served model, for hosts with vllm_instances, which `models` leaves out)
    counts those hosts' endpoints instead (hostkit.rollout.endpoints), after a dry run of the
    deploy on them says which would restart. `drainer` takes a batch's hosts (of hosts with
    instances, the instances that restart) out of service before its deploy and back after its
    gate. ValueError, before any host is touched, when a host cannot fit --max-unavailable.
    """
    rollout = _Rollout(settings, deploy_batch, gate, drainer, report_path, progress, instances or {})
    rollout.report.resumed_from = previous_path
    limited = models is not None or bool(instances)
    rollout.report.max_unavailable = str(settings.max_unavailable) if limited else None
    pending = rollout.resume(ordered, previous)
    rollout.plan_batches(pending, (models or {}) if limited else None)
    for batch in rollout.report.batches:
        if not rollout.roll(batch):
            return rollout.report
    rollout.report.outcome = "planned" if settings.dry else "completed"
    rollout.save()
    return rollout.report


class _Rollout:
    """One rollout's state: its report, kept current, and the steps a batch goes through."""

    def __init__(self, settings: RolloutSettings, deploy_batch: Deployer, gate: Gate | None, drainer: Drain | None,
                 report_path: str | Path | None, progress: Callable[[str], None],
                 instances: Mapping[str, Mapping[str, str]]):
        self.settings, self.deploy_batch, self.gate, self.drainer = settings, deploy_batch, gate, drainer
        self.instances = instances
        self.restarting: dict[str, list[str]] = {}  # of each host with instances, those that restart
        self.report_path, self.progress = report_path, progress
        self.started = time.monotonic()
        self.failed_total = 0
        self.limit = 0
        self.report = RolloutReport(
            inventory=settings.inventory, deploy=settings.deploy, batches_spec=settings.batches_spec,
            max_failed=str(settings.max_failed), gate=settings.gate, order_key=settings.order_key, dry=settings.dry,
        )

    def save(self) -> None:
        self.report.seconds = round(time.monotonic() - self.started, 3)
        if self.report_path is not None:
            self.report.write(self.report_path)

    def step(self, name: str, what: str) -> None:
        self.report.host(name).timeline.append([what, round(time.monotonic() - self.started, 3)])

    def fail(self, name: str, failure: str) -> None:
        record = self.report.host(name)
        record.state, record.failure = FAILED, failure

    def failed(self, name: str) -> bool:
        return self.report.host(name).state == FAILED

    def resume(self, ordered: Sequence[str], previous: RolloutReport | None) -> list[str]:
        """The hosts still to roll: all of `ordered`, less those `previous` finished."""
        report = self.report
        pending = list(ordered)
        if previous is not None:
            skipped, pending = resume_selection(previous, ordered)
            for name in skipped:
                record = previous.host(name)
                record.previous_run = True
                report.hosts.append(record)
            if skipped:
                self.progress(f"resume: {_plural(len(skipped), 'host')} already done, skipped: {', '.join(skipped)}")
        report.hosts.extend(HostRecord(name) for name in pending)
        return pending

    def plan_batches(self, pending: list[str], models: Mapping[str, str | None] | None) -> None:
        settings = self.settings
        batches = split_batches(pending, settings.stages)
        if models is not None:
            batches = self.limit_unavailable(batches, pending, models)
        self.report.batches = [BatchRecord(index, hosts) for index, hosts in enumerate(batches, start=1)]
        for record in self.report.batches:
            for name in record.hosts:
                self.report.host(name).batch = record.index
        self.limit = settings.max_failed.limit(len(pending))
        sizes = ", ".join(str(len(hosts)) for hosts in batches)
        rules = "no gate, nothing changed" if settings.dry else f"gate {settings.gate}; max failed {self.limit}"
        if models is not None:
            counted = "endpoints (hosts or instances) down" if self.instances else "hosts"
            rules += f"; at most {settings.max_unavailable} of a model's {counted} at once"
        self.progress(
            f"{'dry run: ' if settings.dry else ''}{_plural(len(pending), 'host')} in {_plural(len(batches), 'batch')}"
            f"{f' ({sizes})' if batches else ''}; {rules}"
        )
        self.save()

    def limit_unavailable(self, batches: list[list[str]], pending: list[str],
                          models: Mapping[str, str | None]) -> list[list[str]]:
        """`batches` split so that none takes more than --max-unavailable of a model's endpoints
        down at once; ValueError when one host alone would."""
        self.find_restarts([name for name in pending if name in self.instances])
        served: dict[str, dict[str, int]] = {}
        down: dict[str, dict[str, int]] = {}
        going_down: dict[str, list[Endpoint]] = {}
        for name in pending:
            if name in self.instances:
                endpoints = [Endpoint(name, instance, model) for instance, model in self.instances[name].items()]
                served[name] = dict(Counter(endpoint.model for endpoint in endpoints))
                going_down[name] = [endpoint for endpoint in endpoints if endpoint.instance in self.restarting[name]]
                down[name] = down_at_once(going_down[name], self.drains(name))
            else:
                model = models.get(name)
                served[name] = down[name] = {} if model is None else {model: 1}
        limits = model_limits(served.values(), self.settings.max_unavailable)
        refusal = over_budget(going_down, {name: self.drains(name) for name in going_down}, limits,
                              str(self.settings.max_unavailable))
        if refusal:
            raise ValueError(f"no host was touched: {refusal}")
        return limit_down(batches, down, limits)

    def drains(self, name: str) -> bool:
        return self.drainer is not None and self.drainer.drains(name)

    def find_restarts(self, names: list[str]) -> None:
        """A dry run of the deploy on the hosts with instances: which of their instances would
        restart (a host the dry run fails on: all of them, it cannot tell)."""
        if not names:
            return
        planned = self.deploy_batch(names, True)
        said = []
        for name in names:
            result, models = planned.hosts[name], self.instances[name]
            found = self.restarting[name] = restarting(result.would_change, models) if result.ok else list(models)
            if not result.ok:
                said.append(f"{name}: cannot tell ({result.failure}), each instance counted as restarting")
            record = self.report.host(name)
            record.endpoints = [EndpointRecord(Endpoint(name, instance, model).unit, model, instance in found)
                                for instance, model in models.items()]
            said.extend(f"{endpoint.label(name)} ({endpoint.model}) {'restarts' if endpoint.restarts else 'no change'}"
                        for endpoint in record.endpoints if result.ok)
        self.progress(f"instances, from a dry run of the deploy in {planned.seconds:.1f}s: {'; '.join(said)}")

    def draining(self, names: Sequence[str]) -> dict[str, Mapping[str, Sequence[str]]]:
        """The drain steps' keyword for a batch: of its hosts with instances, the instances that restart."""
        with_instances = {name: self.restarting[name] for name in names if name in self.instances}
        return {"instances": with_instances} if with_instances else {}

    def roll(self, batch: BatchRecord) -> bool:
        """Drain, deploy, gate and undrain one batch; False when the rollout halts after it."""
        label = f"batch {batch.index}/{len(self.report.batches)}"
        self.progress(f"{label}: {'planning' if self.settings.dry else 'deploying'} "
                      f"{_plural(len(batch.hosts), 'host')}: {', '.join(batch.hosts)}")
        for name in batch.hosts:
            self.report.host(name).state = IN_PROGRESS
        self.save()
        to_deploy = list(batch.hosts)
        if self.drainer is not None and not self.settings.dry:
            to_deploy = _drain(batch.hosts, self.drainer, self.draining(batch.hosts), self.report, self.step,
                               self.fail, lambda line: self.progress(f"{label}: {line}"))
            self.save()
        seconds = self.deploy(batch, to_deploy)
        if self.settings.dry:
            self.record_plans(batch)
            return True
        deployed_ok = [name for name in batch.hosts if not self.failed(name)]
        changed = sum(1 for name in deployed_ok if self.report.host(name).changed)
        self.progress(
            f"{label}: deployed in {seconds:.1f}s: {changed}/{len(batch.hosts)} changed"
            + "".join(f"; {name} FAILED: {self.report.host(name).failure}" for name in batch.hosts
                      if name not in deployed_ok)
            + "".join(f"; {name}: {_instances_changed(self.report.host(name))}" for name in deployed_ok
                      if self.report.host(name).endpoints)
        )
        if self.gate is not None and deployed_ok:
            self.run_gate(batch, deployed_ok, label)
        if self.drainer is not None:
            self.undrain(batch, label)
        return self.settle(batch, label)

    def deploy(self, batch: BatchRecord, names: list[str]) -> float:
        for name in names:
            self.step(name, "deploy")
        deployed = self.deploy_batch(names, self.settings.dry) if names else BatchDeploy({}, 0.0)
        batch.deploy_seconds = deployed.seconds
        for name in names:
            record, result = self.report.host(name), deployed.hosts[name]
            record.deploy_seconds = deployed.seconds
            record.changed, record.errors, record.would_change = result.changed, result.errors, result.would_change
            for endpoint in record.endpoints:
                endpoint.changed = [operation for operation in result.changed if endpoint.unit in operation.split()]
            if not result.ok:
                self.fail(name, result.failure)
        return deployed.seconds

    def record_plans(self, batch: BatchRecord) -> None:
        batch.outcome = PLANNED
        for name in batch.hosts:
            record = self.report.host(name)
            if record.state != FAILED:
                record.state = PLANNED
            self.progress(f"  {name}: {_would_change_line(record)}")
        self.save()

    def run_gate(self, batch: BatchRecord, names: list[str], label: str) -> None:
        for name in names:
            self.step(name, "gate")
        gate_started = time.monotonic()
        gated = self.gate(names)
        batch.gate_seconds = round(time.monotonic() - gate_started, 3)
        for name in names:
            record, result = self.report.host(name), gated[name]
            record.gate, record.gate_seconds = result, result.seconds
            if not result.passed:
                self.fail(name, f"gate: {result.failure}")
        passed = [name for name in names if not self.failed(name)]
        self.progress(
            f"{label}: gate {self.settings.gate} passed on {len(passed)}/{len(names)} in {batch.gate_seconds:.1f}s"
            + "".join(f"; {name} FAILED {self.report.host(name).failure}" for name in names if name not in passed)
        )

    def undrain(self, batch: BatchRecord, label: str) -> None:
        drainer = self.drainer
        back = [name for name in batch.hosts if not self.failed(name) and drainer.drains(name)]
        undrained = drainer.undrain(back, **self.draining(back))
        for name, check in undrained.items():
            self.report.host(name).drain.append(check)
            self.step(name, "undrain")
            if not check.passed:
                self.fail(name, f"undrain: {check.detail}")
        if undrained:
            self.progress(f"{label}: undrained " + ", ".join(
                name if check.passed else f"{name} FAILED ({check.detail})" for name, check in undrained.items()))
        kept = [name for name in batch.hosts if drainer.drains(name) and self.failed(name) and self.report.host(name).drain
                and not any(check.name == "undrain" for check in self.report.host(name).drain)]
        if kept:
            self.progress(f"{label}: left drained (failed after their drain): {', '.join(kept)}")

    def settle(self, batch: BatchRecord, label: str) -> bool:
        """The batch's outcome; False when it halts the rollout."""
        batch.failed = [name for name in batch.hosts if self.failed(name)]
        for name in batch.hosts:
            if not self.failed(name):
                self.report.host(name).state = DONE
        self.failed_total += len(batch.failed)
        reason = halt_reason(batch.hosts, batch.failed, self.failed_total, self.limit)
        batch.outcome = "failed" if reason else "passed"
        if reason:
            self.report.outcome = "halted"
            self.report.halt_reason = f"{label}: {reason}"
            untouched = self.report.names_in(UNTOUCHED)
            self.progress(f"rollout halted after {label}: {reason}; {_plural(len(untouched), 'host')} left untouched")
        self.save()
        return reason is None


def _drain(names: Sequence[str], drainer: Drain, instances: Mapping[str, Mapping[str, Sequence[str]]],
           report: RolloutReport, step: Callable[[str, str], None],
           fail: Callable[[str, str], None], progress: Callable[[str], None]) -> list[str]:
    """Drain a batch's hosts (`instances`: Drain's keyword); the ones to deploy. A host whose
    drain fails is put back into service at once (undrained): it was not touched."""
    refused = []
    for name, checks in drainer.drain(names, **instances).items():
        report.host(name).drain.extend(checks)
        step(name, "drain")
        failed = [check for check in checks if not check.passed]
        if failed:
            fail(name, f"{failed[0].name}: {failed[0].detail}")
            refused.append(name)
        else:
            progress(f"drained {name}: {'; '.join(check.detail for check in checks)}")
    for name, check in drainer.undrain(refused, **instances).items():
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


def _instances_changed(record: HostRecord) -> str:
    changed = [endpoint.unit for endpoint in record.endpoints if endpoint.changed]
    return f"changed {', '.join(changed)}" if changed else "no instance changed"
