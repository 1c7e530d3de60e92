"""Verify hosts: gather over one testinfra connection per host, then check locally.

Per host: the snapshot command (hostkit.facts.snapshot, exactly what the deploy reads),
the plan made from it as the deploy makes it, then one probe command (hostkit.verify.probes).
Two remote commands in all. Hosts run concurrently on a gevent pool: `hostkit verify`
monkey-patches the standard library first, as pyinfra's CLI does, so paramiko's sockets
and the ssh backend's subprocesses yield to each other.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostkit.facts.deadline import KILL_AFTER_S
from hostkit.facts.snapshot import HostSnapshot, HostSnapshotFact
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.plan.planner import PlanError, plan_host
from hostkit.plan.scope import snapshot_scope
from hostkit.facts.vllm_service import ServiceTarget, VllmServiceFact
from hostkit.paths import vllm_unit_of
from hostkit.verify.checks import CheckResult, InstanceReadings, check_host
from hostkit.verify.probes import Probes, parse_probes, probe_command
from hostkit.verify.targets import Target, attach_paramiko, write_ssh_config


# Each remote command's deadline: past the deadlines inside it (hostkit.facts.deadline), which
# name what hung first; the probe's readiness wait comes on top.
COMMAND_S = 300


class GatherError(Exception):
    """The host could not be reached or a gathering command failed: nothing was checked."""


@dataclass
class HostReport:
    name: str
    checks: list[CheckResult] = field(default_factory=list)
    remote_commands: int = 0
    seconds: float = 0.0  # the whole host: connecting, the remote commands, the checks
    command_seconds: dict[str, float] = field(default_factory=dict)  # per remote command
    error: str | None = None  # set when the host could not be verified at all
    warnings: list[str] = field(default_factory=list)

    @property
    def reachable(self) -> bool:
        return self.error is None

    @property
    def ok(self) -> bool:
        return self.reachable and all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [check for check in self.checks if not check.ok]


class RemoteShell:
    """Runs scripts through a testinfra host (ssh or local), each within a deadline; counts and
    times them."""

    def __init__(self, host: Any):
        self.host = host
        self.commands = 0
        self.seconds: dict[str, float] = {}

    def run(self, script: str, what: str, deadline_s: int = COMMAND_S) -> list[str]:
        self.commands += 1
        started = time.monotonic()
        try:
            result = self.host.run("timeout -k %s %s sh -c %s", str(KILL_AFTER_S), str(deadline_s), script)
        except Exception as error:  # paramiko, socket and ssh-backend errors alike: the host is not reachable
            raise GatherError(f"cannot run the {what} command: {type(error).__name__}: {error}".strip()) from None
        finally:
            self.seconds[what] = time.monotonic() - started
        if result.rc in (124, 137):
            raise GatherError(f"the {what} command timed out after {deadline_s} s")
        if result.rc != 0:
            raise GatherError(f"the {what} command exited {result.rc}: {result.stderr.strip()[-500:]}")
        return result.stdout.splitlines()


@dataclass(frozen=True)
class HostReadings:
    """What verify read from one host: the snapshot, then, when a plan could be made, the probes."""

    snapshot: HostSnapshot
    probes: Probes | None  # None when no plan could be made, so nothing was probed
    plan: Any  # HostPlan | None
    plan_error: str | None
    instances: dict[str, InstanceReadings] = field(default_factory=dict)  # vllm_instances by name


def read_host(shell: RemoteShell, name: str, profile: Any, ready_timeout_s: int | None = None) -> HostReadings:
    fact = HostSnapshotFact()
    snapshot = fact.process(shell.run(fact.command(scope=snapshot_scope(profile)), "snapshot"))
    try:
        plan = plan_host(profile, planning_facts(snapshot), host_name=name)
    except PlanError as error:
        return HostReadings(snapshot, None, None, str(error))
    if plan.instances:
        instances = {name: read_instance(shell, server, ready_timeout_s, host_parts=index == 0)
                     for index, (name, server) in enumerate(plan.instances.items())}
        return HostReadings(snapshot, next(iter(instances.values())).probes, plan, None, instances)
    return HostReadings(snapshot, _probe(shell, plan.vllm, ready_timeout_s, "probe"), plan, None)


def _probe(shell: RemoteShell, plan: Any, ready_timeout_s: int | None, what: str, host_parts: bool = True) -> Probes:
    wait = plan.ready_timeout_s if ready_timeout_s is None else ready_timeout_s
    return parse_probes(shell.run(probe_command(plan, ready_timeout_s, host_parts), what, COMMAND_S + wait))


def read_instance(shell: RemoteShell, plan: Any, ready_timeout_s: int | None, host_parts: bool) -> InstanceReadings:
    """One of vllm_instances: its service fact (the one the deploy reads), then its probes; two
    remote commands, named by its unit."""
    fact = VllmServiceFact()
    unit = vllm_unit_of(plan.instance)
    # The target the deploy's operation asks the fact for (operations.vllm_service.service_target).
    target = ServiceTarget(plan.user, plan.argv[0], plan.host, plan.port, plan.instance)
    service = fact.process(shell.run(fact.command(target=target), f"{unit} service"))
    return InstanceReadings(service, _probe(shell, plan, ready_timeout_s, f"{unit} probe", host_parts))


def verify_host(name: str, host: Any, profile: Any, ready_timeout_s: int | None = None) -> HostReport:
    """One host through an open testinfra host. Never raises for the host's own problems."""
    started = time.monotonic()
    shell = RemoteShell(host)
    report = HostReport(name)
    try:
        readings = read_host(shell, name, profile, ready_timeout_s)
    except GatherError as error:
        report.error = str(error)
    else:
        if readings.plan is None:
            report.checks.append(CheckResult("plan", "plan", False, "a plan for this host's profile",
                                             readings.plan_error or "", "fix the inventory data"))
        else:
            report.warnings = list(readings.plan.warnings)
            try:
                report.checks = check_host(profile, readings.plan, readings.snapshot, readings.probes,
                                           readings.instances)
            except Exception as error:  # a bug must not cost the other hosts their reports
                report.error = f"checking failed: {type(error).__name__}: {error}"
    report.remote_commands = shell.commands
    report.command_seconds = dict(shell.seconds)
    report.seconds = time.monotonic() - started
    return report


def _close(host: Any) -> None:
    """Close paramiko's cached connection; a later use of the same testinfra host reconnects."""
    client = vars(host.backend).pop("client", None)
    if client is not None:
        client.close()


def verify_targets(targets: Sequence[Target], connection: str = "paramiko", parallel: int = 10,
                   ready_timeout_s: int | None = None) -> list[HostReport]:
    """Every target, `parallel` at a time; reports in target order."""
    import gevent.pool
    import testinfra

    with tempfile.TemporaryDirectory(prefix="hostkit-verify-") as directory:
        ssh_config = write_ssh_config(targets, Path(directory) / "ssh_config")

        def one(target: Target) -> HostReport:
            started = time.monotonic()
            try:
                host = testinfra.get_host(target.hostspec(connection, ssh_config))
                attach_paramiko(host, target)
            except Exception as error:  # paramiko and socket errors alike: unreachable
                return HostReport(target.name, error=f"cannot connect: {type(error).__name__}: {error}",
                                  seconds=time.monotonic() - started)
            try:
                return verify_host(target.name, host, target.profile, ready_timeout_s)
            finally:
                _close(host)

        pool = gevent.pool.Pool(max(1, parallel))
        return list(pool.imap(one, targets))
