"""Code that runs on the host: shell scripts and Python programs (standard library only),
shipped as package data and composed by their callers with a prelude of variables."""

from __future__ import annotations

from importlib import resources


def host_file(name: str) -> str:
    """hostkit/remote/NAME, as text."""
    return resources.files(__name__).joinpath(name).read_text()
