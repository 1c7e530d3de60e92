"""hostkit.desired.changes: which unit file changes need a restart."""

from __future__ import annotations

from hostkit.desired.changes import UnitChange, unit_change, unit_directives

UNIT = """\
# Managed by vllm-hostkit
[Unit]
Description=vLLM
After=network-online.target

[Service]
Environment=A=1
Environment=B=2
ExecStart=/opt/vllm/bin/vllm serve m \\
    --port 8000
MemoryMax=6442450944
; an old-style comment
"""


def test_directives_skip_comments_and_join_continuations():
    directives = unit_directives(UNIT)
    assert directives[("Service", "Environment")] == ("A=1", "B=2")
    assert directives[("Service", "ExecStart")] == ("/opt/vllm/bin/vllm serve m  --port 8000",)
    assert not any(key.startswith(("#", ";")) for _, key in directives)


def test_comments_blank_lines_and_spacing_change_nothing():
    edited = UNIT.replace("# Managed by vllm-hostkit", "# Managed by vllm-hostkit 2.0\n\n# more").replace(
        "MemoryMax=6442450944", "MemoryMax = 6442450944  ")
    assert unit_change(UNIT, edited) == UnitChange()


def test_a_memory_limit_is_live_everything_else_restarts():
    assert unit_change(UNIT, UNIT.replace("6442450944", "7516192768")) == UnitChange(live_directives=("MemoryMax=",))
    added = UNIT.replace("MemoryMax=6442450944", "MemoryMax=1\nMemorySwapMax=0\nRestart=always")
    assert unit_change(UNIT, added) == UnitChange(restart_directives=("Restart=",),
                                                  live_directives=("MemoryMax=", "MemorySwapMax="))


def test_order_of_repeated_directives_counts_and_other_sections_are_named():
    swapped = UNIT.replace("Environment=A=1\nEnvironment=B=2", "Environment=B=2\nEnvironment=A=1")
    assert unit_change(UNIT, swapped).restart_directives == ("Environment=",)
    assert unit_change(UNIT, UNIT.replace("After=network-online.target", "After=x.service")).restart_directives == (
        "[Unit] After=",)


def test_a_memory_key_outside_service_is_not_live():
    moved = UNIT.replace("[Unit]\n", "[Unit]\nMemoryMax=1\n")
    assert unit_change(UNIT, moved).restart_directives == ("[Unit] MemoryMax=",)


def test_nothing_installed_restarts():
    assert unit_change(None, UNIT).restart_directives == ("the unit file",)
