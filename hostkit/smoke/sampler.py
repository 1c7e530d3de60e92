"""Host memory and swap during a smoke run: sampled every 0.5 s, locally or over one ssh command.

Over ssh, one long-running remote loop prints a line per sample (a round trip per sample
would cost more than the sample). The loop ends by itself after a bounded number of
samples, and at the first write after the ssh connection closes.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from dataclasses import dataclass

from hostkit.facts.kernel_log import KernelLog, oom_lines_command, parse_kernel_log
from hostkit.facts.systemctl_show import SHOW_FUNCTIONS
from hostkit.paths import VLLM_UNIT

INTERVAL_S = 0.5
MAX_SAMPLES = 7200  # one hour at 0.5 s: the remote loop never outlives a forgotten run by much
_MEMINFO_KEYS = ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")
SSH_FAILED = 255  # ssh's own failure (connection refused or reset), as opposed to the command's status
SSH_ATTEMPTS = 3


@dataclass(frozen=True)
class MemorySample:
    t: float  # epoch seconds on this machine, when the sample arrived
    ram_total: int
    ram_available: int
    swap_total: int
    swap_free: int
    unit_current: int | None = None  # the vLLM unit's memory.current (cgroup v2), when it runs
    unit_swap: int | None = None

    @property
    def ram_used(self) -> int:
        return self.ram_total - self.ram_available

    @property
    def swap_used(self) -> int:
        return self.swap_total - self.swap_free


def sampler_script(unit: str = VLLM_UNIT, interval: float = INTERVAL_S, max_samples: int = MAX_SAMPLES) -> str:
    """Prints `s MemTotal:KB MemAvailable:KB SwapTotal:KB SwapFree:KB UNIT_CURRENT UNIT_SWAP` per sample.

    Shell builtins only, apart from `sleep`: on a loaded host every fork delays the sample.
    """
    keys = "|".join(f"{key}:" for key in _MEMINFO_KEYS)
    return SHOW_FUNCTIONS + "\n" + (
        f"cg=/sys/fs/cgroup$(hk_show_value {shlex.quote(unit)} ControlGroup); i=0; "
        f"while [ $i -lt {max_samples} ]; do "
        "line=s; "
        f"while read -r key value rest; do case $key in {keys}) line=\"$line $key$value\";; esac; done < /proc/meminfo; "
        "uc=-; us=-; "
        "[ -r \"$cg/memory.current\" ] && read -r uc < \"$cg/memory.current\"; "
        "[ -r \"$cg/memory.swap.current\" ] && read -r us < \"$cg/memory.swap.current\"; "
        "echo \"$line $uc $us\" || exit 0; "
        f"sleep {interval}; i=$((i+1)); done"
    )


def parse_sample_line(line: str, t: float) -> MemorySample | None:
    words = line.split()
    if len(words) != 1 + len(_MEMINFO_KEYS) + 2 or words[0] != "s":
        return None
    fields = {}
    for word in words[1:1 + len(_MEMINFO_KEYS)]:
        key, _, value = word.partition(":")
        if not value.isdigit():
            return None
        fields[key] = int(value) * 1024
    if set(fields) != set(_MEMINFO_KEYS):
        return None
    unit_current, unit_swap = (int(w) if w.isdigit() else None for w in words[-2:])
    return MemorySample(t, fields["MemTotal"], fields["MemAvailable"], fields["SwapTotal"], fields["SwapFree"],
                        unit_current, unit_swap)


class SshSampler:
    """Samples a remote host through `ssh_argv` (ssh and its options, up to the destination)."""

    def __init__(self, ssh_argv: list[str], label: str, unit: str = VLLM_UNIT):
        self.ssh_argv = list(ssh_argv)
        self.label = label
        self.unit = unit
        self.samples: list[MemorySample] = []
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [*self.ssh_argv, sampler_script(self.unit)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name="smoke-sampler", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            sample = parse_sample_line(line, time.time())
            if sample is not None:
                self.samples.append(sample)

    def stop(self) -> list[MemorySample]:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        return list(self.samples)

    def kernel_log(self) -> KernelLog:
        for _ in range(SSH_ATTEMPTS):
            result = subprocess.run([*self.ssh_argv, oom_lines_command()], capture_output=True, text=True,
                                    timeout=120, check=False)
            if result.returncode != SSH_FAILED:
                break
        return parse_kernel_log(result.stdout.splitlines())


class LocalSampler:
    """Samples this host with psutil; the unit's cgroup files are read directly."""

    def __init__(self, unit: str = VLLM_UNIT):
        self.label = "local"
        self.unit = unit
        self.samples: list[MemorySample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cgroup: str | None = None

    def start(self) -> None:
        try:
            found = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", self.unit],
                                   capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            found = ""
        self._cgroup = f"/sys/fs/cgroup{found}" if found else None
        self._thread = threading.Thread(target=self._run, name="smoke-sampler", daemon=True)
        self._thread.start()

    def _cgroup_value(self, name: str) -> int | None:
        if not self._cgroup:
            return None
        try:
            with open(f"{self._cgroup}/{name}") as handle:
                text = handle.read().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            virtual, swap = psutil.virtual_memory(), psutil.swap_memory()
            self.samples.append(MemorySample(
                time.time(), virtual.total, virtual.available, swap.total, swap.free,
                self._cgroup_value("memory.current"), self._cgroup_value("memory.swap.current"),
            ))
            self._stop.wait(INTERVAL_S)

    def stop(self) -> list[MemorySample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return list(self.samples)

    def kernel_log(self) -> KernelLog:
        result = subprocess.run(["sh", "-c", oom_lines_command()], capture_output=True, text=True,
                                timeout=120, check=False)
        return parse_kernel_log(result.stdout.splitlines())


# Never a password prompt; a dead connection noticed within seconds.
_SSH = ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5")


def ssh_argv_for(host: str, inventory: str | None = None) -> list[str]:
    """How to reach HOST: its inventory entry's ssh_* data, else plain ssh (HOST an ssh destination)."""
    if inventory:
        from hostkit.fleet.inventory import load_inventory

        for name, data in load_inventory(inventory):
            if name == host:
                return ssh_argv_from_data(name, data)
        raise KeyError(f"no host {host!r} in {inventory}")
    return [*_SSH, host]


def ssh_argv_from_data(name: str, data: dict) -> list[str]:
    from hostkit.fleet.inventory import SshSettings

    ssh = SshSettings.from_data(name, data)
    argv = list(_SSH)
    if ssh.port:
        argv += ["-p", str(ssh.port)]
    if ssh.key:
        argv += ["-i", ssh.key]
    if ssh.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={ssh.known_hosts}"]
    if ssh.strict is not None:
        argv += ["-o", f"StrictHostKeyChecking={ssh.strict}"]
    return argv + ["-o", "LogLevel=ERROR", f"{ssh.user}@{ssh.hostname}" if ssh.user else ssh.hostname]
