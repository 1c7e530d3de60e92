"""How a file as hostkit renders it is compared with the host's copy: by the sha256 of its
text, which the facts report for each file hostkit manages. A secret (the environment file)
is then compared without reading it back."""

from __future__ import annotations

from hashlib import sha256


def text_sha256(text: str) -> str:
    return sha256(text.encode()).hexdigest()
