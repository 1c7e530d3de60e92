"""Bounded concurrent `/v1/completions` load against one vLLM server URL.

Bounded twice: by the number of requests and by a wall-clock deadline after which no new
request starts (each request also has its own timeout). Requests go only to the URL given.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from hostkit.remote.http_request import http_request

DEFAULT_PROMPT = (
    "Explain in a few paragraphs how an operating system decides which memory pages to move to swap, "
    "and what an administrator can tune."
)


def api_base(url: str) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` all mean the server root."""
    base = url.strip().rstrip("/")
    base = base.removesuffix("/v1")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"{url!r} is not an http(s) URL")
    return base


def served_model(base: str, api_key: str | None, timeout: float = 30) -> str:
    """The first model `/v1/models` lists."""
    status, body = http_request(f"{base}/v1/models", api_key, None, timeout)
    if status != 200:
        raise RuntimeError(f"GET {base}/v1/models answered HTTP {status}: {body[:200].decode(errors='replace')}")
    models = json.loads(body).get("data") or []
    if not models:
        raise RuntimeError(f"{base}/v1/models lists no model")
    return models[0]["id"]


@dataclass(frozen=True)
class RequestResult:
    started: float  # seconds since the load started
    seconds: float
    ok: bool
    status: int | None  # HTTP status; None when no answer came
    error: str | None = None
    completion_tokens: int | None = None


@dataclass
class LoadResult:
    model: str
    concurrency: int
    planned: int
    started_at: float  # epoch seconds
    ended_at: float
    results: list[RequestResult] = field(default_factory=list)
    hit_deadline: bool = False  # the time limit stopped requests from being sent

    @property
    def succeeded(self) -> int:
        return sum(result.ok for result in self.results)

    @property
    def failed(self) -> int:
        return len(self.results) - self.succeeded

    @property
    def not_sent(self) -> int:
        return self.planned - len(self.results)

    def latencies(self) -> list[float]:
        return sorted(result.seconds for result in self.results if result.ok)

    def errors(self) -> dict[str, int]:
        return dict(Counter(result.error or f"HTTP {result.status}" for result in self.results if not result.ok))

    @property
    def completion_tokens(self) -> int:
        return sum(result.completion_tokens or 0 for result in self.results if result.ok)


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def _one(base: str, model: str, prompt: str, max_tokens: int, api_key: str | None, timeout: float,
         t0: float) -> RequestResult:
    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.7}
    started = time.monotonic()
    try:
        status, body = http_request(f"{base}/v1/completions", api_key, payload, timeout)
    except OSError as error:  # refused, reset, timed out, cut short
        reason = getattr(error, "reason", None) or error
        return RequestResult(started - t0, time.monotonic() - started, False, None, f"{type(error).__name__}: {reason}")
    seconds = time.monotonic() - started
    if status != 200:
        return RequestResult(started - t0, seconds, False, status, f"HTTP {status}")
    try:
        answer = json.loads(body)
        if not answer.get("choices"):
            raise ValueError("no choices")
    except ValueError as error:
        return RequestResult(started - t0, seconds, False, status, f"bad response: {error}")
    tokens = (answer.get("usage") or {}).get("completion_tokens")
    return RequestResult(started - t0, seconds, True, status, None, tokens if isinstance(tokens, int) else None)


def run_load(base: str, model: str, *, concurrency: int, requests: int, max_tokens: int, api_key: str | None,
             request_timeout: float, time_limit: float, prompt: str = DEFAULT_PROMPT) -> LoadResult:
    """`requests` completions, `concurrency` at a time; none starts after `time_limit` seconds."""
    result = LoadResult(model=model, concurrency=concurrency, planned=requests, started_at=time.time(), ended_at=0.0)
    t0 = time.monotonic()
    lock = threading.Lock()
    next_index = 0

    def worker() -> None:
        nonlocal next_index
        while True:
            with lock:
                if next_index >= requests:
                    return
                if time.monotonic() - t0 >= time_limit:
                    result.hit_deadline = True
                    return
                next_index += 1
            outcome = _one(base, model, prompt, max_tokens, api_key, request_timeout, t0)
            with lock:
                result.results.append(outcome)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="smoke") as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    result.ended_at = time.time()
    result.results.sort(key=lambda r: r.started)
    return result
