"""One smoke run: memory baseline, bounded load, then wait for swap to settle; OOM lines around it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from hostkit.facts.kernel_log import KernelLog, new_lines, parse_oom_kills
from hostkit.sizes import MIB
from hostkit.smoke.load import LoadResult, run_load
from hostkit.smoke.sampler import INTERVAL_S, MemorySample

BASELINE_S = 2.0  # samples before the load: what "back to baseline" means
BASELINE_WAIT_MAX_S = 60.0  # for the first samples to arrive before the load starts anyway
TAIL_S = 2.0  # samples after the load even when swap never moved
# Swap "came back" when what is left above the baseline is at most half of the rise, or noise.
RECOVERY_FRACTION = 0.5
SWAP_NOISE_BYTES = 32 * MIB


class Sampler(Protocol):
    label: str
    samples: list[MemorySample]

    def start(self) -> None: ...
    def stop(self) -> list[MemorySample]: ...
    def kernel_log(self) -> KernelLog: ...


@dataclass(frozen=True)
class SwapSummary:
    baseline: int
    peak: int
    peak_t: float
    final: int
    total: int

    @property
    def rise(self) -> int:
        return max(0, self.peak - self.baseline)

    @property
    def left_over(self) -> int:
        return max(0, self.final - self.baseline)

    @property
    def recovered(self) -> bool:
        return self.left_over <= max(SWAP_NOISE_BYTES, RECOVERY_FRACTION * self.rise)


@dataclass(frozen=True)
class RamSummary:
    total: int
    baseline_used: int
    peak_used: int
    final_used: int
    unit_peak: int | None  # the vLLM unit's highest memory.current seen


@dataclass
class SmokeRun:
    url: str
    load: LoadResult
    watch: str | None  # what was sampled: "local", a host name, or None
    samples: list[MemorySample]
    oom_lines: tuple[str, ...]  # kernel OOM lines logged during the run
    kernel_log_source: str | None
    settle_s: float

    @property
    def oom_kills(self):
        return parse_oom_kills(self.oom_lines)

    def problems(self) -> list[str]:
        """Why the run failed; empty when it passed."""
        problems = []
        if self.load.failed:
            problems.append(f"{self.load.failed} of {len(self.load.results)} requests failed")
        if self.load.not_sent:
            problems.append(f"{self.load.not_sent} requests were not sent before the time limit")
        if self.oom_lines:
            kills = self.oom_kills
            problems.append(f"the kernel logged OOM activity during the run ({len(kills)} kill(s))")
        if self.watch is not None and not self.samples:
            problems.append(f"no memory samples came from {self.watch}")
        return problems

    def warnings(self) -> list[str]:
        """Worth a look, but not a failure: swap that stays up after the load."""
        swap = self.swap()
        if swap is not None and not swap.recovered:
            return [f"swap did not come back toward its baseline within {self.settle_s:g} s after the load"]
        return []

    @property
    def ok(self) -> bool:
        return not self.problems()

    def swap(self) -> SwapSummary | None:
        if not self.samples:
            return None
        before = [s for s in self.samples if s.t < self.load.started_at] or self.samples[:1]
        after = [s for s in self.samples if s.t >= self.load.started_at] or self.samples[-1:]
        baseline = sorted(s.swap_used for s in before)[len(before) // 2]
        peak = max(after, key=lambda s: s.swap_used)
        return SwapSummary(baseline, peak.swap_used, peak.t, self.samples[-1].swap_used, self.samples[-1].swap_total)

    def ram(self) -> RamSummary | None:
        if not self.samples:
            return None
        before = [s for s in self.samples if s.t < self.load.started_at] or self.samples[:1]
        unit = [s.unit_current for s in self.samples if s.unit_current is not None]
        return RamSummary(
            total=self.samples[-1].ram_total,
            baseline_used=sorted(s.ram_used for s in before)[len(before) // 2],
            peak_used=max(s.ram_used for s in self.samples),
            final_used=self.samples[-1].ram_used,
            unit_peak=max(unit) if unit else None,
        )


def _swap_settled(samples: list[MemorySample], load_started: float) -> bool:
    before = [s.swap_used for s in samples if s.t < load_started]
    after = [s.swap_used for s in samples if s.t >= load_started]
    if not before or not after:
        return True
    baseline = sorted(before)[len(before) // 2]
    rise = max(0, max(after) - baseline)
    return max(0, after[-1] - baseline) <= max(SWAP_NOISE_BYTES, RECOVERY_FRACTION * rise)


def smoke_run(url: str, base: str, model: str, *, concurrency: int, requests: int, max_tokens: int,
              api_key: str | None, request_timeout: float, time_limit: float, settle_s: float,
              sampler: Sampler | None) -> SmokeRun:
    log_before = None
    if sampler is not None:
        log_before = sampler.kernel_log()
        sampler.start()
        _wait_for_samples(sampler, BASELINE_S)
    load = run_load(base, model, concurrency=concurrency, requests=requests, max_tokens=max_tokens,
                    api_key=api_key, request_timeout=request_timeout, time_limit=time_limit)
    samples: list[MemorySample] = []
    oom, source = (), None
    if sampler is not None:
        deadline = time.monotonic() + settle_s
        time.sleep(TAIL_S)
        while time.monotonic() < deadline and not _swap_settled(list(sampler.samples), load.started_at):
            time.sleep(INTERVAL_S)
        samples = sampler.stop()
        log_after = sampler.kernel_log()
        oom, source = new_lines(log_before, log_after), log_after.source
    return SmokeRun(url=url, load=load, watch=sampler.label if sampler else None, samples=samples,
                    oom_lines=oom, kernel_log_source=source, settle_s=settle_s)


def _wait_for_samples(sampler: Sampler, seconds: float) -> None:
    """Baseline time, counted from the first sample (an ssh connection takes a moment), and at
    least two samples: a loaded host may take seconds per sample."""
    deadline = time.monotonic() + BASELINE_WAIT_MAX_S
    while not sampler.samples and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(seconds)
    while len(sampler.samples) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
