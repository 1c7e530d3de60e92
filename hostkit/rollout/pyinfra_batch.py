"""One batch of a rollout: the pyinfra CLI on the whole inventory, limited to the batch.

The whole inventory is loaded so the deploy still validates every host's data; `--limit`
(repeated, one host name each) keeps connections and changes to the batch.
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hostkit.fleet.pyinfra_runner import PyinfraRun, run_pyinfra


@dataclass
class HostDeploy:
    ok: bool
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    would_change: list[str] = field(default_factory=list)
    failure: str | None = None


@dataclass
class BatchDeploy:
    hosts: dict[str, HostDeploy]
    seconds: float


def limit_args(names: Sequence[str]) -> list[str]:
    """pyinfra --limit takes group names and fnmatch globs: escape glob characters so a
    name matches only itself."""
    return [f"--limit={glob.escape(name)}" for name in names]


def plan_pyinfra(inventory: str | Path, deploy: str | Path, *extra: str, cwd: str | Path | None = None,
                 timeout: float = 1800) -> PyinfraRun:
    """`pyinfra --dry --json` without `-y`: with `-y` pyinfra skips change detection and
    its plan lists no host under hosts_with_change."""
    argv = [sys.executable, "-m", "pyinfra", str(inventory), str(deploy), "--dry", "--json", *extra]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    return PyinfraRun(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret value replaced: pyinfra output may echo a command."""
    for secret in secrets:
        text = text.replace(secret, "********")
    return text


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_OPERATION_START = re.compile(r"^--> Starting (?:.+ )?operation: (?P<name>.+?)\s*$")
_HOST_LINE = re.compile(r"^\s+\[(?P<host>[^\]]+)\] (?P<text>.*\S)\s*$")
_PROGRESS = re.compile(r"^(Success|No changes|Skipped|Connected|Ready: .*)$")


@dataclass
class LoggedHost:
    changed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # what the host printed before its error

    def failure(self) -> str | None:
        if not self.errors:
            return None
        said = " | ".join(self.messages[-3:])
        return f"operation failed: {self.errors[0]}" + (f": {said}" if said else "")


def operations_from_log(log: str) -> dict[str, LoggedHost]:
    """Per host, the operations that changed and failed, from pyinfra's progress log (runs
    that end without JSON results have nothing else), with the error lines the host
    printed. An operation given positional arguments is logged as `NAME (ARGS)`."""
    hosts: dict[str, LoggedHost] = {}
    operation = None
    for line in _ANSI.sub("", log).splitlines():
        start = _OPERATION_START.match(line)
        if start:
            operation = start["name"]
            continue
        host_line = _HOST_LINE.match(line)
        if not host_line or operation is None:
            continue
        logged, text = hosts.setdefault(host_line["host"], LoggedHost()), host_line["text"]
        if text.startswith("Success"):
            logged.changed.append(operation)
        elif re.match(r"Error: executed \d+ commands", text):
            logged.errors.append(operation)
        elif not _PROGRESS.match(text):
            logged.messages.append(text)
    return hosts


def read_batch(run: PyinfraRun, names: Sequence[str], dry: bool) -> BatchDeploy:
    """Per-host results of a `pyinfra --json` run (with `--dry`: the plan)."""
    try:
        payload = json.loads(run.stdout) if run.stdout.strip() else None
    except json.JSONDecodeError:
        payload = None
    seconds = round(run.seconds, 3)
    if not isinstance(payload, dict) or (not dry and not payload.get("results")):
        # pyinfra gave no results: it refused while preparing, reached no host, or every
        # host of the batch failed ("No hosts remaining!"). The log still says which
        # operations ran on which host.
        why = f"pyinfra exited {run.returncode} without results: {_tail(run.output) or 'no output'}"
        logged = operations_from_log(run.stderr)
        hosts = {}
        for name in names:
            host_log = logged.get(name, LoggedHost())
            hosts[name] = HostDeploy(ok=False, changed=host_log.changed, errors=host_log.errors,
                                     failure=host_log.failure() or why)
        return BatchDeploy(hosts, seconds)

    if dry:
        hosts = {name: HostDeploy(ok=True) for name in names}
        for op in payload.get("plan") or []:
            for name in op.get("hosts_with_change", []):
                if name in hosts:
                    hosts[name].would_change.append(op["name"])
            for name in op.get("hosts_with_conditional_change", []):
                if name in hosts:
                    hosts[name].would_change.append(f"{op['name']} (if an earlier operation changes)")
        if run.returncode != 0:
            for host_deploy in hosts.values():
                host_deploy.ok = False
                host_deploy.failure = f"pyinfra --dry exited {run.returncode}: {_tail(run.output)}"
        return BatchDeploy(hosts, seconds)

    results = payload["results"]
    operations = results.get("operations", [])
    failed_hosts = set(results.get("failed_hosts", []))
    logged = operations_from_log(run.stderr)
    hosts = {}
    for name in names:
        changed = [op["name"] for op in operations if name in op["success"]]
        errors = [op["name"] for op in operations if name in op["error"]]
        ran = any(name in op["success"] or name in op["no_change"] or name in op["error"] for op in operations)
        failure = None
        if errors:
            failure = logged.get(name, LoggedHost()).failure() or f"operation failed: {errors[0]}"
        elif name in failed_hosts:
            failure = "failed before its operations ran (connection or fact error)"
        elif not ran and operations:
            failure = "not part of the pyinfra run (check the --limit and the host name)"
        hosts[name] = HostDeploy(ok=failure is None, changed=changed, errors=errors, failure=failure)
    return BatchDeploy(hosts, seconds)


class PyinfraBatchDeployer:
    """Deploys one batch with the pyinfra CLI, from `cwd` (the repo root for hostkit's deploys)."""

    def __init__(self, inventory: str | Path, deploy: str | Path, cwd: str | Path | None = None,
                 extra: Sequence[str] = (), timeout: float = 7200, secrets: Sequence[str] = ()):
        self.inventory = str(inventory)
        self.deploy = str(deploy)
        self.cwd = cwd
        self.extra = list(extra)
        self.timeout = timeout
        self.secrets = [secret for secret in secrets if secret]

    def __call__(self, names: Sequence[str], dry: bool) -> BatchDeploy:
        args = [*limit_args(names), *self.extra]
        try:
            if dry:
                run = plan_pyinfra(self.inventory, self.deploy, *args, cwd=self.cwd, timeout=self.timeout)
            else:
                run = run_pyinfra(self.inventory, self.deploy, *args, cwd=self.cwd, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            why = f"pyinfra ran past {self.timeout:.0f}s and was stopped"
            return BatchDeploy({name: HostDeploy(ok=False, failure=why) for name in names}, self.timeout)
        batch = read_batch(run, names, dry)
        for host_deploy in batch.hosts.values():
            if host_deploy.failure:
                host_deploy.failure = redact(host_deploy.failure, self.secrets)
        return batch
