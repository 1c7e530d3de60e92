"""The planning facts of an inventory's hosts, read over their connections (`hostkit plan`)."""

from __future__ import annotations

from collections.abc import Sequence

from hostkit.facts.snapshot import snapshot
from hostkit.fleet.connect import connected_hosts
from hostkit.fleet.inventory import load_inventory
from hostkit.plan.planning_facts import PlanningFacts
from hostkit.plan.scope import snapshot_scope
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.profile.validation import validate_inventory


def gather_planning_facts(inventory_path: str, limit: Sequence[str] | None = None) -> dict[str, PlanningFacts]:
    """Connect to each host, take one snapshot, and return its planning facts."""
    profiles = validate_inventory(load_inventory(inventory_path, limit=limit))
    with connected_hosts(inventory_path, limit) as hosts:
        return {h.name: planning_facts(snapshot(h, snapshot_scope(profiles[h.name]))) for h in hosts}
