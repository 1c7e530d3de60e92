"""Lab containers: systemd-nspawn on an overlay of the cached root filesystem, at native speed.

Each container gets what a VM gets from qemu, so tests reach both the same way:
- its own network namespace, given user-mode networking by slirp4netns (the controller's
  loopback is 10.0.2.2 inside, as in a qemu VM; outbound traffic reaches the package mirrors;
  sshd is forwarded to a loopback port of the controller);
- its own cgroup in the controller's writable hierarchies (cgroup2 and the systemd named v1
  one), so that two containers' systemd never manage the same tree;
- its own writable upper layer over the shared, read-only root filesystem.

The container shares the controller's kernel: swap, sysctls, THP, disks and reboots of a
kernel are not its own, and on a hybrid-cgroup controller the memory controller is read-only
inside it (limits accepted, not enforced). Tests that need those run on VMs.
Everything the lab makes on the controller (mount, namespace, cgroups, processes) is removed by
`stop` and `kill`.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from hostkit_lab.host import LabHost
from hostkit_lab.progress import say
from hostkit_lab.rootfs import base_rootfs

CGROUP_GROUP = "hostkit-lab"
NETNS_DIR = Path("/run/netns")
SLIRP_READY_S = 10
DEADLINE_S = 30  # each controller-side command: mount, ip netns


@dataclass
class ContainerHost(LabHost):
    """A systemd-nspawn container: systemd, sshd and the network of a host, the kernel of the
    controller."""

    # Controller directories bound read-only into the container, as "SOURCE:DESTINATION".
    binds: list[str] = field(default_factory=list)

    kind: ClassVar[str] = "container"

    @property
    def label(self) -> str:
        """Unique on the controller (two test labs may both have a host called main1)."""
        return "hkl-" + hashlib.sha256(self.directory.encode()).hexdigest()[:10]

    @property
    def pid(self) -> int | None:
        return _live_pid(self.path / "nspawn.pid")

    def host_key(self) -> str:
        return base_rootfs(self.os).host_key()

    def describe(self) -> str:
        return f"{self.os}, systemd-nspawn"

    def create(self) -> None:
        for part in ("upper", "work", "root"):
            (self.path / part).mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        rootfs = base_rootfs(self.os)
        self._mount_overlay(rootfs.path)
        _run(["ip", "netns", "add", self.label])
        _spawn_detached(["slirp4netns", "--configure", "--mtu=65520", "--api-socket", str(self._api_socket),
                         "--netns-type=path", str(NETNS_DIR / self.label), "tap0"],
                        self.path / "slirp.log", self.path / "slirp.pid")
        self._forward_ssh()
        cgroups = self._make_cgroups()
        _spawn_detached(
            ["systemd-nspawn", "--quiet", "-D", str(self.path / "root"), "--boot", "--register=no", "--keep-unit",
             "--console=passive", f"--machine={self.label}", f"--hostname={self.name}",
             f"--uuid={uuid.uuid4().hex}", f"--network-namespace-path={NETNS_DIR / self.label}",
             "--resolv-conf=off", *(f"--bind-ro={bind}" for bind in self.binds)],
            self.path / "console.log", self.path / "nspawn.pid", cgroups,
        )

    def stop(self, timeout: float = 60) -> None:
        pid = self.pid
        if pid is not None:
            # nspawn turns SIGTERM into the container's orderly power-off.
            os.kill(pid, signal.SIGTERM)
            if not self._exited_within(timeout):
                say(f"{self.name}: no power-off after {timeout:.0f} s; killing the container")
        self._tear_down()

    def kill(self) -> None:
        self._tear_down()

    # -- parts --------------------------------------------------------------------------
    @property
    def _api_socket(self) -> Path:
        return self.path / "slirp.sock"

    def _mount_overlay(self, lower: Path) -> None:
        self.create()
        if not os.path.ismount(self.path / "root"):
            _run(["mount", "-t", "overlay", "overlay", "-o",
                  f"lowerdir={lower},upperdir={self.path / 'upper'},workdir={self.path / 'work'}",
                  str(self.path / "root")])
        # nspawn's --resolv-conf=off leaves the file to us: slirp4netns's DNS forwarder.
        resolv = self.path / "root/etc/resolv.conf"
        resolv.unlink(missing_ok=True)
        resolv.write_text("nameserver 10.0.2.3\n")

    def _forward_ssh(self) -> None:
        request = {"execute": "add_hostfwd", "arguments": {
            "proto": "tcp", "host_addr": "127.0.0.1", "host_port": self.port, "guest_port": 22}}
        deadline = time.monotonic() + SLIRP_READY_S
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as api:
                    api.settimeout(5)
                    api.connect(str(self._api_socket))
                    api.sendall(json.dumps(request).encode())
                    answer = json.loads(api.recv(4096))
                if "error" in answer:
                    raise RuntimeError(f"{self.name}: slirp4netns refused the ssh forward: {answer['error']}")
                return
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    log = (self.path / "slirp.log").read_text(errors="replace")
                    raise RuntimeError(f"{self.name}: slirp4netns not ready after {SLIRP_READY_S} s: {log}") from None
                time.sleep(0.2)

    def _make_cgroups(self) -> list[Path]:
        made = []
        for hierarchy in _writable_hierarchies():
            group = hierarchy / CGROUP_GROUP / self.label
            group.mkdir(parents=True, exist_ok=True)
            made.append(group / "cgroup.procs")
        return made

    def _tear_down(self) -> None:
        _remove_cgroups([hierarchy / CGROUP_GROUP / self.label for hierarchy in _writable_hierarchies()])
        for pid_file in ("nspawn.pid", "slirp.pid"):
            pid = _live_pid(self.path / pid_file)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        if os.path.ismount(self.path / "root"):
            _run(["umount", "--lazy", str(self.path / "root")])
        if (NETNS_DIR / self.label).exists():
            _run(["ip", "netns", "delete", self.label])
        self._api_socket.unlink(missing_ok=True)


def _run(argv: list[str]) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"`{' '.join(argv)}` exited {error.returncode}: {error.stderr.strip()}") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"`{' '.join(argv)}` did not finish within {DEADLINE_S} s") from None


def _live_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return None if state == "Z" else pid


def _spawn_detached(argv: list[str], log: Path, pid_file: Path, cgroup_procs: list[Path] = ()) -> None:
    """Start `argv` as a daemon (a grandchild, so no test process has to reap it), in the
    given cgroups, its output to `log`, its pid to `pid_file`."""
    pid_file.unlink(missing_ok=True)
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                for procs in cgroup_procs:
                    procs.write_text(str(os.getpid()))
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.execvp(argv[0], argv)
            pid_file.write_text(str(grandchild))
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    if _live_pid(pid_file) is None:
        raise RuntimeError(f"`{argv[0]}` did not start: {log.read_text(errors='replace') if log.exists() else ''}")


def _writable_hierarchies() -> list[Path]:
    """The controller's cgroup2 mount and systemd's named v1 hierarchy: the trees a container's
    systemd manages (the v1 controllers are read-only inside a container)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fstype, _, options = after.split(" ")[:3]
        mount_point, mount_options = before.split(" ")[4], before.split(" ")[5]
        if "ro" in mount_options.split(","):
            continue
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            found.append(Path(mount_point))
    return found


def _remove_cgroups(groups: list[Path]) -> None:
    """Kill what runs in `groups` (the same container's group in each hierarchy), then remove
    them with what nspawn and the container made below them."""
    groups = [group for group in groups if group.exists()]
    deadline = time.monotonic() + DEADLINE_S
    while pids := {pid for group in groups for pid in _pids_below(group)}:
        for group in groups:
            if (group / "cgroup.kill").exists():
                (group / "cgroup.kill").write_text("1")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(pids)} of {groups[0].name} still alive after {DEADLINE_S} s")
        time.sleep(0.1)
    for group in groups:
        for sub in sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [group]:
            _rmdir_when_empty(sub, deadline)


def remove_lab_cgroups() -> None:
    """The lab's parent cgroups, once no container of any lab on this controller is left."""
    for hierarchy in _writable_hierarchies():
        try:
            (hierarchy / CGROUP_GROUP).rmdir()
        except (FileNotFoundError, OSError):
            pass  # another lab's containers still run


def _pids_below(group: Path) -> set[int]:
    return {int(pid) for procs in group.rglob("cgroup.procs") for pid in procs.read_text().split()}


def _rmdir_when_empty(group: Path, deadline: float) -> None:
    """A cgroup whose last process just died can stay busy for a moment."""
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cgroup {group} still busy after {DEADLINE_S} s") from None
            time.sleep(0.1)
