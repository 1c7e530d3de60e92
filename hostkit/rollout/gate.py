"""The health gate after each batch: does every host of the batch serve?

- `ServiceGate`: /health, /v1/models and one real POST /v1/completions, with the
  profile's API key in the Authorization header only; on a host with vllm_instances, of
  each instance at its own port with its own key and model (checks named
  `vllm@NAME.service health`, ...): the restarted ones must be ready, the others still serve. From the controller to the host's
  address when that port answers there; otherwise on the host, through the host's own
  pyinfra connection, with the key on stdin (see `hostkit.rollout.probe`).
- `VerifyGate`: `hostkit verify` for the batch's hosts, then the `ServiceGate`.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostkit.fleet.connectors import is_local, ssh_address, uses_ssh
from hostkit.operations.callbacks import connector_arguments
from hostkit.paths import vllm_instance_unit
from hostkit.profile.host_profile import HostProfile
from hostkit.remote import host_program
from hostkit.rollout import probe as probe_module
from hostkit.rollout.pyinfra_batch import limit_args
from hostkit.rollout.report import RELEASE_CHECK, GateCheck, GateResult, endpoint_check
from hostkit.vllm.readiness import probe_address


@dataclass(frozen=True)
class Server:
    """One vLLM server of a host, as the gate and the drain reach it."""

    unit: str | None  # vllm@NAME.service; None: vllm.service, whose checks keep their names
    profile: HostProfile  # the host's, or the instance's (its port, bind address, key, model)

    def check(self, step: str) -> str:
        return step if self.unit is None else endpoint_check(self.unit, step)


def servers(profile: HostProfile, instances: Sequence[str] | None = None) -> list[Server]:
    """vllm.service, or each of `instances` (all of vllm_instances when None) of a host with them."""
    if not profile.vllm_instances:
        return [Server(None, profile)]
    names = list(profile.vllm_instances) if instances is None else instances
    return [Server(vllm_instance_unit(name), profile.vllm_instances[name]) for name in names]


def host_source(module) -> str:
    """A standard-library module of this package (probe.py, idle.py) as a host runs it: after
    the text of hostkit.remote.http_request, which on the controller the module imports."""
    return host_program(Path(module.__file__).read_text(), "http_request.py")


PROBE_SOURCE = host_source(probe_module)
CONNECT_TIMEOUT_S = 3.0
PARALLEL_PROBES = 64


def _is_loopback(address: str) -> bool:
    if address.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def direct_base_url(name: str, data: Mapping[str, Any], profile: HostProfile) -> str | None:
    """The server's URL as the controller would reach it, or None when only the host can:
    a loopback ssh address is the controller itself (a port forward to sshd, say), and
    a server bound to loopback is only reachable on its host."""
    bind = profile.vllm_host
    if is_local(name):
        return host_base_url(profile)  # the host is the controller
    if not uses_ssh(name):
        return None  # docker, chroot, ...: the connector is the way in
    address = ssh_address(name, data)
    if _is_loopback(address) or _is_loopback(bind):
        return None
    target = address if bind in ("0.0.0.0", "::") else bind
    return f"http://{_url_host(target)}:{profile.vllm_port}"


def host_base_url(profile: HostProfile) -> str:
    """The server's URL from the host itself."""
    return f"http://{_url_host(probe_address(profile.vllm_host))}:{profile.vllm_port}"


def _answers(base_url: str) -> bool:
    host, _, port = base_url.removeprefix("http://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _checks(server: Server, checks: Sequence[dict[str, Any]], where: str) -> list[GateCheck]:
    return [GateCheck(server.check(check["name"]), check["passed"], f"{check['detail']} ({where})", check["seconds"])
            for check in checks]


def _failed(name: str, detail: str, started: float) -> GateResult:
    return GateResult.of([GateCheck(name, False, detail)], time.monotonic() - started)


def _outcome(probe, started: float) -> GateResult:
    """A probe greenlet's result (None: it never ran, no connection to the host)."""
    if probe is None:
        return _failed("connect", "pyinfra could not connect to the host", started)
    if not probe.successful():
        return _failed("probe", f"the probe raised {probe.exception!r}", started)
    return probe.value


class ServiceGate:
    """Readiness and one completion per host; hosts without vLLM pass with a note."""

    def __init__(self, inventory: str | Path, profiles: Mapping[str, HostProfile],
                 host_data: Mapping[str, Mapping[str, Any]], timeout: float | None = None,
                 direct: bool = True):
        self.inventory = str(inventory)
        self.profiles = profiles
        self.host_data = host_data
        self.timeout = timeout
        self.direct = direct

    def _timeout(self, profile: HostProfile) -> float:
        return float(self.timeout if self.timeout is not None else profile.vllm_ready_timeout)

    def __call__(self, names: Sequence[str]) -> dict[str, GateResult]:
        # Greenlets, as pyinfra runs hosts: concurrent once the process is patched for
        # gevent (the CLI is, by pyinfra_cli's import), one after another otherwise.
        from gevent.pool import Pool

        started = time.monotonic()
        pool = Pool(PARALLEL_PROBES)
        results: dict[str, GateResult] = {}
        candidates: dict[str, list[tuple[Server, str | None, Any]]] = {}
        for name in names:
            profile = self.profiles[name]
            if not profile.vllm_enabled:
                results[name] = GateResult.of([GateCheck("service", True, "vllm_enabled is false: nothing to serve")], 0)
                continue
            candidates[name] = []
            for server in servers(profile):
                url = direct_base_url(name, self.host_data.get(name, {}), server.profile) if self.direct else None
                candidates[name].append((server, url, None if url is None else pool.spawn(_answers, url)))
        pool.join()
        # Each server from the controller when its port answers there, the others on the host.
        # (A finished greenlet is falsy: compare with None.)
        direct = {name: [(server, url) for server, url, answers in found if answers is not None and answers.value]
                  for name, found in candidates.items()}
        remote = {name: [server for server, _, answers in found if answers is None or not answers.value]
                  for name, found in candidates.items()}
        remote = {name: listed for name, listed in remote.items() if listed}

        probes = {name: pool.spawn(self._probe_direct, targets) for name, targets in direct.items() if targets}
        on_host: dict[str, Any] = {}
        if remote:
            from hostkit.fleet.connect import connected_hosts

            with connected_hosts(self.inventory, limit=[glob.escape(name) for name in remote]) as hosts:
                on_host.update({host.name: pool.spawn(self._probe_on_host, host, remote[host.name])
                                for host in hosts if host.name in remote})
                pool.join()  # before disconnecting
        pool.join()
        for name in candidates:
            parts = [_outcome(probes[name], started)] if name in probes else []
            if name in remote:
                parts.append(_outcome(on_host.get(name), started))
            results[name] = parts[0] if len(parts) == 1 else GateResult.of(
                [check for part in parts for check in part.checks], time.monotonic() - started)
        return results

    def _probe_direct(self, targets: Sequence[tuple[Server, str]]) -> GateResult:
        from gevent.pool import Pool

        started = time.monotonic()
        pool = Pool(PARALLEL_PROBES)
        probes = [(server, url, pool.spawn(self._probe_server, server, url)) for server, url in targets]
        pool.join()
        checks = [check for server, url, probe in probes
                  for check in _checks(server, probe.get(), f"from the controller to {url}")]
        return GateResult.of(checks, time.monotonic() - started)

    def _probe_server(self, server: Server, base_url: str) -> list[dict[str, Any]]:
        profile = server.profile
        key = profile.vllm_api_key.get_secret_value() if profile.vllm_api_key else None
        return probe_module.probe(base_url, profile.served_model_name, key, self._timeout(profile))

    def _probe_on_host(self, host, targets: Sequence[Server]) -> GateResult:
        """Each server in turn, through the host's one connection."""
        started = time.monotonic()
        checks = []
        for server in targets:
            profile = server.profile
            timeout = self._timeout(profile)
            args = {"base_url": host_base_url(profile), "model": profile.served_model_name, "timeout": timeout}
            key = profile.vllm_api_key.get_secret_value() if profile.vllm_api_key else ""
            found, error = run_script_on_host(host, PROBE_SOURCE, args, stdin=key + "\n", timeout=timeout + 60)
            where = f"on the host, to {args['base_url']}"
            if error is not None:
                checks.append(GateCheck(server.check("probe"), False, f"{where}: {error}"))
            else:
                checks.extend(_checks(server, found, where))
        return GateResult.of(checks, time.monotonic() - started)


def run_script_on_host(host, source: str, args: Mapping[str, Any], stdin: str, timeout: float) -> tuple[Any, str | None]:
    """Run a standard-library script (probe.py, idle.py) with `python3 -c` through the host's
    own pyinfra connection and its sudo/su/env settings; (its last stdout line as JSON, None)
    or (None, what went wrong)."""
    from pyinfra.api.arguments import pop_global_arguments
    from pyinfra.api.command import QuoteString, StringCommand
    from pyinfra.context import ctx_host, ctx_state

    command = StringCommand(
        "command -v python3 >/dev/null || { echo 'python3 is missing on the host' >&2; exit 127; };",
        "python3", "-c", QuoteString(source), QuoteString(json.dumps(args)),
    )
    with ctx_state.use(host.state), ctx_host.use(host):
        arguments, _ = pop_global_arguments(host.state, host, {"_stdin": stdin, "_timeout": int(timeout)})
        try:
            _, output = host.run_shell_command(command, print_output=False, print_input=False,
                                               **connector_arguments(arguments))
        except (OSError, TimeoutError) as error:
            return None, f"{type(error).__name__} {error}".strip()
    try:
        return json.loads(output.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, f"no result: {output.stderr.strip()[-300:] or 'no output'}"


class VerifyGate:
    """`hostkit verify --limit ... --format json` for the batch, then the service gate."""

    def __init__(self, inventory: str | Path, service_gate: ServiceGate, cwd: str | Path | None = None):
        self.inventory = str(inventory)
        self.service_gate = service_gate
        self.cwd = cwd

    def __call__(self, names: Sequence[str]) -> dict[str, GateResult]:
        started = time.monotonic()
        verified = run_verify(self.inventory, names, self.cwd, self.service_gate.timeout)
        served = self.service_gate(names)
        return {
            name: GateResult.of([*verified[name], *served[name].checks], time.monotonic() - started)
            for name in names
        }


def run_verify(inventory: str, names: Sequence[str], cwd: str | Path | None = None,
               ready_timeout: float | None = None) -> dict[str, list[GateCheck]]:
    """`hostkit verify` (its own process: it patches the stdlib for gevent and runs
    testinfra) for `names`: per host its verdict, and the vLLM release it found in service."""
    argv = [sys.executable, "-c", "from hostkit.cli.verify import verify; verify()", inventory,
            *limit_args(names), "--format", "json"]
    if ready_timeout is not None:
        argv += ["--ready-timeout", str(int(ready_timeout))]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    seconds = round(time.monotonic() - started, 3)
    try:
        payload = json.loads(proc.stdout)
        by_name = {host["name"]: host for host in payload["hosts"]}
    except (ValueError, KeyError, TypeError):
        detail = f"hostkit verify exited {proc.returncode} without a JSON report: {proc.stderr.strip()[-300:]}"
        return {name: [GateCheck("verify", False, detail, seconds)] for name in names}
    return {name: [verify_check(by_name.get(name), seconds), *release_check(by_name.get(name))] for name in names}


def release_check(host: Mapping[str, Any] | None) -> list[GateCheck]:
    """verify's vLLM release check as a gate check: the rollout's summary shows each host's release."""
    found = [check for check in (host or {}).get("checks", [])
             if (check.get("area"), check.get("name")) == ("vllm", "release")]
    return [GateCheck(RELEASE_CHECK, bool(check.get("ok")), str(check.get("actual")), 0.0) for check in found[:1]]


def verify_check(host: Mapping[str, Any] | None, seconds: float) -> GateCheck:
    """One host of `hostkit verify --format json` as one gate check."""
    if host is None:
        return GateCheck("verify", False, "hostkit verify did not report this host", seconds)
    if not host.get("reachable", False):
        return GateCheck("verify", False, f"unreachable: {host.get('error') or 'no connection'}", seconds)
    checks = host.get("checks", [])
    failed = [check for check in checks if not check.get("ok")]
    if host.get("ok") and not failed:
        return GateCheck("verify", True, f"{len(checks)} checks passed", seconds)
    shown = "; ".join(
        f"[{check.get('area')}] {check.get('name')}: expected {check.get('expected')}, found {check.get('actual')}"
        for check in failed[:3]
    )
    more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
    return GateCheck("verify", False, f"{len(failed)} of {len(checks)} checks failed: {shown or host.get('error')}{more}", seconds)
