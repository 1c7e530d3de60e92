"""A Prometheus server on loopback for a window, with hostkit's shipped alert rules as they are.

The binary is the distribution's: on PATH, or where the test suite unpacks Debian's package
(~/.cache/vllm-hostkit/prometheus, tests/prometheus_dist.py; `make unit` fetches it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RULES = Path(__file__).resolve().parents[2] / "hostkit" / "monitoring" / "alerts.rules.yml"


def binary() -> str:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-hostkit" / "prometheus"
    packaged = cache / "root" / "usr" / "bin" / "prometheus"
    found = shutil.which("prometheus") or (str(packaged) if packaged.exists() else None)
    if found is None:
        raise FileNotFoundError(f"no prometheus on PATH or in {cache}: `apt-get install prometheus`, or `make unit` once")
    return found


@contextmanager
def server(directory: Path, config: str) -> Iterator[str]:
    """`prometheus` with `config` and its data in `directory`; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (directory / "prometheus.yml").write_text(config)
    with (directory / "prometheus.log").open("w") as log:
        process = subprocess.Popen([binary(), f"--config.file={directory / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={directory / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def api(base: str, path: str, **params) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)["data"]
