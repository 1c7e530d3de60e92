"""OOM kills in the kernel log: the shell that reads them, and the parser.

The kernel reports each kill in two lines (kernel 4.19 and later):

    oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/system.slice/vllm.service,task_memcg=/system.slice/vllm.service,task=python3,pid=812,uid=0
    Memory cgroup out of memory: Killed process 812 (python3) total-vm:..., anon-rss:...kB, ...

`Out of memory: Killed process ...` is the system-wide form. The `oom-kill:` line names the
victim's cgroup, which is how a kill inside the vLLM unit is recognised after the process
is gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One grep pattern for every line that belongs to an OOM report worth keeping.
OOM_GREP = "invoked oom-killer|oom-kill:|Killed process|Out of memory"
OOM_LINE_LIMIT = 400

_KILLED = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory)[^:]*: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"(?:.*?anon-rss:(?P<anon_kb>\d+)kB)?"
)
_OOM_KILL_FIELDS = re.compile(r"oom-kill:(?P<fields>\S+)")


def kernel_log_oom_command() -> str:
    """Prints `source=journalctl|dmesg|none`, then the OOM lines of this boot (exit 0 always).

    An unreadable log (no journal, dmesg restricted) is `source=none`: "unknown", never "clean".
    """
    return (
        "if command -v journalctl >/dev/null 2>&1"
        " && [ -n \"$(journalctl -k -b -q --no-pager -n 1 2>/dev/null)\" ]; then"
        " echo source=journalctl; journalctl -k -b -q --no-pager -o short-iso 2>/dev/null"
        " | grep -E '" + OOM_GREP + "' | tail -n " + str(OOM_LINE_LIMIT) + ";"
        " elif [ -n \"$(dmesg 2>/dev/null | head -n 1)\" ]; then"
        " echo source=dmesg; dmesg 2>/dev/null | grep -E '" + OOM_GREP + "' | tail -n " + str(OOM_LINE_LIMIT) + ";"
        " else echo source=none; fi"
    )


@dataclass(frozen=True)
class OomKill:
    """One process killed by the OOM killer."""

    pid: int
    process: str  # the victim's comm, e.g. "python3" or "VLLM::EngineCor"
    anon_rss_bytes: int | None
    cgroup_limit: bool  # killed for exceeding a cgroup's memory limit, not for host-wide shortage
    memcg: str | None  # the victim's cgroup path, when the kernel printed it
    line: str  # the `Killed process` line as logged

    def in_unit(self, unit: str) -> bool:
        return self.memcg is not None and self.memcg.rstrip("/").endswith("/" + unit)


@dataclass(frozen=True)
class KernelLog:
    source: str | None  # "journalctl" | "dmesg" | None when unreadable
    lines: tuple[str, ...] = ()  # OOM-related lines, as logged

    @property
    def readable(self) -> bool:
        return self.source is not None

    @property
    def oom_kills(self) -> tuple[OomKill, ...]:
        return parse_oom_kills(self.lines)


def parse_kernel_log(output: list[str]) -> KernelLog:
    source = "none"
    lines = []
    for line in output:
        if line.startswith("source="):
            source = line.split("=", 1)[1].strip()
        elif line.strip():
            lines.append(line.rstrip())
    return KernelLog(None if source == "none" else source, tuple(lines))


def _oom_kill_fields(line: str) -> dict[str, str]:
    match = _OOM_KILL_FIELDS.search(line)
    if match is None:
        return {}
    fields = {}
    for part in match["fields"].split(","):
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


def parse_oom_kills(lines: list[str] | tuple[str, ...]) -> tuple[OomKill, ...]:
    """Kills in log order; each `Killed process` line is matched with the `oom-kill:` line before it."""
    kills = []
    pending: dict[str, str] = {}
    for line in lines:
        fields = _oom_kill_fields(line)
        if fields:
            pending = fields
            continue
        match = _KILLED.search(line)
        if match is None:
            continue
        pid = int(match["pid"])
        context = pending if pending.get("pid") == str(pid) else {}
        pending = {}
        kills.append(
            OomKill(
                pid=pid,
                process=match["comm"],
                anon_rss_bytes=int(match["anon_kb"]) * 1024 if match["anon_kb"] else None,
                cgroup_limit=match["scope"].startswith("Memory cgroup")
                or context.get("constraint") == "CONSTRAINT_MEMCG",
                memcg=context.get("task_memcg") or None,
                line=line,
            )
        )
    return tuple(kills)


def new_lines(before: KernelLog, after: KernelLog) -> tuple[str, ...]:
    """Lines in `after` that `before` did not have (each logged line carries its own timestamp)."""
    seen: dict[str, int] = {}
    for line in before.lines:
        seen[line] = seen.get(line, 0) + 1
    fresh = []
    for line in after.lines:
        if seen.get(line, 0):
            seen[line] -= 1
        else:
            fresh.append(line)
    return tuple(fresh)
