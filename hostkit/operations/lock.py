"""One hostkit deploy per host at a time: a lock file in /run, taken first and released last.

`acquire_deploy_lock` creates /run/vllm-hostkit/deploy.lock atomically (the shell's
noclobber `>` is an O_EXCL open) holding who took it: a per-run token, the controller's
host name and pid, that process's start time and the inventory host name. /run is a tmpfs,
so a reboot clears the lock. A live lock held by another run fails this host with the
holder's details; a FunctionCommand returning False fails this host only (an exception in
the generator would stop every host, see hostkit/operations/gpu.py).

A lock is taken over when its holder is gone:
- the holder ran on this controller and its process (pid and start time) no longer exists
  (a pyinfra killed mid-run), or
- the lock is older than `stale_after_s` (a controller that died elsewhere).
Before a takeover, hostkit waits for the previous run's remote commands to end: a
controller that dies does not stop the commands it started (a swap dd runs on), and a
second run racing them could swap on a half-written file. Those are the processes whose
command line names vllm-hostkit, which every hostkit script and path does.

The lock is bookkeeping, not configuration: the operations run their one remote command
themselves at execute time and yield nothing when all is well, so a converged host still
reports no change. A run whose host fails part-way releases the lock from pyinfra's
operation-error callback; a run that is killed leaves it to the takeover rules above.
"""

from __future__ import annotations

import os
import shlex
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, Host, State, StringCommand, operation
from pyinfra.api.state import BaseStateCallback

from hostkit.remote import host_file
from hostkit.facts.snapshot import mark_changed
from hostkit.operations import callbacks
from hostkit.desired.deploy_lock import STALE_AFTER_S
from hostkit.paths import DEPLOY_LOCK_DIR, DEPLOY_LOCK_PATH

LEFTOVER_WAIT_S = 600
LEFTOVER_POLL_S = 2
LEFTOVER_MARKER = "vllm-hostkit"

_HELD_ATTR = "_hostkit_deploy_lock"
_CALLBACK_ATTR = "_hostkit_deploy_lock_callback"


@dataclass(frozen=True)
class LockOwner:
    """Who holds the lock: one line of `key=value` words in the lock file."""

    token: str
    controller: str
    pid: int
    pid_started: float
    host: str

    @classmethod
    def for_this_run(cls, host_name: str) -> LockOwner:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), psutil.Process().create_time(), host_name)

    def line(self) -> str:
        return (
            f"token={self.token} controller={self.controller} pid={self.pid} "
            f"pid_started={self.pid_started:.2f} host={self.host}"
        )

    @classmethod
    def parse(cls, line: str) -> LockOwner | None:
        words = dict(word.split("=", 1) for word in line.split() if "=" in word)
        try:
            return cls(words["token"], words["controller"], int(words["pid"]), float(words["pid_started"]),
                       words["host"])
        except (KeyError, ValueError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on controller {self.controller} (inventory host {self.host})"


@dataclass(frozen=True)
class LockProbe:
    """What the acquire command found on the host."""

    acquired: bool
    age_s: int = 0  # of the lock held by someone else
    holder_line: str = ""  # its content, verbatim
    leftovers: tuple[str, ...] = field(default_factory=tuple)  # "PID ARGS" of earlier runs' commands

    @property
    def holder(self) -> LockOwner | None:
        return LockOwner.parse(self.holder_line)

    @classmethod
    def parse(cls, lines: list[str]) -> LockProbe:
        status = lines[0].split() if lines else []
        leftovers = tuple(line[len("busy "):] for line in lines if line.startswith("busy "))
        if status[:1] == ["acquired"]:
            return cls(True, leftovers=leftovers)
        if status[:1] == ["held"] and len(status) == 2 and status[1].lstrip("-").isdigit():
            holder = next((line[len("holder "):] for line in lines if line.startswith("holder ")), "")
            return cls(False, max(0, int(status[1])), holder, leftovers)
        raise ValueError(f"unexpected output from the deploy lock command: {lines!r}")


def acquire_command(owner: LockOwner, replace: str | None = None) -> str:
    """Create the lock for `owner`, first removing it if it still holds exactly `replace`
    (a takeover). Prints `acquired`, or `held AGE_S` and `holder LINE`; then one `busy PID
    ARGS` line per process of an earlier hostkit run (never this command's own)."""
    settings = {
        "lock": DEPLOY_LOCK_PATH,
        "hk_lock_dir": DEPLOY_LOCK_DIR,
        "hk_owner": owner.line(),
        "hk_take_over": "1" if replace is not None else "0",
        "hk_replace": replace or "",
        "hk_marker": LEFTOVER_MARKER,
    }
    lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
    return "\n".join((*lines, host_file("lock_acquire.sh")))


def release_command(owner: LockOwner) -> str:
    """Remove the lock only while it is still `owner`'s."""
    return (
        f'if [ "$(cat {DEPLOY_LOCK_PATH} 2>/dev/null)" = {shlex.quote(owner.line())} ]; then rm -f {DEPLOY_LOCK_PATH}; fi'
    )


def controller_process_alive(owner: LockOwner) -> bool | None:
    """Whether the holder's pyinfra process still runs; None when it ran on another controller."""
    if owner.controller != socket.gethostname():
        return None
    try:
        return abs(psutil.Process(owner.pid).create_time() - owner.pid_started) < 1
    except psutil.Error:
        return False


@dataclass(frozen=True)
class Takeover:
    allowed: bool
    reason: str


def takeover(probe: LockProbe, stale_after_s: int,
             alive: Callable[[LockOwner], bool | None] = controller_process_alive) -> Takeover:
    """Whether a lock held by someone else may be taken over, and why (or why not)."""
    holder = probe.holder
    if holder is not None:
        if alive(holder) is False:
            return Takeover(True, f"its holder, {holder.describe()}, no longer runs")
        who = holder.describe()
    else:
        who = "an unreadable holder"
    if probe.age_s > stale_after_s:
        return Takeover(True, f"it is {probe.age_s}s old, older than {stale_after_s}s ({who})")
    return Takeover(False, f"another hostkit deploy holds {DEPLOY_LOCK_PATH}: {who}, for {probe.age_s}s")


def _probe(op_host: Host, command: str, connector_arguments: dict) -> LockProbe:
    ok, output = op_host.run_shell_command(StringCommand(command), **connector_arguments)
    if not ok:
        raise ValueError(f"the deploy lock command failed: {output.stderr.strip()}")
    return LockProbe.parse(output.stdout_lines)


def _refusal(message: str) -> FunctionCommand:
    return FunctionCommand(callbacks.fail_host, ([f"deploy lock: {message}"],), {})


class _ReleaseOnError(BaseStateCallback):
    """A host that fails part-way runs no later operation, so it would keep the lock."""

    @staticmethod
    def operation_host_error(state: State, host: Host, op_hash, retry_attempt: int = 0, max_retries: int = 0):
        owner = getattr(host, _HELD_ATTR, None)
        arguments = state.get_op_data_for_host(host, op_hash).global_arguments
        if owner is None or arguments.get("_ignore_errors"):
            return
        connector_arguments = callbacks.connector_arguments(arguments)
        try:
            host.run_shell_command(StringCommand(release_command(owner)), **connector_arguments)
        except Exception as error:  # the failure may be the connection itself
            logger.warning(f"[{host.name}] deploy lock not released ({error}); the next run takes it over")
        setattr(host, _HELD_ATTR, None)


def _register_release_on_error(state: State) -> None:
    if not getattr(state, _CALLBACK_ATTR, False):
        state.add_callback_handler(_ReleaseOnError())
        setattr(state, _CALLBACK_ATTR, True)


@operation()
def acquire_deploy_lock(stale_after_s: int = STALE_AFTER_S, leftover_wait_s: int = LEFTOVER_WAIT_S):
    """
    Take this host's deploy lock, or fail this host when another live run holds it.

    + stale_after_s: a lock older than this is taken over whoever holds it
    + leftover_wait_s: how long a takeover waits for the previous run's commands to end
    """
    if not host.state.is_executing:
        return  # the lock exists only while operations run
    connector_arguments = callbacks.current_connector_arguments(host)
    owner = LockOwner.for_this_run(host.name)
    deadline = time.monotonic() + leftover_wait_s
    announced = waiting = False
    try:
        probe = _probe(host, acquire_command(owner), connector_arguments)
        while not probe.acquired:
            decision = takeover(probe, stale_after_s)
            if not decision.allowed:
                yield _refusal(f"{decision.reason}; this host is not deployed")
                return
            if not announced:
                host.log_styled(f"deploy lock: taking over {DEPLOY_LOCK_PATH}: {decision.reason}", fg="yellow",
                                log_func=logger.warning)
                announced = True
            if not probe.leftovers:
                stale_line = probe.holder_line
                probe = _probe(host, acquire_command(owner, replace=stale_line), connector_arguments)
                if not probe.acquired and probe.holder_line == stale_line:
                    yield _refusal(f"could not take over {DEPLOY_LOCK_PATH}: {stale_line!r}")
                    return
                continue  # not acquired: another run took it over first, and the loop judges that one
            if time.monotonic() > deadline:
                listed = "; ".join(line[:160] for line in probe.leftovers)
                message = f"commands of an earlier run still run after {leftover_wait_s}s: {listed}"
                yield _refusal(message)
                return
            if not waiting:
                host.log(f"deploy lock: waiting for {len(probe.leftovers)} command(s) of the earlier run to end")
                waiting = True
            time.sleep(LEFTOVER_POLL_S)
            probe = _probe(host, acquire_command(owner), connector_arguments)
    except ValueError as error:
        yield _refusal(str(error))
        return
    setattr(host, _HELD_ATTR, owner)
    _register_release_on_error(host.state)
    # The plan's snapshot was taken before the lock: read the host afresh.
    mark_changed(host)


@operation()
def release_deploy_lock():
    """
    Release the deploy lock that `acquire_deploy_lock` took in this run.
    """
    yield from ()  # an operation is a generator; this one runs its command itself and yields none
    owner = getattr(host, _HELD_ATTR, None)
    if not host.state.is_executing or owner is None:
        return
    connector_arguments = callbacks.current_connector_arguments(host)
    ok, output = host.run_shell_command(StringCommand(release_command(owner)), **connector_arguments)
    setattr(host, _HELD_ATTR, None)
    if not ok:
        host.log_styled(f"deploy lock: {DEPLOY_LOCK_PATH} not released: {output.stderr.strip()}", fg="yellow",
                        log_func=logger.warning)
