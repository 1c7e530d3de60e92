"""Memory monitoring: the host-side collector, its systemd units, the alert rules.

The collector (collector.py, standard library only) is package data: the deploy copies it to
the host and a systemd timer runs it with the host's own python3. The alert rules
(alerts.rules.yml) and the scrape snippet for vLLM's /metrics (vllm-scrape.yml) ship as
files users load into Prometheus as they are.
"""

from __future__ import annotations

import posixpath
from importlib import resources

from hostkit.remote import host_program

COLLECTOR_PATH = "/usr/local/lib/vllm-hostkit/monitoring-collector.py"
SERVICE = "vllm-hostkit-monitor.service"
TIMER = "vllm-hostkit-monitor.timer"
SERVICE_PATH = f"/etc/systemd/system/{SERVICE}"
TIMER_PATH = f"/etc/systemd/system/{TIMER}"
STATE_DIR = "/var/lib/vllm-hostkit"
WATCHDOG_FILE = f"{STATE_DIR}/watchdog.json"
TEXTFILE_NAME = "hostkit.prom"
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
NODE_EXPORTER_DROPIN = f"/etc/systemd/system/{NODE_EXPORTER_UNIT}.d/vllm-hostkit-textfile.conf"
# A metrics file older than this many intervals is stale (the alert rule uses the same figure).
STALE_INTERVALS = 3
# The collector unit's deadline for one run: nvidia-smi (twice, 5 s each), /health and systemctl
# (3 s each) at their worst, plus a slow start at boot (a lab host's first run after a reboot
# took 10.5 s; 30 s killed some on a loaded CI machine).
RUN_TIMEOUT_S = 90


def stale_after_s(interval_s: float) -> float:
    """When verify and doctor call the file stale: the file is written as a run ends and the
    timer counts each interval from a run's end, so one slow run (up to its deadline) may
    come between two writes besides the intervals."""
    return STALE_INTERVALS * interval_s + RUN_TIMEOUT_S


def package_file(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text()


def collector_source() -> str:
    """The collector as installed: one file, with hostkit's HTTP client in it."""
    return host_program(package_file("collector.py"), "http_request.py")


def textfile_path(textfile_dir: str) -> str:
    return posixpath.join(textfile_dir, TEXTFILE_NAME)
