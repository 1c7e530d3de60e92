"""Diagnosis rules on recorded host output (tests/unit/fixtures/doctor), varied one fact at a time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hostkit.doctor.gather import SUB_MARKER, parse_doctor_output, parse_nvme_boot, split_sub_sections
from hostkit.doctor.inputs import GpuHolder, GpuMemory, VllmProcessTree
from hostkit.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNUSABLE
from hostkit.doctor.report import exit_code
from hostkit.doctor.rules import Severity, diagnose, host_reserve
from hostkit.profile.host_profile import HostProfile
from hostkit.sizes import GIB, MIB

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"


def recorded(name: str):
    return parse_doctor_output("lab1", (FIXTURES / f"{name}.txt").read_text().splitlines())


def codes(diagnosis) -> dict[str, Severity]:
    return {finding.code: finding.severity for finding in diagnosis.findings}


def finding(diagnosis, code: str):
    return next(f for f in diagnosis.findings if f.code == code)


def healthy():
    """The recorded lab host with a limit the planner's "auto" would give (RAM minus ~1 GiB)."""
    inputs = recorded("lab-clean")
    return replace(inputs, unit=replace(inputs.unit, max_bytes=900 * MIB))


def with_argv(inputs, *flags: str, version: str | None = None):
    argv = ("/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct", *flags)
    vllm = replace(inputs.vllm, argv=argv)
    return replace(inputs, vllm=vllm, installed_vllm_version=version or inputs.installed_vllm_version)


def test_healthy_host_has_no_findings():
    diagnosis = diagnose(healthy())
    assert diagnosis.findings == ()
    assert not diagnosis.critical
    assert diagnosis.settings.gpu_memory_utilization == 0.85 and diagnosis.settings.max_num_seqs == 64


# -- swap ---------------------------------------------------------------------------------


def test_no_swap_is_a_warning_unless_the_inventory_turned_it_off():
    inputs = parse_doctor_output("h200", (FIXTURES / "h200-other-gpu-process.txt").read_text().splitlines())
    assert codes(diagnose(inputs))["no-swap"] is Severity.WARNING
    no_swap_wanted = HostProfile(swap_enabled=False, vllm_enabled=False)
    assert codes(diagnose(inputs, no_swap_wanted))["no-swap"] is Severity.INFO


@pytest.mark.parametrize(("used_fraction", "expected"), [(0.5, None), (0.85, Severity.WARNING), (0.97, Severity.CRITICAL)])
def test_swap_almost_full(used_fraction, expected):
    inputs = healthy()
    memory = replace(inputs.memory, swap_used_bytes=int(inputs.memory.swap_total_bytes * used_fraction))
    assert codes(diagnose(replace(inputs, memory=memory))).get("swap-almost-full") is expected


def test_high_swappiness_is_a_note():
    inputs = healthy()
    diagnosis = diagnose(replace(inputs, tuning=replace(inputs.tuning, swappiness=60)))
    assert codes(diagnosis) == {"swappiness-high": Severity.INFO}


# -- OOM kills ----------------------------------------------------------------------------------


def test_memcg_oom_kill_inside_the_vllm_unit_is_critical_and_other_kills_are_warnings():
    diagnosis = diagnose(recorded("lab-oom"))
    assert codes(diagnosis) == {
        "vllm-oom-killed": Severity.CRITICAL,
        "oom-kill-other": Severity.WARNING,
        "vllm-restarted": Severity.WARNING,
        "memory-limit-near-ram": Severity.WARNING,  # the recording's MemoryMax=1200M on 1.93 GiB
    }
    vllm_kill = finding(diagnosis, "vllm-oom-killed")
    assert "hit its unit memory limit (MemoryMax=1.2G)" in vllm_kill.problem
    assert "python3 (pid 536" in vllm_kill.problem
    assert "vllm_memory_max" in vllm_kill.fix
    assert "pid 583" in finding(diagnosis, "oom-kill-other").problem
    assert diagnosis.critical


def test_host_wide_oom_kill_of_the_engine_asks_for_a_limit():
    inputs = healthy()
    lines = (
        "2026-11-29T23:04:02+0000 gpu1 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        "mems_allowed=0,global_oom,task_memcg=/user.slice/user-0.slice/session-3.scope,task=VLLM::EngineCor,pid=4242,uid=0",
        "2026-11-29T23:04:02+0000 gpu1 kernel: Out of memory: Killed process 4242 (VLLM::EngineCor) total-vm:9kB, "
        "anon-rss:61440000kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:5448kB oom_score_adj:0",
    )
    diagnosis = diagnose(replace(inputs, kernel_log=replace(inputs.kernel_log, lines=lines)))
    kill = finding(diagnosis, "vllm-oom-killed")
    assert kill.severity is Severity.CRITICAL
    assert "host ran out of memory" in kill.problem and "VLLM::EngineCor (pid 4242, 58.6G anon)" in kill.problem
    assert "vllm_memory_max" in kill.fix


def test_oom_counter_of_the_unit_counts_without_a_kernel_log_line():
    inputs = healthy()
    diagnosis = diagnose(replace(inputs, unit=replace(inputs.unit, oom_kills=2)))
    assert codes(diagnosis) == {"vllm-oom-killed": Severity.CRITICAL}


def test_unreadable_kernel_log_is_reported_as_unknown():
    inputs = healthy()
    diagnosis = diagnose(replace(inputs, kernel_log=replace(inputs.kernel_log, source=None)))
    assert codes(diagnosis) == {"kernel-log-unreadable": Severity.INFO}


# -- the unit's memory limit ----------------------------------------------------------------------


def test_missing_memory_limit():
    inputs = healthy()
    diagnosis = diagnose(replace(inputs, unit=replace(inputs.unit, max_bytes=None)))
    assert codes(diagnosis) == {"memory-limit-missing": Severity.WARNING}


def test_limit_too_close_to_ram_names_the_largest_safe_limit():
    inputs = recorded("lab-clean")  # MemoryMax=1200M on 1.93 GiB of RAM
    reserve = host_reserve(inputs.memory.ram_total_bytes)
    assert reserve == inputs.memory.ram_total_bytes // 2  # small host: half of RAM, below the 2 GiB cap
    near = finding(diagnose(inputs), "memory-limit-near-ram")
    assert near.severity is Severity.WARNING
    assert "within" in near.problem
    above = diagnose(replace(inputs, unit=replace(inputs.unit, max_bytes=4 * GIB)))
    assert "at or above RAM" in finding(above, "memory-limit-near-ram").problem


def test_host_reserve_matches_the_planners_auto_headroom():
    assert host_reserve(64 * GIB) == int(6.4 * GIB)
    assert host_reserve(16 * GIB) == 2 * GIB
    assert host_reserve(2 * GIB) == GIB


def test_crash_loop_with_an_option_the_release_lacks():
    diagnosis = diagnose(recorded("lab-crashloop"))
    found = codes(diagnosis)
    assert found["vllm-not-running"] is Severity.CRITICAL
    assert found["unknown-vllm-option"] is Severity.CRITICAL
    unknown = finding(diagnosis, "unknown-vllm-option")
    assert "--swap-space" in unknown.problem and "0.20.0 (installed)" in unknown.problem
    assert "removed in 0.18.0" in unknown.problem
    assert "ExecStart" in unknown.problem
    assert "exited, status 2" in finding(diagnosis, "vllm-not-running").problem


def test_unknown_option_falls_back_to_the_inventory_version():
    inputs = with_argv(healthy(), "--enable-bogus-feature")
    inputs = replace(inputs, installed_vllm_version=None)
    profile = HostProfile(vllm_model="Qwen/Qwen2.5-0.5B-Instruct", vllm_version="0.33.0", vllm_memory_max=900 * MIB)
    diagnosis = diagnose(inputs, profile)
    unknown = finding(diagnosis, "unknown-vllm-option")
    assert "0.33.0 (inventory's vllm_version)" in unknown.problem
    assert codes(diagnose(inputs)).get("unknown-vllm-option") is None  # no version known: no guess


def test_installed_release_differs_from_the_inventory():
    profile = HostProfile(vllm_model="Qwen/Qwen2.5-0.5B-Instruct", vllm_version="0.33.0")
    mismatch = finding(diagnose(healthy(), profile), "vllm-version-mismatch")
    assert "0.8.5.post1" in mismatch.problem and "vllm_version: 0.8.5.post1" in mismatch.fix


# -- GPU sharing ----------------------------------------------------------------------------------


# Recorded on the H200 by doctor's earlier GPU queries: pid 552 (PyTorch) held 3590 MiB.
H200_SHARED = GpuMemory(0, "GPU-982fcb4d-b5d0-f9bd-6261-ebcade7c637d", 143771, 3599, 0, 3590,
                        (GpuHolder(552, "python3", 3590),))


def h200_with_vllm(*flags: str, version: str = "0.33.0"):
    inputs = parse_doctor_output("h200", (FIXTURES / "h200-other-gpu-process.txt").read_text().splitlines())
    inputs = replace(inputs, gpus=(H200_SHARED,))
    argv = ("/opt/vllm/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", *flags)
    vllm = VllmProcessTree(pid=7000, argv=argv, argv_exact=True, tree_pids=(7000,), tree_rss_bytes=4 * GIB)
    return replace(inputs, vllm=vllm, installed_vllm_version=version)


def test_utilization_above_090_with_another_gpu_process():
    diagnosis = diagnose(h200_with_vllm("--gpu-memory-utilization", "0.95"))
    shared = finding(diagnosis, "gpu-utilization-shared")
    assert shared.severity is Severity.WARNING  # 0.95 x 143771 + 3590 MiB still fits
    assert "3590 MiB held by pid(s) 552" in shared.problem
    assert "vllm_gpu_memory_utilization: 0.8" in shared.fix


def test_utilization_that_cannot_fit_beside_the_other_process_is_critical():
    shared = finding(diagnose(h200_with_vllm("--gpu-memory-utilization", "0.98")), "gpu-utilization-shared")
    assert shared.severity is Severity.CRITICAL and "cannot start" in shared.problem


def test_default_utilization_of_recent_releases_counts():
    shared = finding(diagnose(h200_with_vllm()), "gpu-utilization-shared")
    assert "0.92 (vLLM's default)" in shared.problem
    assert "gpu-utilization-shared" not in codes(diagnose(h200_with_vllm(version="0.10.2")))  # default 0.9


def test_utilization_at_080_with_another_process_is_fine():
    assert "gpu-utilization-shared" not in codes(diagnose(h200_with_vllm("--gpu-memory-utilization", "0.8")))


# -- long context and chunked prefill ---------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "version", "flagged"),
    [
        (("--max-model-len", "32768", "--no-enable-chunked-prefill"), "0.8.5.post1", True),
        (("--max-model-len", "32k", "--disable-chunked-prefill"), "0.33.0", True),
        (("--max-model-len", "32768"), "0.8.5.post1", False),  # V1 chunks by itself
        (("--max-model-len", "32768", "--enable-chunked-prefill", "--max-num-batched-tokens", "8192"), "0.8.5.post1", False),
        (("--max-model-len", "32768", "--enable-chunked-prefill", "--max-num-batched-tokens", "32768"), "0.8.5.post1", True),
        (("--max-model-len", "32768"), "0.6.6.post1", True),  # V0: not enabled on the command line
        (("--max-model-len", "32768", "--enable-chunked-prefill=true"), "0.6.6.post1", False),
        (("--max-model-len", "4096", "--no-enable-chunked-prefill"), "0.8.5.post1", False),  # short context
    ],
)
def test_long_context_without_chunked_prefill(flags, version, flagged):
    diagnosis = diagnose(with_argv(healthy(), *flags, version=version))
    assert ("long-context-without-chunked-prefill" in codes(diagnosis)) is flagged
    if flagged:
        assert "vllm_max_num_batched_tokens: 8192" in finding(diagnosis, "long-context-without-chunked-prefill").fix


def test_long_context_from_the_models_own_length():
    inputs = replace(healthy(), vllm=replace(healthy().vllm, argv=(
        "/opt/vllm/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--no-enable-chunked-prefill")))
    long_context = finding(diagnose(inputs), "long-context-without-chunked-prefill")
    assert "131072" in long_context.problem and "own context length" in long_context.problem


# -- max_num_seqs against host memory --------------------------------------------------------------


def test_max_num_seqs_is_flagged_only_under_memory_pressure():
    assert "max-num-seqs-high-for-ram" not in codes(diagnose(with_argv(healthy(), "--max-num-seqs", "256")))

    after_oom = with_argv(recorded("lab-oom"), "--max-num-seqs", "256")
    high = finding(diagnose(after_oom), "max-num-seqs-high-for-ram")
    assert "vLLM was OOM-killed" in high.problem
    assert "vllm_max_num_seqs: 64" in high.fix


def test_max_num_seqs_default_counts_when_the_unit_peaks_near_its_limit():
    inputs = with_argv(healthy())  # no --max-num-seqs: vLLM's default
    inputs = replace(inputs, unit=replace(inputs.unit, peak_bytes=880 * MIB))  # 98% of 900M
    high = finding(diagnose(inputs), "max-num-seqs-high-for-ram")
    assert "vLLM's default" in high.problem and "98% of MemoryMax" in high.problem


def test_modest_max_num_seqs_is_not_flagged_even_under_pressure():
    assert "max-num-seqs-high-for-ram" not in codes(diagnose(recorded("lab-oom")))  # --max-num-seqs 64


# -- exit code --------------------------------------------------------------------------------------


def test_exit_code_is_nonzero_on_a_critical_finding():
    assert exit_code([diagnose(healthy())]) == EXIT_OK
    assert exit_code([diagnose(recorded("lab-clean"))]) == EXIT_OK  # a warning only
    assert exit_code([diagnose(healthy()), diagnose(recorded("lab-crashloop"))]) == EXIT_FAILED
    assert exit_code([diagnose(healthy())], unreachable=["gpu2"]) == EXIT_UNUSABLE
    # A verdict unknown for one host outweighs a failure on another (verify's rule too).
    assert exit_code([diagnose(recorded("lab-crashloop"))], unreachable=["gpu2"]) == EXIT_UNUSABLE


# -- the distribution --------------------------------------------------------------------------


def test_unattended_upgrades_of_the_driver_are_reported_with_the_hold_as_fix():
    """The Ubuntu 24.04 packages part (tests/unit/fixtures/platform) in the doctor's output."""
    platform_fixtures = Path(__file__).parent / "fixtures" / "platform"
    lines = (FIXTURES / "lab-clean.txt").read_text().splitlines()
    status = (platform_fixtures / "ubuntu-24.04-dpkg-status").read_text()
    stanzas = [dict(line.split(": ", 1) for line in stanza.splitlines()) for stanza in status.split("\n\n")]
    packages = [f"package {s['Package']} {s['Status'].split()[0]}" for s in stanzas
                if s["Status"].endswith(" installed") and "nvidia" in s["Package"]]
    lines += ["@@doctor:platform@@", "%%hostkit-platform:packages", "manager apt", *packages,
              "auto-upgrader unattended-upgrades", "timer apt-daily-upgrade.timer enabled",
              "config APT::Periodic::Unattended-Upgrade 1"]
    inputs = parse_doctor_output("gpu-1", lines)
    inputs = replace(inputs, unit=replace(inputs.unit, max_bytes=900 * MIB))
    found = finding(diagnose(inputs), "driver-auto-upgrades")
    assert found.severity is Severity.WARNING
    assert found.problem.startswith("unattended-upgrades may upgrade the NVIDIA driver packages libnvidia-cfg1-570, ")
    assert "nvidia-kernel-common-570" not in found.evidence["packages"]  # held
    assert "gpu_hold_driver_packages: true" in found.fix
    assert diagnose(inputs).to_dict()["inputs"]["platform"]["package_manager"] == "apt"
    held = replace(inputs, platform=inputs.platform.model_copy(update={"held_packages": inputs.platform.driver_packages}))
    assert "driver-auto-upgrades" not in codes(diagnose(held))


@pytest.mark.processes
def test_the_doctor_reads_the_platform_of_this_host():
    from hostkit.doctor.gather import gather_local

    platform = gather_local().platform
    assert platform is not None and platform.python is not None


# -- keeping vLLM alive (issue 24) ----------------------------------------------------------


def test_a_unit_at_its_start_limit_is_critical_with_the_watchdogs_lines():
    inputs = healthy()
    failed = replace(inputs.unit, active_state="failed", sub_state="failed", result="start-limit-hit")
    watchdog = replace(inputs.keepalive, watchdog_lines=(
        "2026-12-01T08:10:00+00:00 m1 vllm-watchdog[412]: vllm.service hit its start limit (StartLimitBurst) and "
        "stays failed: the watchdog does not restart it.",))
    diagnosis = diagnose(replace(inputs, unit=failed, keepalive=watchdog))
    limit = finding(diagnosis, "vllm-start-limit")
    assert limit.severity is Severity.CRITICAL and "systemctl reset-failed vllm.service" in limit.fix
    assert limit.evidence["journal"] == list(watchdog.watchdog_lines)
    assert "vllm-start-limit" not in codes(diagnose(replace(inputs, unit=replace(failed, result="exit-code"))))


def test_watchdog_restarts_of_the_last_day_are_reported_and_older_ones_not():
    inputs = healthy()
    now = 1_800_000_000.0
    kept = replace(inputs.keepalive, checked_at=now, watchdog_restarts=(now - 2 * 86400, now - 600, now - 60))
    restarts = finding(diagnose(replace(inputs, keepalive=kept)), "vllm-watchdog-restarts")
    assert restarts.problem.startswith("The health watchdog restarted vllm.service 2 time(s) in the last 24 h")
    assert "vllm-watchdog-restarts" not in codes(diagnose(replace(inputs, keepalive=replace(
        kept, watchdog_restarts=(now - 2 * 86400,)))))


# -- GPU memory outside the unit, and deadlines ---------------------------------------------


def h200(case: str):
    return parse_doctor_output("h200", (FIXTURES / f"h200-holder-{case}.txt").read_text().splitlines())


def test_memory_held_outside_the_unit_is_named_with_no_vllm_running():
    held = finding(diagnose(h200("outside")), "gpu-held-outside-vllm")
    assert held.severity is Severity.WARNING  # nothing says vLLM is to run here
    assert "pid 471 (python3) 123634 MiB" in held.problem
    assert held.evidence["holders"] == [{"pid": 471, "name": "python3", "used_mib": 123634}]


def test_memory_held_outside_the_unit_is_critical_where_the_inventorys_vllm_cannot_fit():
    """plan refuses this host for vllm_gpu_memory_utilization 0.85; doctor fails it too."""
    profile = HostProfile(swap_enabled=False, vllm_gpu_memory_utilization=0.85)
    held = finding(diagnose(h200("outside"), profile), "gpu-held-outside-vllm")
    assert held.severity is Severity.CRITICAL and "does not fit beside it" in held.problem
    assert exit_code([diagnose(h200("outside"), profile)]) == EXIT_FAILED


def test_memory_in_the_units_cgroup_is_no_finding():
    profile = HostProfile(swap_enabled=False, vllm_gpu_memory_utilization=0.85)
    assert "gpu-held-outside-vllm" not in codes(diagnose(h200("in-unit"), profile))


def test_a_command_past_its_deadline_is_critical_and_named():
    inputs = replace(h200("in-unit"), timeouts=("nvidia-smi --query-gpu timed out after 2 s",))
    timed_out = finding(diagnose(inputs), "command-timed-out")
    assert timed_out.severity is Severity.CRITICAL
    assert "nvidia-smi --query-gpu timed out after 2 s" in timed_out.problem


# -- the NVMe boot unit -------------------------------------------------------------------

NVME_BOOT_PART = [
    f"{SUB_MARKER}nvme-boot@@",
    "hk_lib=/usr/local/lib/vllm-hostkit", "hk_by_id=/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1_1",
    "hk_mount=/mnt/nvme", "hk_fstype=ext4", "hk_swap_file=/mnt/nvme/vllm-hostkit.swap", "hk_swap_size=1073741824",
    "ActiveState=active", "Result=success", "active_swap=/mnt/nvme/vllm-hostkit.swap",
]


def with_nvme_boot(lines):
    return replace(healthy(), nvme_boot=parse_nvme_boot(split_sub_sections(lines)["nvme-boot"]))


def test_doctor_says_what_the_next_wiped_boot_does():
    found = finding(diagnose(with_nvme_boot(NVME_BOOT_PART)), "instance-store")
    assert found.severity == Severity.INFO
    assert found.problem.startswith("At boot, vllm-hostkit-nvme.service formats a blank "
                                    "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1_1 (ext4, label vllm-hostkit), "
                                    "mounts it at /mnt/nvme and re-creates the 1G swap file")


def test_a_planned_swap_file_absent_since_a_failed_boot_unit_is_a_warning():
    failed = [line for line in NVME_BOOT_PART if not line.startswith(("active_swap", "ActiveState", "Result"))]
    found = finding(diagnose(with_nvme_boot([*failed, "ActiveState=failed", "Result=exit-code"])),
                    "swap-planned-absent")
    assert found.severity == Severity.WARNING
    assert "vllm-hostkit-nvme.service is failed (result exit-code)" in found.problem
    assert "journalctl -b -u vllm-hostkit-nvme.service" in found.fix
