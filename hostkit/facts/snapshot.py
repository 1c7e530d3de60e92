"""One remote command per host that gathers the state every hostkit operation reads.

pyinfra 3 has no fact cache: each `host.get_fact` is a round trip, at prepare and again
at execute. Every section below is an ordinary pyinfra fact (usable on its own); the
snapshot runs all of their commands in one shell, splits the output on markers and
hands each section its lines.

The snapshot is memoised per host. An operation that changes the host calls
`mark_changed(host, section, ...)` while executing, naming the sections its change makes
stale (all of them when it names none). The next reader refreshes just those sections, in
one command, instead of trusting state that the change made stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase, Host

from hostkit.facts.gpu import GpuFact
from hostkit.facts.kernel import KernelFact
from hostkit.facts.model_config import ModelConfigFact
from hostkit.facts.monitoring import MonitoringFact
from hostkit.facts.parts import split_on_marker
from hostkit.facts.platform import PlatformFact
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.storage import StorageFact
from hostkit.facts.system import SystemFact
from hostkit.facts.vllm_release import VllmReleaseFact
from hostkit.facts.vllm_service import VllmServiceFact

MARKER = "@@hostkit-section@@"

# Order matters only for readability of the raw output.
SECTIONS: tuple[type[FactBase], ...] = (
    SystemFact,
    GpuFact,
    KernelFact,
    StorageFact,
    VllmServiceFact,
    VllmReleaseFact,
    PlatformFact,
    MonitoringFact,
    ModelConfigFact,
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


def section_command(fact_cls: type[FactBase], scope: SnapshotScope) -> str:
    fact = fact_cls()
    if getattr(fact_cls, "takes_scope", False):
        return fact.command(scope=scope)
    return fact.command()


class HostSnapshotFact(FactBase):
    """All hostkit sections in one command. Each section's failure is contained to it."""

    def command(self, scope: SnapshotScope, sections: tuple[str, ...] | None = None) -> str:
        # pyinfra calls command() and process() on one instance: process() parses these.
        self.sections_asked = _selected(sections)
        parts = []
        for fact_cls in self.sections_asked:
            parts.append(f"echo '{MARKER} {fact_cls.section}'")
            parts.append(f"( {section_command(fact_cls, scope)} ) 2>/dev/null || true")
        return "\n".join(parts)

    def process(self, output: list[str]) -> HostSnapshot:
        return HostSnapshot(parse_sections(output, getattr(self, "sections_asked", SECTIONS)))


def parse_sections(output: list[str], sections: tuple[type[FactBase], ...] = SECTIONS) -> dict[str, Any]:
    raw = split_on_marker(output, MARKER)
    return {fact_cls.section: fact_cls().process(raw.get(fact_cls.section, [])) for fact_cls in sections}


def _selected(sections: tuple[str, ...] | None) -> tuple[type[FactBase], ...]:
    if sections is None:
        return SECTIONS
    return tuple(fact_cls for fact_cls in SECTIONS if fact_cls.section in sections)


class MemoisedSnapshot:
    """A host's snapshot for this run. Reading a stale section first refreshes every stale
    section, all in one command: fewer round trips than a command per section read."""

    def __init__(self, host: Host, scope: SnapshotScope, taken: HostSnapshot):
        self.host = host
        self.scope = scope
        self.sections = dict(taken.sections)
        self.stale: set[str] = set()

    def section(self, name: str) -> Any:
        if name in self.stale:
            fresh = self.host.get_fact(HostSnapshotFact, scope=self.scope, sections=tuple(sorted(self.stale)))
            self.sections.update(fresh.sections)
            self.stale.clear()
        return self.sections[name]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in SECTION_NAMES:
            raise AttributeError(name)
        return self.section(name)


SECTION_NAMES = frozenset(fact_cls.section for fact_cls in SECTIONS)
_MEMO_ATTR = "_hostkit_snapshot"


def snapshot(host: Host, scope: SnapshotScope) -> MemoisedSnapshot:
    """The memoised snapshot of `host`, taken on first use.

    The first call's `scope` (where to look for swap files and the vLLM unit) holds for the
    run: every caller derives it from the same profile (hostkit.plan.scope).
    """
    memo: MemoisedSnapshot | None = getattr(host, _MEMO_ATTR, None)
    if memo is None:
        memo = MemoisedSnapshot(host, scope, host.get_fact(HostSnapshotFact, scope=scope))
        setattr(host, _MEMO_ATTR, memo)
    return memo


def mark_changed(host: Host, *sections: str) -> None:
    """Call from an operation that is about to change the host (only effective at execute).

    `sections` are the snapshot sections the change makes stale; none means all of them.
    """
    unknown = set(sections) - SECTION_NAMES
    if unknown:
        raise ValueError(f"no snapshot section named {', '.join(sorted(unknown))}")
    memo: MemoisedSnapshot | None = getattr(host, _MEMO_ATTR, None)
    if memo is not None and host.state.is_executing:
        memo.stale.update(sections or SECTION_NAMES)
