"""apt on the controller, one command at a time.

The lab's prerequisites, the test's Prometheus and the real-vLLM disk's debs are fetched by
steps that `make test` runs side by side; two `apt-get update`s at once fail on apt's lists
lock instead of waiting, so every apt command of the checkout takes this lock first.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

LOCK = Path.home() / ".cache" / "vllm-hostkit" / "apt.lock"
TIMEOUT_S = 600  # a whole `apt-get update` or install from a slow mirror
LOCK_WAIT_S = 2 * TIMEOUT_S  # the holder's command and one more before it


def apt_get(*args: str, cwd: Path | None = None, check: bool = True,
            timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """`apt-get ARGS` under the lock and a deadline; with `check`, a failure raises with apt's
    own last lines."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    command = f"`apt-get {' '.join(args)}`"
    with open(LOCK, "w") as lock:
        _take(lock, command)
        try:
            result = subprocess.run(["apt-get", *args], cwd=cwd, env=env, timeout=timeout, capture_output=True,
                                    text=True)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{command} did not finish within {timeout:.0f} s") from None
    if check and result.returncode != 0:
        raise RuntimeError(f"{command} failed with exit status {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def _take(lock, command: str) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command} waited {LOCK_WAIT_S} s for {LOCK}, held by another apt command "
                                   "of this checkout") from None
            time.sleep(1)
