"""`hostkit rollout`: a new configuration onto a fleet, batch by batch, behind a health gate.

A canary batch first, then the rest in a fixed order, never more than --max-unavailable
of one served model's endpoints (hosts, or instances of vllm_instances: hostkit.rollout.endpoints)
down at once; each host drained first when its data says how
(hostkit.rollout.drain); after each batch the hosts must pass verification, readiness
and one real completion, and are undrained. A batch that fails stops the
rollout, leaving later hosts untouched; the JSON report says which host is done,
failed or untouched, and `--resume REPORT` carries on after a fix.
"""

from hostkit.rollout.batches import BatchSpecError, order_hosts, parse_batches, parse_max_failed, split_batches
from hostkit.rollout.engine import RolloutSettings, run_rollout
from hostkit.rollout.fleet_rollout import rollout
from hostkit.rollout.report import GateCheck, GateResult, HostRecord, RolloutReport, read_report

__all__ = [
    "BatchSpecError",
    "GateCheck",
    "GateResult",
    "HostRecord",
    "RolloutReport",
    "RolloutSettings",
    "order_hosts",
    "parse_batches",
    "parse_max_failed",
    "read_report",
    "rollout",
    "run_rollout",
    "split_batches",
]
