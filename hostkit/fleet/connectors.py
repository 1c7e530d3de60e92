"""pyinfra inventory names as connections: which connector a name picks, and where an ssh
name points. The one place hostkit reads them: verify and its pytest plugin, rollout's gate,
smoke's sampler (through SshSettings).

pyinfra: `@local` runs commands on the controller itself, `@ssh/HOST` and a bare name go over
ssh (ssh_hostname, when set, is the address), any other `@connector/...` is that connector's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOCAL = "@local"
SSH_PREFIX = "@ssh/"


def is_local(name: str) -> bool:
    return name == LOCAL


def uses_ssh(name: str) -> bool:
    return not name.startswith("@") or name.startswith(SSH_PREFIX)


def ssh_address(name: str, data: Mapping[str, Any]) -> str:
    """Where ssh connects for this inventory name."""
    return str(data.get("ssh_hostname") or name.removeprefix(SSH_PREFIX))
