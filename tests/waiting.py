"""Waiting in tests for something to happen: a check polled until it holds or time runs out."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

Result = TypeVar("Result")


def wait_for(check: Callable[[], Result], timeout: float, what: str | None = None, *, interval: float = 1.0,
             ignoring: type[BaseException] | tuple[type[BaseException], ...] = ()) -> Result:
    """`check()`'s first truthy result within `timeout` seconds, polled every `interval` seconds.
    When time runs out: with `what`, the test fails (timed out ... waiting for `what`); without,
    the last (falsy) result comes back for the caller to assert on with its own message.
    `ignoring`: exceptions of `check()` that count as a falsy result (None), such as OSError from
    a server that does not listen yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except ignoring:
            result = None
        if result or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    assert result or what is None, f"timed out after {timeout:.0f}s waiting for {what}"
    return result
