"""check_host on a lab host's real snapshot and probe output (verify_replay), as provisioned
and then broken: that state with one thing changed, the way `swapoff`, `sysctl -w`,
`systemctl stop`, editing the unit or writing THP change it.
"""

from __future__ import annotations

import dataclasses

import pytest

from hostkit.facts.kernel import ThpSetting
from hostkit.facts.snapshot import HostSnapshot, HostSnapshotFact
from hostkit.facts.storage import FstabEntry
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.operations.swap import swap_steps
from hostkit.desired.changes import service_changes
from hostkit.plan.planner import plan_host
from hostkit.profile.validation import profile_from_data
from hostkit.vllm.readiness import Probe
from hostkit.verify.checks import AREAS, check_host, kernel_checks, server_argv
from hostkit.facts.kernel_log import KernelLog
from hostkit.verify.probes import Probes, Readiness, parse_probes
from hostkit.desired.vllm_unit import render_env, render_unit
from verify_replay import LAB_DATA, SECRET, probed_today, recorded, rendered_today

SWAP = "/mnt/nvme/vllm-hostkit.swap"


def observed(state: str):
    profile = profile_from_data("lab1", LAB_DATA)
    snapshot_lines = rendered_today(recorded(f"debian12-{state}.snapshot.txt"), keep_unit=state == "broken")
    snapshot = HostSnapshotFact().process(snapshot_lines)
    plan = plan_host(profile, planning_facts(snapshot), host_name="lab1")
    return profile, plan, snapshot, parse_probes(probed_today(recorded(f"debian12-{state}.probe.txt")))


def converged():
    return observed("converged")


def with_section(snapshot: HostSnapshot, name: str, **changes) -> HostSnapshot:
    return HostSnapshot({**snapshot.sections, name: dataclasses.replace(snapshot.section(name), **changes)})


def failed(results) -> dict[str, str]:
    return {r.name: r.message() for r in results if not r.ok}


def test_a_freshly_provisioned_host_passes_every_check():
    profile, plan, snapshot, probes = converged()
    results = check_host(profile, plan, snapshot, probes)
    assert failed(results) == {}
    assert {r.area for r in results} == set(AREAS)
    names = {r.name for r in results}
    assert {"swap active", "swap size", "swap on NVMe", "swap file", "swap in fstab", "sysctl vm.swappiness",
            "THP enabled", "THP defrag", "THP unit", "unit enabled", "unit active", "unit file", "MemoryMax",
            "MemoryHigh", "MemorySwapMax", "flags in effect", "non-root user", "API key not in argv",
            "ready (/health)", "serves the model (/v1/models)", "no OOM kills since boot"} <= names


def test_a_host_broken_in_five_ways_fails_exactly_those_checks():
    """Recorded after swapoff, sysctl -w vm.swappiness=60, systemctl stop vllm, THP enabled
    set to always and RestartSec edited in the installed unit."""
    failures = failed(check_host(*observed("broken")))
    assert set(failures) == {"swap active", "sysctl vm.swappiness", "THP enabled", "unit active", "unit file",
                             "server process", "ready (/health)"}
    assert "actual inactive/dead" in failures["unit active"]
    assert "actual edited or out of date, changed on disk since systemd loaded it" in failures["unit file"]
    assert "stopped waiting: unit inactive" in failures["ready (/health)"]


def test_the_area_engineers_own_judges_agree_on_the_converged_host():
    _, plan, snapshot, _ = converged()
    assert swap_steps(plan.swap, snapshot.storage) == []
    assert all(check.ok for check in kernel_checks(plan.kernel, snapshot.kernel, snapshot.system.kernel_cmdline, "h"))
    assert not service_changes(snapshot.vllm, render_unit(plan.vllm), render_env(plan.vllm))


def test_swapoff_fails_swap_active_with_the_path_and_a_fix():
    profile, plan, snapshot, probes = converged()
    broken = with_section(snapshot, "storage", swaps=())
    failures = failed(check_host(profile, plan, broken, probes))
    assert list(failures) == ["swap active"]
    assert f"expected {SWAP} in /proc/swaps at priority 10; actual no swap at all" in failures["swap active"]
    assert "fix: swapon -p 10" in failures["swap active"]
    assert f"swapon -p 10 {SWAP}" in swap_steps(plan.swap, broken.storage)


def test_a_swap_file_with_the_wrong_mode_and_an_fstab_line_left_fails():
    profile, plan, snapshot, probes = converged()
    storage = snapshot.storage
    files = {path: dataclasses.replace(stat, mode=0o644) for path, stat in storage.files.items()}
    fstab = storage.fstab + (FstabEntry(plan.swap.path, "none", "swap", ("nofail", "pri=10"), 0, 0, 3),)
    failures = failed(check_host(profile, plan, with_section(snapshot, "storage", files=files, fstab=fstab), probes))
    assert set(failures) == {"swap file", "swap in fstab"}
    assert "mode 644" in failures["swap file"] and "chmod 600" in failures["swap file"]
    assert "no /etc/fstab line (at boot vllm-hostkit-nvme.service makes and swaps on the file)" in failures["swap in fstab"]


def test_the_nvme_boot_unit_is_checked_and_says_what_the_next_wiped_boot_does():
    profile, plan, snapshot, probes = converged()
    [unit] = [r for r in check_host(profile, plan, snapshot, probes) if r.name == "NVMe boot unit"]
    assert unit.ok and ("at boot, vllm-hostkit-nvme.service formats a blank /dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_"
                        "hostkit-lab1_1 (ext4, label vllm-hostkit), mounts it at /mnt/nvme and re-creates the 1G swap "
                        "file /mnt/nvme/vllm-hostkit.swap") in unit.expected
    storage = snapshot.storage
    sums = {**storage.nvme_unit_sha256, "/etc/vllm-hostkit/nvme.conf": "0" * 64}
    fstab = storage.fstab + (FstabEntry("UUID=abc", "/mnt/nvme", "ext4", ("nofail",), 0, 2, 3),)
    failures = failed(check_host(profile, plan, with_section(snapshot, "storage", nvme_unit_sha256=sums,
                                                             nvme_unit_enabled=False, fstab=fstab), probes))
    assert set(failures) == {"NVMe boot unit", "no boot wait for the NVMe"}
    assert "missing or differing: /etc/vllm-hostkit/nvme.conf, not enabled" in failures["NVMe boot unit"]
    assert "line 3: UUID=abc" in failures["no boot wait for the NVMe"]
    unlabelled = {**storage.devices, "/dev/nvme0n1": dataclasses.replace(storage.devices["/dev/nvme0n1"], label=None)}
    failures = failed(check_host(profile, plan, with_section(snapshot, "storage", devices=unlabelled), probes))
    assert set(failures) == {"NVMe mounted"} and "label none" in failures["NVMe mounted"]


def test_under_selinux_the_swap_file_label_is_checked():
    """SELinux on (the label is read): swapfile_t passes, the unlabeled_t of a file made
    without the label fails with the semanage fix; with SELinux off there is no such check."""
    profile, plan, snapshot, probes = converged()

    def labelled(selinux_type):
        files = {path: dataclasses.replace(stat, selinux_type=selinux_type) for path, stat in snapshot.storage.files.items()}
        return check_host(profile, plan, with_section(snapshot, "storage", files=files), probes)

    assert "swap file SELinux label" not in {r.name for r in check_host(profile, plan, snapshot, probes)}
    assert failed(labelled("swapfile_t")) == {}
    failure = failed(labelled("unlabeled_t"))["swap file SELinux label"]
    assert "expected type swapfile_t" in failure and "actual type unlabeled_t" in failure
    assert f"fix: semanage fcontext -a -t swapfile_t '{SWAP}' && restorecon {SWAP}" in failure


def test_a_changed_swappiness_fails_with_expected_and_actual():
    profile, plan, snapshot, probes = converged()
    broken = with_section(snapshot, "kernel", live={**snapshot.kernel.live, "vm/swappiness": "60"})
    failures = failed(check_host(profile, plan, broken, probes))
    assert list(failures) == ["sysctl vm.swappiness"]
    assert "expected 10; actual 60; fix: sysctl -w vm.swappiness=10," in failures["sysctl vm.swappiness"]


def test_changed_thp_fails_enabled_and_defrag():
    profile, plan, snapshot, probes = converged()
    choices = ("always", "madvise", "never")
    broken = with_section(snapshot, "kernel", thp_enabled=ThpSetting("always", choices))
    failures = failed(check_host(profile, plan, broken, probes))
    assert list(failures) == ["THP enabled"]
    assert "expected madvise; actual always" in failures["THP enabled"]


def test_a_disabled_thp_unit_fails():
    profile, plan, snapshot, probes = converged()
    failures = failed(check_host(profile, plan, with_section(snapshot, "kernel", thp_unit_enabled=False), probes))
    assert list(failures) == ["THP unit"]
    assert "not enabled" in failures["THP unit"]


def stopped(probes: Probes) -> Probes:
    unit = {**probes.unit, "ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}
    readiness = Readiness(Probe(None, "[Errno 111] Connection refused", None, None), "unit inactive", 1, 0)
    return dataclasses.replace(probes, unit=unit, process=None, readiness=readiness)


def test_a_stopped_unit_fails_active_process_and_ready_without_waiting():
    profile, plan, snapshot, probes = converged()
    snapshot = with_section(snapshot, "vllm", memory_limit_bytes=None)  # a stopped unit has no cgroup
    failures = failed(check_host(profile, plan, snapshot, stopped(probes)))
    assert list(failures) == ["unit active", "server process", "ready (/health)"]
    assert "expected active/running; actual inactive/dead" in failures["unit active"]
    assert "stopped waiting: unit inactive" in failures["ready (/health)"]
    assert "systemctl start vllm.service" in failures["server process"]


def test_an_edited_unit_file_fails_even_before_a_daemon_reload():
    profile, plan, snapshot, probes = converged()
    broken = with_section(snapshot, "vllm", unit_sha256="0" * 64)
    unit = {**probes.unit, "NeedDaemonReload": "yes"}
    failures = failed(check_host(profile, plan, broken, dataclasses.replace(probes, unit=unit)))
    assert list(failures) == ["unit file"]
    assert "actual edited or out of date, changed on disk since systemd loaded it" in failures["unit file"]
    assert "pyinfra INVENTORY hostkit.deploy.vllm_host --limit lab1" in failures["unit file"]


def test_memory_directives_not_in_effect_fail():
    profile, plan, snapshot, probes = converged()
    unit = {**probes.unit, "MemoryMax": "infinity", "MemorySwapMax": "0"}
    broken = with_section(snapshot, "vllm", memory_limit_bytes=None)
    failures = failed(check_host(profile, plan, broken, dataclasses.replace(probes, unit=unit)))
    assert set(failures) == {"MemoryMax", "MemorySwapMax", "memory limit in force"}
    assert f"expected {plan.vllm.memory_max_bytes} (989M); actual infinity" in failures["MemoryMax"]


def test_flags_in_effect_compare_the_running_argv_with_the_plan():
    profile, plan, snapshot, probes = converged()
    assert probes.process.argv[0] == "/usr/bin/python3"  # the stand-in is a script: /proc shows its interpreter
    assert server_argv(probes.process.argv, plan.vllm.argv) == plan.vllm.argv
    argv = tuple(word for word in probes.process.argv if word not in ("--max-model-len", "4096"))
    process = dataclasses.replace(probes.process, argv=argv)
    failures = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, process=process)))
    assert list(failures) == ["flags in effect"]
    assert "missing --max-model-len 4096" in failures["flags in effect"]


def test_a_secret_in_argv_fails_and_is_never_printed():
    profile, plan, snapshot, probes = converged()
    process = dataclasses.replace(probes.process, argv=probes.process.argv + ("--api-key", SECRET))
    results = check_host(profile, plan, snapshot, dataclasses.replace(probes, process=process))
    failures = failed(results)
    assert set(failures) == {"flags in effect", "API key not in argv"}
    assert "present in argv" in failures["API key not in argv"]
    assert not any(SECRET in r.message() or SECRET in r.expected or SECRET in r.actual for r in results)


def test_a_server_running_as_root_or_with_another_key_fails():
    profile, plan, snapshot, probes = converged()
    process = dataclasses.replace(probes.process, uid=0, user="root", api_key_sha256="1" * 64)
    failures = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, process=process)))
    assert set(failures) == {"non-root user", "API key in effect"}
    assert "expected vllm (not root); actual root (uid 0)" in failures["non-root user"]


def test_a_server_that_never_became_ready_or_lacks_the_model_fails():
    profile, plan, snapshot, probes = converged()
    timeout = Readiness(Probe(503, "", None, None), "timeout", 90, 180)
    failures = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, readiness=timeout)))
    assert list(failures) == ["ready (/health)"]
    assert "/health: HTTP 503 after 90 tries in 180s, gave up at the ready timeout" in failures["ready (/health)"]
    wrong = Readiness(Probe(200, "", 200, ("other-model",)), "ready", 1, 0)
    failures = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, readiness=wrong)))
    assert "expected GET /v1/models lists Qwen/Qwen2.5-0.5B-Instruct; actual other-model" in failures[
        "serves the model (/v1/models)"]


def test_oom_kills_since_boot_fail_and_an_unreadable_log_is_not_clean():
    profile, plan, snapshot, probes = converged()
    kill = "Out of memory: Killed process 812 (python3) total-vm:2125472kB, anon-rss:1611204kB"
    ooms = KernelLog("journalctl", (kill,), 1)
    failures = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, ooms=ooms)))
    assert list(failures) == ["no OOM kills since boot"]
    assert "1 OOM kills: " + kill in failures["no OOM kills since boot"]
    unknown = dataclasses.replace(probes, ooms=KernelLog(None))
    assert "unknown" in failed(check_host(profile, plan, snapshot, unknown))["no OOM kills since boot"]


def test_gpu_checks_follow_the_profile_policy():
    _, _, snapshot, probes = converged()
    strict = profile_from_data("lab1", {**LAB_DATA, "gpu_required": True})
    plan = plan_host(strict, planning_facts(snapshot), host_name="lab1")
    failures = failed(check_host(strict, plan, snapshot, probes))
    assert set(failures) == {"GPU NVIDIA driver", "GPU GPU count"}
    assert "install the NVIDIA driver" in failures["GPU NVIDIA driver"]


def test_swap_must_be_on_nvme_unless_swap_dir_says_where():
    profile, plan, snapshot, probes = converged()
    storage = snapshot.storage
    root_disk = tuple(dataclasses.replace(f, on_nvme=False) for f in storage.filesystems)
    off_nvme = with_section(snapshot, "storage", filesystems=root_disk)
    failures = failed(check_host(profile, plan, off_nvme, probes))
    assert list(failures) == ["swap on NVMe"]
    assert "actual /mnt/nvme (/dev/nvme0n1, ext4), not NVMe" in failures["swap on NVMe"]
    chosen = profile_from_data("lab1", {**LAB_DATA, "swap_dir": "/mnt/nvme"})
    assert failed(check_host(chosen, plan, off_nvme, probes)) == {}


def test_swap_disabled_expects_no_hostkit_swap():
    profile = profile_from_data("lab1", {**LAB_DATA, "swap_enabled": False})
    _, _, snapshot, probes = converged()
    plan = plan_host(profile, planning_facts(snapshot), host_name="lab1")
    failures = failed(check_host(profile, plan, snapshot, probes))
    assert failures["no stray hostkit swap"].startswith("no stray hostkit swap: expected no hostkit swap file")
    assert SWAP in failures["no stray hostkit swap"]


def test_vllm_disabled_has_no_vllm_checks():
    profile = profile_from_data("lab1", {**LAB_DATA, "vllm_enabled": False})
    _, _, snapshot, probes = converged()
    plan = plan_host(profile, planning_facts(snapshot), host_name="lab1")
    results = check_host(profile, plan, snapshot, Probes(ooms=probes.ooms))
    assert not [r for r in results if r.area == "vllm"]


@pytest.mark.parametrize("state", ["not-found", ""])
def test_a_missing_unit_is_one_failure(state):
    profile, plan, snapshot, probes = converged()
    unit = {"LoadState": state} if state else {}
    results = check_host(profile, plan, snapshot, Probes(ooms=probes.ooms, unit=unit))
    assert [r.name for r in results if r.area == "vllm"] == ["unit installed"]


def test_a_systemctl_past_its_deadline_is_named_first():
    profile, plan, snapshot, probes = converged()
    stuck = with_section(snapshot, "vllm", timeouts=("systemctl show vllm.service timed out after 20 s",))
    results = check_host(profile, plan, stuck, probes)
    deadline = next(r for r in results if r.name == "unit state read in time")
    assert not deadline.ok and "systemctl show vllm.service timed out after 20 s" in deadline.message()
    assert failed(check_host(profile, plan, snapshot, probes)) == {}


def test_a_gpu_command_past_its_deadline_fails_even_where_no_gpu_is_required():
    profile, plan, snapshot, probes = converged()
    assert not profile.gpu_required  # the lab's data: no GPU there, nvidia-smi absent
    wedged = with_section(snapshot, "gpu", driver_present=True,
                          nvidia_smi_error="nvidia-smi --query-gpu timed out after 3 s",
                          timeouts=("nvidia-smi --query-gpu timed out after 3 s",
                                    "nvidia-smi --query-compute-apps timed out after 3 s"))
    results = check_host(profile, plan, wedged, probes)
    assert failed(results) == {"GPU read in time": (
        "GPU read in time: expected nvidia-smi and the kernel log answer within their deadlines; actual "
        "nvidia-smi --query-gpu timed out after 3 s; nvidia-smi --query-compute-apps timed out after 3 s; "
        "fix: see what wedges the GPU or its driver (the kernel log's Xid lines, nvidia-bug-report.sh), "
        "or reboot the host")}
    assert "GPU health" not in {r.name for r in results}


def test_the_watchdog_is_checked_installed_and_active():
    profile, plan, snapshot, probes = converged()
    results = {r.name: r for r in check_host(profile, plan, snapshot, probes)}
    assert results["health watchdog installed"].ok and results["health watchdog active"].ok
    stopped = dataclasses.replace(probes.watchdog, unit={**probes.watchdog.unit, "ActiveState": "inactive",
                                                         "SubState": "dead"})
    message = failed(check_host(profile, plan, snapshot, dataclasses.replace(probes, watchdog=stopped)))
    assert message == {"health watchdog active": "health watchdog active: expected active/running, enabled; "
                       "actual inactive/dead, enabled; fix: systemctl enable --now vllm-hostkit-watchdog.service; "
                       "read journalctl -u vllm-hostkit-watchdog.service"}
    edited = dataclasses.replace(probes.watchdog, script_sha256="0" * 64)
    assert "health watchdog installed" in failed(check_host(profile, plan, snapshot,
                                                            dataclasses.replace(probes, watchdog=edited)))
    off = profile.model_copy(update={"vllm_watchdog": False})
    off_plan = plan.model_copy(update={"watchdog": plan.watchdog.model_copy(update={"enabled": False})})
    assert failed(check_host(off, off_plan, snapshot, probes))["no health watchdog"].endswith(
        "(it removes the watchdog)")


def test_the_installed_release_is_checked_against_vllm_version_and_the_driver():
    from hostkit.facts.vllm_release import InstalledRelease

    profile, plan, snapshot, probes = converged()
    release = InstalledRelease(interpreter="/opt/vllm/bin/python3", package="vllm", version="0.32.0",
                               torch="2.14.0", cuda="13.0")
    failures = failed(check_host(profile, plan, with_section(snapshot, "vllm_release", release=release), probes))
    assert "expected vLLM 0.33.0 in /opt/vllm/bin/python3; actual vllm 0.32.0" in failures["release"]
    assert "fix: set vllm_version: 0.32.0" in failures["release"]
    # The lab host has no NVIDIA driver: a CUDA build cannot run there.
    assert "expected NVIDIA driver 580.65.06 or newer (CUDA 13.0); actual no driver" in failures[
        "driver for the CUDA build"]
    same = dataclasses.replace(release, version=LAB_DATA.get("vllm_version", "0.33.0"), cuda=None)
    results = check_host(profile, plan, with_section(snapshot, "vllm_release", release=same), probes)
    assert failed(results) == {} and "release" in {r.name for r in results}
