"""What a healthy GPU host looks like, and the verdict on one host's `GpuFacts`.

Pure: no I/O. The deploy operation and scripts/gpu_verify.py share it; the script runs
where pydantic may be missing, so nothing here imports the profile (the planner makes the
host's policy from its gpu_* keys: hostkit.plan.planner.gpu_plan).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from hostkit.facts.gpu import GpuDevice, GpuFacts

REQUIRED_MODULES = ("nvidia", "nvidia_uvm")


@dataclass(frozen=True)
class XidRule:
    fatal: bool  # fails the host; else a warning
    nvidia_action: str  # the catalog's "Resolution Bucket (Immediate Action)"
    meaning: str


# NVIDIA's Xid catalog for Ampere and newer GPUs (docs.nvidia.com/deploy/xid-errors/
# analyzing-xid-catalog.html). Fatal: the catalog's immediate action resets the GPU or
# reboots the machine (RESET_GPU, RESTART_BM, or a workflow whose text says "a GPU reset or
# node reboot is needed"): vLLM cannot be trusted on that GPU until then. Warning: the
# catalog blames the application or asks for nothing (RESTART_APP, IGNORE), which is what a
# crashed or killed vLLM leaves behind. A code in neither list fails the host unless it is
# in gpu_tolerated_xids, as does a fatal code: list one there after resetting the GPU
# without a reboot, since the kernel log keeps the line until the next boot.
XID_RULES: dict[int, XidRule] = {
    13: XidRule(False, "RESTART_APP", "graphics engine exception: an application fault, e.g. out of bounds"),
    31: XidRule(False, "RESTART_APP", "GPU memory page fault: an illegal address from an application"),
    43: XidRule(False, "IGNORE", "an application hit a software fault and stopped; the GPU stays healthy"),
    45: XidRule(False, "WORKFLOW_XID_45", "preemptive cleanup: an application was aborted (Ctrl-C, kill, GPU reset)"),
    63: XidRule(False, "IGNORE", "row remapping event (a pending remap is checked on its own)"),
    92: XidRule(False, "IGNORE", "high single-bit ECC error rate (corrected)"),
    94: XidRule(False, "RESTART_APP", "contained memory error: one application stopped; reset the GPU when convenient"),
    154: XidRule(False, "XID_154", "GPU recovery action changed: names the action another Xid needs"),
    46: XidRule(True, "RESET_GPU", "GPU stopped processing"),
    48: XidRule(True, "WORKFLOW_XID_48", "double-bit ECC error: a GPU reset or node reboot is needed"),
    62: XidRule(True, "RESET_GPU", "internal micro-controller halt"),
    64: XidRule(True, "RESET_GPU", "GPU memory remapping failure"),
    74: XidRule(True, "WORKFLOW_NVLINK_ERR", "NVLink error: a GPU reset or node reboot is needed"),
    79: XidRule(True, "RESTART_BM", "GPU has fallen off the bus"),
    95: XidRule(True, "RESET_GPU", "uncontained memory error"),
    109: XidRule(True, "RESET_GPU", "context switch timeout"),
    110: XidRule(True, "RESET_GPU", "security fault"),
    119: XidRule(True, "RESET_GPU", "GSP RPC timeout"),
    120: XidRule(True, "RESET_GPU", "GSP error"),
    136: XidRule(True, "RESET_GPU", "NVLink link training failed"),
    140: XidRule(True, "RESET_GPU", "ECC unrecovered error"),
    143: XidRule(True, "RESET_GPU", "GPU initialization error"),
    156: XidRule(True, "RESET_GPU", "resource retirement event"),
    158: XidRule(True, "RESET_GPU", "GPU fatal timeout"),
}


@dataclass(frozen=True)
class GpuPolicy:
    """The `gpu_*` keys of the host profile.

    nvidia-smi reports pending page retirement and pending row remapping per GPU as
    Yes/No, so their two thresholds count GPUs with something pending.
    """

    required: bool = True
    count: int | None = None
    min_driver: str | None = None
    require_persistence: bool = True
    max_ecc_uncorrected: int = 0
    max_retired_pages_pending: int = 0
    max_remapped_rows_pending: int = 0
    tolerated_xids: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True)
class CheckFailure:
    check: str
    expected: str
    actual: str
    fix: str

    def __str__(self) -> str:
        return f"{self.check}: expected {self.expected}, actual {self.actual} (fix: {self.fix})"


@dataclass(frozen=True)
class GpuVerdict:
    ok: bool
    summary: str  # one line, for a passing host; names the failed checks otherwise
    failures: tuple[CheckFailure, ...] = ()
    warnings: tuple[str, ...] = ()  # not failures, but not clean either

    def report(self) -> str:
        """The summary, then one line per failure and warning."""
        lines = [self.summary]
        lines += [f"  FAIL {failure}" for failure in self.failures]
        lines += [f"  WARN {warning}" for warning in self.warnings]
        return "\n".join(lines)


def version_tuple(version: str) -> tuple[int, ...]:
    """'580.159.04' -> (580, 159, 4); the leading numeric components only."""
    numbers = []
    for part in version.strip().split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group(0)))
    return tuple(numbers)


def versions_match(module: str, nvml: str) -> bool:
    """Equal on the components both give: NVML's own error names only 'major.minor'."""
    left, right = version_tuple(module), version_tuple(nvml)
    shared = min(len(left), len(right))
    return shared > 0 and left[:shared] == right[:shared]


def _gpu_label(gpu: GpuDevice) -> str:
    return f"GPU {gpu.index} ({gpu.bus_id or gpu.uuid or gpu.name})"


def _describe(gpus: tuple[GpuDevice, ...]) -> str:
    kinds = Counter((gpu.name or "unknown GPU", gpu.memory_total_mib) for gpu in gpus)
    return " + ".join(
        f"{count}x {name}" + (f" {memory} MiB" if memory is not None else "")
        for (name, memory), count in kinds.items()
    )


def _driver_checks(policy: GpuPolicy, facts: GpuFacts) -> list[CheckFailure]:
    failures = []
    if facts.nvidia_smi_error:
        failures.append(
            CheckFailure(
                "nvidia-smi",
                "exit 0 with one row per GPU",
                facts.nvidia_smi_error.replace("\n", " / "),
                "read the error: reboot after a driver upgrade, reseat or replace a lost GPU",
            )
        )
    if facts.module_version is None:
        failures.append(
            CheckFailure(
                "kernel module loaded",
                "/proc/driver/nvidia/version present",
                "missing",
                "load the driver (modprobe nvidia) or reinstall it for the running kernel",
            )
        )
    elif facts.nvml_version and not versions_match(facts.module_version, facts.nvml_version):
        failures.append(
            CheckFailure(
                "driver version match",
                f"kernel module == NVML library ({facts.nvml_version})",
                f"kernel module {facts.module_version}",
                "reboot to load the upgraded kernel module (Driver/library version mismatch)",
            )
        )
    driver = facts.nvml_version or facts.module_version
    if policy.min_driver and driver and version_tuple(driver) < version_tuple(policy.min_driver):
        failures.append(
            CheckFailure(
                "driver version",
                f">= {policy.min_driver}",
                driver,
                f"install NVIDIA driver {policy.min_driver} or newer and reboot",
            )
        )
    missing_modules = [name for name in REQUIRED_MODULES if name not in facts.modules]
    if missing_modules:
        failures.append(
            CheckFailure(
                "kernel modules",
                " and ".join(REQUIRED_MODULES) + " in /proc/modules",
                "missing " + ", ".join(missing_modules),
                "modprobe " + " ".join(missing_modules) + " (nvidia-modprobe -u -c=0 for nvidia_uvm)",
            )
        )
    return failures


def _device_node_checks(facts: GpuFacts) -> list[CheckFailure]:
    nodes = set(facts.device_nodes)
    # /dev/nvidiaN is numbered by minor number, which the query does not give: count them.
    gpu_nodes = [node for node in nodes if re.fullmatch(r"/dev/nvidia\d+", node)]
    missing = [node for node in ("/dev/nvidiactl", "/dev/nvidia-uvm") if node not in nodes]
    if len(gpu_nodes) < facts.gpu_count:
        missing.append(f"{facts.gpu_count - len(gpu_nodes)} of /dev/nvidia0..N")
    if not missing:
        return []
    return [
        CheckFailure(
            "device nodes",
            f"/dev/nvidiactl, /dev/nvidia-uvm and {facts.gpu_count} /dev/nvidiaN",
            "missing " + ", ".join(sorted(missing)),
            "nvidia-modprobe -c=0 -u (a sandboxed service cannot create them itself)",
        )
    ]


def _per_gpu_checks(policy: GpuPolicy, facts: GpuFacts) -> list[CheckFailure]:
    failures = []
    gpus = facts.gpus
    if policy.require_persistence:
        off = [_gpu_label(gpu) for gpu in gpus if gpu.persistence_mode is not True]
        if off:
            daemon = "running" if facts.persistenced_running else "not running"
            failures.append(
                CheckFailure(
                    "persistence mode",
                    "Enabled on every GPU",
                    "not enabled on " + ", ".join(off) + f"; nvidia-persistenced {daemon}",
                    "run nvidia-persistenced (nvidia-smi -pm 1 is deprecated)",
                )
            )
    ecc = [
        f"{_gpu_label(gpu)}: {gpu.ecc_uncorrected_volatile}"
        for gpu in gpus
        if (gpu.ecc_uncorrected_volatile or 0) > policy.max_ecc_uncorrected
    ]
    if ecc:
        failures.append(
            CheckFailure(
                "uncorrected ECC errors (volatile)",
                f"<= {policy.max_ecc_uncorrected} per GPU",
                ", ".join(ecc),
                "drain the host; reset the GPU or reboot, and replace it if errors recur",
            )
        )
    for check, attribute, limit, fix in (
        (
            "retired pages pending",
            "retired_pages_pending",
            policy.max_retired_pages_pending,
            "reset the GPU or reboot so the pending retirement takes effect",
        ),
        (
            "remapped rows pending",
            "remapped_rows_pending",
            policy.max_remapped_rows_pending,
            "reset the GPU or reboot so the pending row remapping takes effect",
        ),
    ):
        pending = [_gpu_label(gpu) for gpu in gpus if getattr(gpu, attribute) is True]
        if len(pending) > limit:
            failures.append(
                CheckFailure(check, f"<= {limit} GPUs", f"{len(pending)}: " + ", ".join(pending), fix)
            )
    remap_failed = [_gpu_label(gpu) for gpu in gpus if gpu.remapped_rows_failure is True]
    if remap_failed:
        failures.append(
            CheckFailure(
                "row remapping failure",
                "No on every GPU",
                "Yes on " + ", ".join(remap_failed),
                "the GPU has run out of spare rows: replace it",
            )
        )
    return failures


def _xid_counts(policy: GpuPolicy, facts: GpuFacts) -> tuple[Counter, Counter]:
    """(codes that fail the host, codes that warn), each with its count; tolerated ones dropped."""
    counts = Counter(event.code for event in facts.xids if event.code not in policy.tolerated_xids)
    failing = Counter({code: n for code, n in counts.items() if code not in XID_RULES or XID_RULES[code].fatal})
    return failing, counts - failing


def _xid_label(code: int, count: int) -> str:
    rule = XID_RULES.get(code)
    about = f" ({rule.meaning}; NVIDIA: {rule.nvidia_action})" if rule else " (not in hostkit's table)"
    return f"Xid {code} x{count}{about}"


def _xid_checks(policy: GpuPolicy, facts: GpuFacts) -> list[CheckFailure]:
    failing, _ = _xid_counts(policy, facts)
    if not failing:
        return []
    tolerated = sorted(policy.tolerated_xids)
    return [
        CheckFailure(
            "Xid errors since boot",
            "no fatal or unknown Xid" + (f" other than {tolerated}" if tolerated else ""),
            ", ".join(_xid_label(code, count) for code, count in sorted(failing.items())),
            "drain the host; reset the GPU or reboot as NVIDIA's action says (after a reset without a reboot,"
            " add the code to gpu_tolerated_xids); replace the GPU if it recurs",
        )
    ]


def _fabricmanager_checks(facts: GpuFacts) -> list[CheckFailure]:
    fabric = facts.fabricmanager
    if fabric is None:
        return []
    driver = facts.module_version or facts.nvml_version or "the driver's version"
    actual = []
    if not fabric.running:
        actual.append("not running")
    if fabric.version != driver:
        actual.append(f"version {fabric.version or 'unknown'}")
    if not actual:
        return []
    return [
        CheckFailure(
            "nvidia-fabricmanager (NVSwitch)",
            f"running at version {driver}",
            ", ".join(actual),
            f"install nvidia-fabricmanager {driver} and start it",
        )
    ]


def _warnings(policy: GpuPolicy, facts: GpuFacts) -> list[str]:
    warnings = list(facts.timeouts)
    _, application = _xid_counts(policy, facts)
    if application:
        warnings.append(
            "Xid since boot that NVIDIA puts down to an application or needs no action: "
            + ", ".join(_xid_label(code, count) for code, count in sorted(application.items()))
        )
    if not facts.xid_log_readable:
        warnings.append("kernel log unreadable (journalctl -k -b and dmesg): Xid errors unknown")
    elif facts.xid_total > len(facts.xids):
        warnings.append(f"{facts.xid_total} Xid lines since boot, only {len(facts.xids)} parsed")
    if any(gpu.persistence_mode for gpu in facts.gpus) and not facts.persistenced_running:
        warnings.append("persistence mode is on but nvidia-persistenced is not running")
    if any(gpu.mig_enabled for gpu in facts.gpus):
        warnings.append("MIG mode is enabled: vLLM sees MIG instances, not whole GPUs")
    return warnings


def _passing_summary(facts: GpuFacts) -> str:
    gpus = facts.gpus
    persistence = "on" if all(gpu.persistence_mode for gpu in gpus) else "off"
    if all(gpu.ecc_enabled is None for gpu in gpus):
        ecc = "ECC n/a"
    elif any(gpu.ecc_enabled is False for gpu in gpus):
        ecc = "ECC off on some GPUs"
    elif any(gpu.ecc_uncorrected_volatile for gpu in gpus):
        ecc = "ECC uncorrected errors within limit"
    else:
        ecc = "ECC clean"
    if not facts.xid_log_readable:
        xid = "Xid unknown"
    elif facts.xids:
        codes = sorted({event.code for event in facts.xids})
        xid = "only tolerated or warning Xid " + ", ".join(map(str, codes))
    else:
        xid = "no Xid since boot"
    driver = facts.nvml_version or facts.module_version
    return f"{_describe(gpus)}, driver {driver}, persistence {persistence}, {ecc}, {xid}"


def evaluate(policy: GpuPolicy, facts: GpuFacts) -> GpuVerdict:
    """Every failed check at once, with what was expected and what was found."""
    if not facts.gpus and not policy.required:
        reason = (facts.nvidia_smi_error or "no GPU listed") if facts.driver_present else "no nvidia-smi"
        return GpuVerdict(ok=True, summary=f"no GPU expected ({reason.splitlines()[0]})")

    failures: list[CheckFailure] = []
    if not facts.driver_present:
        failures.append(
            CheckFailure("NVIDIA driver", "nvidia-smi installed", "no nvidia-smi", "install the NVIDIA driver")
        )
    else:
        failures += _driver_checks(policy, facts)
    expected_count = policy.count if policy.count is not None else "at least 1"
    if facts.gpu_count == 0 or (policy.count is not None and facts.gpu_count != policy.count):
        failures.append(
            CheckFailure(
                "GPU count",
                str(expected_count),
                str(facts.gpu_count) + (f" ({_describe(facts.gpus)})" if facts.gpus else ""),
                "check `nvidia-smi -L` and the kernel log for GPUs that fell off the bus,"
                " or correct gpu_count",
            )
        )
    if facts.driver_present:
        failures += _device_node_checks(facts)
    failures += _per_gpu_checks(policy, facts)
    failures += _xid_checks(policy, facts)
    failures += _fabricmanager_checks(facts)

    warnings = tuple(_warnings(policy, facts))
    if failures:
        checks = ", ".join(failure.check for failure in failures)
        return GpuVerdict(
            ok=False,
            summary=f"GPU verification failed: {checks}",
            failures=tuple(failures),
            warnings=warnings,
        )
    return GpuVerdict(ok=True, summary=_passing_summary(facts), warnings=warnings)
