"""Faults during and between deploys of deploys/vllm_host.py, on one lab host (with the vLLM
stand-in) that the tests share in file order. After each fault: the host is reachable, has
booted cleanly, has no fstab entry for a missing file, and the next run converges with
nothing lost (swap as planned, vLLM serving, a further run changing nothing).

Faults covered elsewhere are not repeated here (scripts/fault_report.py runs them all):
a full disk, a refused swapoff or resize, a blank or foreign NVMe at boot (test_swap.py); a
memory hog in the vLLM unit (test_vllm_service.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from hostkit.vllm.readiness import Probe, probe_command
from tests.e2e.conftest import MAIN_DEPLOY, REPO, lab_inventory
from tests.e2e.lab_shell import sh
from hostkit_lab.standin.install import install_standin
from tests.waiting import wait_for

SWAP = "/mnt/nvme/vllm-hostkit.swap"
LOCK = "/run/vllm-hostkit/deploy.lock"
GIB = 2**30
BASE = {
    "vllm_served_model_name": "lab-model",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 120,
}


@pytest.fixture(scope="module")
def host(shared_lab_host):
    sh(shared_lab_host, "systemctl is-system-running --wait > /dev/null || true")  # boot finished
    install_standin(shared_lab_host)
    return shared_lab_host


def start_deploy(lab_host, tmp_path, name: str, **data) -> subprocess.Popen:
    """The pyinfra CLI in the background, in its own process group (so a test can kill it)."""
    inventory = lab_inventory(tmp_path / f"{name}.py", lab_host, {**BASE, **data})
    return subprocess.Popen([sys.executable, "-m", "pyinfra", str(inventory), str(MAIN_DEPLOY), "-y"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def deploy(run_deploy, lab_host, **data):
    return run_deploy(lab_host, {**BASE, **data})


def wait_on_host(lab_host, condition: str, timeout: float, what: str) -> None:
    assert wait_for(lambda: lab_host.ssh(condition, timeout=60).returncode == 0, timeout, interval=0.5), \
        f"{what}: not seen within {timeout:.0f}s"


def assert_converged(run_deploy, lab_host, swap_bytes: int = GIB, **data) -> None:
    """The fault left no damage: a clean, booted host, and a run that changes nothing."""
    assert lab_host.reachable()
    state = sh(lab_host, "systemctl is-system-running || true").strip()
    assert state in ("running", "degraded"), state
    fstab = sh(lab_host, "cat /etc/fstab")
    for fields in (line.split() for line in fstab.splitlines()):
        if len(fields) >= 3 and fields[2] == "swap" and not fields[0].startswith("#"):
            assert sh(lab_host, f"test -f {fields[0]} && echo yes || echo no").strip() == "yes", \
                f"fstab names a missing swap file {fields[0]}"
    swaps = sh(lab_host, "tail -n +2 /proc/swaps").split()
    assert swaps[0] == SWAP and abs(int(swaps[2]) * 1024 - swap_bytes) <= 8192, swaps
    assert sh(lab_host, f"stat -c '%s %a' {SWAP}").split() == [str(swap_bytes), "600"]
    # Under nvme_mount: no fstab line; the boot unit makes and swaps on the file.
    assert f"{SWAP} none swap" not in fstab
    assert sh(lab_host, "systemctl is-enabled vllm-hostkit-nvme.service").strip() == "enabled"
    assert sh(lab_host, ". /etc/vllm-hostkit/nvme.conf && echo $hk_swap_file").strip() == SWAP
    assert sh(lab_host, f"ls {SWAP}.new {LOCK} 2>/dev/null || true").strip() == ""
    assert Probe.parse(sh(lab_host, probe_command("0.0.0.0", 8000)).strip()).serves("lab-model")
    run = deploy(run_deploy, lab_host, **data)
    assert run.ok, run.output[-4000:]
    assert run.changed_on(lab_host.name) == [], run.output[-4000:]


def test_a_second_deploy_at_once_is_refused_and_nothing_is_corrupted(host, run_deploy, tmp_path):
    # The first deploy provisions the host; its vLLM loads for 45 s, so it holds the lock a while.
    slow_load = {"vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "45"}}
    first = start_deploy(host, tmp_path, "first", **slow_load)
    try:
        # Once the NVMe is mounted: a second run planned while mkfs runs would be refused earlier.
        wait_on_host(host, f"test -s {LOCK} && findmnt /mnt/nvme > /dev/null", 900, "the first deploy's lock")
        second = deploy(run_deploy, host, **slow_load)
        assert not second.ok
        assert f"another hostkit deploy holds {LOCK}: pid {first.pid} on controller" in second.output
        assert "this host is not deployed" in second.output and host.name in second.output
        output, _ = first.communicate(timeout=1500)
        assert first.returncode == 0, output[-4000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert_converged(run_deploy, host, GIB, **slow_load)


# Run on the host before the deploy: freezes the swap dd the moment it starts and says so, so
# the test cuts the controller off inside the dd however fast the disk writes.
DD_HELD = "/run/e2e-dd-held"
DD_HOLDER = f"""cat > /run/e2e-dd-holder.sh <<'EOF'
while ! pids=$(pgrep -f '^dd .*of={SWAP}'); do sleep 0.02; done
kill -STOP $pids
echo $pids > {DD_HELD}
EOF
rm -f {DD_HELD}
nohup sh /run/e2e-dd-holder.sh > /dev/null 2>&1 &"""


def test_ssh_cut_during_the_swap_dd_then_a_rerun_converges(host, run_deploy, tmp_path):
    """The controller dies mid-run (SIGKILL: no cleanup, its ssh connection just drops) while
    the swap resize writes the new file. The orphaned dd then runs on; the rerun takes the dead
    run's lock over, waits for the dd to end, and finishes the resize."""
    sh(host, DD_HOLDER)
    cut = start_deploy(host, tmp_path, "cut", swap_size="2G")
    try:
        wait_on_host(host, f"test -s {DD_HELD}", 900, "the swap dd")
    finally:
        os.killpg(cut.pid, signal.SIGKILL)
        cut.wait()
    sh(host, f"kill -CONT $(cat {DD_HELD})")
    rerun = deploy(run_deploy, host, swap_size="2G")
    assert rerun.ok, rerun.output[-4000:]
    assert "taking over /run/vllm-hostkit/deploy.lock: its holder, pid" in rerun.output
    assert_converged(run_deploy, host, 2 * GIB, swap_size="2G")


def test_a_crash_looping_vllm_fails_the_gate_with_its_journal(host, run_deploy):
    run = deploy(run_deploy, host, swap_size="2G", vllm_model="/nonexistent", vllm_ready_timeout=30)
    assert not run.ok
    assert "last 30 journal lines of vllm.service" in run.output
    assert "cannot load model /nonexistent" in run.output
    assert host.reachable()
    run = deploy(run_deploy, host, swap_size="2G")
    assert run.ok, run.output[-4000:]
    assert_converged(run_deploy, host, 2 * GIB, swap_size="2G")


@pytest.mark.slow
def test_a_reboot_between_the_swap_and_unit_steps_then_a_rerun_converges(host, run_deploy, tmp_path):
    """A resize back to 1G plus a new vLLM flag: the host loses power (sysrq o: no clean
    shutdown) as soon as the resized swap is active, before the unit is rewritten, and is
    powered on again. (A power cut rather than sysrq b: under qemu TCG a guest reset in
    place boots several times slower than a fresh start.)"""
    boot = host.boot_id()
    # Powers off without a clean shutdown once the 1G file is active (gives up after 10 minutes).
    watcher = (f"nohup sh -c 'for i in $(seq 3000); do"
               f" if awk -v p={SWAP} \"\\$1 == p && \\$3 < 2000000\" /proc/swaps | grep -q .; then"
               " echo o > /proc/sysrq-trigger; fi; sleep 0.2; done' > /dev/null 2>&1 &")
    sh(host, watcher)
    run = start_deploy(host, tmp_path, "rebooted", vllm_max_num_seqs=32)
    try:
        assert wait_for(lambda: host.pid is None, 1800), "the host never lost power"
        host.start()
        host.wait_for_ssh(timeout=1800, not_boot_id=boot)
        output, _ = run.communicate(timeout=60)  # a connection that died silently may hang
        assert run.returncode != 0, output[-4000:]
    except subprocess.TimeoutExpired:
        pass
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert "--max-num-seqs 32" not in sh(host, "systemctl show -p ExecStart --value vllm.service")
    rerun = deploy(run_deploy, host, vllm_max_num_seqs=32)
    assert rerun.ok, rerun.output[-4000:]
    assert "--max-num-seqs 32" in sh(host, "systemctl show -p ExecStart --value vllm.service")
    assert_converged(run_deploy, host, GIB, vllm_max_num_seqs=32)
