"""What a scenario's records say, per host: pure functions of what the probes recorded.

Times are seconds since the scenario's window opened, on the controller's clock; the host's
kernel log is brought onto it by the clock offset measured at the start (`host_offset_s`).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from hostkit.facts.kernel_log import OomKill, parse_oom_kills


@dataclass(frozen=True)
class Request:
    """One completion request of the load: when it was sent and answered, and whether it served."""

    sent: float
    done: float
    ok: bool


@dataclass(frozen=True)
class Kill:
    """A process the kernel's OOM killer killed, when (window time) and where."""

    at: float
    process: str
    pid: int
    memcg: str | None
    system_wide: bool  # host-wide shortage, not a cgroup's limit

    def as_dict(self) -> dict:
        return {"at_s": round(self.at, 1), "process": self.process, "pid": self.pid, "memcg": self.memcg,
                "system_wide": self.system_wide}


# `journalctl -k -o short-unix`: "1765112345.123456 hostname kernel: message".
_SHORT_UNIX = re.compile(r"^(?P<stamp>\d+\.\d+) \S+ kernel: (?P<message>.*)$")


def kernel_kills(journal: str, window_start_unix: float, host_offset_s: float) -> list[Kill]:
    """The OOM kills in a `journalctl -k -o short-unix` text. `window_start_unix`: the window's
    start on the controller's clock (time.time()); `host_offset_s`: the host's clock minus the
    controller's."""
    stamped = [(float(m["stamp"]), m["message"]) for line in journal.splitlines()
               if (m := _SHORT_UNIX.match(line.strip()))]
    # parse_oom_kills pairs each `Killed process` line with the `oom-kill:` line before it.
    kills: list[OomKill] = list(parse_oom_kills([message for _, message in stamped]))
    stamps = iter(stamp for stamp, message in stamped if "Killed process" in message and _is_kill(message))
    return [Kill(at=next(stamps) - host_offset_s - window_start_unix, process=kill.process, pid=kill.pid,
                 memcg=kill.memcg, system_wide=not kill.cgroup_limit) for kill in kills]


def _is_kill(message: str) -> bool:
    return bool(parse_oom_kills([message]))


def outages(requests: list[Request], end: float) -> list[tuple[float, float]]:
    """Intervals, up to `end`, in which the host did not serve: from the answer of a failed
    request that follows a success (or opens the window) to the answer of the next success.
    The host counts as serving at the window's start (each scenario starts on a serving host)."""
    spans = []
    down_since = None
    for request in sorted(requests, key=lambda r: r.done):
        if request.done > end:
            break
        if not request.ok and down_since is None:
            down_since = request.done
        elif request.ok and down_since is not None:
            spans.append((down_since, request.done))
            down_since = None
    if down_since is not None:
        spans.append((down_since, end))
    return spans


def seconds_not_serving(requests: list[Request], end: float) -> float:
    return sum(stop - start for start, stop in outages(requests, end))


def serving_again_after(requests: list[Request], failure: float | None, end: float) -> float | None:
    """Seconds from `failure` to the first answered request after it that was sent after it
    and served; None when none did before `end` (or there was no failure)."""
    if failure is None:
        return None
    served = [r.done for r in requests if r.ok and r.sent >= failure and r.done <= end]
    return min(served) - failure if served else None


def first_failure(requests: list[Request]) -> float | None:
    """When the first failed request was answered: the failure as a client saw it."""
    failed = [r.done for r in requests if not r.ok]
    return min(failed) if failed else None


def per_second(requests: list[Request], end: float, step: float = 5.0) -> list[tuple[float, float]]:
    """(bucket start, successful requests per second in the bucket): the charts' curve."""
    buckets = int(end // step) + 1
    counts = [0] * buckets
    for request in requests:
        if request.ok and 0 <= request.done <= end:
            counts[int(request.done // step)] += 1
    return [(index * step, count / step) for index, count in enumerate(counts)]


def alert_leads(alerts: dict[str, dict], failure: float | None) -> dict[str, dict]:
    """Each alert that went pending or fired, with how many seconds before `failure` it did
    (negative: after). `alerts`: name -> {"pending_s": t or None, "firing_s": t or None}."""
    leads = {}
    for name, seen in sorted(alerts.items()):
        entry = {key: None if value is None else round(value, 1) for key, value in seen.items()}
        for key in ("pending", "firing"):
            at = seen.get(f"{key}_s")
            entry[f"{key}_lead_s"] = None if at is None or failure is None else round(failure - at, 1)
        leads[name] = entry
    return leads


def peak(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def spread(values: list[float | None]) -> dict:
    """Median, lowest and highest of a figure over runs; runs without the figure are counted."""
    present = [value for value in values if value is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "runs": len(values), "missing": len(values)}
    return {"median": round(statistics.median(present), 1), "min": round(min(present), 1),
            "max": round(max(present), 1), "runs": len(values), "missing": len(values) - len(present)}
