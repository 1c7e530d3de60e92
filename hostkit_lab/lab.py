"""A set of lab hosts, VMs and containers, whose state lives in one directory."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from hostkit_lab.container import ContainerHost, remove_lab_cgroups
from hostkit_lab.host import LabHost
from hostkit_lab.image import ssh_key
from hostkit_lab.net import free_port
from hostkit_lab.progress import say
from hostkit_lab.vm import MEMORY_MB, VmHost

KINDS: dict[str, type[LabHost]] = {"vm": VmHost, "container": ContainerHost}


def default_lab_dir() -> Path:
    """`.lab/` at the top of a source checkout (or the cwd), unless HOSTKIT_LAB_DIR says otherwise."""
    if "HOSTKIT_LAB_DIR" in os.environ:
        return Path(os.environ["HOSTKIT_LAB_DIR"])
    checkout = Path(__file__).resolve().parents[1]
    root = checkout if (checkout / "pyproject.toml").exists() else Path.cwd()
    return root / ".lab"


class Lab:
    """A set of lab hosts whose state lives in one directory (`.lab/` by default)."""

    def __init__(self, directory: Path | None = None, cpus: int = 2):
        self.directory = Path(directory) if directory else default_lab_dir()
        self.cpus = cpus  # vCPUs of the VMs it starts
        self.state_file = self.directory / "lab.json"

    def hosts(self) -> list[LabHost]:
        if not self.state_file.exists():
            return []
        hosts = []
        for entry in json.loads(self.state_file.read_text())["hosts"]:
            kind = KINDS[entry.pop("kind", "vm")]
            hosts.append(kind(**entry))
        return hosts

    def host(self, name: str) -> LabHost:
        for lab_host in self.hosts():
            if lab_host.name == name:
                return lab_host
        raise KeyError(f"no lab host named {name!r}; have: {', '.join(h.name for h in self.hosts()) or 'none'}")

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    def _save(self, hosts: list[LabHost]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({"hosts": [{"kind": h.kind, **asdict(h)} for h in hosts]}, indent=2))
        # Pinned host keys: ssh and pyinfra check them strictly, as they should on any fleet.
        self.known_hosts.write_text("".join(f"[127.0.0.1]:{h.port} {h.host_key()}\n" for h in hosts))

    def up(self, count: int = 1, os_name: str = "debian12", cgroup: str = "v2", prefix: str = "lab",
           cpus: int | None = None, memory_mb: int = MEMORY_MB, disks: tuple[str, ...] = (),
           kind: str = "vm", binds: tuple[str, ...] = ()) -> list[LabHost]:
        """Start `count` fresh hosts of `kind` (besides any already running) and wait for ssh on all.

        VMs take `cgroup`, `cpus`, `memory_mb` and `disks`; containers take `binds`."""
        if kind == "vm" and cgroup == "v1" and os_name == "debian13":
            raise SystemExit("cgroup v1 needs Debian 11 or 12: Debian 13's systemd refuses cgroup v1")
        existing = self.hosts()
        taken = {h.name for h in existing}
        new_hosts = []
        index = 1
        while len(new_hosts) < count:
            name = f"{prefix}{index}"
            index += 1
            if name in taken:
                continue
            host_dir = self.directory / "hosts" / name
            if host_dir.exists():
                shutil.rmtree(host_dir)
            host_dir.mkdir(parents=True)
            common = dict(name=name, port=free_port(), os=os_name, directory=str(host_dir), key=str(ssh_key()),
                          known_hosts=str(self.known_hosts))
            if kind == "vm":
                lab_host = VmHost(**common, cgroup=cgroup, cpus=cpus or self.cpus, memory_mb=memory_mb,
                                  disks=list(disks))
            else:
                lab_host = ContainerHost(**common, binds=list(binds))
            lab_host.create()
            new_hosts.append(lab_host)
        self._save(existing + new_hosts)
        say(f"starting {', '.join(h.name for h in new_hosts)} ({new_hosts[0].describe()})")
        for lab_host in new_hosts:
            lab_host.start()
        with ThreadPoolExecutor(max_workers=len(new_hosts)) as pool:
            list(pool.map(lambda h: h.wait_for_ssh(), new_hosts))
        return new_hosts

    def remove(self, name: str) -> None:
        lab_host = self.host(name)
        lab_host.kill()
        shutil.rmtree(lab_host.path, ignore_errors=True)
        self._save([h for h in self.hosts() if h.name != name])

    def down(self) -> None:
        for lab_host in self.hosts():
            lab_host.kill()
        shutil.rmtree(self.directory / "hosts", ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        remove_lab_cgroups()

    def status(self) -> list[dict]:
        return [
            {"name": h.name, "kind": h.kind, "os": h.os, "description": h.describe(), "port": h.port,
             "running": h.pid is not None, "ssh": h.pid is not None and h.reachable()}
            for h in self.hosts()
        ]
