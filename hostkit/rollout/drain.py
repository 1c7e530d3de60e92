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
from hostkit.rollout.gate import direct_base_url, host_base_url, host_source, run_script_on_host
from hostkit.rollout.report import GateCheck

IDLE_SOURCE = host_source(idle_module)
_PARALLEL = 64


def run_hook(step: str, argv: Sequence[str], host_name: str, timeout: float) -> GateCheck:
    """`argv` + [host_name] on the controller, within `timeout` seconds, as one check."""
    started = time.monotonic()
    shown = argv[0]
    try:
        proc = subprocess.run([*argv, host_name], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOSTKIT_HOST": host_name}, stdin=subprocess.DEVNULL)
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

    def drain(self, names: Sequence[str]) -> dict[str, list[GateCheck]]:
        """The drain command, then the wait for no running request, per host that drains."""
        from gevent.pool import Pool

        drained = [name for name in names if self.drains(name)]
        pool = Pool(_PARALLEL)
        hooks = {name: pool.spawn(self._hook, "drain", name) for name in drained}
        pool.join()
        results = {name: [hooks[name].value] for name in drained}
        waiting = [name for name in drained if results[name][0].passed]
        for name, check in self.wait_idle(waiting).items():
            results[name].append(check)
        return results

    def undrain(self, names: Sequence[str]) -> dict[str, GateCheck]:
        from gevent.pool import Pool

        pool = Pool(_PARALLEL)
        hooks = {name: pool.spawn(self._hook, "undrain", name)
                 for name in names if self.profiles[name].rollout_undrain_command is not None}
        pool.join()
        return {name: hook.value for name, hook in hooks.items()}

    def _hook(self, step: str, name: str) -> GateCheck:
        profile = self.profiles[name]
        argv = profile.rollout_drain_command if step == "drain" else profile.rollout_undrain_command
        return run_hook(step, argv, name, profile.rollout_hook_timeout)

    def wait_idle(self, names: Sequence[str]) -> dict[str, GateCheck]:
        from gevent.pool import Pool

        pool = Pool(_PARALLEL)
        serving = [name for name in names if self.profiles[name].vllm_enabled]
        results = {name: GateCheck("idle", True, "vllm_enabled is false: nothing to wait for")
                   for name in names if name not in serving}
        urls = {name: direct_base_url(name, self.host_data.get(name, {}), self.profiles[name]) if self.direct else None
                for name in serving}
        waits = {name: pool.spawn(self._wait_direct, name, url) for name, url in urls.items() if url is not None}
        remote = [name for name, url in urls.items() if url is None]
        if remote:
            from hostkit.fleet.connect import connected_hosts

            with connected_hosts(self.inventory, limit=[glob.escape(name) for name in remote]) as hosts:
                for connected in hosts:
                    waits[connected.name] = pool.spawn(self._wait_on_host, connected)
                pool.join()
        pool.join()
        for name in serving:
            wait = waits.get(name)
            if wait is None:
                results[name] = GateCheck("idle", False, "pyinfra could not connect to the host")
            elif not wait.successful():
                results[name] = GateCheck("idle", False, f"the wait raised {wait.exception!r}")
            else:
                results[name] = wait.value
        return results

    def _wait_direct(self, name: str, base_url: str) -> GateCheck:
        waited = idle_module.wait_idle(base_url, self.profiles[name].rollout_drain_timeout)
        return GateCheck("idle", waited["idle"], f"{waited['detail']} (from the controller)", waited["seconds"])

    def _wait_on_host(self, host) -> GateCheck:
        profile = self.profiles[host.name]
        args = {"base_url": host_base_url(profile), "timeout": profile.rollout_drain_timeout}
        waited, error = run_script_on_host(host, IDLE_SOURCE, args, stdin="", timeout=profile.rollout_drain_timeout + 60)
        if error is not None:
            return GateCheck("idle", False, f"on the host: {error}")
        return GateCheck("idle", waited["idle"], f"{waited['detail']} (on the host)", waited["seconds"])
