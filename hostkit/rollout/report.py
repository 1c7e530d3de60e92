"""The rollout report: which host is in which state, what changed, what the gate said.

Written after every batch, so a rollout that stops, or is killed, can be resumed from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPORT_VERSION = 1

# Host states. `in_progress` is only ever seen in a report left by a rollout that died
# mid-batch; resuming treats it like `untouched`.
DONE = "done"
FAILED = "failed"
UNTOUCHED = "untouched"
IN_PROGRESS = "in_progress"
PLANNED = "planned"  # --dry: what would happen


# The gate check that carries the vLLM release verify found in service (its detail).
RELEASE_CHECK = "release"


@dataclass
class GateCheck:
    name: str
    passed: bool
    detail: str = ""
    seconds: float = 0.0


@dataclass
class GateResult:
    passed: bool
    checks: list[GateCheck] = field(default_factory=list)
    seconds: float = 0.0

    @classmethod
    def of(cls, checks: Sequence[GateCheck], seconds: float) -> GateResult:
        return cls(all(check.passed for check in checks), list(checks), round(seconds, 3))

    @property
    def failure(self) -> str:
        return "; ".join(f"{check.name}: {check.detail}" for check in self.checks if not check.passed)


@dataclass
class EndpointRecord:
    """One of a host's vllm_instances in a rollout (hostkit.rollout.endpoints)."""

    unit: str  # vllm@NAME.service
    model: str  # its served model
    restarts: bool = False  # the dry run before batching: its unit would change, counted as going down
    changed: list[str] = field(default_factory=list)  # the deploy's operations that changed it

    def label(self, host: str) -> str:
        return f"{host}/{self.unit}"


def endpoint_check(unit: str, step: str) -> str:
    """The name of a drain or gate check of one instance: `vllm@a.service health`."""
    return f"{unit} {step}"


@dataclass
class HostRecord:
    name: str
    batch: int | None = None
    state: str = UNTOUCHED
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # operations that failed
    would_change: list[str] = field(default_factory=list)  # --dry
    gate: GateResult | None = None
    deploy_seconds: float | None = None  # the batch's pyinfra run: its hosts deploy in parallel
    gate_seconds: float | None = None
    failure: str | None = None  # why the host failed, one line
    previous_run: bool = False  # done in the run this one resumed
    drain: list[GateCheck] = field(default_factory=list)  # drain command, idle wait, undrain command
    # The host's steps in the order they ran: [step, seconds since the rollout began].
    timeline: list[list[Any]] = field(default_factory=list)
    endpoints: list[EndpointRecord] = field(default_factory=list)  # its vllm_instances; empty: vllm.service

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostRecord:
        gate = data.get("gate")
        if gate is not None:
            gate = GateResult(gate["passed"], [GateCheck(**check) for check in gate.get("checks", [])], gate.get("seconds", 0.0))
        drain = [GateCheck(**check) for check in data.get("drain", [])]
        endpoints = [EndpointRecord(**endpoint) for endpoint in data.get("endpoints", [])]
        return cls(**{**data, "gate": gate, "drain": drain, "endpoints": endpoints})


@dataclass
class BatchRecord:
    index: int
    hosts: list[str]
    outcome: str = "pending"  # pending | passed | failed | planned
    deploy_seconds: float | None = None
    gate_seconds: float | None = None
    failed: list[str] = field(default_factory=list)


@dataclass
class RolloutReport:
    inventory: str
    deploy: str
    batches_spec: str
    max_failed: str
    gate: str
    order_key: str | None = None
    dry: bool = False
    resumed_from: str | None = None
    max_unavailable: str | None = None
    outcome: str = "running"  # running | completed | halted | planned
    halt_reason: str | None = None
    seconds: float = 0.0
    hosts: list[HostRecord] = field(default_factory=list)
    batches: list[BatchRecord] = field(default_factory=list)
    version: int = REPORT_VERSION

    def host(self, name: str) -> HostRecord:
        for record in self.hosts:
            if record.name == name:
                return record
        raise KeyError(name)

    def names_in(self, state: str) -> list[str]:
        return [record.name for record in self.hosts if record.state == state]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.hosts:
            counts[record.state] = counts.get(record.state, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["counts"] = self.counts()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutReport:
        if data.get("version") != REPORT_VERSION:
            raise ValueError(f"not a hostkit rollout report of version {REPORT_VERSION}")
        fields = {key: value for key, value in data.items() if key not in ("hosts", "batches", "counts")}
        return cls(
            **fields,
            hosts=[HostRecord.from_dict(host) for host in data.get("hosts", [])],
            batches=[BatchRecord(**batch) for batch in data.get("batches", [])],
        )

    def write(self, path: str | Path) -> None:
        """Atomically, so a reader (or a resume) never sees half a report."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        os.replace(partial, path)


def read_report(path: str | Path) -> RolloutReport:
    try:
        return RolloutReport.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"cannot resume from {path}: {error}") from None


def resume_selection(previous: RolloutReport, ordered: Sequence[str]) -> tuple[list[str], list[str]]:
    """(hosts to skip, hosts to roll) when resuming `previous` over the inventory's hosts
    in rollout order. Done hosts are skipped; failed, untouched and new hosts are rolled,
    in rollout order, so a host that failed comes first and is the new canary."""
    if previous.dry:
        raise ValueError("cannot resume from a --dry report: nothing was rolled out")
    done = {record.name for record in previous.hosts if record.state == DONE}
    skip = [name for name in ordered if name in done]
    return skip, [name for name in ordered if name not in done]
