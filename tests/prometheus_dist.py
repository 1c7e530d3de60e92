"""The distribution's Prometheus (`prometheus` and `promtool`) for the tests, without a service.

Taken from PATH when installed; otherwise Debian's `prometheus` package is fetched with
`apt-get download` (running `apt-get update` first when the package lists lack it) and
unpacked with `dpkg-deb -x` into ~/.cache/vllm-hostkit/prometheus, once. Unpacking instead
of installing starts no prometheus.service on the test machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

PACKAGE = "prometheus"
APT_TIMEOUT_S = 600


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-hostkit" / "prometheus"


def _download(directory: Path) -> Path:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    fetch = ["apt-get", "download", "-q", PACKAGE]
    if subprocess.run(fetch, cwd=directory, env=env, capture_output=True, timeout=APT_TIMEOUT_S).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, timeout=APT_TIMEOUT_S)
        subprocess.run(fetch, cwd=directory, env=env, check=True, capture_output=True, timeout=APT_TIMEOUT_S)
    (deb,) = directory.glob(f"{PACKAGE}_*.deb")
    return deb


def prometheus_bin(name: str) -> str:
    """The path of `prometheus` or `promtool`."""
    found = shutil.which(name)
    if found:
        return found
    unpacked = cache_dir() / "root"
    binary = unpacked / "usr" / "bin" / name
    if not binary.exists():
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir()) as work:
            deb = _download(Path(work))
            staging = Path(work) / "root"
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True, timeout=APT_TIMEOUT_S)
            shutil.rmtree(unpacked, ignore_errors=True)
            staging.rename(unpacked)
    return str(binary)
