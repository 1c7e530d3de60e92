"""Byte sizes as people write them in inventories: "16G", "16GiB", "512M", "1.5T".

Units are binary (K = 1024). Bare numbers are refused because "16" could mean bytes,
MiB or GiB depending on who wrote it; decimal spellings ("16GB") are refused because
they suggest 10**9 while swap and cgroup tools count in 2**30.
"""

from __future__ import annotations

import re

KIB = 1024
MIB = KIB**2
GIB = KIB**3
TIB = KIB**4

_UNITS = {"K": KIB, "M": MIB, "G": GIB, "T": TIB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTkmgt])(iB)?\s*$")
_DECIMAL_SUFFIX = re.compile(r"^\s*\d+(?:\.\d+)?\s*[KMGTkmgt]B\s*$")
_BARE = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")


class SizeError(ValueError):
    pass


def parse_size(text: str) -> int:
    """Bytes in `text`, e.g. "16G" -> 17179869184. Fractions round down to whole bytes."""
    if not isinstance(text, str):
        raise SizeError(f"expected a size string such as '16G', got {type(text).__name__} {text!r}")
    if _BARE.match(text):
        if float(text) == 0:
            return 0
        raise SizeError(f"{text.strip()!r} has no unit: write e.g. '{text.strip()}G' (GiB) or '{text.strip()}M' (MiB)")
    if _DECIMAL_SUFFIX.match(text):
        fixed = text.strip()[:-1]
        raise SizeError(f"{text.strip()!r} is ambiguous: sizes are binary, write '{fixed}' or '{fixed}iB'")
    match = _SIZE.match(text)
    if not match:
        raise SizeError(f"{text!r} is not a size: write e.g. '16G', '16GiB', '512M', '1T'")
    number, unit = match.group(1), match.group(2).upper()
    return int(float(number) * _UNITS[unit])


def format_size(size_bytes: int) -> str:
    """Short binary form: 17179869184 -> "16G", 1610612736 -> "1.5G", 1000 -> "1000B"."""
    for unit, factor in (("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB)):
        if abs(size_bytes) >= factor:
            value = size_bytes / factor
            if size_bytes % factor == 0:
                return f"{size_bytes // factor}{unit}"
            return f"{value:.1f}{unit}"
    return f"{size_bytes}B"
