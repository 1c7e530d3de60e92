"""vllm-hostkit's metrics collector, run on the host by a systemd timer.

Runs as `python3 -I -S collector.py ...` (standard library only: no site packages on the
host are needed or trusted). One run reads each vLLM unit's memory cgroup and systemd's view
of it (vllm.service, or each of vllm_instances, whose series carry vllm_instance="NAME"),
/proc/meminfo, /proc/vmstat, the kernel log (/dev/kmsg, for Xid errors and the units' OOM
kills) and nvidia-smi, and writes Prometheus text format for node_exporter's
textfile collector: to a temporary file in the same directory, then renamed over
`hostkit.prom`, so node_exporter never reads half a file.

Nothing here may block: nvidia-smi runs under `timeout` and is abandoned (not waited for)
when it overruns, since a wedged GPU can leave it in uninterruptible sleep; the HTTP
readiness probe has a deadline; /dev/kmsg is read non-blocking.

Counters the kernel resets when systemd re-creates the unit's cgroup (memory.events'
oom_kill: an OOM-killed unit is restarted in a fresh cgroup) are counted from the kernel
log instead, incrementally by record sequence number, in a small state file kept across
runs; they restart from zero at boot, as Prometheus counters may.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable

try:
    from hostkit.remote.http_request import http_request
except ImportError:  # on the host, where the installed collector holds its text before this
    pass

MIB = 1024 * 1024
UNLIMITED_FLOOR = 2**60  # cgroup v1 prints "no limit" as about 2**63
UNIT_STATES = ("active", "activating", "deactivating", "inactive", "failed", "reloading")
SYSTEMD_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "ControlGroup", "InvocationID")
XID_RE = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
OOM_TASK_MEMCG_RE = re.compile(r"oom-kill:.*\btask_memcg=([^,\s]+)")
TEXTFILE_NAME = "hostkit.prom"
INSTANCE_LABEL = "vllm_instance"
SWAP_FILE_NAME = "vllm-hostkit.swap"

# name: (type, help). Every sample written must be declared here.
METRICS = {
    "hostkit_vllm_up": ("gauge", "1 when the vLLM unit is active and /health answers 200."),
    "hostkit_vllm_unit_state": ("gauge", "The vLLM unit's systemd ActiveState (1 for the current one)."),
    "hostkit_vllm_start_limit_hit": ("gauge", "1 when systemd gave up restarting the vLLM unit (start limit hit)."),
    "hostkit_vllm_restarts_total": ("counter", "Automatic restarts of the vLLM unit by systemd (NRestarts)."),
    "hostkit_vllm_watchdog_restarts_total": ("counter", "Restarts of the vLLM unit by hostkit's watchdog."),
    "hostkit_vllm_memory_current_bytes": ("gauge", "Memory charged to the vLLM unit's cgroup."),
    "hostkit_vllm_memory_peak_bytes": ("gauge", "High-water mark of the vLLM unit's cgroup memory since it started."),
    "hostkit_vllm_memory_max_bytes": ("gauge", "The vLLM unit's hard memory limit (MemoryMax); absent when unlimited."),
    "hostkit_vllm_memory_high_bytes": ("gauge", "The vLLM unit's MemoryHigh throttle limit; absent when unset."),
    "hostkit_vllm_swap_current_bytes": ("gauge", "Swap used by the vLLM unit's cgroup (cgroup v2)."),
    "hostkit_vllm_swap_max_bytes": ("gauge", "The vLLM unit's MemorySwapMax (cgroup v2); absent when unlimited."),
    "hostkit_vllm_oom_kills_total": ("counter", "Processes of the vLLM unit killed by the OOM killer since boot."),
    "hostkit_host_oom_kills_total": ("counter", "OOM kills on the host since boot, any cgroup (/proc/vmstat oom_kill)."),
    "hostkit_memory_total_bytes": ("gauge", "Host RAM (MemTotal)."),
    "hostkit_memory_available_bytes": ("gauge", "Host RAM available without swapping (MemAvailable)."),
    "hostkit_swap_total_bytes": ("gauge", "Swap space on the host."),
    "hostkit_swap_used_bytes": ("gauge", "Swap in use on the host (SwapTotal - SwapFree)."),
    "hostkit_swap_planned_absent": ("gauge", "1 when a swap file hostkit planned (its boot unit's, or an fstab line's) is not in /proc/swaps."),
    "hostkit_gpu_query_success": ("gauge", "1 when nvidia-smi answered within its deadline."),
    "hostkit_gpu_memory_total_bytes": ("gauge", "GPU memory, per GPU."),
    "hostkit_gpu_memory_used_bytes": ("gauge", "GPU memory in use, per GPU."),
    "hostkit_gpu_memory_used_by_others_bytes": ("gauge", "GPU memory held by compute processes outside the vLLM unit."),
    "hostkit_gpu_xid_errors_total": ("counter", "NVIDIA Xid errors in the kernel log since boot, by Xid code."),
    "hostkit_collector_duration_seconds": ("gauge", "Wall time of the collector's last run."),
    "hostkit_collector_interval_seconds": ("gauge", "How often the collector is meant to run."),
    "hostkit_collector_last_success_timestamp_seconds": ("gauge", "Unix time of the collector's last complete run."),
}


# -- parsing (pure) ------------------------------------------------------------------------


def parse_key_values(text: str) -> dict[str, int]:
    """`name value` lines (/proc/vmstat, memory.events, memory.oom_control, memory.stat)."""
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes."""
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def planned_swap_files(nvme_settings: str | None, fstab: str | None) -> list[str]:
    """The swap files hostkit brings back at boot: its NVMe unit's (`hk_swap_file=` in its
    settings, shell-quoted) and its fstab lines (named vllm-hostkit.swap)."""
    planned = []
    for line in (nvme_settings or "").splitlines():
        if line.startswith("hk_swap_file="):
            value = shlex.split(line[len("hk_swap_file="):])
            planned += [v for v in value if v]
    for line in (fstab or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap" \
                and fields[0].rsplit("/", 1)[-1] == SWAP_FILE_NAME:
            planned.append(fields[0])
    return list(dict.fromkeys(planned))


def active_swaps(text: str | None) -> set[str]:
    return {line.split()[0] for line in (text or "").splitlines()[1:] if line.split()}


def parse_limit(text: str | None) -> int | None:
    """A cgroup limit file: None for no limit (v2 `max`, v1 about 2**63) or unreadable."""
    if text is None:
        return None
    text = text.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return None if value >= UNLIMITED_FLOOR else value


def parse_int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def parse_systemctl_show(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            values[name] = value
    return values


def parse_gpu_query(text: str) -> list[tuple[str, str, int, int]]:
    """`--query-gpu=index,uuid,memory.total,memory.used --format=csv,noheader,nounits`:
    (index, uuid, used MiB, total MiB) per GPU; rows with `[N/A]` or missing fields are skipped."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 4 and fields[0].isdigit() and fields[2].isdigit() and fields[3].isdigit():
            gpus.append((fields[0], fields[1], int(fields[3]), int(fields[2])))
    return gpus


def parse_compute_apps(text: str) -> list[tuple[str, int, int]]:
    """`--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`:
    (GPU uuid, pid, used MiB) per process."""
    apps = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            apps.append((fields[0], int(fields[1]), int(fields[2])))
    return apps


def unit_cgroup_path(unit: str) -> str:
    """Where systemd puts a system service's processes: the unit's cgroup as planned, for a
    host without systemd to ask (hostkit's units set no Slice=). An instance's unit
    (`vllm@a.service`) goes in its prefix's own slice: systemd showed
    ControlGroup=/system.slice/system-vllm.slice/vllm@a.service on a lab host."""
    prefix, at, _ = unit.partition("@")
    return f"/system.slice/system-{prefix}.slice/{unit}" if at else f"/system.slice/{unit}"


def in_cgroup(proc_cgroup: Iterable[str], unit_cgroup: str) -> bool:
    """Whether the lines of a /proc/PID/cgroup put the process in `unit_cgroup` or below it.

    hostkit's one reader of GPU attribution: plan, verify and doctor import it, and the
    collector, which runs on the host with the standard library alone, carries it. systemd's
    hierarchy says which unit a process is in: the unified line `0::PATH` (cgroup v2 and
    hybrid) or v1's `N:name=systemd:PATH`; a v1 controller's path alone does not."""
    if not unit_cgroup:
        return False
    below = unit_cgroup.rstrip("/") + "/"
    for line in proc_cgroup:
        parts = line.strip().split(":", 2)
        systemd_line = len(parts) == 3 and parts[1] in ("", "name=systemd")
        if systemd_line and (parts[2] == unit_cgroup or parts[2].startswith(below)):
            return True
    return False


def system_service_of(proc_cgroup: Iterable[str]) -> str | None:
    """The system service whose cgroup holds the process, read from systemd's hierarchy line
    as in_cgroup reads it: `vllm@a.service` for /system.slice/vllm@a.service, or in a slice
    of system.slice (an instance's: /system.slice/system-vllm.slice/vllm@a.service), or
    below it; None for a process outside every service of system.slice."""
    for line in proc_cgroup:
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[1] in ("", "name=systemd"):
            names = parts[2].split("/")
            if len(names) < 3 or names[1] != "system.slice":
                continue
            for name in names[2:]:
                if name.endswith(".service"):
                    return name
                if not name.endswith(".slice"):
                    break
    return None


def gpu_memory(gpus: list[tuple[str, str, int, int]], apps: list[tuple[str, int, int]],
               pid_in_unit) -> list[tuple[str, int, int, int]]:
    """(index, used bytes, total bytes, bytes used by processes outside the unit) per GPU.
    `pid_in_unit(pid)` says whether a process belongs to the vLLM unit."""
    others: dict[str, int] = {}
    for uuid, pid, used_mib in apps:
        if not pid_in_unit(pid):
            others[uuid] = others.get(uuid, 0) + used_mib
    return [(index, used * MIB, total * MIB, others.get(uuid, 0) * MIB) for index, uuid, used, total in gpus]


def parse_kmsg_record(record: bytes) -> tuple[int, str] | None:
    """(sequence number, message) of one /dev/kmsg record: `PRI,SEQ,USEC,FLAGS;MESSAGE`
    then dictionary lines starting with a space."""
    text = record.decode("utf-8", "replace")
    head, sep, rest = text.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]), rest.split("\n", 1)[0]


def scan_kernel_log(records, after_seq: int, unit_cgroup: str) -> tuple[int, dict[str, int], int]:
    """Over (seq, message) records newer than `after_seq`: the last sequence number seen,
    new Xid errors by code and new OOM kills of processes in `unit_cgroup`."""
    last = after_seq
    xids: dict[str, int] = {}
    unit_ooms = 0
    for seq, message in records:
        if seq <= after_seq:
            continue
        last = max(last, seq)
        xid = XID_RE.search(message)
        if xid:
            xids[xid.group(1)] = xids.get(xid.group(1), 0) + 1
            continue
        oom = OOM_TASK_MEMCG_RE.search(message)
        if oom and unit_cgroup and (oom.group(1) == unit_cgroup or oom.group(1).startswith(unit_cgroup + "/")):
            unit_ooms += 1
    return last, xids, unit_ooms


def watchdog_restarts(text: str | None) -> int | None:
    """The number of restarts in the watchdog's state file; None when absent or unreadable."""
    if text is None:
        return None
    try:
        restarts = json.loads(text).get("restarts")
    except (ValueError, AttributeError):
        return None
    return len(restarts) if isinstance(restarts, list) else None


def unit_labels(unit: str) -> dict[str, str]:
    """The labels of a vLLM unit's series: vllm_instance="NAME" for vllm@NAME.service; none for
    vllm.service, whose series read as they always have. Not `instance`: Prometheus sets that
    to the scrape target (every alert names the host by it) and renames a scraped one."""
    if unit.startswith("vllm@") and unit.endswith(".service"):
        return {INSTANCE_LABEL: unit[len("vllm@"):-len(".service")]}
    return {}


def unit_sample(unit: dict[str, str], healthy: bool,
                labels: dict[str, str] | None = None) -> list[tuple[str, dict[str, str], float]]:
    labels = labels or {}
    active_state = unit.get("ActiveState", "")
    samples = [("hostkit_vllm_up", labels, int(active_state == "active" and healthy))]
    samples += [("hostkit_vllm_unit_state", {**labels, "state": state}, int(state == active_state))
                for state in UNIT_STATES]
    samples.append(("hostkit_vllm_start_limit_hit", labels, int(unit.get("Result") == "start-limit-hit")))
    restarts = parse_int(unit.get("NRestarts"))
    if restarts is not None:
        samples.append(("hostkit_vllm_restarts_total", labels, restarts))
    return samples


def render(samples) -> str:
    """Prometheus text format, HELP and TYPE once per metric, in METRICS order."""
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples:
        if name not in METRICS:
            raise ValueError(f"undeclared metric {name}")
        by_name.setdefault(name, []).append((labels, value))
    lines = []
    for name, (kind, help_text) in METRICS.items():
        if name not in by_name:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, value in by_name[name]:
            label_text = ",".join(f'{key}="{val}"' for key, val in sorted(labels.items()))
            number = repr(float(value)) if isinstance(value, float) else str(int(value))
            lines.append(f"{name}{{{label_text}}} {number}" if labels else f"{name} {number}")
    return "\n".join(lines) + "\n"


# -- reading the host ----------------------------------------------------------------------


def read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def run_bounded(argv: list[str], timeout_s: float) -> str | None:
    """stdout of `argv`, or None when it fails, is missing or overruns `timeout_s`.

    `timeout` (coreutils) kills it at the deadline; the child is then abandoned rather
    than waited for, since a process stuck in the GPU driver may not die at once."""
    try:
        proc = subprocess.Popen(["timeout", "-k", "1", str(timeout_s), *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout_s + 2)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None
    return out if proc.returncode == 0 else None


def read_kmsg(path: str = "/dev/kmsg"):
    """Every record still in the kernel's ring buffer, as (seq, message), without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno == errno.EPIPE:  # overwritten while we read: go on with the next
                    continue
                return
            if not record:
                return
            parsed = parse_kmsg_record(record)
            if parsed is not None:
                yield parsed
    finally:
        os.close(fd)


def health_ok(url: str, timeout_s: float) -> bool:
    """Whether GET `url` answers 200 within `timeout_s`."""
    try:
        return http_request(url, None, None, timeout_s)[0] == 200
    except (OSError, ValueError):  # refused, timed out, not HTTP; a bad URL
        return False


# A unit's part of the state: its OOM kills since boot, its last cgroup, its kept peak.
UNIT_STATE_KEYS = ("unit_ooms", "unit_cgroup", "peak")


def load_state(path: str, boot_id: str) -> dict:
    """The state kept across runs, each unit's under "units"; a file of a collector before
    several units held vllm.service's at the top."""
    try:
        with open(path) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {}
    if not isinstance(state, dict) or state.get("boot_id") != boot_id:
        return {"boot_id": boot_id, "kmsg_seq": -1, "xids": {}, "units": {}}
    if "units" not in state:
        state["units"] = {"vllm.service": {key: state.pop(key) for key in UNIT_STATE_KEYS if key in state}}
    return state


def write_atomically(path: str, text: str, mode: int = 0o644) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def cgroup_dirs(control_group: str) -> tuple[str, int]:
    """The unit's memory cgroup directory and the cgroup version."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "/sys/fs/cgroup" + control_group, 2
    return "/sys/fs/cgroup/memory" + control_group, 1


def unit_memory_samples(directory: str, version: int, invocation: str, state: dict,
                        labels: dict[str, str] | None = None):
    """The unit's memory metrics from its cgroup files; `state` (the unit's) keeps the
    high-water mark where the kernel has no peak file (v2 before Linux 5.19)."""
    labels = labels or {}
    if version == 2:
        current = parse_int(read(f"{directory}/memory.current"))
        peak = parse_int(read(f"{directory}/memory.peak"))
        limits = {"hostkit_vllm_memory_max_bytes": parse_limit(read(f"{directory}/memory.max")),
                  "hostkit_vllm_memory_high_bytes": parse_limit(read(f"{directory}/memory.high")),
                  "hostkit_vllm_swap_max_bytes": parse_limit(read(f"{directory}/memory.swap.max"))}
        swap = parse_int(read(f"{directory}/memory.swap.current"))
        events_oom = parse_key_values(read(f"{directory}/memory.events") or "").get("oom_kill")
    else:
        current = parse_int(read(f"{directory}/memory.usage_in_bytes"))
        peak = parse_int(read(f"{directory}/memory.max_usage_in_bytes"))
        limits = {"hostkit_vllm_memory_max_bytes": parse_limit(read(f"{directory}/memory.limit_in_bytes"))}
        swap = None
        events_oom = parse_key_values(read(f"{directory}/memory.oom_control") or "").get("oom_kill")
    if current is None:
        return [], events_oom
    if peak is None:
        kept = state.get("peak", {})
        peak = max(current, kept.get("bytes", 0) if kept.get("invocation") == invocation else 0)
        state["peak"] = {"invocation": invocation, "bytes": peak}
    samples = [("hostkit_vllm_memory_current_bytes", labels, current), ("hostkit_vllm_memory_peak_bytes", labels, peak)]
    samples += [(name, labels, value) for name, value in limits.items() if value is not None]
    if swap is not None:
        samples.append(("hostkit_vllm_swap_current_bytes", labels, swap))
    return samples, events_oom


def gpu_samples(timeout_s: float, unit_cgroups: list[str]):
    """The GPUs' memory; a process in none of `unit_cgroups` (the vLLM units') is another's."""
    if not any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in os.get_exec_path()):
        return []
    query = run_bounded(["nvidia-smi", "--query-gpu=index,uuid,memory.total,memory.used",
                         "--format=csv,noheader,nounits"], timeout_s)
    apps = None
    if query is not None:
        apps = run_bounded(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                            "--format=csv,noheader,nounits"], timeout_s)
    if query is None or apps is None:
        return [("hostkit_gpu_query_success", {}, 0)]
    rows = gpu_memory(parse_gpu_query(query), parse_compute_apps(apps),
                      lambda pid: any(in_cgroup((read(f"/proc/{pid}/cgroup") or "").splitlines(), unit_cgroup)
                                      for unit_cgroup in unit_cgroups))
    samples = [("hostkit_gpu_query_success", {}, 1)]
    for index, used, total, others in rows:
        samples += [("hostkit_gpu_memory_used_bytes", {"gpu": index}, used),
                    ("hostkit_gpu_memory_total_bytes", {"gpu": index}, total),
                    ("hostkit_gpu_memory_used_by_others_bytes", {"gpu": index}, others)]
    return samples


def unit_samples(unit: str, health_url: str, watchdog_file: str, records, after_seq: int, state: dict,
                 command_timeout: float):
    """One vLLM unit's series, labelled by unit_labels, and its cgroup; `state` is the unit's."""
    labels = unit_labels(unit)
    shown = parse_systemctl_show(run_bounded(
        ["systemctl", "show", unit, *(f"--property={name}" for name in SYSTEMD_PROPERTIES)], command_timeout) or "")
    control_group = shown.get("ControlGroup", "")
    active = shown.get("ActiveState") == "active"
    samples = unit_sample(shown, active and health_ok(health_url, command_timeout), labels)
    watchdog = watchdog_restarts(read(watchdog_file))
    if watchdog is not None:
        samples.append(("hostkit_vllm_watchdog_restarts_total", labels, watchdog))

    events_oom = None
    # Without systemd (or its answer) the unit's cgroup is the last one systemd named, else
    # where the unit is planned: a process in it is vLLM's, with or without systemd.
    unit_cgroup = control_group or state.get("unit_cgroup") or unit_cgroup_path(unit)
    if control_group:
        state["unit_cgroup"] = control_group
        directory, version = cgroup_dirs(control_group)
        memory, events_oom = unit_memory_samples(directory, version, shown.get("InvocationID", ""), state, labels)
        samples += memory
    unit_ooms = scan_kernel_log(records, after_seq, unit_cgroup)[2]
    # The kernel log is the count that survives a re-created cgroup; memory.events can only
    # be ahead of it when the log lost records.
    state["unit_ooms"] = max(state.get("unit_ooms", 0) + unit_ooms, events_oom or 0)
    samples.append(("hostkit_vllm_oom_kills_total", labels, state["unit_ooms"]))
    return samples, unit_cgroup


def collect(args) -> str:
    started = time.monotonic()
    boot_id = (read("/proc/sys/kernel/random/boot_id") or "").strip()
    state_path = os.path.join(args.state_dir, "monitor-state.json")
    state = load_state(state_path, boot_id)

    records = list(read_kmsg())
    after_seq = state["kmsg_seq"]
    samples, unit_cgroups = [], []
    for unit, health_url, watchdog_file in zip(args.unit, args.health_url, args.watchdog_file):
        unit_state = state["units"].setdefault(unit, {})
        found, unit_cgroup = unit_samples(unit, health_url, watchdog_file, records, after_seq, unit_state,
                                          args.command_timeout)
        samples += found
        unit_cgroups.append(unit_cgroup)
    last_seq, xids, _ = scan_kernel_log(records, after_seq, "")
    state["kmsg_seq"] = last_seq
    for code, count in xids.items():
        state["xids"][code] = state["xids"].get(code, 0) + count
    samples += [("hostkit_gpu_xid_errors_total", {"code": code}, count) for code, count in sorted(state["xids"].items())]

    vmstat = parse_key_values(read("/proc/vmstat") or "")
    if "oom_kill" in vmstat:
        samples.append(("hostkit_host_oom_kills_total", {}, vmstat["oom_kill"]))
    meminfo = parse_meminfo(read("/proc/meminfo") or "")
    for name, field in (("hostkit_memory_total_bytes", "MemTotal"), ("hostkit_memory_available_bytes", "MemAvailable"),
                        ("hostkit_swap_total_bytes", "SwapTotal")):
        if field in meminfo:
            samples.append((name, {}, meminfo[field]))
    if "SwapTotal" in meminfo and "SwapFree" in meminfo:
        samples.append(("hostkit_swap_used_bytes", {}, meminfo["SwapTotal"] - meminfo["SwapFree"]))

    active_swap = active_swaps(read("/proc/swaps"))
    samples += [("hostkit_swap_planned_absent", {"path": path}, int(path not in active_swap))
                for path in planned_swap_files(read(args.nvme_settings) if args.nvme_settings else None,
                                               read("/etc/fstab"))]

    samples += gpu_samples(args.nvidia_smi_timeout, unit_cgroups)
    samples += [("hostkit_collector_duration_seconds", {}, round(time.monotonic() - started, 6)),
                ("hostkit_collector_interval_seconds", {}, args.interval),
                ("hostkit_collector_last_success_timestamp_seconds", {}, round(time.time(), 3))]
    os.makedirs(args.state_dir, exist_ok=True)
    write_atomically(state_path, json.dumps(state), 0o600)
    return render(samples)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--textfile-dir", required=True)
    # Once per vLLM unit, each --unit with the --health-url and --watchdog-file of its place.
    parser.add_argument("--unit", action="append")
    parser.add_argument("--interval", type=int, default=15)
    parser.add_argument("--health-url", action="append")
    parser.add_argument("--state-dir", default="/var/lib/vllm-hostkit")
    parser.add_argument("--watchdog-file", action="append")
    parser.add_argument("--nvidia-smi-timeout", type=float, default=5.0)
    parser.add_argument("--command-timeout", type=float, default=3.0)
    parser.add_argument("--nvme-settings", default="", help="the NVMe boot unit's settings file")
    args = parser.parse_args(argv)
    args.unit = args.unit or ["vllm.service"]
    args.health_url = args.health_url or [""] * len(args.unit)
    args.watchdog_file = args.watchdog_file or ["/var/lib/vllm-hostkit/watchdog.json"] * len(args.unit)
    if not len(args.unit) == len(args.health_url) == len(args.watchdog_file):
        parser.error("give each --unit its --health-url and --watchdog-file")
    text = collect(args)
    os.makedirs(args.textfile_dir, exist_ok=True)
    write_atomically(os.path.join(args.textfile_dir, TEXTFILE_NAME), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
