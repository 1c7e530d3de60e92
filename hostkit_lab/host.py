"""What every lab host is: a Debian with systemd and sshd, reached by ssh on a loopback port.

Two kinds (hostkit_lab.vm, hostkit_lab.container) differ in how they start and stop; tests,
inventories and pyinfra reach both the same way.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hostkit_lab.progress import say

BOOT_TIMEOUT_S = 600
TROUBLE = re.compile(r"nvme|I/O error|blk_update_request|Out of memory|Killed process|hung_task|blocked for more than"
                     r"|EXT4-fs error|Buffer I/O")


@dataclass
class LabHost:
    name: str
    port: int
    os: str
    directory: str
    key: str
    known_hosts: str = ""

    kind: ClassVar[str]

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
        """The process that is the host (qemu, systemd-nspawn) while it runs."""
        raise NotImplementedError

    def host_key(self) -> str:
        """sshd's public host key, for known_hosts."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 120) -> None:
        """Shut down cleanly; force it if the host does not go down in time."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def boot_id(self) -> str:
        return self.ssh("cat /proc/sys/kernel/random/boot_id", check=True).stdout.strip()

    def wait_for_ssh(self, timeout: float = BOOT_TIMEOUT_S, not_boot_id: str | None = None) -> None:
        started = time.monotonic()
        last_report = started
        while True:
            if self._answers_from_new_boot(not_boot_id):
                say(f"{self.name}: ssh up after {time.monotonic() - started:.0f} s")
                return
            if self.pid is None:
                raise RuntimeError(f"{self.name}: the {self.kind} exited; console:\n{self.console_tail()}")
            now = time.monotonic()
            if now - started > timeout:
                raise TimeoutError(f"{self.name}: no ssh after {timeout:.0f} s; console:\n{self.console_tail()}")
            if now - last_report >= 15:
                say(f"{self.name}: waiting for ssh ({now - started:.0f} s)")
                last_report = now
            time.sleep(1)

    def _answers_from_new_boot(self, not_boot_id: str | None) -> bool:
        """ssh works, and (when given) from a boot other than `not_boot_id`; a host going down counts as no."""
        try:
            result = self.ssh("cat /proc/sys/kernel/random/boot_id", timeout=30)
        except subprocess.TimeoutExpired:
            return False
        boot_id = result.stdout.strip()
        return result.returncode == 0 and bool(boot_id) and boot_id != not_boot_id

    def reboot(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        """Reboot: a clean shutdown, then a fresh start; wait for ssh from the new boot."""
        before = self.boot_id()
        say(f"{self.name}: rebooting (clean shutdown, then a fresh start)")
        self.stop()
        self.start()
        self.wait_for_ssh(timeout, not_boot_id=before)

    def _exited_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.pid is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.pid is None

    # -- diagnosis ----------------------------------------------------------------------
    def kernel_trouble(self, lines: int = 30) -> str:
        """The console's lines about I/O, the NVMe, OOM kills and hung tasks: what explains a host
        failing under load, for a failed test's report."""
        found = [line for line in self._console_lines() if TROUBLE.search(line)]
        return "\n".join(found[-lines:]) or "(none on the console)"

    def console_tail(self, lines: int = 40) -> str:
        """The end of the console, for errors that CI prints (the lab directory is gone after)."""
        return "\n".join(self._console_lines()[-lines:]) or "(no console.log)"

    def _console_lines(self) -> list[str]:
        try:
            return (self.path / "console.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def describe(self) -> str:
        return f"{self.os}, {self.kind}"
