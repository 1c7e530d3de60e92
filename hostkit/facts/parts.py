"""Reading the output of remote commands: split into named parts on marker lines, numbers."""

from __future__ import annotations

from collections.abc import Iterable


def split_on_marker(lines: Iterable[str], marker: str) -> dict[str, list[str]]:
    """A line `MARKER name`, `MARKERname@@` or `MARKERname@@text` starts the part `name`
    (with `text` as its first line); lines before the first marker are dropped."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith(marker):
            name, _, rest = line[len(marker):].partition("@@")
            current = parts.setdefault(name.strip(), [])
            if rest.strip():
                current.append(rest.strip())
        elif current is not None:
            current.append(line)
    return parts


def parse_int(text: str | None, default: int | None = None, signed: bool = False) -> int | None:
    """A whole number as a host command prints it, else `default`: surrounding whitespace is
    dropped, anything else (units, `N/A`, `max`) gives `default`; a `-` sign only if `signed`."""
    text = (text or "").strip()
    digits = text.lstrip("-") if signed else text
    return int(text) if digits.isdigit() else default


def to_int(value: object, default: int | None = None) -> int | None:
    """int(value) as Python reads it (JSON numbers, signs, whitespace), else `default`."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
