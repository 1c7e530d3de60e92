"""This boot's kernel log: the one reader (hostkit/remote/kernel_log.sh) and its parser,
with the two things hostkit looks for in it, OOM kills and NVIDIA Xid errors.

The snapshot's gpu section reads the Xid lines, `hostkit verify` the `Killed process`
lines, `hostkit doctor` and smoke runs the OOM report lines; each composes the reader into
its own remote command. The reader prints `source=journalctl|dmesg|none`, the kept lines,
then `total=N`. A source that prints no line cannot be read here, and a read that ran past
its deadline counts as unread: an unreadable log is "unknown", never "clean".

The kernel reports each OOM kill in two lines (kernel 4.19 and later):

    oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/system.slice/vllm.service,task_memcg=/system.slice/vllm.service,task=python3,pid=812,uid=0
    Memory cgroup out of memory: Killed process 812 (python3) total-vm:..., anon-rss:...kB, ...

`Out of memory: Killed process ...` is the system-wide form. The `oom-kill:` line names the
victim's cgroup, which is how a kill inside the vLLM unit is recognised after the process
is gone.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from hostkit.facts.deadline import DEADLINE_FUNCTION, KERNEL_LOG_S, TIMED_OUT, timed_out_lines
from hostkit.facts.parts import parse_int
from hostkit.remote import host_file

# The lines worth keeping, as extended regular expressions.
OOM_LINES = "invoked oom-killer|oom-kill:|Killed process|Out of memory"
KILL_LINES = "Killed process"
XID_LINES = "NVRM: Xid"
OOM_LINE_LIMIT = 400

_KILLED = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory)[^:]*: Killed process (?P<pid>\d+) \((?P<comm>[^)]*)\)"
    r"(?:.*?anon-rss:(?P<anon_kb>\d+)kB)?"
)
_OOM_KILL_FIELDS = re.compile(r"oom-kill:(?P<fields>\S+)")
_XID = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<code>\d+)(?:, (?P<detail>.*))?")


def kernel_log_script(match: str, limit: int, keep: str = "first") -> str:
    """The settings and the definition of `hk_kernel_log`, which prints the lines matching
    `match`, the first or the `keep="last"` `limit` of them. It needs hk_deadline."""
    settings = {
        "hk_log_match": match,
        "hk_log_limit": str(limit),
        "hk_log_keep": keep,
        "hk_log_s": str(KERNEL_LOG_S),
        "hk_timed_out": TIMED_OUT,
    }
    lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
    return "\n".join((*lines, host_file("kernel_log.sh")))


def kernel_log_command(match: str, limit: int, keep: str = "first") -> str:
    """A whole command that prints the kernel log's matching lines (exit 0 always)."""
    return "\n".join((DEADLINE_FUNCTION, kernel_log_script(match, limit, keep), "hk_kernel_log"))


def oom_lines_command() -> str:
    """The OOM report lines of this boot, the last OOM_LINE_LIMIT of them."""
    return kernel_log_command(OOM_LINES, OOM_LINE_LIMIT, keep="last")


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
class XidEvent:
    device: str  # as the driver prints it, e.g. "PCI:0000:3b:00"
    code: int
    detail: str


@dataclass(frozen=True)
class KernelLog:
    # "journalctl" | "dmesg" | "no-driver" (the gpu section did not read it) | None when unreadable
    source: str | None
    lines: tuple[str, ...] = ()  # the kept lines, as logged
    total: int = 0  # how many lines matched; may exceed len(lines)

    @property
    def readable(self) -> bool:
        return self.source is not None

    @property
    def oom_kills(self) -> tuple[OomKill, ...]:
        return parse_oom_kills(self.lines)

    @property
    def xids(self) -> tuple[XidEvent, ...]:
        return tuple(event for event in map(parse_xid_line, self.lines) if event is not None)


def parse_kernel_log(output: list[str]) -> KernelLog:
    source = "none"
    total = None
    lines = []
    for line in output:
        if line.startswith("source="):
            source = line.split("=", 1)[1].strip()
        elif line.startswith("total="):
            total = parse_int(line[len("total="):], 0)
        elif line.strip() and not line.startswith(TIMED_OUT):
            lines.append(line.rstrip())
    if timed_out_lines(output):
        source = "none"
    return KernelLog(None if source == "none" else source, tuple(lines), max(total or 0, len(lines)))


def parse_xid_line(line: str) -> XidEvent | None:
    match = _XID.search(line)
    if match is None:
        return None
    return XidEvent(
        device=match["device"], code=int(match["code"]), detail=(match["detail"] or "").strip()
    )


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
