"""Pure parts of the benchmark: counting remote commands in tool logs, and summarising runs.

- pyinfra 3.10's ssh connector logs, at --debug, one line per remote command:
  `Running command on HOST: (pty=False) ...`, and one line per file upload (sftp):
  `Attempting upload of ... to PATH`, which names no host.
- ansible-playbook at -vvv logs one `SSH: EXEC ssh ...` (or `sftp`/`scp`) line per ssh
  invocation: each module execution, each temporary-directory command and each file
  transfer. All lab hosts are 127.0.0.1, so the host is told by the `-o Port=N` argument.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_PYINFRA_COMMAND = re.compile(r"Running command on (?P<host>[^:\s]+): \(pty=")
_PYINFRA_UPLOAD = re.compile(r"Attempting upload of .+ to ")
_ANSIBLE_EXEC = re.compile(r"SSH: EXEC (?P<argv>.*)")
_PORT_ARGUMENT = re.compile(r"(?:^|\s)-o\s+'?Port=(?P<port>\d+)'?(?=\s|$)")


def pyinfra_remote_commands(debug_log: str) -> dict[str, int]:
    """Remote commands per host in a pyinfra --debug log (stderr)."""
    return dict(Counter(match["host"] for match in _PYINFRA_COMMAND.finditer(debug_log)))


def pyinfra_uploads(debug_log: str) -> int:
    """File uploads in a pyinfra --debug log; pyinfra does not say to which host."""
    return len(_PYINFRA_UPLOAD.findall(debug_log))


def ansible_remote_commands(vvv_log: str, hosts_by_port: Mapping[int, str]) -> dict[str, int]:
    """ssh invocations per host in an ansible-playbook -vvv log.

    An EXEC line whose port is not in `hosts_by_port` raises ValueError: it would
    otherwise go uncounted.
    """
    counts: Counter[str] = Counter({name: 0 for name in hosts_by_port.values()})
    for line in vvv_log.splitlines():
        match = _ANSIBLE_EXEC.search(line)
        if match is None:
            continue
        port = _PORT_ARGUMENT.search(match["argv"])
        if port is None or int(port["port"]) not in hosts_by_port:
            raise ValueError(f"cannot tell which host this ssh command went to: {line[:200]}")
        counts[hosts_by_port[int(port["port"])]] += 1
    return dict(counts)


# -- summaries -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A goal from issue 11: `value` compared with `limit` ("min": at least, "max": at most)."""

    name: str
    value: float | None
    limit: float
    kind: str  # "min" | "max"

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.limit if self.kind == "min" else self.value <= self.limit

    def verdict(self) -> str:
        return {True: "met", False: "NOT met", None: "not measured"}[self.met]


def median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def per_host_max(counts: Iterable[Mapping[str, int]]) -> int | None:
    """The most remote commands any one host ran in any of the runs."""
    values = [count for run in counts for count in run.values()]
    return max(values) if values else None


def targets(summary: Mapping[str, float | None]) -> list[Target]:
    """The issue's targets, from summary figures (None where not measured)."""
    return [
        Target("no-op rerun at least 10x faster than Ansible", summary.get("noop_speedup"), 10, "min"),
        Target("first run at least 3x faster than Ansible", summary.get("first_speedup"), 3, "min"),
        Target("no-op rerun: at most 5 remote commands per host", summary.get("noop_commands_per_host"), 5, "max"),
        Target("verify: at most 3 remote commands per host", summary.get("verify_commands_per_host"), 3, "max"),
        Target("3 hosts in at most 1.3x the time of 1 (no-op rerun)", summary.get("fleet_noop_ratio"), 1.3, "max"),
        Target("3 hosts in at most 1.3x the time of 1 (first run)", summary.get("fleet_first_ratio"), 1.3, "max"),
    ]
