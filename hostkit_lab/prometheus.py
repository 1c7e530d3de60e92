"""The distribution's Prometheus (`prometheus` and `promtool`) for the tests, without a service,
and a Prometheus server on loopback that a test starts with a config of its own.

Taken from PATH when installed; otherwise Debian's `prometheus` package is fetched with
`apt-get download` (running `apt-get update` first when the package lists lack it) and
unpacked with `dpkg-deb -x` into ~/.cache/vllm-hostkit/prometheus, once. Unpacking instead
of installing starts no prometheus.service on the test machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hostkit_lab.apt import apt_get
from hostkit_lab import exposition_server
from hostkit_lab.net import free_port

PACKAGE = "prometheus"
RULES = Path(__file__).resolve().parents[1] / "hostkit" / "monitoring" / "alerts.rules.yml"
UNPACK_TIMEOUT_S = 120


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vllm-hostkit" / "prometheus"


def _download(directory: Path) -> Path:
    if apt_get("download", "-q", PACKAGE, cwd=directory, check=False).returncode != 0:
        apt_get("update", "-qq")
        apt_get("download", "-q", PACKAGE, cwd=directory)
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
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True, timeout=UNPACK_TIMEOUT_S)
            shutil.rmtree(unpacked, ignore_errors=True)
            staging.rename(unpacked)
    return str(binary)


@contextmanager
def prometheus_server(directory: Path, config: str) -> Iterator[str]:
    """`prometheus` with `config` (YAML or JSON text) and its data in `directory`; yields its URL.
    Its log is `directory`/prometheus.log."""
    port = free_port()
    config_file = directory / "prometheus.yml"
    config_file.write_text(config)
    with (directory / "prometheus.log").open("w") as log:
        server = subprocess.Popen([prometheus_bin("prometheus"), f"--config.file={config_file}",
                                   f"--storage.tsdb.path={directory / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=30)


def api(base: str, path: str, **params) -> dict:
    """The `data` of a Prometheus HTTP API answer (/api/v1/`path`)."""
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)["data"]


def shortened_rules(directory: Path, for_s: int = 10) -> Path:
    """The shipped rules with each `for:` shortened to `for_s`: expressions and thresholds as shipped."""
    rules = directory / "alerts.rules.yml"
    rules.write_text(re.sub(r"(?m)^(\s+for:) \S+$", rf"\1 {for_s}s", RULES.read_text()))
    return rules


def firing(base: str, name: str) -> dict | None:
    """The alert `name` if it is firing on the server at `base`."""
    return next((alert for alert in api(base, "alerts")["alerts"]
                 if alert["labels"]["alertname"] == name and alert["state"] == "firing"), None)


@contextmanager
def exposition_served(text: str) -> Iterator[str]:
    """`text` (a Prometheus text exposition, as a host's collector wrote it) at a loopback URL."""
    body = text.encode()
    server = exposition_server.server(free_port(), lambda: body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
