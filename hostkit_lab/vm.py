"""Lab hosts: qcow2 overlays on the cached base image, booted with qemu (TCG) and reached by ssh."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostkit_lab.image import base_image, ssh_key
from hostkit_lab.progress import say

MEMORY_MB = 2048
NVME_SIZE = "8G"
TROUBLE = re.compile(r"nvme|I/O error|blk_update_request|Out of memory|Killed process|hung_task|blocked for more than"
                     r"|EXT4-fs error|Buffer I/O")
BOOT_TIMEOUT_S = 600


def default_lab_dir() -> Path:
    """`.lab/` at the top of a source checkout (or the cwd), unless HOSTKIT_LAB_DIR says otherwise."""
    if "HOSTKIT_LAB_DIR" in os.environ:
        return Path(os.environ["HOSTKIT_LAB_DIR"])
    checkout = Path(__file__).resolve().parents[2]
    root = checkout if (checkout / "pyproject.toml").exists() else Path.cwd()
    return root / ".lab"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LabHost:
    name: str
    port: int
    os: str
    cgroup: str
    directory: str
    key: str
    cpus: int = 2
    known_hosts: str = ""
    memory_mb: int = MEMORY_MB
    # Raw disk images attached read-only after the root disk (/dev/vdb, /dev/vdc, ...).
    disks: list[str] = field(default_factory=list)

    # -- connection ---------------------------------------------------------------------
    def ssh_argv(self, command: str | None = None, connect_timeout: int = 10) -> list[str]:
        argv = [
            "ssh", "-i", self.key, "-p", str(self.port),
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "root@127.0.0.1",
        ]
        return argv + ([command] if command else [])

    def ssh(self, command: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run(self.ssh_argv(command), capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{self.name}: `{command}` exited {result.returncode}: {result.stderr.strip()}")
        return result

    def reachable(self) -> bool:
        try:
            return self.ssh("true", timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def pyinfra_data(self) -> dict:
        """Connection data for a pyinfra inventory entry."""
        return {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": self.port,
            "ssh_user": "root",
            "ssh_key": self.key,
            "ssh_known_hosts_file": self.known_hosts,
            "ssh_strict_host_key_checking": "yes",
            "ssh_connect_retries": 2,
        }

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def pid(self) -> int | None:
        try:
            pid = int((self.path / "qemu.pid").read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None

    def boot_id(self) -> str:
        return self.ssh("cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip()

    def start(self) -> None:
        image = base_image(self.os)
        append = f"root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname={self.name}"
        if self.cgroup == "v1":
            append += " systemd.unified_cgroup_hierarchy=0"
        read_only = [arg for disk in self.disks for arg in ("-drive", f"file={disk},if=virtio,format=raw,readonly=on")]
        subprocess.run(
            [
                "qemu-system-x86_64", "-name", self.name,
                "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", str(self.cpus), "-m", str(self.memory_mb),
                "-display", "none", "-monitor", "none", "-serial", f"file:{self.path / 'console.log'}",
                "-daemonize", "-pidfile", str(self.path / "qemu.pid"),
                "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", append,
                # cache=unsafe: a guest's flushes stay in the controller's page cache, which a qemu
                # restart keeps; only a crash of the controller itself would lose them.
                "-drive", f"file={self.path / 'root.qcow2'},if=virtio,format=qcow2,cache=unsafe",
                "-drive", f"file={self.path / 'nvme.qcow2'},if=none,id=nvm,format=qcow2,cache=unsafe",
                "-device", f"nvme,drive=nvm,serial=hostkit-{self.name}",
                *read_only,
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
                "-device", "virtio-net-pci,netdev=n0",
            ],
            check=True,
        )

    def wait_for_ssh(self, timeout: float = BOOT_TIMEOUT_S, not_boot_id: str | None = None) -> None:
        started = time.monotonic()
        last_report = started
        while True:
            if self._answers_from_new_boot(not_boot_id):
                say(f"{self.name}: ssh up after {time.monotonic() - started:.0f} s")
                return
            if self.pid is None:
                raise RuntimeError(f"{self.name}: qemu exited; console:\n{self.console_tail()}")
            now = time.monotonic()
            if now - started > timeout:
                raise TimeoutError(f"{self.name}: no ssh after {timeout:.0f} s; console:\n{self.console_tail()}")
            if now - last_report >= 15:
                say(f"{self.name}: waiting for ssh ({now - started:.0f} s)")
                last_report = now
            time.sleep(2)

    def kernel_trouble(self, lines: int = 30) -> str:
        """The console's lines about I/O, the NVMe, OOM kills and hung tasks: what explains a host
        failing under load, for a failed test's report."""
        found = [line for line in self._console_lines() if TROUBLE.search(line)]
        return "\n".join(found[-lines:]) or "(none on the console)"

    def console_tail(self, lines: int = 40) -> str:
        """The end of the serial console, for errors that CI prints (the lab directory is gone after)."""
        return "\n".join(self._console_lines()[-lines:]) or "(no console.log)"

    def _console_lines(self) -> list[str]:
        try:
            return (self.path / "console.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def _answers_from_new_boot(self, not_boot_id: str | None) -> bool:
        """ssh works, and (when given) from a boot other than `not_boot_id`; a host going down counts as no."""
        try:
            result = self.ssh("cat /proc/sys/kernel/random/boot_id", timeout=30)
        except subprocess.TimeoutExpired:
            return False
        boot_id = result.stdout.strip()
        return result.returncode == 0 and bool(boot_id) and boot_id != not_boot_id

    def reboot(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        """Reboot: a clean shutdown through systemd, then a fresh boot; wait for ssh from the new boot.

        The lab powers off and starts qemu again rather than letting the guest reset in place:
        under TCG a guest boots 2-3 times slower after an in-place reset (measured: ssh back
        80-105 s after `systemctl reboot`, against 7 s to power off plus 38 s to boot).
        """
        before = self.boot_id()
        say(f"{self.name}: rebooting (clean shutdown, then a fresh boot)")
        self.stop()
        self.start()
        self.wait_for_ssh(timeout, not_boot_id=before)

    def stop(self, timeout: float = 120) -> None:
        """Power off cleanly; kill qemu if the guest does not go down in time."""
        pid = self.pid
        if pid is None:
            return
        try:
            self.ssh("systemctl poweroff", timeout=20)
        except subprocess.TimeoutExpired:
            pass
        if not self._exited_within(timeout):
            # SIGTERM first: qemu then writes its caches back (cache=unsafe keeps them in qemu).
            say(f"{self.name}: no power-off after {timeout:.0f} s; stopping qemu")
            os.kill(pid, signal.SIGTERM)
            if not self._exited_within(15):
                os.kill(pid, signal.SIGKILL)
                time.sleep(1)

    def _exited_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.pid is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.pid is None

    def kill(self) -> None:
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def blank_nvme(self) -> None:
        """Replace the NVMe disk with a blank one, as an instance-store disk after stop/start."""
        if self.pid is not None:
            raise RuntimeError(f"{self.name}: stop the host before blanking its NVMe disk")
        _create_blank(self.path / "nvme.qcow2")


def _create_blank(path: Path) -> None:
    path.unlink(missing_ok=True)
    # preallocation=metadata: on a qcow2 without it, qemu 7.2's NVMe controller lost requests
    # during the first writes (mkfs, the first swap dd): 30 to 75 I/O timeouts, then EIO or the
    # device gone; 2 of 3 fresh images on an idle machine, in either cache mode. With it, none
    # (2 of 2), and the first 1 GiB dd took 19-23 s instead of 112 s (2026-12-01).
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", "preallocation=metadata", str(path), NVME_SIZE],
                   check=True)


class Lab:
    """A set of lab hosts whose state lives in one directory (`.lab/` by default)."""

    def __init__(self, directory: Path | None = None, cpus: int = 2):
        self.directory = Path(directory) if directory else default_lab_dir()
        self.cpus = cpus  # vCPUs of the hosts it starts
        self.state_file = self.directory / "lab.json"

    def hosts(self) -> list[LabHost]:
        if not self.state_file.exists():
            return []
        return [LabHost(**entry) for entry in json.loads(self.state_file.read_text())["hosts"]]

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
        self.state_file.write_text(json.dumps({"hosts": [asdict(h) for h in hosts]}, indent=2))
        # Pinned host keys: ssh and pyinfra check them strictly, as they should on any fleet.
        self.known_hosts.write_text("".join(
            f"[127.0.0.1]:{h.port} {base_image(h.os).host_key()}\n" for h in hosts
        ))

    def up(self, count: int = 1, os_name: str = "debian12", cgroup: str = "v2", prefix: str = "lab",
           cpus: int | None = None, memory_mb: int = MEMORY_MB, disks: tuple[str, ...] = ()) -> list[LabHost]:
        """Start `count` fresh hosts (besides any already running) and wait for ssh on all."""
        if cgroup == "v1" and os_name != "debian12":
            raise SystemExit("cgroup v1 needs --os debian12: Debian 13's systemd refuses cgroup v1")
        image = base_image(os_name)
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
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root_disk),
                            str(host_dir / "root.qcow2")], check=True)
            _create_blank(host_dir / "nvme.qcow2")
            new_hosts.append(LabHost(name=name, port=_free_port(), os=os_name, cgroup=cgroup,
                                     directory=str(host_dir), key=str(ssh_key()), cpus=cpus or self.cpus,
                                     known_hosts=str(self.known_hosts), memory_mb=memory_mb, disks=list(disks)))
        self._save(existing + new_hosts)
        say(f"booting {', '.join(h.name for h in new_hosts)} ({os_name}, cgroup {cgroup}, qemu TCG)")
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

    def status(self) -> list[dict]:
        return [
            {"name": h.name, "os": h.os, "cgroup": h.cgroup, "port": h.port,
             "running": h.pid is not None, "ssh": h.pid is not None and h.reachable()}
            for h in self.hosts()
        ]
