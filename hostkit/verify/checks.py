"""Pure checks: a host's snapshot and probes against its plan. No I/O.

Every check yields a CheckResult, passing or not, with what the plan expects, what the
host shows and how to fix a difference. The expectations come from the plan that
`hostkit.plan.planner.plan_host` makes from the host's profile and snapshot, exactly as the
deploy makes it, and from the renderers the deploy uses (sysctl file, THP unit, vLLM unit).
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, replace
from collections.abc import Mapping, Sequence
from typing import Any

from hostkit.facts.kernel import THP_DIR, THP_UNIT_PATH, KernelState, sysctl_key
from hostkit.facts.storage import SWAP_FILE_SELINUX_TYPE, StorageInfo
from hostkit.facts.vllm_service import env_file_of, unit_path_of
from hostkit.plan.snapshot_facts import driver_version
from hostkit.plan.gpu_policy import evaluate
from hostkit.monitoring import STALE_INTERVALS, TIMER, stale_after_s
from hostkit.desired.digest import text_sha256
from hostkit.desired.kernel import (
    render_sysctl_file,
    render_thp_unit,
    sysctl_conflicts,
    wanted_sysctl,
    wanted_thp,
)
from hostkit.desired.monitoring import monitored_servers, wanted_files
from hostkit.desired.nvme_boot import stale_files
from hostkit.desired.swap import swap_fstab_line, swap_state
from hostkit.desired.vllm_readiness import memory_limit_problem
from hostkit.desired.watchdog import watchdog_plan
from hostkit.paths import (
    NVME_LABEL,
    NVME_SETTINGS_FILE,
    NVME_UNIT,
    SYSCTL_FILE,
    THP_UNIT,
    WATCHDOG_SCRIPT_PATH,
    WATCHDOG_UNIT,
    WATCHDOG_UNIT_PATH,
    vllm_unit_of,
    watchdog_instance_unit,
)
from hostkit.plan.plans import (
    GpuPlan,
    HostPlan,
    KernelPlan,
    MonitoringPlan,
    NvmePlan,
    SwapPlan,
    VllmPlan,
    WatchdogSettings,
    left_to_host,
    nvme_lifecycle,
)
from hostkit.sizes import MIB, format_size
from hostkit.facts.kernel_log import KernelLog
from hostkit.verify.probes import Probes, VllmProcess
from hostkit.vllm.runtime import InstallTarget, driver_floor, driver_problem, release_matches
from hostkit.desired.vllm_unit import ENV_FILE_STAT, cuda_visible_devices, memory_directives, render_env, render_unit

# /proc/swaps leaves out the page mkswap writes its header to (4 KiB, 64 KiB on some arm64).
SWAP_SIZE_TOLERANCE = 1 * MIB
AREAS = ("swap", "kernel", "gpu", "vllm", "oom", "monitoring")


PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "not applicable"


@dataclass(frozen=True)
class CheckResult:
    area: str  # one of AREAS
    name: str
    ok: bool  # False: a failure. A check that does not apply is no failure: ok, with the reason below
    expected: str
    actual: str
    fix: str = ""
    # Why the check does not apply to this host (a container's host owns the setting); "": it applies.
    not_applicable: str = ""

    @property
    def status(self) -> str:
        return FAIL if not self.ok else NOT_APPLICABLE if self.not_applicable else PASS

    def message(self) -> str:
        if self.not_applicable:
            return f"{self.name}: not applicable: {self.not_applicable}"
        text = f"{self.name}: expected {self.expected}; actual {self.actual}"
        return text + (f"; fix: {self.fix}" if self.fix and not self.ok else "")


def _check(area: str, name: str, ok: bool, expected: str, actual: str, fix: str) -> CheckResult:
    return CheckResult(area, name, bool(ok), expected, actual, fix)


def not_applicable(area: str, name: str, expected: str, reason: str) -> CheckResult:
    return CheckResult(area, name, True, expected, reason, not_applicable=reason)


def redeploy(host: str) -> str:
    return f"re-run the deploy: pyinfra INVENTORY hostkit.deploy.vllm_host --limit {host}"


# -- swap ----------------------------------------------------------------------------------


def swap_checks(plan: SwapPlan, storage: StorageInfo, host: str, swap_dir: str = "auto") -> list[CheckResult]:
    """The swap file's state (swap_state, which the swap operation acts on) as named checks,
    plus the active size and the NVMe.

    `swap_dir` is the profile's: a directory named there need not be on NVMe."""
    state = swap_state(plan, storage)
    strays = _check("swap", "no stray hostkit swap", not state.strays,
                    "no hostkit swap file other than the planned one", ", ".join(state.strays) or "none",
                    redeploy(host) + " (it removes them)")
    if not plan.enabled:
        return [strays]
    if plan.path is None:
        return [_check("swap", "swap file planned", False, "a swap file on NVMe",
                       f"the planner found no place for it ({plan.reason})",
                       "mount an NVMe filesystem or set swap_dir (or nvme_device), then re-run the deploy")]

    path = plan.path
    results = []
    area = storage.swap_area(path)
    active = ", ".join(f"{s.path} ({format_size(s.size_bytes)}, priority {s.priority})" for s in storage.swaps)
    results.append(_check("swap", "swap active", area is not None and state.active_priority == plan.priority,
                          f"{path} in /proc/swaps at priority {plan.priority}", active or "no swap at all",
                          f"swapon -p {plan.priority} {path}, or {redeploy(host)}"))
    if area is not None:
        short = plan.size_bytes - area.size_bytes
        results.append(_check(
            "swap", "swap size", 0 <= short <= SWAP_SIZE_TOLERANCE,
            f"{format_size(plan.size_bytes)} active ({plan.size_bytes} bytes less mkswap's header page)",
            f"{format_size(area.size_bytes)} ({area.size_bytes} bytes)", redeploy(host) + " (it resizes the file)"))

    directory = posixpath.dirname(path)
    filesystem = storage.filesystem_for(directory)
    on_nvme = filesystem is not None and filesystem.on_nvme
    where = (f"{filesystem.mountpoint} ({filesystem.source}, {filesystem.fstype})" if filesystem
             else "no mounted filesystem found")
    chosen = swap_dir != "auto"
    results.append(_check("swap", "swap on NVMe", on_nvme or chosen,
                          f"{directory} on an NVMe-backed filesystem" + (" (or swap_dir as set)" if chosen else ""),
                          where + ("" if on_nvme else ", not NVMe"),
                          "set swap_dir or nvme_device to an NVMe location, then re-run the deploy"))

    file = state.file
    if file is None:
        actual = "file missing"
    else:
        actual = f"{file.kind}, {file.size_bytes} bytes, mode {file.mode:o}, owner {file.uid}:{file.gid}"
    results.append(_check("swap", "swap file", file is not None and file.is_regular and file.mode == 0o600
                          and (file.uid, file.gid) == (0, 0) and file.size_bytes == plan.size_bytes,
                          f"regular file of {plan.size_bytes} bytes, mode 600, owner root:root", actual,
                          f"chown root:root {path} && chmod 600 {path}; a wrong size: {redeploy(host)}"))
    if file is not None and file.selinux_type is not None:  # SELinux is on
        results.append(_check(
            "swap", "swap file SELinux label", file.selinux_type == SWAP_FILE_SELINUX_TYPE,
            f"type {SWAP_FILE_SELINUX_TYPE} (swapon at boot is denied any other, and nofail hides that)",
            f"type {file.selinux_type}",
            f"semanage fcontext -a -t {SWAP_FILE_SELINUX_TYPE} '{path}' && restorecon {path}, or {redeploy(host)}"))

    entries = storage.fstab_swap_entries(path)
    listed = "; ".join(f"line {e.line_no}: {','.join(e.options) or 'defaults'}" for e in entries)
    if plan.boot == "unit":
        results.append(_check("swap", "swap in fstab", not entries,
                              f"no /etc/fstab line (at boot {NVME_UNIT} makes and swaps on the file)",
                              listed or "no swap entry for it", redeploy(host)))
    else:
        results.append(_check("swap", "swap in fstab", state.fstab_ok,
                              f"one /etc/fstab line `{swap_fstab_line(plan)}`", listed or "no swap entry for it",
                              redeploy(host)))
    results.append(strays)
    return results


def nvme_checks(nvme: NvmePlan | None, swap: SwapPlan, storage: StorageInfo, host: str) -> list[CheckResult]:
    """The disk mounted as planned, the boot unit as the deploy renders it, and no fstab line
    waiting for the disk at boot."""
    if nvme is None:
        leftover = bool(storage.nvme_unit_sha256) or storage.nvme_unit_enabled
        return [_check("swap", "NVMe boot unit", not leftover, f"no {NVME_UNIT} (no nvme_device)",
                       "installed" if leftover else "none", redeploy(host) + " (it removes it)")] if leftover else []
    signatures = storage.devices.get(nvme.device)
    mounted = storage.filesystem_at(nvme.mount)
    real = signatures.real_path if signatures else nvme.device
    label = signatures.label if signatures else None
    results = [_check("swap", "NVMe mounted", mounted is not None and mounted.source == real and label == NVME_LABEL,
                      f"{nvme.by_id} ({real}) mounted at {nvme.mount}, label {NVME_LABEL}",
                      (f"{mounted.source} at {nvme.mount}" if mounted else f"nothing mounted at {nvme.mount}")
                      + f", label {label or 'none'}", redeploy(host))]
    stale = sorted(stale_files(nvme, swap, storage))
    actual = ("as rendered" if not stale else "missing or differing: " + ", ".join(stale)) + (
        ", enabled" if storage.nvme_unit_enabled else ", not enabled")
    results.append(_check("swap", "NVMe boot unit", not stale and storage.nvme_unit_enabled,
                          f"{NVME_UNIT} and {NVME_SETTINGS_FILE} as rendered from the plan, enabled: "
                          + nvme_lifecycle(nvme, swap), actual, redeploy(host)))
    waits = storage.fstab_mount_entries(nvme.mount)
    results.append(_check("swap", "no boot wait for the NVMe", not waits,
                          f"no /etc/fstab line for {nvme.mount} (a wiped disk would hold the boot for its device timeout)",
                          "; ".join(f"line {e.line_no}: {e.spec}" for e in waits) or "none", redeploy(host)))
    return results


def host_setting_checks(container: str) -> list[CheckResult]:
    """A container's NVMe, swap, sysctl and THP (plans.HOST_SETTINGS): its host's, not checked."""
    reason = left_to_host(container)
    return [not_applicable(area, name, expected, reason) for area, name, expected in (
        ("swap", "NVMe", "a blank nvme_device formatted and mounted at nvme_mount"),
        ("swap", "swap", "the swap file as planned: active, brought back at boot, on NVMe"),
        ("kernel", "sysctl", f"the profile's sysctl values live and in {SYSCTL_FILE}"),
        ("kernel", "THP", f"thp_enabled and thp_defrag live and kept by {THP_UNIT}"),
    )]


# -- kernel --------------------------------------------------------------------------------


def kernel_checks(plan: KernelPlan, kernel: KernelState, kernel_cmdline: str, host: str) -> list[CheckResult]:
    """The effective values (what /proc/sys and sysfs say now), then how they persist, judged
    against the wanted state the kernel operations apply (hostkit.desired.kernel's wanted_*,
    render_* and sysctl_conflicts)."""
    results = []
    for path, value in wanted_sysctl(plan).items():
        key = sysctl_key(path)
        live = kernel.live.get(path, "")
        if path not in kernel.live:
            actual = f"unknown: {SYSCTL_FILE} does not set it, so its value was not read"
        elif live is None:
            actual = f"/proc/sys/{path} does not exist"
        else:
            actual = live
        results.append(_check("kernel", f"sysctl {key}", live == value, value, actual,
                              f"sysctl -w {shlex.quote(f'{key}={value}')}, and {redeploy(host)} to persist it"))

    expected_file = render_sysctl_file(plan)
    file_state = ("as rendered" if kernel.hostkit_sysctl_text == expected_file
                  else "missing" if kernel.hostkit_sysctl_text is None else "edited or out of date")
    results.append(_check("kernel", "sysctl file", file_state == "as rendered",
                          f"{SYSCTL_FILE} as hostkit renders it from the plan", file_state, redeploy(host)))
    conflicts = sysctl_conflicts(kernel, plan)
    results.append(_check("kernel", "sysctl conflicts", not conflicts or plan.sysctl_conflicts == "warn",
                          f"no later sysctl.d file overriding hostkit's values at boot "
                          f"(sysctl_conflicts: {plan.sysctl_conflicts})",
                          "; ".join(str(c) for c in conflicts) or "none",
                          "remove those settings, or set sysctl_conflicts: warn"))

    wanted = wanted_thp(plan)
    if not wanted:
        return results
    if not kernel.thp_supported:
        results.append(_check("kernel", "THP", False, f"{THP_DIR} with " + ", ".join(
            f"{name} {value}" for name, value in wanted.items()), "this kernel has no transparent hugepage support",
            "leave thp_enabled/thp_defrag unset for this host, or boot a kernel with THP"))
        return results
    for name, value in wanted.items():
        setting = kernel.thp_enabled if name == "enabled" else kernel.thp_defrag
        actual = setting.selected if setting else "unreadable"
        results.append(_check("kernel", f"THP {name}", actual == value, value, actual,
                              f"echo {value} > {THP_DIR}/{name}, and {redeploy(host)} to persist it"))
    unit_state = ("as rendered" if kernel.thp_unit_text == render_thp_unit(plan)
                  else "missing" if kernel.thp_unit_text is None else "edited or out of date")
    results.append(_check("kernel", "THP unit", unit_state == "as rendered" and kernel.thp_unit_enabled,
                          f"{THP_UNIT_PATH} as rendered from the plan, enabled",
                          f"{unit_state}, {'enabled' if kernel.thp_unit_enabled else 'not enabled'}",
                          f"systemctl enable {THP_UNIT}, or {redeploy(host)}"))
    return results


# -- GPU -----------------------------------------------------------------------------------


def gpu_checks(plan: GpuPlan, gpu_facts: Any) -> list[CheckResult]:
    """hostkit.plan.gpu_policy's verdict (the deploy's own GPU gate), one result per failed check."""
    verdict = evaluate(plan.policy, gpu_facts)
    # A GPU command past its deadline fails the host whatever the policy, as the deploy refuses
    # it (hostkit.operations.gpu.snapshot_finished): a wedged nvidia-smi is not "no GPU".
    timeouts = list(getattr(gpu_facts, "timeouts", ()))
    deadline = [_check("gpu", "GPU read in time", False, "nvidia-smi and the kernel log answer within their deadlines",
                       "; ".join(timeouts), "see what wedges the GPU or its driver (the kernel log's Xid lines, "
                       "nvidia-bug-report.sh), or reboot the host")] if timeouts else []
    if verdict.ok and not deadline:
        summary = verdict.summary + "".join(f"; warning: {w}" for w in verdict.warnings)
        return [_check("gpu", "GPU health", True, "the gpu_* policy of the profile", summary, "")]
    return deadline + [_check("gpu", f"GPU {f.check}", False, f.expected, f.actual, f.fix) for f in verdict.failures]


# -- vLLM ----------------------------------------------------------------------------------


def server_argv(argv: tuple[str, ...], planned: list[str]) -> list[str]:
    """The command line the unit started: /proc shows a script's interpreter (and its one
    optional shebang argument) before it, e.g. `/opt/vllm/bin/python3 /opt/vllm/bin/vllm serve`."""
    for start in range(min(3, len(argv))):
        if planned and argv[start] == planned[0]:
            return list(argv[start:])
    return list(argv)


def _argv_difference(expected: list[str], actual: tuple[str, ...], secret: str | None) -> str:
    def shown(words) -> str:
        return " ".join("********" if secret and secret in word else word for word in words)

    missing = [w for w in expected if w not in actual]
    extra = [w for w in actual if w not in expected]
    detail = []
    if missing:
        detail.append(f"missing {shown(missing)}")
    if extra:
        detail.append(f"unexpected {shown(extra)}")
    if not detail:
        detail.append("same words in another order")
    return f"{shown(actual)} ({'; '.join(detail)})"


def vllm_checks(plan: VllmPlan, service: Any, probes: Probes, host: str) -> list[CheckResult]:
    """`service` is the snapshot's vllm section (hostkit.facts.vllm_service.VllmServiceState)."""
    if not plan.enabled:
        return []
    unit = probes.unit
    name = vllm_unit_of(plan.instance)
    logs = f"journalctl -u {name} -b"
    results = []

    if unit.get("LoadState") != "loaded":
        return [_check("vllm", "unit installed", False, f"{name} loaded by systemd",
                       f"LoadState {unit.get('LoadState') or 'unknown'}", redeploy(host))]
    enabled = unit.get("UnitFileState") or "unknown"
    results.append(_check("vllm", "unit enabled", enabled == "enabled", "enabled", enabled,
                          f"systemctl enable {name}"))
    state = f"{unit.get('ActiveState', 'unknown')}/{unit.get('SubState', 'unknown')}"
    if unit.get("NRestarts", "0") not in ("", "0"):
        state += f", {unit['NRestarts']} restarts"
    results.append(_check("vllm", "unit active", unit.get("ActiveState") == "active", "active/running", state,
                          f"systemctl start {name}; read {logs}"))

    if service.unit_sha256 is None:
        file_state = "missing"
    elif service.unit_sha256 != text_sha256(render_unit(plan)):
        file_state = "edited or out of date"
    else:
        file_state = "as rendered"
    loaded = unit.get("NeedDaemonReload") != "yes"
    drop_ins = unit.get("DropInPaths", "").split()
    actual = file_state + ("" if loaded else ", changed on disk since systemd loaded it")
    actual += f"; drop-ins: {' '.join(drop_ins)}" if drop_ins else ""
    results.append(_check("vllm", "unit file", file_state == "as rendered" and loaded,
                          f"{unit_path_of(plan.instance)} as hostkit renders it from the plan, and loaded", actual, redeploy(host)))

    env_ok = service.env_sha256 == text_sha256(render_env(plan))
    stat = service.env_stat
    content = "as rendered" if env_ok else "different content" if service.env_sha256 else "missing"
    mode = f"mode {stat.mode} {stat.owner}:{stat.group}" if stat else "no mode"
    results.append(_check("vllm", "environment file", env_ok and stat == ENV_FILE_STAT,
                          f"{env_file_of(plan.instance)} as rendered (holds the API key), mode {ENV_FILE_STAT.mode} root:root",
                          f"{content}, {mode}", redeploy(host)))

    for directive, value in memory_directives(plan):
        actual = unit.get(directive) or "not reported"
        results.append(_check("vllm", directive, actual == str(value), f"{value} ({format_size(value)})",
                              actual + (f" ({format_size(int(actual))})" if actual.isdigit() else ""),
                              f"{redeploy(host)}; then systemctl restart {name}"))

    results.extend(_process_checks(plan, service, probes.process, state, host, logs))
    results.extend(_readiness_checks(plan, probes, logs))
    return results


def _process_checks(plan: VllmPlan, service: Any, process: VllmProcess | None, state: str, host: str,
                    logs: str) -> list[CheckResult]:
    """The running server: its cgroup's limit, its flags, its user, where its API key comes from."""
    name = vllm_unit_of(plan.instance)
    if process is None:
        return [_check("vllm", "server process", False, f"{name} has a main process",
                       f"none ({state})", f"systemctl start {name}; read {logs}")]
    results = []
    if plan.memory_max_bytes is not None and plan.memory_limit_unapplied:
        # The plan's warning says so, and the report shows it: a container's host must limit it.
        results.append(not_applicable("vllm", "memory limit in force",
                                      f"the unit's cgroup limited to {plan.memory_max_bytes} bytes",
                                      f"the kernel does not apply it here: {plan.memory_limit_unapplied}"))
    elif plan.memory_max_bytes is not None:
        problem = memory_limit_problem(plan, service)
        results.append(_check("vllm", "memory limit in force", problem is None,
                              f"the unit's cgroup limited to {plan.memory_max_bytes} bytes",
                              problem or f"{service.memory_limit_bytes}",
                              f"systemctl daemon-reload && systemctl restart {name}"))
    secret = plan.api_key.get_secret_value() if plan.api_key is not None else None
    results.append(_check("vllm", "flags in effect", server_argv(process.argv, plan.argv) == plan.argv,
                          "the running server's argv equal to the plan: " + " ".join(plan.argv),
                          _argv_difference(plan.argv, process.argv, secret),
                          f"{redeploy(host)}; then systemctl restart {name}"))
    uid = process.uid if process.uid is not None else "?"
    results.append(_check("vllm", "non-root user", process.uid not in (0, None) and process.user == plan.user,
                          f"{plan.user} (not root)", f"{process.user or '?'} (uid {uid})", redeploy(host)))
    if secret is None:
        results.append(_check("vllm", "API key", process.api_key_sha256 is None, "no API key (vllm_api_key unset)",
                              "VLLM_API_KEY set in the server's environment" if process.api_key_sha256 else "none",
                              redeploy(host)))
        return results
    in_argv = any(secret in word for word in process.argv)
    results.append(_check("vllm", "API key not in argv", not in_argv,
                          "the key absent from the server's command line (ps)",
                          "present in argv" if in_argv else "absent",
                          f"pass it only through {env_file_of(plan.instance)}: {redeploy(host)}"))
    in_env = process.api_key_sha256 == text_sha256(secret)
    results.append(_check("vllm", "API key in effect", in_env,
                          "VLLM_API_KEY in the server's environment equal to vllm_api_key",
                          "equal" if in_env else "different" if process.api_key_sha256 else "unset",
                          f"{redeploy(host)}; then systemctl restart {name}"))
    return results


def _readiness_checks(plan: VllmPlan, probes: Probes, logs: str) -> list[CheckResult]:
    readiness = probes.readiness
    expected = f"GET /health answers 200 within {plan.ready_timeout_s}s"
    if readiness is None or readiness.probe is None:
        actual = "not probed" if readiness is None else "no probe answer (is python3 on the host?)"
        return [_check("vllm", "ready (/health)", False, expected, actual, "install python3 on the host")]
    probe = readiness.probe
    waited = f"after {readiness.attempts} tries in {readiness.waited_s}s"
    why = {"ready": "", "timeout": ", gave up at the ready timeout"}.get(
        readiness.outcome, f", stopped waiting: {readiness.outcome}")
    results = [_check("vllm", "ready (/health)", probe.health == 200, expected, f"{probe.describe()} {waited}{why}",
                      f"read {logs}; the model may still be loading (raise vllm_ready_timeout) or the server failed")]
    if probe.health == 200:
        if probe.models is not None:
            actual = ", ".join(probe.models) or "no models"
        else:
            actual = f"HTTP {probe.models_status}" if probe.models_status else probe.error or "no answer"
            actual += " (the API key was refused)" if probe.models_status == 401 else ""
        results.append(_check("vllm", "serves the model (/v1/models)", probe.serves(plan.served_model_name),
                              f"GET /v1/models lists {plan.served_model_name}", actual, f"read {logs}"))
    return results


def watchdog_checks(settings: WatchdogSettings | None, plan: VllmPlan, probes: Probes, host: str) -> list[CheckResult]:
    """The health watchdog: installed as the deploy renders it, enabled and running; absent
    when vllm_watchdog is false."""
    if not plan.enabled:
        return []
    wanted = watchdog_plan(settings, plan)
    current = probes.watchdog
    if current is None:
        return []  # not probed: the probe reads it whenever vLLM is planned
    unit = wanted.unit
    if not wanted.enabled:
        present = bool(current.unit_sha256 or (current.script_sha256 and not wanted.keep_script))
        return [_check("vllm", "no health watchdog", not present, "none (vllm_watchdog is false)",
                       "installed" if present else "none", redeploy(host) + " (it removes the watchdog)")]
    files_ok = (current.unit_sha256 == text_sha256(wanted.unit_text)
                and current.script_sha256 == text_sha256(wanted.script_text))
    files = "as rendered" if files_ok else "missing" if current.unit_sha256 is None else "edited or out of date"
    state = f"{current.unit.get('ActiveState', 'unknown')}/{current.unit.get('SubState', 'unknown')}"
    enabled = current.unit.get("UnitFileState") or "unknown"
    return [
        _check("vllm", "health watchdog installed", files_ok,
               f"{wanted.unit_path} and {WATCHDOG_SCRIPT_PATH} as hostkit renders them", files, redeploy(host)),
        _check("vllm", "health watchdog active", current.active and current.enabled, "active/running, enabled",
               f"{state}, {enabled}", f"systemctl enable --now {unit}; read journalctl -u {unit}"),
    ]


def leftover_watchdog_checks(plan: HostPlan, service: Any, probes: Probes, host: str) -> list[CheckResult]:
    """Watchdogs the plan does not run, which a deploy that failed or stopped partway leaves
    behind: on a host with vllm_instances, vllm.service's (its unit file, or its unit still
    enabled or running); the watchdog unit files of instances not planned (`service`: the
    snapshot's vLLM fact, which lists them), checked on a host of vllm.service when it has any."""
    results = []
    current = probes.host_watchdog
    if plan.instances and current is not None:
        left = ([f"{WATCHDOG_UNIT_PATH} present"] if current.unit_sha256 else []) + \
            ([f"{current.unit.get('ActiveState')}/{current.unit.get('SubState', '?')}"]
             if current.unit.get("ActiveState") not in ("", "inactive", "failed") else []) + \
            (["enabled"] if current.enabled else [])
        results.append(_check(
            "vllm", f"no {WATCHDOG_UNIT}", not left,
            f"none: each of vllm_instances has its own {watchdog_instance_unit('NAME')}",
            ", ".join(left) or "none",
            f"{redeploy(host)} (it removes it), or by hand: systemctl disable --now {WATCHDOG_UNIT}; "
            f"rm -f {WATCHDOG_UNIT_PATH}; systemctl daemon-reload"))
    unplanned = [watchdog_instance_unit(name) for name in service.instance_watchdogs if name not in plan.instances]
    if plan.instances or unplanned:
        results.append(_check(
            "vllm", "no watchdogs of instances not planned", not unplanned,
            "only the planned instances' watchdogs" if plan.instances else "none (the host runs vllm.service)",
            ", ".join(unplanned) or "none", f"{redeploy(host)} (it stops and removes them)"))
    return results


def instance_checks(plan: VllmPlan, service: Any, probes: Probes, host: str,
                    release: Sequence[CheckResult] = ()) -> list[CheckResult]:
    """One of vllm_instances: vllm_checks of its unit, env file, port and key, its `release`
    checks, and the GPUs its unit gives it; each check's name starts with its unit
    (vllm@NAME.service)."""
    results = [*deadline_checks(service), *vllm_checks(plan, service, probes, host), *release]
    if plan.enabled and plan.gpu_indices and probes.unit.get("LoadState") == "loaded":
        results.append(_gpu_assignment_check(plan, probes.unit, host))
    results += watchdog_checks(plan.watchdog, plan, probes, host)
    name = vllm_unit_of(plan.instance)
    return [replace(result, name=f"{name} {result.name}") for result in results]


def _gpu_assignment_check(plan: VllmPlan, unit: dict[str, str], host: str) -> CheckResult:
    """CUDA_VISIBLE_DEVICES in the unit as systemd loaded it: the instance's GPUs by UUID."""
    wanted = f"CUDA_VISIBLE_DEVICES={cuda_visible_devices(plan)}"
    given = [word for word in unit.get("Environment", "").split() if word.startswith("CUDA_VISIBLE_DEVICES=")]
    return _check("gpu", "GPUs", given == [wanted], wanted, " ".join(given) or "no CUDA_VISIBLE_DEVICES",
                  f"{redeploy(host)}; then systemctl daemon-reload && systemctl restart {vllm_unit_of(plan.instance)}")


# -- kernel log ----------------------------------------------------------------------------


def oom_checks(ooms: KernelLog, container: str | None = None) -> list[CheckResult]:
    if ooms.source is None and container is not None:
        # The kernel and its log are the container's host's; a container may not read them.
        return [not_applicable("oom", "no OOM kills since boot", "no 'Killed process' in the kernel log since boot",
                               f"the kernel log is the container's host's (unreadable in this {container} container)")]
    if ooms.source is None:
        return [_check("oom", "no OOM kills since boot", False, "no 'Killed process' in the kernel log since boot",
                       "unknown: neither journalctl -k nor dmesg was readable", "run the verification as root")]
    shown = " | ".join(ooms.lines[:3]) + (f" (and {ooms.total - 3} more)" if ooms.total > 3 else "")
    return [_check("oom", "no OOM kills since boot", ooms.total == 0,
                   f"no 'Killed process' in the kernel log since boot ({ooms.source})",
                   f"{ooms.total} OOM kills: {shown}" if ooms.total else "none",
                   "find the cause (journalctl -k -b | grep -B20 'Killed process'): lower "
                   "vllm_gpu_memory_utilization or vllm_max_num_seqs, or give the host more RAM or swap; "
                   "the check passes again after the next boot")]


def deadline_checks(service: Any) -> list[CheckResult]:
    """A snapshot command that ran past its deadline leaves the unit's state unknown: say so first."""
    if not service.timeouts:
        return []
    return [_check("vllm", "unit state read in time", False, "systemctl show answers within its deadline",
                   "; ".join(service.timeouts),
                   "see what blocks systemd (systemctl list-jobs; journalctl -b -u systemd), or reboot the host")]


# -- monitoring ----------------------------------------------------------------------------


def monitoring_checks(plan: MonitoringPlan, servers: Sequence[VllmPlan], state: Any, host: str) -> list[CheckResult]:
    """`state` is the snapshot's monitoring section (hostkit.facts.monitoring.MonitoringState);
    `servers` the host's vLLM servers (monitored_servers)."""
    if not plan.enabled:
        return [_check("monitoring", "no monitoring installed", not state.installed,
                       "no hostkit collector (monitoring_enabled: false)",
                       "installed" if state.installed else "none", redeploy(host) + " (it removes it)")]
    stale_files = sorted(path for path, text in wanted_files(plan, servers).items()
                         if state.file_sha256.get(path) != text_sha256(text))
    timer = f"{state.timer_enabled or 'not installed'}, {state.timer_active or 'inactive'}"
    results = [
        _check("monitoring", "collector installed", not stale_files,
               "the collector and its units as hostkit renders them", "as rendered" if not stale_files else
               "missing or different: " + ", ".join(stale_files), redeploy(host)),
        _check("monitoring", "collector timer active", (state.timer_enabled, state.timer_active) == ("enabled", "active"),
               f"{TIMER} enabled, active", timer, f"systemctl enable --now {TIMER}"),
    ]
    limit = round(stale_after_s(plan.interval_s))
    age = state.textfile_age_s
    results.append(_check("monitoring", "metrics file fresh", age is not None and age <= limit,
                          f"{state.textfile_path} written in the last {limit}s ({STALE_INTERVALS} intervals and one run's deadline)",
                          "no metrics file" if age is None else f"written {age}s ago",
                          f"journalctl -u {TIMER.replace('.timer', '.service')} -b; systemctl start {TIMER}"))
    if plan.node_exporter:
        exporter = (f"{'installed' if state.node_exporter_installed else 'not installed'}, "
                    f"{state.node_exporter_enabled or 'disabled'}, {state.node_exporter_active or 'inactive'}")
        results.append(_check("monitoring", "node_exporter serving", state.node_exporter_installed
                              and (state.node_exporter_enabled, state.node_exporter_active) == ("enabled", "active"),
                              "prometheus-node-exporter installed, enabled, active", exporter, redeploy(host)))
    return results


def release_checks(profile: Any, plan: VllmPlan, state: Any, gpu: Any, host: str) -> list[CheckResult]:
    """The vLLM release in service against vllm_version, and its CUDA build against the driver.
    `state` is the snapshot's vllm_release section (hostkit.facts.vllm_release); a user's own
    vLLM whose release cannot be read (no distribution metadata) is not checked."""
    if not plan.enabled or state is None:
        return []
    release = state.release
    if release.version is None and not profile.vllm_install:
        return []
    version = profile.vllm_version
    if profile.vllm_install:
        declared, where, fix = f"{profile.vllm_package}=={version}", f"{profile.vllm_install_root}/current", redeploy(host)
    else:
        declared, where = f"vLLM {version}", release.interpreter or profile.vllm_command
        fix = f"set vllm_version: {release.version} or install vLLM {version}"
    same = release.version is not None and release_matches(release.version, version)
    results = [_check("vllm", "release", same, f"{declared} in {where}", release.describe(), fix)]
    if profile.vllm_install:
        target = InstallTarget.from_profile(profile)
        results.append(_check("vllm", "release in service", state.current == target.venv,
                              f"{target.current} -> {target.venv}", str(state.current), redeploy(host)))
    if release.version is not None and release.cuda:
        problem = driver_problem(release.describe(), release.cuda, driver_version(gpu))
        results.append(_check("vllm", "driver for the CUDA build", problem is None,
                              f"NVIDIA driver {driver_floor(release.cuda)} or newer (CUDA {release.cuda})",
                              driver_version(gpu) or "no driver", problem or ""))
    return results


def release_of(snapshot: Any, server: VllmPlan) -> Any:
    """The snapshot's vllm_release section as `server` reads it: the release behind its own
    command (vllm.service's, or an instance's); None in snapshots without the section."""
    section = getattr(snapshot, "vllm_release", None)
    return section.of_command(server.argv[0]) if section is not None and server.argv else section


# -- one host ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceReadings:
    """What verify read of one of vllm_instances: its service fact and its probes."""

    service: Any  # hostkit.facts.vllm_service.VllmServiceState
    probes: Probes


def check_host(profile: Any, plan: HostPlan, snapshot: Any, probes: Probes,
               instances: Mapping[str, InstanceReadings] | None = None) -> list[CheckResult]:
    """Every check of one host, in the order of AREAS. A host with vllm_instances: the host's
    checks once, each instance's by its `instances` readings (probes: the first instance's,
    which hold the kernel log), each with its own watchdog and the release behind its own
    vllm_command."""
    instances = instances or {}
    host = plan.host
    if plan.container is not None:
        host_settings = host_setting_checks(plan.container)
    else:
        host_settings = [*swap_checks(plan.swap, snapshot.storage, host, profile.swap_dir),
                         *nvme_checks(plan.nvme, plan.swap, snapshot.storage, host),
                         *kernel_checks(plan.kernel, snapshot.kernel, snapshot.system.kernel_cmdline, host)]
    if plan.instances:
        return [
            *host_settings,
            *gpu_checks(plan.gpu, snapshot.gpu),
            *(check for name, server in plan.instances.items()
              for check in instance_checks(server, instances[name].service, instances[name].probes, host,
                                           release_checks(profile.vllm_instances[name], server,
                                                          release_of(snapshot, server), snapshot.gpu, host))),
            *leftover_watchdog_checks(plan, snapshot.vllm, probes, host),
            *oom_checks(probes.ooms, plan.container),
            *monitoring_checks(plan.monitoring, monitored_servers(plan), snapshot.monitoring, host),
        ]
    return [
        *host_settings,
        *gpu_checks(plan.gpu, snapshot.gpu),
        *deadline_checks(snapshot.vllm),
        *vllm_checks(plan.vllm, snapshot.vllm, probes, host),
        *release_checks(profile, plan.vllm, getattr(snapshot, "vllm_release", None), snapshot.gpu, host),
        *watchdog_checks(plan.watchdog, plan.vllm, probes, host),
        *leftover_watchdog_checks(plan, snapshot.vllm, probes, host),
        *oom_checks(probes.ooms, plan.container),
        *monitoring_checks(plan.monitoring, monitored_servers(plan), snapshot.monitoring, host),
    ]
