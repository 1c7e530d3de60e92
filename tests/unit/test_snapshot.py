"""The memoised snapshot: one command for all sections, and only stale sections refreshed after a change."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.snapshot import (
    MARKER,
    SECTION_NAMES,
    HostSnapshot,
    HostSnapshotFact,
    mark_changed,
    snapshot,
)


class FakeHost:
    """Answers HostSnapshotFact with a generation number per section, so a test sees what was re-read."""

    def __init__(self):
        self.state = SimpleNamespace(is_executing=False)
        self.asked: list[tuple | None] = []
        self.generation = 0

    def get_fact(self, fact_cls, scope=None, sections=None):
        assert fact_cls is HostSnapshotFact
        self.asked.append(sections)
        self.generation += 1
        return HostSnapshot({name: (name, self.generation) for name in (sections or SECTION_NAMES)})


def test_one_command_then_memoised():
    host = FakeHost()
    first = snapshot(host, scope="p")
    assert snapshot(host, "p").kernel == ("kernel", 1) and snapshot(host, "p") is first
    assert host.asked == [None]


def test_a_change_refreshes_only_its_sections_and_only_when_one_of_them_is_read():
    host = FakeHost()
    snapshot(host, scope="p")
    host.state.is_executing = True
    mark_changed(host, "storage", "system")
    assert snapshot(host, "p").kernel == ("kernel", 1)  # not stale: not re-read
    assert host.asked == [None]
    mark_changed(host, "kernel")
    assert snapshot(host, "p").storage == ("storage", 2)
    assert host.asked == [None, ("kernel", "storage", "system")]  # every stale section, in one command
    assert snapshot(host, "p").kernel == ("kernel", 2) and snapshot(host, "p").vllm == ("vllm", 1)


def test_a_change_without_sections_makes_all_stale():
    host = FakeHost()
    snapshot(host, "p")
    host.state.is_executing = True
    mark_changed(host)
    assert snapshot(host, "p").gpu == ("gpu", 2) and host.asked == [None, tuple(sorted(SECTION_NAMES))]


def test_changes_at_prepare_time_and_unknown_sections():
    host = FakeHost()
    snapshot(host, "p")
    mark_changed(host, "storage")  # not executing: prepare only reads
    assert snapshot(host, "p").storage == ("storage", 1)
    host.state.is_executing = True
    with pytest.raises(ValueError, match="no snapshot section named swap"):
        mark_changed(host, "swap")


def test_a_partial_command_gathers_only_its_sections():
    fact = HostSnapshotFact()
    command = fact.command(snapshot_scope(), sections=("kernel", "vllm"))
    assert [line.split()[-1] for line in command.splitlines() if MARKER in line] == ["kernel'", "vllm'"]
    parsed = fact.process([f"{MARKER} kernel", f"{MARKER} vllm"])
    assert set(parsed.sections) == {"kernel", "vllm"}
    full = HostSnapshotFact()
    full.command(snapshot_scope())
    assert set(full.process([]).sections) == SECTION_NAMES  # a section with no output parses as empty
