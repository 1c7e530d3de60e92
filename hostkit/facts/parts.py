"""Output of one remote command split into named parts on marker lines."""

from __future__ import annotations


def split_on_marker(lines: list[str], marker: str) -> dict[str, list[str]]:
    """`MARKER name` lines start the part `name`; lines before the first marker are dropped."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith(marker):
            current = parts.setdefault(line[len(marker):].strip(), [])
        elif current is not None:
            current.append(line)
    return parts
