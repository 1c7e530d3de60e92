"""pyinfra inventory hosts as testinfra hosts, with the same ssh settings.

`@local` (pyinfra's local connector) becomes testinfra's local backend: the commands run on
this machine, with sudo as `_sudo` asks, and give the same reports as over ssh. Other
connectors than ssh and local are refused (hostkit.fleet.connectors reads the names).

Each inventory host becomes a `Host` block of an ssh_config file (HostName, Port, User,
IdentityFile and host key checking from its pyinfra `ssh_*` data) and a testinfra hostspec
`<backend>://<name>?ssh_config=FILE`, so the testinfra id carries the pyinfra host name.
testinfra's paramiko and ssh backends both read that file. pyinfra's `_sudo`/`_sudo_user`
map to testinfra's sudo. Not mapped: ssh_password and ssh_key_password (use a key or an
agent) and ssh_config_file.

testinfra's paramiko backend never reads known_hosts (it accepts any host key with a
warning), so `attach_paramiko` gives it a connection opened with pyinfra's host key rules
instead: ssh_strict_host_key_checking "yes" rejects unknown keys, "accept-new" (pyinfra's
default) accepts them without recording them, "no"/"off" accepts any key; a key that
differs from the one in ssh_known_hosts_file (default ~/.ssh/known_hosts) is refused
unless checking is off.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import paramiko

from hostkit.fleet.connectors import is_local, uses_ssh
from hostkit.fleet.inventory import SshSettings
from hostkit.profile.host_profile import HostProfile
from hostkit.profile.validation import ProfileError, validate_inventory

CONNECT_TIMEOUT_S = 30


class InventoryError(Exception):
    """The inventory cannot be verified: missing, broken, invalid data, or no host selected."""


@dataclass(frozen=True)
class Target:
    name: str
    data: dict[str, Any]
    profile: HostProfile

    @property
    def alias(self) -> str:
        """The name in the ssh_config file and the hostspec: the pyinfra name, URL-safe."""
        return quote(self.name, safe="._-")

    @property
    def backend_hostname(self) -> str:
        """What the testinfra host's backend.get_hostname() says for this target."""
        return "local" if is_local(self.name) else self.alias

    def ssh_config_block(self) -> str:
        ssh = SshSettings.from_data(self.name, self.data)
        options = [("HostName", ssh.hostname)]
        if ssh.port:
            options.append(("Port", str(ssh.port)))
        if ssh.user:
            options.append(("User", ssh.user))
        if ssh.key:
            options.append(("IdentityFile", ssh.key))
            options.append(("IdentitiesOnly", "yes"))
        if ssh.strict is not None:
            options.append(("StrictHostKeyChecking", ssh.strict))
        if ssh.known_hosts:
            options.append(("UserKnownHostsFile", ssh.known_hosts))
        lines = [f"Host {self.alias}"]
        lines += [f"    {key} {_config_value(value)}" for key, value in options]
        return "\n".join(lines) + "\n"

    def hostspec(self, connection: str, ssh_config: str | Path) -> str:
        """`connection` (paramiko or ssh) for an ssh host; `@local` is always local."""
        params = {}
        if self.data.get("_sudo"):
            params["sudo"] = "true"
            if self.data.get("_sudo_user"):
                params["sudo_user"] = str(self.data["_sudo_user"])
        if is_local(self.name):
            return f"local://?{urlencode(params)}"
        params.update(ssh_config=str(ssh_config), timeout=str(CONNECT_TIMEOUT_S))
        return f"{connection}://{self.alias}?{urlencode(params)}"


def paramiko_client(target: Target, timeout: float = CONNECT_TIMEOUT_S) -> paramiko.SSHClient:
    """A connected paramiko client with the target's pyinfra ssh data and host key rules."""
    ssh = SshSettings.from_data(target.name, target.data)
    client = paramiko.SSHClient()
    strict = ssh.strict or "accept-new"
    if strict != "no":
        known_hosts = ssh.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if os.path.isfile(known_hosts):
            client.load_system_host_keys(known_hosts)  # read-only: verification records nothing
    # The base policy accepts an unknown key silently; a changed known key raises either way.
    client.set_missing_host_key_policy(paramiko.RejectPolicy() if strict == "yes" else paramiko.MissingHostKeyPolicy())
    client.connect(
        hostname=ssh.hostname,
        port=ssh.port or 22,
        username=ssh.user,
        key_filename=ssh.key,
        look_for_keys=not ssh.key,
        timeout=timeout,
    )
    return client


def attach_paramiko(host: Any, target: Target) -> None:
    """Give a testinfra paramiko host `paramiko_client(target)` unless it is connected already."""
    from testinfra.backend.paramiko import ParamikoBackend

    backend = host.backend
    if isinstance(backend, ParamikoBackend) and "client" not in vars(backend):
        vars(backend)["client"] = paramiko_client(target)  # the slot of its cached_property


def _config_value(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def write_ssh_config(targets: Sequence[Target], path: Path) -> Path:
    path.write_text("".join(target.ssh_config_block() for target in targets if not is_local(target.name)))
    path.chmod(0o600)
    return path


def targets_from_hosts(hosts: Sequence[tuple[str, dict[str, Any]]]) -> list[Target]:
    """Validated targets; InventoryError lists every invalid key of every host."""
    if not hosts:
        raise InventoryError("no host selected: check the inventory and --limit")
    others = [name for name, _ in hosts if not (is_local(name) or uses_ssh(name))]
    if others:
        raise InventoryError(f"verify reaches hosts over ssh or @local, not through {', '.join(others)}")
    try:
        profiles = validate_inventory(hosts)
    except ProfileError as error:
        raise InventoryError(f"invalid inventory data:\n{error}") from None
    return [Target(name, dict(data), profiles[name]) for name, data in hosts]


def load_targets(inventory: str, limit: Sequence[str] | None = None) -> list[Target]:
    """In this process. pyinfra_cli, which loads inventories, monkey-patches the standard
    library for gevent when imported: callers that cannot have that use load_targets_isolated."""
    from hostkit.fleet.inventory import load_inventory

    try:
        hosts = load_inventory(inventory, limit=list(limit) if limit else None)
    except FileNotFoundError as error:
        raise InventoryError(str(error)) from None
    except Exception as error:  # an inventory file is Python: anything can go wrong in it
        raise InventoryError(f"cannot load inventory {inventory}: {type(error).__name__}: {error}") from None
    return targets_from_hosts(hosts)


_LOADER = resources.files("hostkit").joinpath("fleet/inventory_loader.py").read_text()


def load_targets_isolated(inventory: str, limit: Sequence[str] | None = None) -> list[Target]:
    """load_targets in a child Python, so this process is not monkey-patched (pytest, xdist)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOADER, inventory, *(limit or ())], capture_output=True, cwd=os.getcwd()
    )
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip()
        raise InventoryError(message.splitlines()[-1] if proc.returncode != 3 and message else message)
    return targets_from_hosts(pickle.loads(proc.stdout))
