"""Host RAM: what one vLLM server needs of it, and what the OS keeps."""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.sizes import GIB, MIB, format_size

# Host RAM per vLLM instance, from the field notes: low and high ends of the observed range.
RAM_PER_GPU_PROCESS = (2 * GIB, 4 * GIB)
RAM_FRONTEND = (2 * GIB, 3 * GIB)
# "auto" memory limits move in these steps (see hostkit.plan.planner's docstring).
LIMIT_STEP = GIB
SMALL_LIMIT_STEP = 128 * MIB
SMALL_LIMIT = 8 * GIB


@dataclass(frozen=True)
class RamNeed:
    """About how much host RAM one vLLM server takes, and from what."""

    low: int
    high: int
    parts: tuple[str, ...]

    def describe(self) -> str:
        return f"vLLM needs about {format_size(self.low)}-{format_size(self.high)} of host RAM ({', '.join(self.parts)})"


def ram_need(tp: int, cpu_offload_gb: float | None, v0_engine: bool, swap_space: float | None) -> RamNeed:
    """`tp` GPU worker processes and the API server, --cpu-offload-gb per GPU, and under the V0
    engine its pinned --swap-space GiB per GPU (V1 ignores it)."""
    low = RAM_PER_GPU_PROCESS[0] * tp + RAM_FRONTEND[0]
    high = RAM_PER_GPU_PROCESS[1] * tp + RAM_FRONTEND[1]
    parts = [f"{tp} GPU process(es) and the frontend"]
    if v0_engine:
        pinned = int((swap_space or 0) * GIB) * tp
        low, high = low + pinned, high + pinned
        parts.append(f"--swap-space {swap_space} GiB x {tp} pinned")
    if cpu_offload_gb:
        offload = int(cpu_offload_gb * GIB) * tp
        low, high = low + offload, high + offload
        parts.append(f"--cpu-offload-gb {cpu_offload_gb} x {tp}")
    return RamNeed(low, high, tuple(parts))


def os_reserve(ram: int) -> int:
    """What vllm_memory_max "auto" leaves the OS and sshd: max(10% of RAM, min(2 GiB, half of it))."""
    return max(ram // 10, min(2 * GIB, ram // 2))


def auto_limit(value: int) -> int:
    """`value` rounded down to the step of an automatic memory limit."""
    step = LIMIT_STEP if value >= SMALL_LIMIT else SMALL_LIMIT_STEP
    return max(0, value) // step * step
