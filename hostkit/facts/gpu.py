"""NVIDIA driver and GPU health, gathered in one shell command.

The command prints sub-sections between `@@gpu:NAME@@` lines:

- query: `nvidia-smi --query-gpu=QUERY_FIELDS --format=csv,noheader,nounits` (stdout and
  stderr, so NVML's own error text survives), then `@@gpu:query-rc@@ N`; or
  `@@gpu:no-nvidia-smi@@` when the tool is missing, which means "no driver", not an error.
- numa: `gpu INDEX NODE` for each GPU the query listed, NODE its PCI device's sysfs numa_node
  (-1: the platform reports none; `?`: not readable), then `NUMA_NODES/nodeN/cpulist:CPUS`
  for each NUMA node (hostkit.plan.numa places instances with them).
- apps: `nvidia-smi --query-compute-apps=APPS_FIELDS`, the processes holding GPU memory,
  then `@@gpu:apps-rc@@ N`; procs: for each of their pids, `PID comm NAME` from
  /proc/PID/comm and `PID cgroup LINE` for each line of /proc/PID/cgroup. A pid that
  /proc does not show (another pid namespace, or gone since) has neither.
- version: /proc/driver/nvidia/version (the kernel module that is loaded).
- modules: the nvidia* lines of /proc/modules (`lsmod` may be missing).
- nodes: `ls -ld /dev/nvidia*`.
- persistenced: the command lines of running nvidia-persistenced processes. Its name is
  longer than the 15 characters of /proc/PID/comm, so `pgrep -x` can never match it:
  the comm prefix selects candidates and the full command line confirms them.
- xid: the kernel log's `NVRM: Xid` lines since boot, the first XID_LINE_LIMIT of them,
  as hostkit.facts.kernel_log reads and parses them. Without a loaded NVIDIA driver the log
  is not read at all (`source=no-driver`): reading it is the most expensive part of the
  command, and nvidia-smi cannot list a GPU then anyway.
- fabricmanager: only when /dev/nvidia-nvswitch* exists: whether nv-fabricmanager runs,
  and its `--version` output.

Every nvidia-smi and journalctl call has a deadline (hostkit.facts.deadline).

Shell builtins do what they can: on a slow host every process costs a noticeable
fraction of a second, and a host without NVIDIA hardware should pay for none.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace

from pyinfra.api import FactBase

from hostkit.remote import host_file
from hostkit.facts.deadline import DEADLINE_FUNCTION, NVIDIA_SMI_S, TIMED_OUT, timed_out_lines
from hostkit.facts.kernel_log import XID_LINES, XidEvent, kernel_log_script, parse_kernel_log
from hostkit.facts.parts import parse_int, split_on_marker
# The collector runs on the host with the standard library alone, so the one reader of
# cgroup membership lives there.
from hostkit.monitoring.collector import in_cgroup, system_service_of

# Fixed order: the parser maps columns by position. Every name appears in the header of
# real `nvidia-smi --query-gpu` output from an H200 (tests check this against a fixture).
QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "driver_version",
    "persistence_mode",
    "memory.total",
    "memory.used",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "mig.mode.current",
)

# The order the fact asks for; `hostkit doctor` asks for its own and passes it to the parser.
APPS_FIELDS: tuple[str, ...] = ("pid", "used_memory", "gpu_uuid")

SUB_MARKER = "@@gpu:"
XID_LINE_LIMIT = 200
_DRIVER_VERSION = "/proc/driver/nvidia/version"
PCI_DEVICES = "/sys/bus/pci/devices"
NUMA_NODES = "/sys/devices/system/node"

_NVML_LIBRARY_RE = re.compile(r"NVML library version:\s*(?P<version>\d+(?:\.\d+)+)")
_VERSION_RE = re.compile(r"\d+(?:\.\d+)+")


@dataclass(frozen=True)
class GpuDevice:
    """One row of the query. None means `[N/A]`, missing, or not a value we understand."""

    index: int
    bus_id: str
    name: str
    uuid: str
    driver_version: str
    persistence_mode: bool | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    ecc_enabled: bool | None
    ecc_uncorrected_volatile: int | None
    retired_pages_pending: bool | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    mig_enabled: bool | None
    # Its PCI device's NUMA node (sysfs numa_node): -1 where the platform reports none (a VM,
    # a one-socket host), None where it was not read.
    numa_node: int | None = None


@dataclass(frozen=True)
class FabricManager:
    """Present only on hosts with /dev/nvidia-nvswitch* nodes."""

    running: bool
    version: str | None


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory, as `--query-compute-apps` lists it, one row per GPU."""

    pid: int
    gpu_uuid: str
    used_mib: int | None  # None: `[N/A]` (some drivers in containers)
    name: str = ""  # /proc/PID/comm; "" when /proc does not show the pid
    cgroups: tuple[str, ...] = ()  # the lines of /proc/PID/cgroup, "ID:CONTROLLERS:PATH"

    def in_cgroup(self, path: str) -> bool:
        """Whether the process is in the cgroup `path` or below it (hostkit's one reader)."""
        return in_cgroup(self.cgroups, path)

    @property
    def service(self) -> str | None:
        """The system service it runs in (`vllm@a.service`), None outside any."""
        return system_service_of(self.cgroups)


@dataclass(frozen=True)
class GpuFacts:
    driver_present: bool  # nvidia-smi is installed
    gpus: tuple[GpuDevice, ...] = ()
    nvidia_smi_error: str | None = None  # nvidia-smi ran but failed (no device, mismatch, ...)
    module_version: str | None = None  # from /proc/driver/nvidia/version
    nvml_version: str | None = None  # what NVML reports; on a mismatch, its own library version
    modules: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()  # character devices only
    persistenced_running: bool = False
    # "journalctl" | "dmesg" | "no-driver" (not read: no NVIDIA driver loaded) | None when unreadable
    kernel_log_source: str | None = None
    xids: tuple[XidEvent, ...] = ()
    xid_total: int = 0  # may exceed len(xids): only the first XID_LINE_LIMIT lines are kept
    fabricmanager: FabricManager | None = None
    processes: tuple[GpuProcess, ...] = ()
    processes_error: str | None = None  # the compute-process query failed: who holds memory is unknown
    timeouts: tuple[str, ...] = ()  # "WHAT timed out after N s", one per command that hit its deadline
    numa_cpus: dict[int, str] = field(default_factory=dict)  # NUMA node -> its CPUs, as sysfs cpulist writes them

    def holders(self, gpu: GpuDevice, unit_cgroup: str) -> tuple[tuple[GpuProcess, ...], tuple[GpuProcess, ...]]:
        """The processes holding memory on `gpu`: (the vLLM unit's, everyone else's), by each
        one's cgroup. A pid /proc does not show has no cgroup, so it is someone else's."""
        held = [p for p in self.processes if p.gpu_uuid == gpu.uuid]
        return tuple(p for p in held if p.in_cgroup(unit_cgroup)), tuple(p for p in held if not p.in_cgroup(unit_cgroup))

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def xid_log_readable(self) -> bool:
        """Whether the Xid lines are known; with no driver loaded they are taken as none, so
        the lines of a driver that was unloaded since boot go unseen."""
        return self.kernel_log_source is not None


class GpuFact(FactBase):
    """Parsed into `GpuFacts`. Always exits 0; every missing tool or file is itself a fact."""

    section = "gpu"

    def command(self) -> str:
        settings = {
            "hk_mark": SUB_MARKER,
            "hk_query_fields": ",".join(QUERY_FIELDS),
            "hk_apps_fields": ",".join(APPS_FIELDS),
            "hk_smi_s": str(NVIDIA_SMI_S),
            "hk_driver_version": _DRIVER_VERSION,
            "hk_pci": PCI_DEVICES,
            "hk_nodes": NUMA_NODES,
        }
        lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        return "\n".join(
            (*lines, DEADLINE_FUNCTION, kernel_log_script(XID_LINES, XID_LINE_LIMIT), host_file("gpu.sh"))
        )

    def process(self, output: list[str]) -> GpuFacts:
        return parse_gpu_output(output)


def _na(value: str) -> bool:
    return value in ("", "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]")


def _smi_int(value: str) -> int | None:
    """An nvidia-smi number; its words for no value (`[N/A]`) and a unit left in place
    ("143771 MiB") tolerated."""
    value = value.strip()
    return None if _na(value) else parse_int(value.split()[0])


def _flag(value: str, true: str, false: str) -> bool | None:
    value = value.strip()
    if value == true:
        return True
    if value == false:
        return False
    return None


def parse_query_row(line: str) -> GpuDevice | None:
    """A CSV row in QUERY_FIELDS order; missing trailing columns read as `[N/A]`."""
    columns = [column.strip() for column in line.split(",")]
    if not columns or not columns[0].isdigit():
        return None
    columns += ["[N/A]"] * (len(QUERY_FIELDS) - len(columns))
    value = dict(zip(QUERY_FIELDS, columns))
    return GpuDevice(
        index=int(value["index"]),
        bus_id="" if _na(value["pci.bus_id"]) else value["pci.bus_id"],
        name="" if _na(value["name"]) else value["name"],
        uuid="" if _na(value["uuid"]) else value["uuid"],
        driver_version="" if _na(value["driver_version"]) else value["driver_version"],
        persistence_mode=_flag(value["persistence_mode"], "Enabled", "Disabled"),
        memory_total_mib=_smi_int(value["memory.total"]),
        memory_used_mib=_smi_int(value["memory.used"]),
        ecc_enabled=_flag(value["ecc.mode.current"], "Enabled", "Disabled"),
        ecc_uncorrected_volatile=_smi_int(value["ecc.errors.uncorrected.volatile.total"]),
        retired_pages_pending=_flag(value["retired_pages.pending"], "Yes", "No"),
        remapped_rows_pending=_flag(value["remapped_rows.pending"], "Yes", "No"),
        remapped_rows_failure=_flag(value["remapped_rows.failure"], "Yes", "No"),
        mig_enabled=_flag(value["mig.mode.current"], "Enabled", "Disabled"),
    )


def _parse_query(lines: list[str], return_code: str) -> tuple[tuple[GpuDevice, ...], str | None]:
    """GPU rows, and nvidia-smi's error text when it failed (rows of healthy GPUs may remain)."""
    body = [line for line in lines if line.strip()]
    gpus = tuple(gpu for gpu in map(parse_query_row, body) if gpu is not None)
    if return_code == "0" and gpus:
        return gpus, None
    problems = [line.removeprefix(TIMED_OUT).strip() for line in body if parse_query_row(line) is None]
    return gpus, "\n".join(problems) or f"nvidia-smi exited {return_code} and listed no GPU"


def parse_compute_apps(
    lines: list[str], fields: tuple[str, ...] = APPS_FIELDS
) -> tuple[tuple[GpuProcess, ...], list[str]]:
    """`--query-compute-apps` rows (columns in `fields` order) and the lines that are not rows."""
    processes, problems = [], []
    for line in lines:
        if not line.strip():
            continue
        value = dict(zip(fields, (column.strip() for column in line.split(","))))
        pid = value.get("pid", "")
        if len(value) != len(fields) or not pid.isdigit():
            problems.append(line.removeprefix(TIMED_OUT).strip())
            continue
        processes.append(GpuProcess(pid=int(pid), gpu_uuid=value.get("gpu_uuid", ""),
                                    used_mib=_smi_int(value.get("used_memory", ""))))
    return tuple(processes), problems


def _parse_processes(parts: dict[str, list[str]]) -> tuple[tuple[GpuProcess, ...], str | None]:
    if "apps" not in parts:
        return (), None
    processes, problems = parse_compute_apps(parts["apps"])
    return_code = (parts.get("apps-rc") or ["missing"])[0]
    error = None
    if return_code != "0":
        error = "\n".join(problems) or f"nvidia-smi --query-compute-apps exited {return_code}"
    names: dict[int, str] = {}
    cgroups: dict[int, list[str]] = {}
    for line in parts.get("procs", []):
        pid, _, rest = line.partition(" ")
        kind, _, text = rest.partition(" ")
        if not pid.isdigit():
            continue
        if kind == "comm":
            names[int(pid)] = text
        elif kind == "cgroup" and text not in cgroups.setdefault(int(pid), []):
            cgroups[int(pid)].append(text)
    return tuple(
        GpuProcess(p.pid, p.gpu_uuid, p.used_mib, names.get(p.pid, ""), tuple(cgroups.get(p.pid, ())))
        for p in processes
    ), error


def _parse_fabricmanager(lines: list[str]) -> FabricManager:
    running = any(
        line.startswith("process: ") and line.split()[1].rsplit("/", 1)[-1] == "nv-fabricmanager"
        for line in lines
        if len(line.split()) > 1
    )
    version = None
    for line in lines:
        if line.startswith("version: "):
            match = _VERSION_RE.search(line)
            if match:
                version = match.group(0)
                break
    return FabricManager(running=running, version=version)


def parse_numa(lines: list[str]) -> tuple[dict[int, int], dict[int, str]]:
    """({GPU index: its numa_node}, {NUMA node: its cpulist}) from the numa part; a GPU whose
    node was not readable is left out."""
    gpu_nodes: dict[int, int] = {}
    node_cpus: dict[int, str] = {}
    for line in lines:
        words = line.split()
        if len(words) == 3 and words[0] == "gpu" and words[1].isdigit():
            node = parse_int(words[2], signed=True)
            if node is not None:
                gpu_nodes[int(words[1])] = node
        elif line.startswith(f"{NUMA_NODES}/node"):
            path, _, cpus = line.partition(":")
            node = path[len(f"{NUMA_NODES}/node"):].removesuffix("/cpulist")
            if node.isdigit():
                node_cpus[int(node)] = cpus.strip()
    return gpu_nodes, node_cpus


def parse_gpu_output(output: list[str]) -> GpuFacts:
    parts = split_on_marker(output, SUB_MARKER)
    driver_present = "query" in parts and "no-nvidia-smi" not in parts

    gpus: tuple[GpuDevice, ...] = ()
    numa_cpus: dict[int, str] = {}
    smi_error = None
    nvml_version = None
    if driver_present:
        return_code = (parts.get("query-rc") or ["missing"])[0]
        gpus, smi_error = _parse_query(parts["query"], return_code)
        gpu_nodes, numa_cpus = parse_numa(parts.get("numa", []))
        gpus = tuple(replace(gpu, numa_node=gpu_nodes.get(gpu.index)) for gpu in gpus)
        if gpus:
            nvml_version = gpus[0].driver_version or None
        elif smi_error:
            match = _NVML_LIBRARY_RE.search(smi_error)
            nvml_version = match["version"] if match else None

    processes, processes_error = _parse_processes(parts) if driver_present else ((), None)

    module_version = None
    for line in parts.get("version", []):
        match = _VERSION_RE.search(line) if line.startswith("NVRM version:") else None
        if match:
            module_version = match.group(0)
            break

    node_lines = [line.split() for line in parts.get("nodes", [])]
    device_nodes = tuple(
        words[-1] for words in node_lines if len(words) > 1 and words[0].startswith("c")
    )

    persistenced_running = any(
        line.split()[0].rsplit("/", 1)[-1] == "nvidia-persistenced"
        for line in parts.get("persistenced", [])
        if line.split()
    )

    kernel_log = parse_kernel_log(parts.get("xid", []))
    xids = kernel_log.xids

    return GpuFacts(
        driver_present=driver_present,
        gpus=gpus,
        nvidia_smi_error=smi_error,
        module_version=module_version,
        nvml_version=nvml_version,
        modules=tuple(line.split()[0] for line in parts.get("modules", []) if line.split()),
        device_nodes=device_nodes,
        persistenced_running=persistenced_running,
        kernel_log_source=kernel_log.source,
        xids=xids,
        xid_total=max(kernel_log.total, len(xids)),
        fabricmanager=_parse_fabricmanager(parts["fabricmanager"]) if "fabricmanager" in parts else None,
        processes=processes,
        processes_error=processes_error,
        timeouts=timed_out_lines(output),
        numa_cpus=numa_cpus,
    )
