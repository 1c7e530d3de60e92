"""Commands on a lab host over ssh, as the end-to-end tests run them."""

from __future__ import annotations

import time


def sh(lab_host, command: str, timeout: float = 600) -> str:
    """`command`'s output on `lab_host`; the test fails when it exits non-zero. A loaded lab
    machine sometimes times out the ssh banner (exit 255): ssh is tried up to 6 times, 5 s apart."""
    for _ in range(6):
        result = lab_host.ssh(command, timeout=timeout)
        if result.returncode != 255:
            break
        time.sleep(5)
    assert result.returncode == 0, f"{lab_host.name}: `{command}` exited {result.returncode}: {result.stderr.strip()}"
    return result.stdout


def assert_root_owned(lab_host, path: str) -> None:
    """`path` on `lab_host` belongs to root and no one else may write it."""
    mode, user = sh(lab_host, f"stat -c '%a %U' {path}").split()
    assert user == "root" and int(mode, 8) & 0o022 == 0, (path, mode, user)
