"""How long a deploy may hold the host's deploy lock before another run may take it over."""

from __future__ import annotations

# Longer than any deploy but its readiness gate, which waits vllm_ready_timeout more.
STALE_AFTER_S = 3600


def deploy_lock_stale_after_s(ready_timeout_s: int) -> int:
    """The deploy's lock is stale after this; the watchdog waits out a lock younger than it."""
    return STALE_AFTER_S + ready_timeout_s
