"""Swap on NVMe, end to end: real Debian VMs (8 GiB blank /dev/nvme0n1, 2 GiB RAM), real
pyinfra over ssh, running tests/e2e/deploys/swap_only.py (the NVMe and swap part of the
vLLM host deploy).

All tests share one VM (`shared_lab_host`) and run in file order; each first brings the
host to the lab plan (a no-op when the test before it passed). The boot test comes last: three
boots (a blank disk behind a second one, the disks intact, someone else's data on the disk).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from hostkit.monitoring import collector_source
from hostkit.desired.nvme_boot import NVME_WAIT_S

from tests.e2e.lab_shell import sh
from hostkit_lab.prometheus import exposition_served, firing, prometheus_server, shortened_rules
from tests.waiting import wait_for

DEPLOY = Path(__file__).parent / "deploys" / "swap_only.py"
SWAP = "/mnt/nvme/vllm-hostkit.swap"
GIB = 2**30
MIB = 2**20
# Swap-only runs: no vLLM planning, nothing else on the host changes.
BASE = {"vllm_enabled": False}
UNIT = "vllm-hostkit-nvme.service"
SETTINGS = "/etc/vllm-hostkit/nvme.conf"
LABEL = "vllm-hostkit"


def deploy(run_deploy, lab_host, **data):
    return run_deploy(lab_host, data={**BASE, **data}, deploy=DEPLOY)


def proc_swaps(lab_host) -> dict[str, tuple[int, int, int]]:
    """path -> (size KiB, used KiB, priority)."""
    lines = sh(lab_host, "cat /proc/swaps").splitlines()[1:]
    return {f[0]: (int(f[2]), int(f[3]), int(f[4])) for f in (line.split() for line in lines)}


def fstab_entries(lab_host, field: int, value: str) -> list[list[str]]:
    lines = sh(lab_host, "cat /etc/fstab").splitlines()
    return [f for f in (line.split() for line in lines) if len(f) > field and not f[0].startswith("#")
            and f[field] == value]


def assert_swap_as_planned(lab_host, size: int, priority: int = 10) -> None:
    swaps = proc_swaps(lab_host)
    assert list(swaps) == [SWAP]
    size_kib, _used, active_priority = swaps[SWAP]
    assert abs(size_kib * 1024 - size) <= 8192 and active_priority == priority
    assert sh(lab_host, f"stat -c '%s %a %U:%G' {SWAP}").split() == [str(size), "600", "root:root"]
    # The boot unit brings it back: no fstab line.
    assert fstab_entries(lab_host, 0, SWAP) == []
    assert sh(lab_host, f"ls {SWAP}.new 2>/dev/null || true").strip() == ""


def by_id(lab_host) -> str:
    """The planned disk's by-id name, as the deploy wrote it into the unit's settings."""
    return sh(lab_host, f". {SETTINGS} && echo $hk_by_id").strip()


def assert_nvme_mounted(lab_host, device: str = "/dev/nvme0n1") -> str:
    uuid = sh(lab_host, f"blkid -p -o value -s UUID {device}").strip()
    mounted = lab_host.ssh("findmnt -n -o SOURCE /mnt/nvme").stdout.strip()
    # Why not, in CI's output (its lab directory is gone after): the unit's journal and the
    # boot's NVMe lines (an I/O timeout of qemu's NVMe).
    assert mounted == device, lab_host.ssh(
        f"journalctl -b --no-pager -u {UNIT}; journalctl -b --no-pager -o short-monotonic"
        " | grep -iE 'nvme|timed out|dependency' | tail -n 40").stdout
    assert sh(lab_host, f"blkid -p -o value -s LABEL {device}").strip() == LABEL
    assert fstab_entries(lab_host, 1, "/mnt/nvme") == []
    assert sh(lab_host, f"readlink -f {by_id(lab_host)}").strip() == device
    assert sh(lab_host, f"systemctl is-enabled {UNIT}").strip() == "enabled"
    return uuid


def assert_no_change(run_deploy, lab_host, **data) -> None:
    run = deploy(run_deploy, lab_host, **data)
    assert run.ok, run.output
    assert run.changed == [], f"a converged host changed: {run.changed}\n{run.output}"


# -- no reboots -----------------------------------------------------------------------------


def test_non_blank_nvme_is_refused_and_a_blank_one_gets_swap(shared_lab_host, run_deploy):
    host = shared_lab_host
    sh(host, "mkfs.ext4 -q -L userdata /dev/nvme0n1")

    # The planner refuses first, naming the device and what is on it.
    run = deploy(run_deploy, host)
    assert not run.ok
    assert "/dev/nvme0n1 holds ext4" in run.output

    # With the planner out of the way, prepare_nvme refuses on its own.
    run = deploy(run_deploy, host, nvme_device=None, swap_dir="/var/tmp",
                 e2e_nvme_plan={"device": "/dev/nvme0n1", "by_id": "/dev/disk/by-id/unused", "mount": "/mnt/nvme"},
                 e2e_swap_plan={"enabled": False})
    assert not run.ok
    assert "refusing to format /dev/nvme0n1: it is not blank: /dev/nvme0n1 carries ext4" in run.output
    assert sh(host, "blkid -p -o value -s LABEL /dev/nvme0n1").strip() == "userdata"
    assert sh(host, "findmnt -n /mnt/nvme || true").strip() == ""

    sh(host, "wipefs -q -a /dev/nvme0n1")
    run = deploy(run_deploy, host)
    assert run.ok, run.output
    assert_nvme_mounted(host)
    assert_swap_as_planned(host, GIB)

    assert_no_change(run_deploy, host)


def test_resize_up_and_down_is_make_before_break(shared_lab_host, run_deploy):
    host = shared_lab_host
    assert deploy(run_deploy, host).ok

    run = deploy(run_deploy, host, swap_size="2G")
    assert run.ok, run.output
    assert_swap_as_planned(host, 2 * GIB)

    run = deploy(run_deploy, host, swap_size="1G")
    assert run.ok, run.output
    assert_swap_as_planned(host, GIB)
    assert_no_change(run_deploy, host)


def test_drift_is_corrected(shared_lab_host, run_deploy):
    host = shared_lab_host
    assert deploy(run_deploy, host).ok
    sh(host, f"swapoff {SWAP} && chmod 644 {SWAP} && echo hk_swap_size=1 >> {SETTINGS}")

    run = deploy(run_deploy, host)
    assert run.ok, run.output
    assert_swap_as_planned(host, GIB)

    sh(host, f"swapoff {SWAP} && swapon -p 3 {SWAP}")
    run = deploy(run_deploy, host)
    assert run.ok, run.output
    assert_swap_as_planned(host, GIB)
    assert_no_change(run_deploy, host)


def test_disk_full_is_refused_or_cleaned_up(shared_lab_host, run_deploy):
    """A small filesystem: a 2 GiB ext4 image on the NVMe, loop-mounted at /mnt/small. The
    planner plans for /mnt/nvme as usual; e2e_swap_plan points the operation at /mnt/small.
    On it the host keeps the plan's reserve free (1 GiB: hostkit.plan.swap_filesystems)."""
    host = shared_lab_host
    assert deploy(run_deploy, host).ok
    sh(host, "truncate -s 2G /mnt/nvme/small.img && mkfs.ext4 -q -F /mnt/nvme/small.img"
             " && mkdir -p /mnt/small && mount -o loop /mnt/nvme/small.img /mnt/small")
    fstab_before = sh(host, "cat /etc/fstab")
    filler = None
    try:
        # The planner refuses a size that does not fit.
        run = deploy(run_deploy, host, swap_size="4G", swap_dir="/mnt/small")
        assert not run.ok and "does not fit in /mnt/small" in run.output

        # The host-side check refuses before writing anything, with the numbers.
        plan = {"enabled": True, "path": "/mnt/small/vllm-hostkit.swap", "size_bytes": 1024 * MIB}
        run = deploy(run_deploy, host, e2e_swap_plan=plan)
        assert not run.ok
        assert ("not enough free space in /mnt/small for /mnt/small/vllm-hostkit.swap: need 1024 MiB plus"
                " a 1024 MiB reserve") in run.output

        # The disk fills up while dd writes (a filler takes the free space once the file
        # appears): the partial file is removed and no fstab entry is written.
        filler = sh(host, "nohup sh -c 'while [ ! -e /mnt/small/vllm-hostkit.swap ]; do sleep 0.05; done;"
                          " fallocate -l $(( $(df -B1 --output=avail /mnt/small | tail -n 1) - 4194304 ))"
                          " /mnt/small/filler' > /dev/null 2>&1 & echo $!").strip()
        plan = {**plan, "size_bytes": 256 * MIB}
        run = deploy(run_deploy, host, e2e_swap_plan=plan)
        assert not run.ok
        assert "No space left on device" in run.output
        assert "removed the partial swap file /mnt/small/vllm-hostkit.swap" in run.output
        assert sh(host, "ls /mnt/small").split() == ["filler", "lost+found"]
        assert sh(host, "cat /etc/fstab") == fstab_before
        assert list(proc_swaps(host)) == [SWAP]
    finally:
        if filler:
            host.ssh(f"kill {filler} 2>/dev/null")
        host.ssh("umount /mnt/small; rm -f /mnt/nvme/small.img")
    assert_no_change(run_deploy, host)


# Takes RAM 32 MiB at a time until 300 MiB sit in swap (one huge allocation thrashes, slow and
# erratic under TCG), then gives back its newest, resident chunks until 450 MiB are available
# again: sshd and pyinfra stay responsive, while swapoff stays refused (300 MiB of swapped
# pages plus the 256 MiB margin exceed what is available).
PUSHER_READY = "/run/swap-pusher.ready"
SWAP_PUSHER = f"""
import time
def meminfo_mib(key):
    return next(int(line.split()[1]) >> 10 for line in open("/proc/meminfo") if line.startswith(key + ":"))
def swapped_mib():
    return meminfo_mib("SwapTotal") - meminfo_mib("SwapFree")
held = []
while swapped_mib() < 300 and len(held) < 64:
    held.append(bytes([1]) * (32 << 20))
    time.sleep(0.05)
# Settle where a deploy can run (450 MiB available) and RAM still cannot take the swapped pages
# back with the 256 MiB margin of swapoff, 64 MiB to spare: freeing a chunk can free swapped pages too.
for _ in range(300):
    available, swapped = meminfo_mib("MemAvailable"), swapped_mib()
    if available < 450 and held:
        held.pop()
    elif swapped + 256 <= available + 64 and len(held) < 72:
        held.append(bytes([1]) * (32 << 20))
    else:
        break
    time.sleep(0.2)
open("{PUSHER_READY}", "w").close()
time.sleep(3600)
"""


def memory_mib(lab_host) -> dict[str, int]:
    lines = sh(lab_host, "cat /proc/meminfo").splitlines()
    return {f[0].rstrip(":"): int(f[1]) >> 10 for f in (line.split() for line in lines)}


def test_resize_and_swapoff_are_refused_while_memory_is_short_then_swap_is_removed(shared_lab_host, run_deploy):
    host = shared_lab_host
    assert deploy(run_deploy, host).ok
    sh(host, f"rm -f {PUSHER_READY}")
    hog = sh(host, f"nohup python3 -c '{SWAP_PUSHER}' > /dev/null 2>&1 & echo $!").strip()
    try:
        assert wait_for(lambda: host.ssh(f"test -e {PUSHER_READY}").returncode == 0, 300, interval=5), \
            "the memory hog never pushed 300 MiB into swap"
        memory = memory_mib(host)
        swapped = memory["SwapTotal"] - memory["SwapFree"]
        assert swapped + 256 > memory["MemAvailable"], memory
        fstab_before = sh(host, "cat /etc/fstab")
        size_before = proc_swaps(host)[SWAP][0]

        # A resize swaps the old file off too: refused before its dd, the old file kept.
        run = deploy(run_deploy, host, swap_size="2G")
        assert not run.ok
        assert f"refusing to swapoff {SWAP}: it holds" in run.output
        assert list(proc_swaps(host)) == [SWAP] and proc_swaps(host)[SWAP][0] == size_before
        assert sh(host, f"ls {SWAP}.new 2>/dev/null || true").strip() == ""
        assert sh(host, "cat /etc/fstab") == fstab_before

        run = deploy(run_deploy, host, swap_enabled=False)
        assert not run.ok
        assert f"refusing to swapoff {SWAP}: it holds" in run.output
        assert "MiB of swapped-out pages; swapoff needs those plus a 256 MiB margin" in run.output
        assert SWAP in proc_swaps(host) and sh(host, f". {SETTINGS} && echo $hk_swap_file").strip() == SWAP
    finally:
        host.ssh(f"kill {hog}")

    run = deploy(run_deploy, host, swap_enabled=False)
    assert run.ok, run.output
    assert proc_swaps(host) == {}
    assert sh(host, f"ls {SWAP} 2>/dev/null || true").strip() == ""
    assert sh(host, f". {SETTINGS} && echo \"[$hk_swap_file]\"").strip() == "[]"  # none made at boot
    assert_no_change(run_deploy, host, swap_enabled=False)


def test_an_fstab_era_host_is_converted_with_its_swap_on_throughout(shared_lab_host, run_deploy):
    """The host as hostkit left it before the boot unit: the mount by UUID with its device
    timeout and the swap file's line in fstab, no label, no unit. The deploy takes both over
    without a swapoff or an unmount (sampled every 0.1 s on the host while it runs)."""
    host = shared_lab_host
    assert deploy(run_deploy, host).ok
    uuid = assert_nvme_mounted(host)
    sh(host, f"systemctl disable --quiet {UNIT} && rm -f /etc/systemd/system/{UNIT} {SETTINGS}"
             " /usr/local/lib/vllm-hostkit/*.sh && e2label /dev/nvme0n1 ''"
             f" && echo 'UUID={uuid} /mnt/nvme ext4 defaults,nofail,x-systemd.device-timeout=90s 0 2' >> /etc/fstab"
             f" && echo '{SWAP} none swap nofail,pri=10 0 0' >> /etc/fstab && systemctl daemon-reload")
    watcher = sh(host, "nohup sh -c 'while :; do s=0; m=0; grep -q \"^/mnt/nvme/vllm-hostkit.swap \" /proc/swaps && s=1;"
                       " grep -q \" /mnt/nvme \" /proc/self/mounts && m=1; echo $s$m; sleep 0.1; done'"
                       " > /run/hk-watch 2>&1 & echo $!").strip()
    try:
        run = deploy(run_deploy, host)
    finally:
        host.ssh(f"kill {watcher}")
    assert run.ok, run.output
    assert set(run.changed) == {"Prepare NVMe", "NVMe and swap at boot"}, run.changed  # the label; the unit
    samples = sh(host, "cat /run/hk-watch").split()
    assert len(samples) > 20 and set(samples) == {"11"}, samples  # swap active and mounted throughout
    assert assert_nvme_mounted(host) == uuid
    assert_swap_as_planned(host, GIB)
    assert_no_change(run_deploy, host)


# -- boots -----------------------------------------------------------------------------------


def boot(lab_host) -> dict[str, float]:
    """Start the stopped VM; seconds from qemu's start to ssh and to the swap file active (None:
    not within 5 min), and what systemd measured in the guest (since the kernel started)."""
    started = time.monotonic()
    lab_host.start()
    lab_host.wait_for_ssh()
    figures = {"ssh": time.monotonic() - started, "swap": None}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if SWAP in proc_swaps(lab_host):
            figures["swap"] = time.monotonic() - started
            break
        if lab_host.ssh(f"systemctl is-failed --quiet {UNIT}").returncode == 0:
            break
        time.sleep(1)
    def monotonic_s(unit: str, prop: str) -> float:
        return int(sh(lab_host, f"systemctl show -p {prop} --value {unit}").strip() or 0) / 1e6

    figures["guest_sshd"] = monotonic_s("ssh.service", "ActiveEnterTimestampMonotonic")
    figures["guest_unit_done"] = monotonic_s(UNIT, "ExecMainExitTimestampMonotonic")
    return figures


# A service named as hostkit's vLLM unit: whether the boot starts it, whatever the NVMe did.
PLACEHOLDER_VLLM = """cat > /etc/systemd/system/vllm.service <<'EOF'
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload && systemctl enable --quiet vllm.service"""


def vllm_starts(lab_host) -> bool:
    return wait_for(lambda: sh(lab_host, "systemctl is-active vllm.service || true").strip() == "active", 120,
                    "vllm.service to start", interval=2)


def report(case: str, figures: dict) -> None:
    print(json.dumps({"test": "nvme boot", "case": case,
                      **{name: None if value is None else round(value, 1) for name, value in figures.items()}}))


def unit_journal(lab_host) -> str:
    return sh(lab_host, f"journalctl -b --no-pager -o cat -u {UNIT}")


def alert_on_collected_metrics(lab_host, directory: Path, name: str) -> dict:
    """The alert `name` firing in a real Prometheus with the shipped rules (`for:` shortened),
    scraping what the collector last wrote on the host."""
    text = sh(lab_host, "cat /run/hk-metrics/hostkit.prom")
    with exposition_served(text) as url:
        config = json.dumps({
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(shortened_rules(directory))],
            "scrape_configs": [{"job_name": "node", "static_configs": [
                {"targets": [url.split("/")[2]], "labels": {"instance": f"{lab_host.name}:9100"}}]}],
        })
        with prometheus_server(directory, config) as base:
            return wait_for(lambda: firing(base, name), 120, f"{name} firing", interval=2, ignoring=OSError)


def planned_absent_metric(lab_host) -> str:
    """hostkit's collector, run once on the host against its real state."""
    sh(lab_host, f"printf %s {shlex.quote(collector_source())} > /run/collector.py && python3 -I -S /run/collector.py"
                 f" --textfile-dir /run/hk-metrics --state-dir /run/hk-state --nvme-settings {SETTINGS}")
    lines = sh(lab_host, "cat /run/hk-metrics/hostkit.prom").splitlines()
    return "\n".join(line for line in lines if line.startswith("hostkit_swap_planned_absent"))


@pytest.mark.slow
def test_swap_comes_back_at_boot_by_itself_and_a_foreign_disk_is_left_alone(shared_lab_host, run_deploy, tmp_path):
    host = shared_lab_host
    run = deploy(run_deploy, host)
    assert run.ok, run.output
    first_uuid = assert_nvme_mounted(host)
    planned = by_id(host)
    # udev 252 adds the namespace id to model and serial: the name of this namespace alone.
    assert planned == f"/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-{host.name}_1"

    # Instance store after a stop/start, behind a second instance-store disk that qemu now
    # attaches first: both blank, the planned one is nvme1n1 this boot.
    host.stop()
    host.blank_nvme()
    host.add_second_nvme()
    host.nvme_order_swapped = True
    blank = boot(host)
    assert sh(host, f"readlink -f {planned}").strip() == "/dev/nvme1n1", unit_journal(host)
    healed_uuid = assert_nvme_mounted(host, "/dev/nvme1n1")
    assert healed_uuid != first_uuid
    assert_swap_as_planned(host, GIB)
    journal = unit_journal(host)
    assert "/dev/nvme1n1 was blank: made ext4, label vllm-hostkit" in journal, journal
    assert f"made {SWAP} (1024 MiB, priority 10) and swapped it on" in journal, journal
    # The other disk is not the planned one: untouched.
    assert sh(host, "wipefs --no-act --noheadings --output TYPE /dev/nvme0n1").strip() == ""
    # No deploy was needed; one after the healed boot changes nothing (nvme_device named by its
    # by-id link: /dev/nvme0n1 is the other disk now).
    assert_no_change(run_deploy, host, nvme_device=planned)

    # The disks intact, in their usual order: the baseline boot.
    host.stop()
    host.nvme_order_swapped = False
    intact = boot(host)
    assert assert_nvme_mounted(host) == healed_uuid
    assert_swap_as_planned(host, GIB)
    journal = unit_journal(host)
    assert "holds hostkit's filesystem (label vllm-hostkit)" in journal and f"swapped on {SWAP}" in journal, journal
    assert_no_change(run_deploy, host)

    for name, figures in (("blank disk", blank), ("disk intact", intact)):
        report(name, figures)

    # Someone else's filesystem on the planned disk at boot: never formatted, the boot goes on,
    # no swap, and the collector says the planned swap file is absent.
    sh(host, "mkfs.ext4 -q -L userdata /dev/nvme1n1")
    foreign_uuid = sh(host, "blkid -p -o value -s UUID /dev/nvme1n1").strip()
    sh(host, PLACEHOLDER_VLLM)
    host.stop()
    host.copy_second_nvme_to_first()
    foreign = boot(host)
    assert foreign["swap"] is None and proc_swaps(host) == {}
    assert sh(host, f"systemctl is-failed {UNIT} || true").strip() == "failed"
    assert "refusing to format /dev/nvme0n1: it is not blank: it carries ext4" in unit_journal(host)
    assert sh(host, "blkid -p -o value -s LABEL -s UUID /dev/nvme0n1").split() == ["userdata", foreign_uuid]
    assert sh(host, "findmnt -n /mnt/nvme || true").strip() == ""
    assert planned_absent_metric(host).endswith(f'hostkit_swap_planned_absent{{path="{SWAP}"}} 1')
    alert = alert_on_collected_metrics(host, tmp_path, "HostkitSwapPlannedAbsent")
    assert alert["labels"]["path"] == SWAP and "journalctl -b -u vllm-hostkit-nvme.service" in alert["annotations"]["summary"]
    # vLLM starts without that swap.
    assert vllm_starts(host)
    report("foreign disk", foreign)

    # The baseline: the same host with no NVMe disk at all.
    host.stop()
    host.nvme_detached = True
    bare = boot(host)
    assert bare["swap"] is None and vllm_starts(host)
    assert f"did not appear within {NVME_WAIT_S} s" in unit_journal(host)
    report("no NVMe disk", bare)
