"""The three failures of the field reports, each driven the same way on every host of the run at
once (the same load, the same fault at the same second, the same window), and measured.

1. Host memory runs out under concurrent load: concurrency and prompt lengths step up while a
   co-tenant (the data loader the reports blame: host/neighbour.py, four worker processes)
   grows until the host's RAM is short by NEIGHBOUR_OVER_MIB. With VLLM_CPU_KVCACHE_SPACE
   fixed, vLLM's CPU build preallocates its KV cache: load alone barely moves its RAM (the
   unit's memory is sampled, so the run shows by how much); what runs the host out is the
   co-tenant, as in the reports.
2. The engine dies mid-service: `kill -9` of VLLM::Worker, the process the OOM killer picks in
   the unit (its largest). vLLM's API server then exits 0 (field notes).
3. A neighbour eats the host's memory while vLLM serves: the same co-tenant, all at once
   (in NEIGHBOUR_BURST_S), at a steady load; which process the kernel's OOM killer chooses is
   read from the kernel log.

A window ends when nothing more will change by itself: every host either serves steadily
again or has a vLLM unit systemd will not start again (inactive or failed), or at its limit.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.cure import measure
from bench.cure.hosts import MODEL, CureHost, wait_serving
from bench.cure.probes import Alerts, Clock, Load, Sampler, models_listed
from bench.cure.remote import run, say, script

MIB = 2**20
NEIGHBOUR = "/root/cure-neighbour.py"
NEIGHBOUR_WORKERS = 4
NEIGHBOUR_OVER_MIB = 768  # the co-tenant's need beyond the host's available RAM
NEIGHBOUR_BURST_S = 20
STEADY_S = 60  # serving steadily: only successes answered in the last minute
CHECK_S = 10
SERIES_STEP_S = 10


@dataclass(frozen=True)
class Scenario:
    number: int
    title: str
    fault: str  # "kill-worker" | "neighbour"
    fault_at_s: float
    shape: Callable[[float], tuple[int, int]]  # window time -> (concurrency, prompt tokens)
    max_concurrency: int
    settle_s: float  # the least window after the fault
    limit_s: float  # the most window
    neighbour_ramp_s: float = 0.0


def _ramp(t: float) -> tuple[int, int]:
    """Concurrency 1, 2, 4, 8 and prompts of 64 to 900 tokens (max-model-len is 1024), a step a minute."""
    steps = ((1, 64), (2, 256), (4, 512), (8, 900))
    return steps[min(int(t // 60), len(steps) - 1)]


SCENARIOS = {
    1: Scenario(1, "host memory runs out under concurrent load", "neighbour", 0.0, _ramp, 8,
                settle_s=300, limit_s=1500, neighbour_ramp_s=240),
    2: Scenario(2, "the engine dies mid-service (kill -9 of VLLM::Worker)", "kill-worker", 60.0,
                lambda t: (2, 64), 2, settle_s=120, limit_s=1500),
    3: Scenario(3, "a neighbour eats the host's memory", "neighbour", 60.0, lambda t: (4, 256), 4,
                settle_s=180, limit_s=900, neighbour_ramp_s=NEIGHBOUR_BURST_S),
}


def clock_offset(host: CureHost) -> float:
    """The host's clock minus this machine's, from one `date` round trip."""
    before = time.time()
    stamp = float(host.sh("date +%s.%N"))
    return stamp - (before + time.time()) / 2


def available_bytes(host: CureHost) -> int:
    return int(host.sh("awk '/^MemAvailable:/ {print $2}' /proc/meminfo")) * 1024


def unit_state(host: CureHost) -> dict[str, str]:
    shown = host.sh("systemctl show vllm.service -p ActiveState -p NRestarts", check=False)
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def watchdog_restarts(host: CureHost) -> int:
    """The restarts hostkit's watchdog has recorded (its state file; tests/e2e/test_real_vllm.py)."""
    state = json.loads(host.sh("cat /var/lib/vllm-hostkit/watchdog.json 2>/dev/null || echo '{}'") or "{}")
    return int(state.get("restarts_total") or 0)


class Watch:
    """One host's probes during a window."""

    def __init__(self, host: CureHost, scenario: Scenario, key: str, clock: Clock, work: Path):
        self.host = host
        self.load = Load(host.vllm, key, MODEL, clock, scenario.shape, scenario.max_concurrency)
        self.sampler = Sampler(host.lab_host, clock)
        self.alerts = (Alerts(work / f"prometheus-{host.name}-{scenario.number}", host.name, host.node.url, clock)
                       if host.node is not None else None)
        self.offset_s = clock_offset(host)
        self.restarts_before = int(unit_state(host).get("NRestarts", 0))
        self.watchdog_before = watchdog_restarts(host) if host.setup == "hostkit" else None
        self.fault_at: float | None = None
        self.given_up_checks = 0

    def start(self) -> None:
        for probe in (self.sampler, self.load, self.alerts):
            if probe is not None:
                probe.start()

    def stop(self) -> None:
        for probe in (self.load, self.sampler, self.alerts):
            if probe is not None:
                probe.stop()

    def settled(self, now: float) -> bool:
        """Serving steadily, or a unit that systemd will not start again (seen twice in a row)."""
        recent = [r for r in self.load.requests if r.done >= now - STEADY_S]
        if recent and all(r.ok for r in recent):
            return True
        state = unit_state(self.host).get("ActiveState")
        self.given_up_checks = self.given_up_checks + 1 if state in ("inactive", "failed") else 0
        return self.given_up_checks >= 2


def fault(scenario: Scenario, watch: Watch, clock: Clock, target_mib: int) -> None:
    host = watch.host
    watch.fault_at = clock.now()
    if scenario.fault == "kill-worker":
        host.sh("pkill -KILL -u vllm -f '^VLLM::Worker'", what="kill -9 of VLLM::Worker")
    else:
        host.sh(f"systemd-run --quiet --unit=cure-neighbour python3 {NEIGHBOUR} {NEIGHBOUR_WORKERS} {target_mib} "
                f"{scenario.neighbour_ramp_s:g}", what="starting the neighbour")


def run_window(scenario: Scenario, hosts: list[CureHost], key: str, work: Path) -> dict:
    """One window on every host at once; each host's figures, the window's length and the co-tenant's size."""
    for host in hosts:
        run(host.lab_host, f"cat > {NEIGHBOUR}", 60, "copying the neighbour", stdin=script("neighbour.py"))
    # The same co-tenant on every host: the least available RAM among them, and more.
    target_mib = min(map(available_bytes, hosts)) // MIB + NEIGHBOUR_OVER_MIB
    clock = Clock()
    watches = [Watch(host, scenario, key, clock, work) for host in hosts]
    for watch in watches:
        watch.start()
    say(f"scenario {scenario.number}: {scenario.title}; fault at {scenario.fault_at_s:.0f} s"
        + (f", co-tenant {target_mib} MiB" if scenario.fault == "neighbour" else ""))
    try:
        _drive(scenario, watches, clock, target_mib)
    finally:
        end = clock.now()
        for watch in watches:
            watch.stop()
    return {"window_s": round(end, 1), "neighbour_mib": target_mib if scenario.fault == "neighbour" else None,
            "hosts": {watch.host.setup: host_figures(watch, clock, end, work / f"scenario-{scenario.number}")
                      for watch in watches}}


def _drive(scenario: Scenario, watches: list[Watch], clock: Clock, target_mib: int) -> None:
    time.sleep(max(0.0, scenario.fault_at_s - clock.now()))
    # Every host's fault at the same moment.
    threads = [threading.Thread(target=fault, args=(scenario, watch, clock, target_mib)) for watch in watches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    last_report = clock.now()
    while True:
        time.sleep(CHECK_S)
        now = clock.now()
        if now - scenario.fault_at_s >= scenario.settle_s and all(watch.settled(now) for watch in watches):
            say(f"scenario {scenario.number}: every host settled at {now:.0f} s")
            return
        if now >= scenario.limit_s:
            say(f"scenario {scenario.number}: window limit ({scenario.limit_s:.0f} s) reached")
            return
        if now - last_report >= 60:
            last_report = now
            say(f"scenario {scenario.number}: {now:.0f} s; " + "; ".join(
                f"{w.host.setup}: {sum(r.ok for r in w.load.requests)} ok, {sum(not r.ok for r in w.load.requests)} "
                f"failed" for w in watches))


def host_figures(watch: Watch, clock: Clock, end: float, logs: Path) -> dict:
    """The host's figures; its kernel log and vLLM's journal of the window kept in `logs`."""
    host = watch.host
    requests = watch.load.requests
    since = f"--since @{int(clock.started_unix + watch.offset_s)}"
    journal = _readable(host, f"journalctl -k -o short-unix --no-pager {since}", "reading the kernel log")
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"kernel-{host.setup}.log").write_text(journal or "")
    (logs / f"vllm-{host.setup}.log").write_text(_readable(host, f"journalctl -u vllm.service -o short-unix "
                                                                 f"--no-pager {since}", "reading vLLM's journal") or "")
    kills = measure.kernel_kills(journal or "", clock.started_unix, watch.offset_s)
    failure = measure.first_failure(requests)
    state = unit_state(host) if journal is not None else {}
    samples = watch.sampler.samples
    return {
        "requests": {"sent": len(requests), "succeeded": sum(r.ok for r in requests),
                     "failed": sum(not r.ok for r in requests)},
        "fault_at_s": None if watch.fault_at is None else round(watch.fault_at, 1),
        "first_failure_s": None if failure is None else round(failure, 1),
        "not_serving_s": round(measure.seconds_not_serving(requests, end), 1),
        "serving_again_after_s": _rounded(measure.serving_again_after(requests, failure, end)),
        "kills": [kill.as_dict() for kill in kills],
        "kernel_log_read": journal is not None,
        "peaks": {
            "mem_used_mib": _mib(measure.peak([s.mem_used for s in samples])),
            "mem_available_min_mib": _mib(min((s.mem_available for s in samples), default=None)),
            "swap_used_mib": _mib(measure.peak([s.swap_used for s in samples])),
            "swap_total_mib": _mib(measure.peak([s.swap_total for s in samples])),
            "vllm_unit_mib": _mib(measure.peak([s.unit_bytes for s in samples])),
            "neighbour_mib": _mib(measure.peak([s.neighbour_bytes for s in samples])),
        },
        "unit": {"systemd_restarts": int(state["NRestarts"]) - watch.restarts_before if "NRestarts" in state else None,
                 "watchdog_restarts": (watchdog_restarts(host) - watch.watchdog_before
                                       if journal is not None and watch.watchdog_before is not None else None),
                 "active_at_end": state.get("ActiveState")},
        "alerts": None if watch.alerts is None else measure.alert_leads(watch.alerts.seen, failure),
        "alerts_error": None if watch.alerts is None else watch.alerts.error,
        "sampler_ssh_restarts": watch.sampler.ssh_restarts,
        "host_clock_offset_s": round(watch.offset_s, 2),
        "series": series(samples, requests, end),
    }


def series(samples: list, requests: list[measure.Request], end: float) -> dict:
    """Every SERIES_STEP_S: memory used, swap used, the co-tenant (MiB), successful requests a second."""
    points = {"t_s": [], "mem_used_mib": [], "swap_used_mib": [], "neighbour_mib": []}
    next_at = 0.0
    for sample in samples:
        if sample.at >= next_at:
            points["t_s"].append(round(sample.at, 1))
            points["mem_used_mib"].append(_mib(sample.mem_used))
            points["swap_used_mib"].append(_mib(sample.swap_used))
            points["neighbour_mib"].append(_mib(sample.neighbour_bytes))
            next_at = sample.at + SERIES_STEP_S
    rate = measure.per_second(requests, end, SERIES_STEP_S)
    points["ok_per_s"] = [[round(t, 1), round(value, 2)] for t, value in rate]
    return points


def _readable(host: CureHost, command: str, what: str) -> str | None:
    """`command`'s output, or None when the host does not answer (sshd itself may be gone)."""
    try:
        return host.sh(command, timeout=120, what=what)
    except (TimeoutError, RuntimeError) as failure:
        say(f"{host.name}: {failure}")
        return None


def reset(hosts: list[CureHost], key: str) -> dict:
    """Between scenarios, on every host: the co-tenant stopped, the swap emptied (swapoff, swapon),
    the page cache dropped, vLLM started again where it is not serving; seconds per host."""
    def one(host: CureHost) -> float:
        started = time.monotonic()
        host.sh("systemctl stop cure-neighbour 2>/dev/null; systemctl reset-failed cure-neighbour 2>/dev/null; true")
        # The active swap files by name: `swapon -a` would not bring back hostkit's, which its
        # boot unit activates, not fstab (the first run lost it that way).
        host.sh("files=$(swapon --show=NAME --noheadings); swapoff -a && for f in $files; do swapon \"$f\"; done && "
                "sync && echo 3 > /proc/sys/vm/drop_caches", timeout=600, what="emptying swap and the page cache")
        if not models_listed(host.vllm, key, MODEL):
            host.sh("systemctl reset-failed vllm.service; systemctl restart vllm.service", what="restarting vLLM")
            wait_serving(host, key)
        return round(time.monotonic() - started, 1)

    with ThreadPoolExecutor(len(hosts)) as pool:
        return dict(zip((host.setup for host in hosts), pool.map(one, hosts)))


def _mib(value: float | None) -> int | None:
    return None if value is None else int(value // MIB)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
