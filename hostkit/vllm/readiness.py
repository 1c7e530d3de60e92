"""Is a vLLM server ready? Probe /health, then /v1/models, from the host itself; poll until ready.

vLLM binds its port only once the model is loaded: /health refuses connections while
loading, answers 200 when serving, and 500/503 once the engine died. /v1/models then must
list the served model name. The probe runs on the host (the port need not be reachable
from the controller) with python3's standard library. When an API key is set, /v1/*
needs it: the probe reads it from the root-only environment file on the host, so it never
appears in a command line or in pyinfra's output.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from hostkit.remote import host_file, host_program
from hostkit.paths import PLATFORM_PYTHON, VLLM_ENV_FILE

PROBE_TIMEOUT_S = 5

# The program: hostkit/remote/readiness_probe.py, with hostkit's HTTP client before it.
_PROBE_SCRIPT = host_program(f"TIMEOUT = {PROBE_TIMEOUT_S}\n" + host_file("readiness_probe.py"), "http_request.py")


def probe_address(bind_host: str) -> str:
    """Where to reach a server bound to `bind_host` from the host itself."""
    if bind_host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bind_host == "::":
        return "::1"
    return bind_host


# Sets $hk_py to the host's python3, else RHEL 8's platform-python (3.6, which the probe
# supports: it sticks to what 3.6's standard library has); fails when there is neither.
HOST_PYTHON = f"hk_py=$(command -v python3 || {{ [ -x {PLATFORM_PYTHON} ] && echo {PLATFORM_PYTHON}; }})"


def probe_command(bind_host: str, port: int, env_file: str = VLLM_ENV_FILE) -> str:
    """Shell command printing one JSON line (see `Probe`), or nothing without a python."""
    args = " ".join(shlex.quote(word) for word in (probe_address(bind_host), str(port), env_file))
    return f'{HOST_PYTHON} && "$hk_py" -I -S -c {shlex.quote(_PROBE_SCRIPT)} {args}'


@dataclass(frozen=True)
class Probe:
    health: int | None  # HTTP status of /health; None: no answer (see error)
    error: str
    models_status: int | None
    models: tuple[str, ...] | None

    @classmethod
    def parse(cls, line: str) -> Probe | None:
        try:
            data = json.loads(line)
        except ValueError:
            return None
        models = data.get("models")
        return cls(
            health=data.get("health"),
            error=data.get("error") or "",
            models_status=data.get("models_status"),
            models=None if models is None else tuple(models),
        )

    def serves(self, model_name: str) -> bool:
        """/health is 200 and /v1/models lists `model_name` (any model when it is empty)."""
        if self.health != 200 or self.models is None:
            return False
        return model_name in self.models if model_name else bool(self.models)

    def describe(self) -> str:
        if self.health is None:
            return f"/health: {self.error or 'no answer'}"
        if self.health != 200:
            return f"/health: HTTP {self.health}"
        if self.models is None:
            detail = f"HTTP {self.models_status}" if self.models_status else self.error
            return f"/health: 200, /v1/models: {detail}"
        return f"/health: 200, models: {', '.join(self.models) or 'none'}"


@dataclass(frozen=True)
class Observation:
    """One look at the server: ready, hopeless (give_up says why), or still coming up."""

    ready: bool
    status: str
    give_up: str | None = None


@dataclass(frozen=True)
class WaitResult:
    ready: bool
    waited_s: float
    last: Observation


def wait_until_ready(
    observe: Callable[[], Observation],
    timeout_s: float,
    report: Callable[[str], None],
    *,
    interval_s: float = 2.0,
    progress_every_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WaitResult:
    """Call `observe` every `interval_s` until ready, hopeless or `timeout_s` passed.

    `report` gets a progress line about every `progress_every_s` seconds while waiting.
    """
    start = clock()
    next_report = start + progress_every_s
    while True:
        observation = observe()
        now = clock()
        waited = now - start
        if observation.ready or observation.give_up or waited >= timeout_s:
            return WaitResult(observation.ready, waited, observation)
        if now >= next_report:
            report(f"waiting for vLLM: {observation.status} ({waited:.0f}s of {timeout_s:.0f}s)")
            next_report = now + progress_every_s
        sleep(min(interval_s, max(0.0, start + timeout_s - now)))
