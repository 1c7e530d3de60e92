"""Commands on lab hosts, each under a deadline that says what timed out; progress lines."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HOST_SCRIPTS = Path(__file__).with_name("host")
SSH_TRIES = 4  # a loaded lab machine sometimes times out the ssh banner (exit 255)


def say(message: str) -> None:
    print(f"[cure {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(host, command: str, timeout: float, what: str, stdin: str | None = None, check: bool = True) -> str:
    """`command`'s stdout on `host`; TimeoutError naming `what` past `timeout`, RuntimeError on a
    non-zero exit when `check`."""
    for attempt in range(SSH_TRIES):
        try:
            result = subprocess.run(host.ssh_argv(command), input=stdin, capture_output=True, text=True,
                                    timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{host.name}: {what} did not finish within {timeout:.0f} s") from None
        if result.returncode != 255:
            break
        time.sleep(5)
    if check and result.returncode != 0:
        raise RuntimeError(f"{host.name}: {what} exited {result.returncode}: {(result.stdout + result.stderr)[-2000:]}")
    return result.stdout


def script(name: str) -> str:
    """A host-side script of bench/cure/host/."""
    return (HOST_SCRIPTS / name).read_text()
