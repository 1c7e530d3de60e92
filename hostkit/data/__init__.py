"""hostkit's package data: host-side scripts (host/) and vLLM's recorded flags (vllm_flags/)."""

from __future__ import annotations

from importlib import resources


def host_file(name: str) -> str:
    """hostkit/data/host/NAME: shell or Python that runs on the host, composed by its caller
    with a prelude of variables."""
    return resources.files("hostkit").joinpath(f"data/host/{name}").read_text()
