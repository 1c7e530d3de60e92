"""What runs during a scenario's window, on the controller, for each host alike:

- Tunnel: an ssh port-forward to a port on the host, started again when it dies (sshd itself
  may be what the OOM killer takes);
- Load: completion requests from the controller at the scenario's concurrency and prompt
  length, each answer recorded (measure.Request);
- Sampler: host/sampler.sh over ssh, one line a second of /proc/meminfo and the cgroups'
  memory, stamped on arrival;
- Alerts: a real Prometheus (the distribution's: hostkit_lab/prometheus.py) with hostkit's
  shipped rules unchanged (their `for:` durations included), scraping the hostkit collector's
  file as node_exporter's textfile collector relays it; each alert's first pending and firing.
Every time is seconds since the window opened (`Clock`).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.cure.measure import Request
from bench.cure.remote import say, script
from hostkit_lab.net import free_port
from hostkit_lab.prometheus import RULES, api, prometheus_server

REQUEST_TIMEOUT_S = 60
MAX_TOKENS = 8
TUNNEL_UP_S = 30


@dataclass
class Clock:
    started: float = field(default_factory=time.monotonic)
    started_unix: float = field(default_factory=time.time)

    def now(self) -> float:
        return time.monotonic() - self.started

    def of_unix(self, stamp: float) -> float:
        return stamp - self.started_unix


class Tunnel:
    """`ssh -N -L` from a free loopback port to `remote_port` on the host."""

    def __init__(self, host, remote_port: int):
        self.host = host
        self.remote_port = remote_port
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.local_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def ensure(self) -> None:
        """The forward up; started (again) when its ssh has exited. Gives up quietly after
        TUNNEL_UP_S: the caller's request then fails, which is what a client would see."""
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return
            argv = self.host.ssh_argv()
            argv[-1:-1] = ["-N", "-o", "ExitOnForwardFailure=yes",
                           "-L", f"127.0.0.1:{self.local_port}:127.0.0.1:{self.remote_port}"]
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + TUNNEL_UP_S
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.local_port), timeout=2).close()
                    return
                except OSError:
                    time.sleep(0.3)

    def close(self) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()
                self.process.wait(timeout=10)


def completion(tunnel: Tunnel, key: str, model: str, prompt_tokens: int, timeout: float = REQUEST_TIMEOUT_S) -> bool:
    """One completion request; True when it was answered 200 with text."""
    tunnel.ensure()
    # "x" is one token of the tiny model's tokenizer ("hello " is four: 256 of them overran
    # --max-model-len 1024 in the first run, every request refused).
    body = json.dumps({"model": model, "prompt": "x" * prompt_tokens, "max_tokens": MAX_TOKENS,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{tunnel.url}/v1/completions", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status == 200 and bool(json.load(answer).get("choices"))
    except (OSError, ValueError, urllib.error.URLError):
        return False


def models_listed(tunnel: Tunnel, key: str, model: str) -> bool:
    """/v1/models with the key names `model`: the server is up and serves it."""
    tunnel.ensure()
    request = urllib.request.Request(f"{tunnel.url}/v1/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return model in {entry.get("id") for entry in json.load(answer).get("data", [])}
    except (OSError, ValueError, urllib.error.URLError):
        return False


class Load:
    """`shape(t)` -> (concurrency, prompt tokens); up to max_concurrency worker threads, worker
    i sending while i < concurrency."""

    def __init__(self, tunnel: Tunnel, key: str, model: str, clock: Clock, shape, max_concurrency: int):
        self.tunnel, self.key, self.model, self.clock, self.shape = tunnel, key, model, clock, shape
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._worker, args=(index,), daemon=True)
                        for index in range(max_concurrency)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_TIMEOUT_S + 10)

    def _worker(self, index: int) -> None:
        while not self.stopping.is_set():
            concurrency, prompt_tokens = self.shape(self.clock.now())
            if index >= concurrency:
                time.sleep(0.5)
                continue
            sent = self.clock.now()
            ok = completion(self.tunnel, self.key, self.model, prompt_tokens)
            self.requests.append(Request(sent, self.clock.now(), ok))
            if not ok:
                time.sleep(1)  # a client's retry delay: a dead server is not hammered


@dataclass(frozen=True)
class Sample:
    at: float
    mem_total: int  # bytes
    mem_available: int
    swap_total: int
    swap_free: int
    unit_bytes: int  # vllm.service's memory.current
    neighbour_bytes: int

    @property
    def mem_used(self) -> int:
        return self.mem_total - self.mem_available

    @property
    def swap_used(self) -> int:
        return self.swap_total - self.swap_free


def parse_sample(at: float, line: str) -> Sample | None:
    parts = line.split()
    if len(parts) != 6 or not all(part.isdigit() for part in parts):
        return None
    total, available, swap_total, swap_free = (int(part) * 1024 for part in parts[:4])
    return Sample(at, total, available, swap_total, swap_free, int(parts[4]), int(parts[5]))


class Sampler:
    """host/sampler.sh over ssh; when the ssh dies (the host under an OOM kill, sshd killed)
    it is started again, and the gap shows in the samples."""

    def __init__(self, host, clock: Clock):
        self.host, self.clock = host, clock
        self.samples: list[Sample] = []
        self.ssh_restarts = 0
        self.stopping = threading.Event()
        self.process: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.process = subprocess.Popen(self.host.ssh_argv("sh -s"), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.process.stdin.write(script("sampler.sh"))
            self.process.stdin.close()
            for line in self.process.stdout:
                sample = parse_sample(self.clock.now(), line)
                if sample is not None:
                    self.samples.append(sample)
            self.process.wait()
            if not self.stopping.is_set():
                self.ssh_restarts += 1
                time.sleep(2)


def _unix(stamp: str) -> float:
    """Prometheus's RFC 3339 activeAt (nanoseconds, Z) as a unix time."""
    head, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + (float(f"0.{fraction}") if fraction else 0.0)


class Alerts:
    """A Prometheus of its own per window (so no alert carries over from the last scenario),
    scraping `node_url`'s /hostkit.prom every 15 s (the collector's interval), the shipped rules
    unchanged; polled every 5 s."""

    POLL_S = 5

    def __init__(self, directory: Path, host_name: str, node_url: str, clock: Clock):
        self.directory, self.host_name, self.node_url, self.clock = directory, host_name, node_url, clock
        self.seen: dict[str, dict] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: str | None = None

    def config(self) -> str:
        return json.dumps({
            "global": {"scrape_interval": "15s", "scrape_timeout": "10s", "evaluation_interval": "5s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "node", "metrics_path": "/hostkit.prom",
                                "static_configs": [{"targets": [self.node_url.removeprefix("http://")],
                                                    "labels": {"instance": f"{self.host_name}:9100"}}]}],
        })

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)

    def _run(self) -> None:
        try:
            with prometheus_server(self.directory, self.config()) as base:
                while not self.stopping.wait(self.POLL_S):
                    try:
                        self._record(api(base, "alerts")["alerts"])
                    except OSError:
                        continue  # Prometheus still starting, or busy: the next poll
        except Exception as failure:  # noqa: BLE001 - kept for the report: a run's alerts unknown, not its figures
            self.error = f"{type(failure).__name__}: {failure}"
            say(f"{self.host_name}: Prometheus failed: {self.error}")

    def _record(self, alerts: list[dict]) -> None:
        now = self.clock.now()
        for alert in alerts:
            name = alert["labels"]["alertname"]
            entry = self.seen.setdefault(name, {"pending_s": None, "firing_s": None})
            if entry["pending_s"] is None and alert.get("activeAt"):
                entry["pending_s"] = self.clock.of_unix(_unix(alert["activeAt"]))
            if entry["firing_s"] is None and alert["state"] == "firing":
                entry["firing_s"] = now
