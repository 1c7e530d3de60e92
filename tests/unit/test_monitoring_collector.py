"""The host-side collector's parsing and rendering, on files recorded on lab hosts and on an H200."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hostkit.monitoring import collector

FIXTURES = Path(__file__).parent / "fixtures"
MON = FIXTURES / "monitoring"
V1 = MON / "debian12-cgroupv1"
V2 = MON / "debian12-cgroupv2"
H200_DOCTOR = FIXTURES / "doctor" / "h200-other-gpu-process.txt"
MIB = 2**20


def doctor_part(path: Path, name: str) -> str:
    text = path.read_text()
    return text.split(f"@@doctor:{name}@@\n", 1)[1].split("@@doctor:", 1)[0]


def samples_by_name(samples) -> dict[str, list]:
    found: dict[str, list] = {}
    for name, labels, value in samples:
        found.setdefault(name, []).append((labels, value))
    return found


def test_vmstat_oom_kill_counter():
    values = collector.parse_key_values((V2 / "proc-vmstat").read_text())
    assert values["oom_kill"] == 0
    assert values["pswpout"] >= 0 and len(values) > 100


def test_meminfo_in_bytes():
    meminfo = collector.parse_meminfo((V2 / "proc-meminfo").read_text())
    assert meminfo["MemTotal"] % 1024 == 0 and meminfo["MemTotal"] > 1_500 * MIB
    assert meminfo["SwapTotal"] == 0 and "HugePages_Total" in meminfo  # a count, not kB


@pytest.mark.parametrize("version, directory", [(2, V2), (1, V1)])
def test_unit_memory_from_the_recorded_cgroup(version, directory, monkeypatch):
    state: dict = {}
    samples, events_oom = collector.unit_memory_samples(str(directory), version, "inv-1", state)
    metrics = {name: value for name, _, value in samples}
    current = "memory.current" if version == 2 else "memory.usage_in_bytes"
    peak = "memory.peak" if version == 2 else "memory.max_usage_in_bytes"
    assert metrics["hostkit_vllm_memory_current_bytes"] == int((directory / current).read_text())
    assert metrics["hostkit_vllm_memory_peak_bytes"] == int((directory / peak).read_text())
    assert metrics["hostkit_vllm_memory_max_bytes"] == 64 * MIB  # MemoryMax=64M
    assert events_oom == 0
    if version == 2:
        assert "hostkit_vllm_memory_high_bytes" not in metrics  # memory.high is "max"
        assert metrics["hostkit_vllm_swap_current_bytes"] == 0
        assert metrics["hostkit_vllm_swap_max_bytes"] == 0  # MemorySwapMax=0 is a limit, not "none"
    else:
        assert "hostkit_vllm_swap_current_bytes" not in metrics
    assert "peak" not in state  # the kernel keeps the peak


def test_peak_is_kept_by_the_collector_where_the_kernel_has_none(tmp_path):
    (tmp_path / "memory.current").write_text("300\n")
    (tmp_path / "memory.max").write_text("max\n")
    state: dict = {}
    first, _ = collector.unit_memory_samples(str(tmp_path), 2, "inv-1", state)
    (tmp_path / "memory.current").write_text("100\n")
    second, _ = collector.unit_memory_samples(str(tmp_path), 2, "inv-1", state)
    restarted, _ = collector.unit_memory_samples(str(tmp_path), 2, "inv-2", state)
    peak = lambda samples: dict((n, v) for n, _, v in samples)["hostkit_vllm_memory_peak_bytes"]  # noqa: E731
    assert (peak(first), peak(second), peak(restarted)) == (300, 300, 100)
    assert "hostkit_vllm_memory_max_bytes" not in dict((n, v) for n, _, v in first)  # unlimited: absent


def test_limits_unlimited_v1_and_v2():
    assert collector.parse_limit("max\n") is None
    assert collector.parse_limit("9223372036854771712\n") is None  # v1's "no limit"
    assert collector.parse_limit("67108864\n") == 64 * MIB
    assert collector.parse_limit(None) is None


def test_systemctl_show_of_a_recorded_unit():
    unit = collector.parse_systemctl_show((V2 / "systemctl-show").read_text())
    assert unit["ControlGroup"] == "/system.slice/rec-hog.service"
    samples = samples_by_name(collector.unit_sample(unit, healthy=True))
    assert samples["hostkit_vllm_up"] == [({}, 1)]
    assert samples["hostkit_vllm_restarts_total"] == [({}, 0)]
    states = {labels["state"]: value for labels, value in samples["hostkit_vllm_unit_state"]}
    assert states["active"] == 1 and sum(states.values()) == 1
    assert samples["hostkit_vllm_start_limit_hit"] == [({}, 0)]


def test_a_unit_at_its_start_limit_is_down():
    unit = {"ActiveState": "failed", "Result": "start-limit-hit", "NRestarts": "5"}
    samples = samples_by_name(collector.unit_sample(unit, healthy=False))
    assert samples["hostkit_vllm_up"] == [({}, 0)]
    assert samples["hostkit_vllm_start_limit_hit"] == [({}, 1)]
    assert ({"state": "failed"}, 1) in samples["hostkit_vllm_unit_state"]
    assert samples["hostkit_vllm_restarts_total"] == [({}, 5)]


def test_active_but_not_healthy_is_down():
    samples = samples_by_name(collector.unit_sample({"ActiveState": "active"}, healthy=False))
    assert samples["hostkit_vllm_up"] == [({}, 0)]


@pytest.mark.parametrize("path, inside", [(V2 / "proc-self-cgroup", True), (V1 / "proc-self-cgroup", True)])
def test_process_cgroup_membership_v1_and_v2(path, inside):
    text = path.read_text().splitlines()
    assert collector.in_cgroup(text, "/system.slice/ssh.service") is inside
    assert collector.in_cgroup(text, "/system.slice/vllm.service") is False
    assert collector.in_cgroup(text, "/system.slice/ssh") is False  # a prefix is not a parent
    assert collector.in_cgroup(text, "") is False


def test_child_cgroups_count_as_the_unit():
    assert collector.in_cgroup(["0::/system.slice/vllm.service/worker"], "/system.slice/vllm.service")


def test_h200_gpu_memory_with_a_process_outside_vllm():
    """Recorded on an H200 while a PyTorch process (pid 552, not in any vLLM unit) held 3.5 GiB."""
    gpus = collector.parse_gpu_query(doctor_part(H200_DOCTOR, "gpu"))
    apps = collector.parse_compute_apps(doctor_part(H200_DOCTOR, "gpu-apps"))
    assert gpus == [("0", "GPU-982fcb4d-b5d0-f9bd-6261-ebcade7c637d", 3599, 143771)]
    assert apps == [("GPU-982fcb4d-b5d0-f9bd-6261-ebcade7c637d", 552, 3590)]
    rows = collector.gpu_memory(gpus, apps, pid_in_unit=lambda pid: False)
    assert rows == [("0", 3599 * MIB, 143771 * MIB, 3590 * MIB)]
    assert collector.gpu_memory(gpus, apps, pid_in_unit=lambda pid: pid == 552)[0][3] == 0


def test_h200_idle_query_and_na_rows():
    """The H200's own memory figures from its recorded full query (143771 MiB total, 0 used)."""
    header, row = (FIXTURES / "gpu" / "h200-1gpu" / "query.csv").read_text().splitlines()[:2]
    fields = dict(zip([h.strip() for h in header.split(",")], [f.strip() for f in row.split(",")]))
    nounits = ", ".join((fields["index"], fields["uuid"], fields["memory.total [MiB]"].split()[0],
                         fields["memory.used [MiB]"].split()[0]))
    assert collector.parse_gpu_query(nounits + "\n1, GPU-x, [N/A], [N/A]\n") == [
        ("0", "GPU-87e77369-5345-4073-ed4b-79c80003dc9a", 0, 143771)]


def test_kernel_log_xids_and_unit_ooms_counted_once():
    records = [
        (10, "NVRM: Xid (PCI:0000:00:06): 13, pid=4242, name=python3, Graphics SM Warp Exception"),
        (11, "NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        (12, "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
             "oom_memcg=/system.slice/vllm.service,task_memcg=/system.slice/vllm.service,task=python3,pid=536,uid=0"),
        (13, "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
             "task_memcg=/system.slice/hog.service,task=python3,pid=583,uid=0"),
    ]
    assert collector.scan_kernel_log(records, -1, "/system.slice/vllm.service") == (13, {"13": 1, "79": 1}, 1)
    assert collector.scan_kernel_log(records, 13, "/system.slice/vllm.service") == (13, {}, 0)
    assert collector.scan_kernel_log(records, 11, "/system.slice/vllm.service") == (13, {}, 1)


def test_kmsg_record_format():
    record = b"6,1234,5678901,-;NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n SUBSYSTEM=pci\n"
    assert collector.parse_kmsg_record(record) == (1234, "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.")
    assert collector.parse_kmsg_record(b"garbage") is None


def test_watchdog_file():
    assert collector.watchdog_restarts(json.dumps({"restarts": [1764570000, 1764570100]})) == 2
    assert collector.watchdog_restarts(None) is None
    assert collector.watchdog_restarts("not json") is None
    assert collector.watchdog_restarts("[1, 2]") is None


def test_render_is_prometheus_text_format():
    text = collector.render([
        ("hostkit_gpu_memory_used_bytes", {"gpu": "0"}, 5),
        ("hostkit_vllm_up", {}, 1),
        ("hostkit_gpu_memory_used_bytes", {"gpu": "1"}, 7),
        ("hostkit_collector_duration_seconds", {}, 0.012),
    ])
    lines = text.splitlines()
    assert lines[:3] == ["# HELP hostkit_vllm_up 1 when the vLLM unit is active and /health answers 200.",
                         "# TYPE hostkit_vllm_up gauge", "hostkit_vllm_up 1"]
    assert 'hostkit_gpu_memory_used_bytes{gpu="0"} 5' in lines and 'hostkit_gpu_memory_used_bytes{gpu="1"} 7' in lines
    assert lines.count("# TYPE hostkit_gpu_memory_used_bytes gauge") == 1
    assert "hostkit_collector_duration_seconds 0.012" in lines
    with pytest.raises(ValueError):
        collector.render([("hostkit_unknown", {}, 1)])


def test_metric_names_follow_prometheus_conventions():
    for name, (kind, _) in collector.METRICS.items():
        assert re.fullmatch(r"hostkit_[a-z0-9_]+", name)
        assert name.endswith("_total") == (kind == "counter"), name


def test_write_is_atomic(tmp_path):
    target = tmp_path / "hostkit.prom"
    collector.write_atomically(str(target), "a 1\n")
    assert target.read_text() == "a 1\n" and not (tmp_path / "hostkit.prom.tmp").exists()
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.processes
def test_a_wedged_command_is_abandoned_at_its_deadline():
    import time

    started = time.monotonic()
    assert collector.run_bounded(["sleep", "30"], 0.5) is None
    assert time.monotonic() - started < 5
    assert collector.run_bounded(["echo", "ok"], 5) == "ok\n"
    assert collector.run_bounded(["false"], 5) is None
    assert collector.run_bounded(["/nonexistent-command"], 5) is None


def test_state_restarts_at_a_new_boot(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"boot_id": "old", "kmsg_seq": 99, "xids": {"79": 1},
                                "units": {"vllm@a.service": {"unit_ooms": 2}}}))
    assert collector.load_state(str(path), "old")["units"] == {"vllm@a.service": {"unit_ooms": 2}}
    assert collector.load_state(str(path), "new") == {"boot_id": "new", "kmsg_seq": -1, "xids": {}, "units": {}}


def test_the_state_of_a_collector_of_one_unit_is_vllm_services(tmp_path):
    """An upgrade within a boot keeps vllm.service's OOM count, last cgroup and kept peak."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"boot_id": "b", "kmsg_seq": 99, "xids": {}, "unit_ooms": 2,
                                "unit_cgroup": "/system.slice/vllm.service", "peak": {"invocation": "i", "bytes": 5}}))
    assert collector.load_state(str(path), "b") == {"boot_id": "b", "kmsg_seq": 99, "xids": {}, "units": {
        "vllm.service": {"unit_ooms": 2, "unit_cgroup": "/system.slice/vllm.service",
                         "peak": {"invocation": "i", "bytes": 5}}}}


def recorded_kmsg_records() -> list[bytes]:
    """The recorded /dev/kmsg dump split back into the records read(2) returns, one each."""
    data = (MON / "debian12-oom-kmsg.bin").read_bytes()
    records, current = [], b""
    for line in data.splitlines(keepends=True):
        if line.startswith(b" ") and current:
            current += line  # a dictionary line of the record before
        else:
            if current:
                records.append(current)
            current = line
    return records + [current]


def test_the_recorded_oom_kill_of_a_unit_is_counted_from_the_kernel_log():
    records = [collector.parse_kmsg_record(record) for record in recorded_kmsg_records()]
    assert all(records) and len(records) > 300
    last, xids, unit_ooms = collector.scan_kernel_log(records, -1, "/system.slice/vllm.service")
    assert (xids, unit_ooms) == ({}, 1)
    assert last == max(seq for seq, _ in records)
    assert collector.scan_kernel_log(records, -1, "/system.slice/other.service")[2] == 0
    assert collector.scan_kernel_log(records, last, "/system.slice/vllm.service")[2] == 0  # counted once


def test_reading_a_kmsg_device_never_blocks(tmp_path):
    """read_kmsg on a FIFO with a writer that stays open: it returns at once, without waiting."""
    import os
    import time

    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, b"6,7,100,-;hello")
        started = time.monotonic()
        assert list(collector.read_kmsg(str(fifo))) == [(7, "hello")]
        assert time.monotonic() - started < 1
    finally:
        os.close(writer)
    assert list(collector.read_kmsg(str(tmp_path / "missing"))) == []


def test_h200_gpu_memory_split_between_the_vllm_cgroup_and_others():
    """Recorded on an H200: pid 574 in /system.slice/vllm.service held 8 GiB, pid 575 outside 3 GiB."""
    recorded = MON / "h200-vllm-cgroup"
    cgroups = {574: (recorded / "proc-inside-cgroup").read_text().splitlines(),
               575: (recorded / "proc-outside-cgroup").read_text().splitlines()}
    gpus = collector.parse_gpu_query((recorded / "query-gpu.csv").read_text())
    apps = collector.parse_compute_apps((recorded / "query-compute-apps.csv").read_text())
    assert [pid for _, pid, _ in apps] == [574, 575]
    rows = collector.gpu_memory(gpus, apps, lambda pid: collector.in_cgroup(cgroups[pid], "/system.slice/vllm.service"))
    assert rows == [("0", 12499 * MIB, 143771 * MIB, 3682 * MIB)]  # only pid 575's memory is "others"


def test_health_probe_over_a_plain_socket():
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert collector.health_ok(f"http://127.0.0.1:{port}/health", 3)
        assert not collector.health_ok(f"http://127.0.0.1:{port}/dead", 3)
    finally:
        server.shutdown()
    assert not collector.health_ok(f"http://127.0.0.1:{port}/health", 1)  # refused
    assert not collector.health_ok("", 1) and not collector.health_ok("http://127.0.0.1:notaport/health", 1)


def test_without_systemd_the_collector_attributes_gpu_memory_by_the_planned_unit_cgroup(tmp_path, monkeypatch):
    """No ControlGroup from systemctl (the H200 host has no systemd): a process in
    /system.slice/vllm.service is still vLLM's, as plan, verify and doctor count it."""
    seen = []
    monkeypatch.setattr(collector, "run_bounded", lambda argv, timeout_s: None)
    monkeypatch.setattr(collector, "read_kmsg", lambda: [])
    monkeypatch.setattr(collector, "gpu_samples", lambda timeout_s, unit_cgroups: seen.extend(unit_cgroups) or [])
    collector.collect(collector.argparse.Namespace(
        state_dir=str(tmp_path), unit=["vllm.service"], health_url=[""], command_timeout=1, nvidia_smi_timeout=1,
        watchdog_file=[str(tmp_path / "none.json")], interval=15, nvme_settings=""))
    assert seen == ["/system.slice/vllm.service"]
    inside = (MON / "h200-vllm-cgroup" / "proc-inside-cgroup").read_text().splitlines()
    assert collector.in_cgroup(inside, seen[0])


def test_a_planned_swap_file_not_in_proc_swaps_is_reported_absent():
    """The boot unit's file (its settings, as the deploy writes them) and an fstab line's, each by path."""
    settings = "# Managed by vllm-hostkit\nhk_mount=/mnt/nvme\nhk_swap_file=/mnt/nvme/vllm-hostkit.swap\n"
    fstab = ("LABEL=root / ext4 defaults 0 1\n/var/lib/swap/vllm-hostkit.swap none swap nofail,pri=10 0 0\n"
             "/swapfile none swap sw 0 0\n#/old/vllm-hostkit.swap none swap sw 0 0\n")
    planned = collector.planned_swap_files(settings, fstab)
    assert planned == ["/mnt/nvme/vllm-hostkit.swap", "/var/lib/swap/vllm-hostkit.swap"]
    swaps = ("Filename\tType\tSize\tUsed\tPriority\n"
             "/var/lib/swap/vllm-hostkit.swap file 1048572 0 10\n")
    assert collector.active_swaps(swaps) == {"/var/lib/swap/vllm-hostkit.swap"}
    assert collector.planned_swap_files("hk_swap_file=''\n", None) == []
