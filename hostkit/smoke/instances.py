"""Which servers `hostkit smoke` loads on a host with vllm_instances: each instance at its own
port, with its own API key and unit (whose cgroup memory is sampled), or the one named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hostkit.paths import vllm_instance_unit


@dataclass(frozen=True)
class InstanceTarget:
    name: str
    url: str  # the URL given, at the instance's port
    api_key: str | None  # its vllm_api_key; never printed
    unit: str


def at_port(url: str, port: int) -> str:
    """`url` with its port replaced: the host the user named, the instance's port."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urlunsplit(parts._replace(netloc=f"{host}:{port}"))


def instance_targets(url: str, profile: Any, only: str | None = None) -> list[InstanceTarget]:
    """The profile's instances (all, or `only`), in inventory order; ValueError for an unknown name."""
    instances = profile.vllm_instances
    if only is not None and only not in instances:
        raise ValueError(f"no instance {only!r} in vllm_instances (it has {', '.join(instances) or 'none'})")
    return [
        InstanceTarget(name, at_port(url, server.vllm_port),
                       server.vllm_api_key.get_secret_value() if server.vllm_api_key is not None else None,
                       vllm_instance_unit(name))
        for name, server in instances.items() if only in (None, name)
    ]
