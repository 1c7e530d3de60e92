"""Basic host facts: OS, kernel, memory, cgroup and systemd versions."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from hostkit.remote import host_file


@dataclass(frozen=True)
class SystemInfo:
    hostname: str
    os_id: str
    os_version_id: str
    kernel: str
    boot_id: str
    cpu_count: int
    mem_total_bytes: int
    mem_available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int
    cgroup_version: int
    systemd_version: int
    kernel_cmdline: str


def _meminfo_bytes(fields: dict[str, str], key: str) -> int:
    value = fields.get(key, "0 kB").split()
    return int(value[0]) * (1024 if len(value) > 1 and value[1] == "kB" else 1)


class SystemFact(FactBase):
    """`key=value` lines, then /proc/meminfo verbatim: hostkit/remote/system.sh."""

    section = "system"

    def command(self) -> str:
        return host_file("system.sh")

    def process(self, output: list[str]) -> SystemInfo:
        values: dict[str, str] = {}
        meminfo: dict[str, str] = {}
        for line in output:
            if line.startswith("meminfo:"):
                key, _, value = line[len("meminfo:"):].partition(":")
                meminfo[key.strip()] = value.strip()
            else:
                key, _, value = line.partition("=")
                values[key] = value.strip()
        systemd_words = values.get("systemd", "").split()
        systemd_version = int(systemd_words[1]) if len(systemd_words) > 1 and systemd_words[1].isdigit() else 0
        return SystemInfo(
            hostname=values.get("hostname", ""),
            os_id=values.get("os_id", ""),
            os_version_id=values.get("os_version_id", ""),
            kernel=values.get("kernel", ""),
            boot_id=values.get("boot_id", ""),
            cpu_count=int(values.get("cpu_count") or 0),
            mem_total_bytes=_meminfo_bytes(meminfo, "MemTotal"),
            mem_available_bytes=_meminfo_bytes(meminfo, "MemAvailable"),
            swap_total_bytes=_meminfo_bytes(meminfo, "SwapTotal"),
            swap_free_bytes=_meminfo_bytes(meminfo, "SwapFree"),
            cgroup_version=2 if values.get("cgroup_fs") == "cgroup2fs" else 1,
            systemd_version=systemd_version,
            kernel_cmdline=values.get("cmdline", ""),
        )
