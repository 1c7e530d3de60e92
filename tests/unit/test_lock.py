"""The deploy lock: its decisions (pure), its shell script (run here with /bin/sh on a
temporary lock directory) and its operations (run as pyinfra runs them, `_inner` with a
fake `host` whose commands run locally)."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host

from hostkit.facts.snapshot import SECTION_NAMES, HostSnapshot, MemoisedSnapshot
from hostkit.operations import lock
from tests.waiting import wait_for
from hostkit.operations.lock import LockOwner, LockProbe, takeover


# Processes of this machine may name vllm-hostkit (lab VMs do): each test has its own marker.
MARKER = f"hk-lock-test-{os.getpid()}"


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "LEFTOVER_MARKER", MARKER)
    directory = tmp_path / "run-vllm-hostkit"
    monkeypatch.setattr(lock, "DEPLOY_LOCK_DIR", str(directory))
    monkeypatch.setattr(lock, "DEPLOY_LOCK_PATH", str(directory / "deploy.lock"))
    return directory


def owner(name="gpu-01", controller="ctl", pid=4242, started=1700000000.5) -> LockOwner:
    return LockOwner(f"tok-{name}-{pid}", controller, pid, started, name)


def run_sh(script: str) -> list[str]:
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def orphan(seconds: float) -> int:
    """A process naming the marker whose parent is gone, like the commands of a killed run
    (a child of this test would count as the probe's own: pytest is the probe's ancestor)."""
    script = f"sh -c 'sleep {seconds}; : {MARKER} swap dd' > /dev/null 2>&1 & echo $!"
    pid = int(run_sh(script)[0])
    # Until its child has exec'd sleep, the child is a fork of sh that names the marker too.
    wait_for(lambda: [c.cmdline()[:1] for c in psutil.Process(pid).children()] == [["sleep"]], 10,
             "the orphan's sleep", interval=0.02, ignoring=psutil.Error)
    return pid


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def probe(owner_: LockOwner, replace: str | None = None) -> LockProbe:
    return LockProbe.parse(run_sh(lock.acquire_command(owner_, replace=replace)))


# -- the lock file's content and the command's output --------------------------------------


def test_owner_line_round_trips_and_garbage_is_unreadable():
    me = LockOwner.for_this_run("gpu-01")
    assert LockOwner.parse(me.line()) == LockOwner(me.token, socket.gethostname(), os.getpid(),
                                                   round(me.pid_started, 2), "gpu-01")
    assert LockOwner.parse("") is None
    assert LockOwner.parse("token=x pid=notanumber") is None


def test_probe_output_is_parsed_and_unexpected_output_refused():
    assert LockProbe.parse(["acquired"]) == LockProbe(True)
    held = LockProbe.parse(["held 42", f"holder {owner().line()}", "busy 77 sh -c dd # vllm-hostkit"])
    assert (held.acquired, held.age_s, held.holder, held.leftovers) == (
        False, 42, owner(), ("77 sh -c dd # vllm-hostkit",))
    with pytest.raises(ValueError, match="unexpected output"):
        LockProbe.parse(["Permission denied"])


# -- when a held lock may be taken over ---------------------------------------------------------


def test_a_live_holder_keeps_the_lock_and_the_refusal_names_it():
    decision = takeover(LockProbe(False, 30, owner().line()), stale_after_s=3600, alive=lambda o: True)
    assert not decision.allowed
    assert decision.reason == (f"another hostkit deploy holds {lock.DEPLOY_LOCK_PATH}: pid 4242 on controller ctl "
                               "(inventory host gpu-01), for 30s")


def test_a_holder_that_died_on_this_controller_is_taken_over_at_once():
    decision = takeover(LockProbe(False, 5, owner().line()), stale_after_s=3600, alive=lambda o: False)
    assert decision.allowed and "no longer runs" in decision.reason


def test_a_holder_elsewhere_is_trusted_until_the_lock_is_stale():
    young = takeover(LockProbe(False, 3599, owner().line()), stale_after_s=3600, alive=lambda o: None)
    old = takeover(LockProbe(False, 3601, owner().line()), stale_after_s=3600, alive=lambda o: None)
    unreadable = takeover(LockProbe(False, 3601, ""), stale_after_s=3600, alive=lambda o: None)
    assert not young.allowed
    assert old.allowed and "3601s old, older than 3600s" in old.reason
    assert unreadable.allowed and "unreadable holder" in unreadable.reason


@pytest.mark.processes
def test_controller_process_liveness_uses_pid_and_start_time():
    me = LockOwner.for_this_run("h")
    assert lock.controller_process_alive(me) is True
    assert lock.controller_process_alive(LockOwner("t", "another-controller", os.getpid(), me.pid_started, "h")) is None
    # The same pid with another start time is another process: the holder is gone.
    assert lock.controller_process_alive(LockOwner("t", me.controller, me.pid, me.pid_started - 100, "h")) is False
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    assert lock.controller_process_alive(LockOwner("t", me.controller, child.pid, started, "h")) is False


# -- the shell script, for real -----------------------------------------------------------------


@pytest.mark.processes
def test_first_run_acquires_and_a_second_sees_the_holder(lock_dir):
    first, second = owner("a", pid=1), owner("b", pid=2)
    assert probe(first).acquired
    assert (lock_dir / "deploy.lock").read_text() == first.line() + "\n"
    held = probe(second)
    assert not held.acquired and held.holder == first and 0 <= held.age_s < 5
    assert (lock_dir / "deploy.lock").read_text() == first.line() + "\n"


@pytest.mark.processes
def test_takeover_replaces_only_the_lock_it_judged(lock_dir):
    first, second, third = owner("a", pid=1), owner("b", pid=2), owner("c", pid=3)
    probe(first)
    # A takeover based on an older reading must not remove a lock someone took since.
    assert not probe(third, replace=owner("zombie").line()).acquired
    assert probe(second, replace=first.line()).acquired
    assert LockOwner.parse((lock_dir / "deploy.lock").read_text()) == second


@pytest.mark.processes
def test_release_removes_only_ones_own_lock(lock_dir):
    first, second = owner("a", pid=1), owner("b", pid=2)
    probe(first)
    run_sh(lock.release_command(second))
    assert (lock_dir / "deploy.lock").exists()
    run_sh(lock.release_command(first))
    assert not (lock_dir / "deploy.lock").exists()
    assert probe(second).acquired


@pytest.mark.processes
def test_of_many_simultaneous_runs_exactly_one_acquires(lock_dir):
    owners = [owner(f"h{i}", pid=i) for i in range(12)]
    with concurrent.futures.ThreadPoolExecutor(len(owners)) as pool:
        probes = list(pool.map(probe, owners))
    winners = [o for o, p in zip(owners, probes) if p.acquired]
    assert len(winners) == 1
    assert all(p.holder == winners[0] for p in probes if not p.acquired)
    assert LockOwner.parse((lock_dir / "deploy.lock").read_text()) == winners[0]


@pytest.mark.processes
def test_commands_of_an_earlier_run_are_listed_but_not_the_lock_command_itself():
    leftover = orphan(30)
    try:
        found = probe(owner())
        assert [line.split(" ", 1)[0] for line in found.leftovers] == [str(leftover)]
        assert f"sleep 30; : {MARKER} swap dd" in found.leftovers[0]
    finally:
        kill(leftover)
    assert probe(owner("b")).leftovers == ()


# -- the operations ---------------------------------------------------------------------------


class FakeState:
    def __init__(self, executing: bool = True):
        self.is_executing = executing
        self.callbacks = []

    def add_callback_handler(self, handler):
        self.callbacks.append(handler)

    def get_op_data_for_host(self, host, op_hash):
        return SimpleNamespace(global_arguments={"_ignore_errors": False})


class LocalHost:
    """A pyinfra host whose commands run here, in /bin/sh."""

    def __init__(self, name="gpu-01", executing=True, state=None):
        self.name = name
        self.state = state or FakeState(executing)
        self.current_op_global_arguments = {}
        self.logged: list[str] = []
        self.commands = 0

    def run_shell_command(self, command, **connector_arguments):
        self.commands += 1
        result = subprocess.run(["sh", "-c", str(command)], capture_output=True, text=True, timeout=30)
        return result.returncode == 0, SimpleNamespace(stdout_lines=result.stdout.splitlines(), stderr=result.stderr)

    def log_styled(self, message, **kwargs):
        self.logged.append(message)

    def log(self, message, **kwargs):
        self.logged.append(message)


def run_op(fake: LocalHost, op, *args, **kwargs) -> list:
    with ctx_host.use(fake):
        return list(op._inner(*args, **kwargs))


def refusal(commands: list) -> str:
    [command] = commands
    assert isinstance(command, FunctionCommand)
    fake = LocalHost()
    assert command.function(None, fake, *command.args) is False
    return fake.logged[0]


def test_prepare_touches_nothing():
    fake = LocalHost(executing=False)
    assert run_op(fake, lock.acquire_deploy_lock) == [] and run_op(fake, lock.release_deploy_lock) == []
    assert fake.commands == 0


@pytest.mark.processes
def test_acquire_then_release_yield_nothing_so_a_converged_host_reports_no_change(lock_dir):
    fake = LocalHost()
    fake._hostkit_snapshot = MemoisedSnapshot(fake, None, HostSnapshot({}))
    assert run_op(fake, lock.acquire_deploy_lock) == []
    held = LockOwner.parse((lock_dir / "deploy.lock").read_text())
    assert (held.host, held.pid, held.controller) == ("gpu-01", os.getpid(), socket.gethostname())
    assert fake._hostkit_snapshot.stale == SECTION_NAMES  # operations read the host afresh under the lock
    assert run_op(fake, lock.release_deploy_lock) == []
    assert not (lock_dir / "deploy.lock").exists()


@pytest.mark.processes
def test_a_second_live_run_is_refused_and_the_first_keeps_its_lock(lock_dir):
    first, second = LocalHost(), LocalHost()
    run_op(first, lock.acquire_deploy_lock)
    before = (lock_dir / "deploy.lock").read_text()
    message = refusal(run_op(second, lock.acquire_deploy_lock))
    assert message.startswith(f"deploy lock: another hostkit deploy holds {lock_dir}/deploy.lock: pid {os.getpid()}")
    assert "(inventory host gpu-01)" in message and message.endswith("this host is not deployed")
    assert run_op(second, lock.release_deploy_lock) == []  # holds nothing, releases nothing
    assert (lock_dir / "deploy.lock").read_text() == before


@pytest.mark.processes
def test_the_lock_of_a_killed_run_is_taken_over(lock_dir):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = LockOwner("dead", socket.gethostname(), child.pid, psutil.Process(child.pid).create_time(), "gpu-01")
    child.wait()
    lock_dir.mkdir()
    (lock_dir / "deploy.lock").write_text(dead.line() + "\n")
    fake = LocalHost()
    assert run_op(fake, lock.acquire_deploy_lock) == []
    assert LockOwner.parse((lock_dir / "deploy.lock").read_text()).pid == os.getpid()
    assert any("no longer runs" in line for line in fake.logged)


@pytest.mark.processes
def test_a_takeover_waits_for_the_earlier_runs_commands(lock_dir, monkeypatch):
    monkeypatch.setattr(lock, "LEFTOVER_POLL_S", 0.2)
    lock_dir.mkdir()
    (lock_dir / "deploy.lock").write_text(owner(controller="elsewhere").line() + "\n")
    os.utime(lock_dir / "deploy.lock", (1, 1))  # ancient: stale
    leftover = orphan(1.5)
    try:
        fake = LocalHost()
        assert run_op(fake, lock.acquire_deploy_lock, leftover_wait_s=60) == []
        assert not running(leftover), "the lock was taken while the earlier command ran"
        assert any("waiting for 1 command(s) of the earlier run" in line for line in fake.logged)
    finally:
        kill(leftover)


@pytest.mark.processes
def test_a_takeover_gives_up_on_commands_that_do_not_end(lock_dir):
    lock_dir.mkdir()
    (lock_dir / "deploy.lock").write_text(owner(controller="elsewhere").line() + "\n")
    os.utime(lock_dir / "deploy.lock", (1, 1))
    leftover = orphan(30)
    try:
        message = refusal(run_op(LocalHost(), lock.acquire_deploy_lock, leftover_wait_s=0))
        assert "commands of an earlier run still run after 0s" in message and str(leftover) in message
        assert LockOwner.parse((lock_dir / "deploy.lock").read_text()).controller == "elsewhere"
    finally:
        kill(leftover)


@pytest.mark.processes
def test_a_host_that_fails_part_way_releases_its_lock(lock_dir):
    fake = LocalHost()
    run_op(fake, lock.acquire_deploy_lock)
    [callback] = fake.state.callbacks
    callback.operation_host_error(fake.state, fake, "op-hash")
    assert not (lock_dir / "deploy.lock").exists()
    run_op(fake, lock.acquire_deploy_lock)
    assert len(fake.state.callbacks) == 1  # registered once per run


def test_a_failed_lock_command_fails_the_host():
    class Broken(LocalHost):
        def run_shell_command(self, command, **kwargs):
            return False, SimpleNamespace(stdout_lines=[], stderr="mkdir: cannot create directory: Read-only file system")

    message = refusal(run_op(Broken(), lock.acquire_deploy_lock))
    assert "the deploy lock command failed: mkdir: cannot create directory: Read-only file system" in message
