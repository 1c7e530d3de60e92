"""A pyinfra inventory file, read the way pyinfra's CLI reads it: its hosts' data, `--limit`,
and each host's ssh keys for the tools that open connections of their own."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hostkit.fleet.connectors import ssh_address


def load_inventory(
    path: str, limit: Sequence[str] | None = None, cwd: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(host name, host.data.dict()) for each host of a pyinfra inventory file, in
    inventory order, loaded the way the pyinfra CLI loads it: group data from
    `group_data/` next to the inventory and in `cwd` (default: the working directory),
    `(host, {data})` tuples, `(hosts, {data})` groups. `limit` takes pyinfra --limit
    patterns (group names or host globs)."""
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory_from_files

    if not os.path.isfile(path):
        raise FileNotFoundError(f"inventory file {path} does not exist")
    with ctx_state.use(State()):
        inventory = make_inventory_from_files(path, cwd=cwd or os.getcwd())
    hosts = limited_hosts(inventory, limit)
    return [(host.name, host.data.dict()) for host in hosts]


@dataclass(frozen=True)
class SshSettings:
    """A host's pyinfra connection keys (ssh_*), read once for the tools that open ssh
    connections of their own: verify's ssh_config and paramiko client, smoke's sampler."""

    hostname: str
    port: int | None
    user: str | None
    key: str | None  # ~ expanded
    known_hosts: str | None  # ~ expanded
    strict: str | None  # OpenSSH's StrictHostKeyChecking word; None where unset

    @classmethod
    def from_data(cls, name: str, data: dict[str, Any]) -> SshSettings:
        strict = data.get("ssh_strict_host_key_checking")
        if strict is not None:
            # pyinfra takes booleans and "off" as well as OpenSSH's words.
            strict = "no" if strict in (False, "off") else "yes" if strict is True else str(strict)
        key, known_hosts = data.get("ssh_key"), data.get("ssh_known_hosts_file")
        return cls(
            hostname=ssh_address(name, data),
            port=int(data["ssh_port"]) if data.get("ssh_port") else None,
            user=str(data["ssh_user"]) if data.get("ssh_user") else None,
            key=os.path.expanduser(str(key)) if key else None,
            known_hosts=os.path.expanduser(str(known_hosts)) if known_hosts else None,
            strict=strict,
        )


def limited_hosts(inventory, limit: Sequence[str] | None) -> list:
    """The inventory's hosts that `pyinfra --limit` would keep (group names or host-name globs),
    in inventory order; all of them with no limit."""
    from fnmatch import fnmatch

    from pyinfra.api.exceptions import NoGroupError

    hosts = list(inventory)
    if not limit:
        return hosts
    selected = set()
    for pattern in limit:
        try:
            selected.update(inventory.get_group(pattern))
        except NoGroupError:
            selected.update(host for host in hosts if fnmatch(host.name, pattern))
    return [host for host in hosts if host in selected]
