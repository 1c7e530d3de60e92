"""Drain around restarts: take a host out of service before its batch deploys, put it back
after the gate.

For each host whose profile has `rollout_drain_command`, before the batch deploys:
1. the drain command, on the controller, with the host's name as its last argument (and in
   HOSTKIT_HOST), within `rollout_hook_timeout` (to take it out of a load balancer, say);
2. a wait until the host's vLLM shows no running request on /metrics (idle.py), within
   `rollout_drain_timeout`: from the controller when the port answers there, else on the host.
After the gate, `rollout_undrain_command` the same way, for the hosts that passed. A host
whose drain fails is not deployed and is undrained again (it was never touched); a host
whose deploy or gate fails stays drained, out of service, and the report says so.

On a host with vllm_instances the rollout names the instances to drain (those that restart):
each one's drain command gets the host's name and the instance's unit last (and
HOSTKIT_HOST, HOSTKIT_UNIT, HOSTKIT_PORT), and its wait reads that instance's own port; its
checks are named `vllm@NAME.service drain`, `... idle`. The undrain is one check per host.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hostkit.profile.host_profile import HostProfile
from hostkit.rollout import idle as idle_module
from hostkit.rollout.gate import Server, direct_base_url, host_base_url, host_source, run_script_on_host, servers
from hostkit.rollout.report import GateCheck

IDLE_SOURCE = host_source(idle_module)
_PARALLEL = 64


def run_hook(step: str, argv: Sequence[str], host_name: str, timeout: float,
             unit: str | None = None, port: int | None = None) -> GateCheck:
    """`argv` + [host_name] (+ [unit] for an instance) on the controller, within `timeout`
    seconds, as one check."""
    started = time.monotonic()
    shown = argv[0]
    instance = {} if unit is None else {"HOSTKIT_UNIT": unit, "HOSTKIT_PORT": str(port)}
    try:
        proc = subprocess.run([*argv, host_name, *([] if unit is None else [unit])], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "HOSTKIT_HOST": host_name, **instance},
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return GateCheck(step, False, f"{shown} {host_name} did not end within {timeout:.0f}s and was stopped",
                         round(time.monotonic() - started, 3))
    except OSError as error:
        return GateCheck(step, False, f"{shown} could not run: {error.strerror or error}", round(time.monotonic() - started, 3))
    seconds = round(time.monotonic() - started, 3)
    if proc.returncode != 0:
        said = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
        return GateCheck(step, False, f"{shown} {host_name} exited {proc.returncode}" + (f": {said}" if said else ""), seconds)
    return GateCheck(step, True, f"{shown} {host_name} exited 0", seconds)


class Drainer:
    """The drain and undrain steps of a rollout's batches (see the module docstring)."""

    def __init__(self, inventory: str | Path, profiles: Mapping[str, HostProfile],
                 host_data: Mapping[str, Mapping[str, Any]], direct: bool = True):
        self.inventory = str(inventory)
        self.profiles = profiles
        self.host_data = host_data
        self.direct = direct

    def drains(self, name: str) -> bool:
        return self.profiles[name].rollout_drain_command is not None

    def targets(self, names: Sequence[str], instances: Mapping[str, Sequence[str]] | None) -> dict[str, list[Server]]:
        """The servers to drain of each host that drains: vllm.service, or the instances named."""
        found = {name: servers(self.profiles[name], (instances or {}).get(name)) for name in names if self.drains(name)}
        return {name: listed for name, listed in found.items() if listed}

    def drain(self, names: Sequence[str],
              instances: Mapping[str, Sequence[str]] | None = None) -> dict[str, list[GateCheck]]:
        """The drain command, then the wait for no running request, per server that drains."""
        from gevent.pool import Pool

        targets = self.targets(names, instances)
        pool = Pool(_PARALLEL)
        hooks = {name: [pool.spawn(self._hook, "drain", name, server) for server in listed]
                 for name, listed in targets.items()}
        pool.join()
        results = {name: [hook.value for hook in spawned] for name, spawned in hooks.items()}
        hooked = {name: listed for name, listed in targets.items() if all(check.passed for check in results[name])}
        for name, checks in self.wait_idle(hooked).items():
            results[name].extend(checks)
        return results

    def undrain(self, names: Sequence[str], instances: Mapping[str, Sequence[str]] | None = None) -> dict[str, GateCheck]:
        from gevent.pool import Pool

        targets = {name: listed for name, listed in self.targets(names, instances).items()
                   if self.profiles[name].rollout_undrain_command is not None}
        pool = Pool(_PARALLEL)
        hooks = {name: [pool.spawn(self._hook, "undrain", name, server) for server in listed]
                 for name, listed in targets.items()}
        pool.join()
        return {name: _one_check("undrain", targets[name], [hook.value for hook in spawned])
                for name, spawned in hooks.items()}

    def _hook(self, step: str, name: str, server: Server) -> GateCheck:
        profile = self.profiles[name]
        argv = profile.rollout_drain_command if step == "drain" else profile.rollout_undrain_command
        check = run_hook(step, argv, name, profile.rollout_hook_timeout, server.unit, server.profile.vllm_port)
        return GateCheck(server.check(check.name), check.passed, check.detail, check.seconds)

    def wait_idle(self, targets: Mapping[str, Sequence[Server]]) -> dict[str, list[GateCheck]]:
        """Per host, each server's wait in turn (drained together, they empty together): from the
        controller when each has a URL there, else on the host."""
        from gevent.pool import Pool

        pool = Pool(_PARALLEL)
        serving = [name for name in targets if self.profiles[name].vllm_enabled]
        results = {name: [GateCheck("idle", True, "vllm_enabled is false: nothing to wait for")]
                   for name in targets if name not in serving}
        urls = {name: [direct_base_url(name, self.host_data.get(name, {}), server.profile) if self.direct else None
                       for server in targets[name]] for name in serving}
        waits = {name: pool.spawn(self._wait_direct, targets[name], found)
                 for name, found in urls.items() if None not in found}
        remote = [name for name in serving if name not in waits]
        if remote:
            from hostkit.fleet.connect import connected_hosts

            with connected_hosts(self.inventory, limit=[glob.escape(name) for name in remote]) as hosts:
                for connected in hosts:
                    waits[connected.name] = pool.spawn(self._wait_on_host, connected, targets[connected.name])
                pool.join()
        pool.join()
        for name in serving:
            wait = waits.get(name)
            if wait is None:
                results[name] = [GateCheck(server.check("idle"), False, "pyinfra could not connect to the host")
                                 for server in targets[name]]
            elif not wait.successful():
                results[name] = [GateCheck(server.check("idle"), False, f"the wait raised {wait.exception!r}")
                                 for server in targets[name]]
            else:
                results[name] = wait.value
        return results

    def _wait_direct(self, targets: Sequence[Server], urls: Sequence[str]) -> list[GateCheck]:
        checks = []
        for server, base_url in zip(targets, urls):
            waited = idle_module.wait_idle(base_url, server.profile.rollout_drain_timeout)
            checks.append(GateCheck(server.check("idle"), waited["idle"], f"{waited['detail']} (from the controller)",
                                    waited["seconds"]))
        return checks

    def _wait_on_host(self, host, targets: Sequence[Server]) -> list[GateCheck]:
        """Each server's wait in turn, through the host's one connection."""
        checks = []
        for server in targets:
            profile = server.profile
            args = {"base_url": host_base_url(profile), "timeout": profile.rollout_drain_timeout}
            waited, error = run_script_on_host(host, IDLE_SOURCE, args, stdin="", timeout=profile.rollout_drain_timeout + 60)
            if error is not None:
                checks.append(GateCheck(server.check("idle"), False, f"on the host: {error}"))
            else:
                checks.append(GateCheck(server.check("idle"), waited["idle"], f"{waited['detail']} (on the host)",
                                        waited["seconds"]))
        return checks


def _one_check(step: str, targets: Sequence[Server], checks: Sequence[GateCheck]) -> GateCheck:
    """A host's checks of one step as one: vllm.service's as it is, its instances' together."""
    if len(checks) == 1 and targets[0].unit is None:
        return checks[0]
    return GateCheck(step, all(check.passed for check in checks),
                     "; ".join(f"{check.name.split()[0]}: {check.detail}" for check in checks),
                     round(max(check.seconds for check in checks), 3))
