"""One remote command per host that gathers the state every hostkit operation reads.

pyinfra 3 has no fact cache: each `host.get_fact` is a round trip, at prepare and again
at execute. Every section below is an ordinary pyinfra fact (usable on its own); the
snapshot runs all of their commands in one shell, splits the output on markers and
hands each section its lines.

The snapshot is memoised per host. An operation that changes the host calls
`mark_changed(host)` while executing, so the next reader takes a fresh snapshot instead
of trusting state that the change made stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase, Host

from hostkit.facts.gpu import GpuFact
from hostkit.facts.kernel import KernelFact
from hostkit.facts.storage import StorageFact
from hostkit.facts.system import SystemFact
from hostkit.facts.vllm_service import VllmServiceFact

MARKER = "@@hostkit-section@@"

# Order matters only for readability of the raw output.
SECTIONS: tuple[type[FactBase], ...] = (
    SystemFact,
    GpuFact,
    KernelFact,
    StorageFact,
    VllmServiceFact,
)


@dataclass(frozen=True)
class HostSnapshot:
    """Parsed sections, by section name: `snapshot.section("swap")`."""

    sections: dict[str, Any]

    def section(self, name: str) -> Any:
        return self.sections[name]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.sections[name]
        except KeyError:
            raise AttributeError(name) from None


def section_command(fact_cls: type[FactBase], profile: Any) -> str:
    fact = fact_cls()
    if getattr(fact_cls, "takes_profile", False):
        return fact.command(profile=profile)
    return fact.command()


class HostSnapshotFact(FactBase):
    """All hostkit sections in one command. Each section's failure is contained to it."""

    def command(self, profile: Any = None) -> str:
        parts = []
        for fact_cls in SECTIONS:
            parts.append(f"echo '{MARKER} {fact_cls.section}'")
            parts.append(f"( {section_command(fact_cls, profile)} ) 2>/dev/null || true")
        return "\n".join(parts)

    def process(self, output: list[str]) -> HostSnapshot:
        return HostSnapshot(parse_sections(output))


def parse_sections(output: list[str]) -> dict[str, Any]:
    raw: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output:
        if line.startswith(MARKER):
            current = raw.setdefault(line[len(MARKER):].strip(), [])
        elif current is not None:
            current.append(line)
    return {fact_cls.section: fact_cls().process(raw.get(fact_cls.section, [])) for fact_cls in SECTIONS}


_SNAPSHOT_ATTR = "_hostkit_snapshot"


def snapshot(host: Host, profile: Any) -> HostSnapshot:
    """The memoised snapshot of `host`, taken on first use and after each change."""
    cached = getattr(host, _SNAPSHOT_ATTR, None)
    if cached is None:
        cached = host.get_fact(HostSnapshotFact, profile=profile)
        setattr(host, _SNAPSHOT_ATTR, cached)
    return cached


def mark_changed(host: Host) -> None:
    """Call from an operation that is about to change the host (only effective at execute)."""
    if host.state.is_executing:
        setattr(host, _SNAPSHOT_ATTR, None)
