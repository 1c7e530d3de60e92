"""Run the pyinfra CLI and read its `--json` results: what changed, what did not, what failed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class OperationResult:
    name: str
    changed: list[str]
    no_change: list[str]
    error: list[str]


@dataclass
class PyinfraRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    operations: list[OperationResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.errors

    @property
    def changed(self) -> list[str]:
        return [op.name for op in self.operations if op.changed]

    @property
    def errors(self) -> list[str]:
        return [op.name for op in self.operations if op.error]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def changed_on(self, host: str) -> list[str]:
        return [op.name for op in self.operations if host in op.changed]

    def remote_commands(self) -> int:
        """Remote commands run; needs `--debug` in the run's arguments."""
        return self.stderr.count("Running command on ")


def write_inventory(path: Path, hosts: list[tuple[str, dict]], group: str = "hosts") -> Path:
    """A pyinfra inventory file holding `hosts` as (name, data) pairs."""
    path.write_text(f"{group} = {hosts!r}\n")
    return path


def run_pyinfra(inventory: str | Path, deploy: str | Path, *extra: str, cwd: str | Path | None = None,
                timeout: float = 1800) -> PyinfraRun:
    argv = [sys.executable, "-m", "pyinfra", str(inventory), str(deploy), "-y", "--json", *extra]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    run = PyinfraRun(argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
    try:
        payload = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        payload = {}
    for op in (payload.get("results") or {}).get("operations", []):
        run.operations.append(OperationResult(op["name"], op["success"], op["no_change"], op["error"]))
    return run
