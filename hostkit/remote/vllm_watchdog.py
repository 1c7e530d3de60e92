#!/usr/bin/python3
"""vLLM health watchdog, run on the host by vllm-hostkit-watchdog.service (installed by
hostkit/operations/watchdog.py). Python 3 standard library only.

systemd restarts vllm.service when its process exits (Restart=always), but not a vLLM
that stays up and stops serving: /health answering 500, or /health 200 while completions
never finish. Every --interval seconds this script looks at the unit and, when it runs,
probes /health (deadline: the interval, at most 10 s) and every --completion-every checks
a one-token completion (deadline --completion-timeout). After a failed completion every
check probes it until one succeeds. The API key is read from the root-only environment
file at each completion probe; it never appears in argv or in the journal.

A check fails when a probe gets no answer in time or an HTTP status other than 200. After
--failures consecutive failed checks it runs `systemctl restart --no-block` on the unit,
at most --max-restarts-per-hour times an hour, with backoff: after k restarts in the last
hour the next one needs failures x 2^k consecutive failed checks. Each decision goes to
the journal (stdout, with syslog priority prefixes), each repeated condition once.

It leaves the unit alone when:
- hostkit's deploy lock (/run/vllm-hostkit/deploy.lock) exists and is younger than
  --lock-stale-after: a deploy is changing the host (failures are not counted meanwhile);
- the unit is not active/running: stopped by the operator (`systemctl stop` stays
  stopped), failed (at its start limit it stays failed and is reported), or being
  started, stopped or auto-restarted by systemd;
- the running instance has never answered HTTP (vLLM refuses connections while it loads
  a model, which can take many minutes): failures count only once the instance, known by
  its InvocationID, has answered at least once.

With --instance NAME it watches vllm@NAME.service of vllm_instances instead, with that
instance's env file, and keeps its state in watchdog@NAME.json beside watchdog.json.

State file /var/lib/vllm-hostkit/watchdog.json (written atomically after every check,
mode 0644; read by hostkit doctor and by monitoring):
    {
      "version": 1,
      "consecutive_failures": 0,      # failed checks in a row of the current instance
      "restarts": [1764576000.0],     # unix times of this watchdog's restarts of the unit,
                                      # oldest first, the last 1000 kept
      "restarts_total": 1,            # all restarts since the file was created (a counter)
      "serving_invocation": "6f1...", # InvocationID of the instance that answered HTTP
      "last_event": "healthy",        # the condition journaled last (journaled once)
      "updated": 1764576030.5         # unix time of the last check
    }
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

try:
    from hostkit.remote.http_request import api_key_from_env_file, http_request
except ImportError:  # on the host, where the installed script holds their text before this
    pass

STATE_DIR = "/var/lib/vllm-hostkit"
CONFIG_DIR = "/etc/vllm-hostkit"
STATE_PATH = f"{STATE_DIR}/watchdog.json"
ENV_FILE = f"{CONFIG_DIR}/vllm.env"
LOCK_PATH = "/run/vllm-hostkit/deploy.lock"
HOUR_S = 3600
KEPT_RESTARTS = 1000
SYSTEMCTL_TIMEOUT_S = 30
# syslog priority prefixes that journald reads from a service's stdout
INFO, WARNING, ERROR = "<6>", "<4>", "<3>"


@dataclass(frozen=True)
class Config:
    unit: str
    url: str  # http://HOST:PORT
    model: str
    interval_s: float
    failures: int
    max_restarts_per_hour: int
    completion_every: int
    completion_timeout_s: float
    lock_stale_after_s: float

    @property
    def health_timeout_s(self) -> float:
        return min(10.0, self.interval_s)


@dataclass(frozen=True)
class UnitStatus:
    active_state: str
    sub_state: str
    result: str
    invocation: str

    @classmethod
    def parse(cls, text: str) -> UnitStatus:
        values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        return cls(values.get("ActiveState", ""), values.get("SubState", ""), values.get("Result", ""),
                   values.get("InvocationID", ""))

    @property
    def running(self) -> bool:
        return (self.active_state, self.sub_state) == ("active", "running")


@dataclass(frozen=True)
class ProbeResult:
    what: str  # "/health", "/v1/completions"
    answered: bool  # an HTTP response came back, whatever its status
    ok: bool
    detail: str  # "HTTP 500", "no answer in 3 s (timed out)"

    def describe(self) -> str:
        return f"{self.what}: {self.detail}"


@dataclass(frozen=True)
class Seen:
    """One check's observations."""

    lock_age_s: float | None  # None: no deploy lock
    unit: UnitStatus
    probes: tuple[ProbeResult, ...] = ()


@dataclass(frozen=True)
class Decision:
    restart: bool
    state: dict
    messages: list[str] = field(default_factory=list)  # priority-prefixed journal lines


def new_state() -> dict:
    return {"version": 1, "consecutive_failures": 0, "restarts": [], "restarts_total": 0,
            "serving_invocation": "", "last_event": "", "updated": 0.0}


def recent_restarts(state: dict, now: float) -> list[float]:
    return [stamp for stamp in state["restarts"] if now - stamp < HOUR_S]


def failures_needed(state: dict, now: float, config: Config) -> int:
    """Backoff: each restart in the last hour doubles the failed checks the next one needs."""
    return config.failures * 2 ** len(recent_restarts(state, now))


def completion_due(state: dict, check_number: int, config: Config) -> bool:
    """Whether this check also probes a completion: every completion_every checks, and every
    check while the instance is failing (a hung engine still answers /health)."""
    return check_number % config.completion_every == 0 or state["consecutive_failures"] > 0


def decide(state: dict, seen: Seen, now: float, config: Config) -> Decision:
    """What to do after one check: pure, over the previous state and what the check saw."""
    state = {**state, "restarts": list(state["restarts"]), "updated": now}
    messages: list[str] = []
    unit = config.unit

    def once(event: str, priority: str, message: str) -> None:
        if state["last_event"] != event:
            messages.append(priority + message)
            state["last_event"] = event

    def idle(event: str, priority: str, message: str) -> Decision:
        state["consecutive_failures"] = 0
        once(event, priority, message)
        return Decision(False, state, messages)

    if seen.lock_age_s is not None:
        if seen.lock_age_s <= config.lock_stale_after_s:
            return idle("paused", INFO, f"paused: a hostkit deploy holds {LOCK_PATH}; not checking {unit}")
        once("stale-lock", WARNING, f"{LOCK_PATH} is {seen.lock_age_s:.0f}s old, older than "
             f"{config.lock_stale_after_s:.0f}s: taken as left over by a dead deploy; checking {unit} again")
    status = seen.unit
    if status.active_state == "failed":
        if status.result == "start-limit-hit":
            return idle(f"start-limit:{status.invocation}", ERROR,
                        f"{unit} hit its start limit (StartLimitBurst) and stays failed: the watchdog does not "
                        f"restart it. Fix the cause (journalctl -u {unit}), then `systemctl reset-failed {unit}` "
                        f"and `systemctl start {unit}`")
        return idle(f"failed:{status.invocation}", ERROR,
                    f"{unit} failed (result: {status.result or 'unknown'}): left to systemd and the operator")
    if status.active_state == "inactive":
        return idle("inactive", INFO, f"{unit} is inactive (stopped, or not started): the watchdog leaves it alone")
    if not status.running:
        # Starting, stopping or waiting to auto-restart: systemd is at it.
        state["consecutive_failures"] = 0
        return Decision(False, state, messages)

    if any(probe.answered for probe in seen.probes) and state["serving_invocation"] != status.invocation:
        state["serving_invocation"] = status.invocation
        state["consecutive_failures"] = 0
        messages.append(f"{INFO}{unit} instance {status.invocation[:12]} answers HTTP: checking it")
    failed = next((probe for probe in seen.probes if not probe.ok), None)
    if failed is None:
        if state["consecutive_failures"]:
            messages.append(f"{INFO}{unit} healthy again after {state['consecutive_failures']} failed check(s)")
        state["consecutive_failures"] = 0
        state["last_event"] = "healthy"
        return Decision(False, state, messages)
    if state["serving_invocation"] != status.invocation:
        once(f"loading:{status.invocation}", INFO,
             f"{unit} instance {status.invocation[:12]} has not answered yet (loading): not counted ({failed.describe()})")
        return Decision(False, state, messages)

    state["consecutive_failures"] += 1
    needed = failures_needed(state, now, config)
    recent = recent_restarts(state, now)
    if state["consecutive_failures"] <= needed:
        messages.append(f"{WARNING}{unit} check failed ({state['consecutive_failures']}/{needed}): {failed.describe()}")
    if state["consecutive_failures"] < needed:
        return Decision(False, state, messages)
    if len(recent) >= config.max_restarts_per_hour:
        next_at = time.strftime("%H:%M:%S", time.localtime(recent[0] + HOUR_S)) if recent else "never"
        once(f"capped:{status.invocation}", ERROR,
             f"not restarting {unit}: {len(recent)} watchdog restart(s) in the last hour, the cap "
             f"(vllm_watchdog_max_restarts_per_hour={config.max_restarts_per_hour}); it stays unhealthy "
             f"({failed.describe()}) until someone acts or the next restart is allowed at {next_at}")
        return Decision(False, state, messages)
    state["restarts"] = [*state["restarts"], now][-KEPT_RESTARTS:]
    state["restarts_total"] += 1
    state["consecutive_failures"] = 0
    state["last_event"] = f"restart:{status.invocation}"
    messages.append(f"{WARNING}restarting {unit}: {needed} consecutive failed checks (last: {failed.describe()}); "
                    f"watchdog restart {len(recent) + 1} of at most {config.max_restarts_per_hour} an hour")
    return Decision(True, state, messages)


# -- the host side: probes, systemctl, files ---------------------------------------------------


def http_probe(config: Config, path: str, timeout_s: float, body: dict | None = None,
               api_key: str | None = None) -> ProbeResult:
    try:
        status, _ = http_request(config.url + path, api_key, body, timeout_s)
    except OSError as error:
        timed_out = isinstance(error, socket.timeout) or "timed out" in str(error)
        detail = f"no answer in {timeout_s:.0f}s (timed out)" if timed_out else f"no answer ({error})"
        return ProbeResult(path, False, False, detail)
    return ProbeResult(path, True, status == 200, f"HTTP {status}")


def probe_health(config: Config) -> ProbeResult:
    return http_probe(config, "/health", config.health_timeout_s)


def probe_completion(config: Config) -> ProbeResult:
    body = {"model": config.model, "prompt": "ping", "max_tokens": 1}
    return http_probe(config, "/v1/completions", config.completion_timeout_s, body=body,
                      api_key=api_key_from_env_file(ENV_FILE))


def unit_status(unit: str) -> UnitStatus:
    output = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState", "-p", "SubState", "-p", "Result", "-p", "InvocationID"],
        capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S, check=True,
    ).stdout
    return UnitStatus.parse(output)


def lock_age_s(now: float, path: str = LOCK_PATH) -> float | None:
    try:
        return max(0.0, now - os.stat(path).st_mtime)
    except FileNotFoundError:
        return None


def load_state(path: str = STATE_PATH) -> dict:
    try:
        with open(path) as state_file:
            loaded = json.load(state_file)
    except (OSError, ValueError):
        return new_state()
    state = new_state()
    if isinstance(loaded, dict):
        state.update({key: loaded[key] for key in state if key in loaded and type(loaded[key]) is type(state[key])})
    return state


def save_state(state: dict, path: str = STATE_PATH) -> None:
    staged = f"{path}.new"
    with open(staged, "w") as state_file:
        json.dump(state, state_file, indent=1)
        state_file.write("\n")
    os.chmod(staged, 0o644)
    os.replace(staged, path)


def check(config: Config, state: dict, check_number: int) -> Decision:
    now = time.time()
    age = lock_age_s(now, LOCK_PATH)
    status = unit_status(config.unit)
    probes: tuple[ProbeResult, ...] = ()
    if (age is None or age > config.lock_stale_after_s) and status.running:
        probes = (probe_health(config),)
        if probes[0].ok and completion_due(state, check_number, config):
            probes += (probe_completion(config),)
    return decide(state, Seen(age, status, probes), time.time(), config)


def restart(unit: str) -> str | None:
    """Queue a restart of `unit`; why it failed, or None."""
    try:
        result = subprocess.run(["systemctl", "restart", "--no-block", unit], capture_output=True, text=True,
                                timeout=SYSTEMCTL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"systemctl restart did not return in {SYSTEMCTL_TIMEOUT_S}s"
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit status {result.returncode}")


def instance_files(instance: str) -> tuple[str, str, str]:
    """The unit, state file and env file of --instance NAME, as hostkit.paths names them."""
    return f"vllm@{instance}.service", f"{STATE_DIR}/watchdog@{instance}.json", f"{CONFIG_DIR}/vllm@{instance}.env"


def parse_args(argv: list[str]) -> tuple[Config, str, str, str]:
    parser = argparse.ArgumentParser(description="vLLM health watchdog (vllm-hostkit)")
    parser.add_argument("--unit", default="vllm.service")
    parser.add_argument("--url", required=True, help="http://HOST:PORT of the vLLM server")
    parser.add_argument("--model", required=True, help="the served model name, for the completion probe")
    parser.add_argument("--interval", type=float, default=10)
    parser.add_argument("--failures", type=int, default=3)
    parser.add_argument("--max-restarts-per-hour", type=int, default=4)
    parser.add_argument("--completion-every", type=int, default=6, help="checks between completion probes")
    parser.add_argument("--completion-timeout", type=float, default=30)
    parser.add_argument("--lock-stale-after", type=float, default=5400)
    parser.add_argument("--state", default=STATE_PATH)
    parser.add_argument("--env-file", default=ENV_FILE)
    parser.add_argument("--lock", default=LOCK_PATH)
    # Named here rather than by --unit, --state and --env-file: their paths name vllm-hostkit,
    # and the deploy lock takes a process whose argv does for a deploy's leftover.
    parser.add_argument("--instance", help="watch vllm@NAME.service, with its env file and a state file of its own")
    args = parser.parse_args(argv)
    if args.instance:
        args.unit, args.state, args.env_file = instance_files(args.instance)
    config = Config(args.unit, args.url.rstrip("/"), args.model, args.interval, args.failures,
                    args.max_restarts_per_hour, max(1, args.completion_every), args.completion_timeout,
                    args.lock_stale_after)
    return config, args.state, args.env_file, args.lock


def main(argv: list[str]) -> None:
    global ENV_FILE, LOCK_PATH
    config, state_path, ENV_FILE, LOCK_PATH = parse_args(argv)
    state = load_state(state_path)
    print(f"{INFO}watching {config.unit} at {config.url} every {config.interval_s:g}s: restart after "
          f"{config.failures} failed checks, at most {config.max_restarts_per_hour} an hour", flush=True)
    check_number = 0
    while True:
        started = time.monotonic()
        check_number += 1
        try:
            decision = check(config, state, check_number)
        except (OSError, subprocess.SubprocessError) as error:
            print(f"{WARNING}check skipped: {error}", flush=True)
        else:
            state = decision.state
            for message in decision.messages:
                print(message, flush=True)
            if decision.restart:
                problem = restart(config.unit)
                if problem:
                    print(f"{ERROR}restarting {config.unit} failed: {problem}", flush=True)
            save_state(state, state_path)
        time.sleep(max(0.0, config.interval_s - (time.monotonic() - started)))


if __name__ == "__main__":
    main(sys.argv[1:])
