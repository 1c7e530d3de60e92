"""Kernel memory tuning: sysctl values and transparent hugepages, applied live and persisted.

sysctl: the wanted values go live (written to /proc/sys and read back) and into one file,
hostkit.paths.SYSCTL_FILE, named to sort after every other sysctl.d file. Settings
elsewhere that would win over hostkit's (the rule is in hostkit.desired.kernel) fail the host
(plan.sysctl_conflicts == "error") before anything changes, or are logged as warnings
("warn") and the values applied anyway.

THP: `enabled` and `defrag` are persisted by a oneshot unit (THP_UNIT) that writes them
early in boot, before the vLLM unit. Installing or changing the unit restarts it, which
applies the values live with the exact code that runs at boot: a unit that cannot write
them fails here, not silently at the next boot. A `transparent_hugepage=` on the kernel
command line that differs from thp_enabled is refused: the boot loader and hostkit would
each claim the setting. A kernel without THP gets a notice and no change. The unit is
WantedBy=basic.target: on Debian 12 and 13 lab hosts it starts right after sysinit.target
and is active before basic.target is reached (tests/e2e/test_kernel.py checks this after a
reboot), which is before any ordinary service, vllm.service included.

A failing host fails alone, at execute time, through a FunctionCommand that returns False:
an exception raised in the generator would stop every host (see hostkit/operations/gpu.py).
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import OperationValueError

from hostkit.desired.kernel import (
    render_sysctl_file,
    render_thp_unit,
    sysctl_conf_overrides,
    sysctl_conflicts,
    thp_refusals,
    wanted_sysctl,
    wanted_thp,
)
from hostkit.facts.kernel import THP_DIR, THP_UNIT_PATH, KernelState, sysctl_key
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.operations import callbacks
from hostkit.paths import SYSCTL_FILE, THP_UNIT
from hostkit.plan.plans import KernelPlan


# -- remote commands -----------------------------------------------------------------------

_SYSCTL_SET = r"""hostkit_sysctl() {
  [ -e "/proc/sys/$1" ] || { echo "hostkit: sysctl $3: /proc/sys/$1 does not exist (unknown key, or its module is not loaded)" >&2; exit 1; }
  printf '%s\n' "$2" > "/proc/sys/$1" || { echo "hostkit: sysctl $3: the kernel refused the value '$2'" >&2; exit 1; }
  got=$(tr -s '[:space:]' ' ' < "/proc/sys/$1"); got=${got% }
  [ "$got" = "$2" ] || { echo "hostkit: sysctl $3 reads back as '$got' after writing '$2'" >&2; exit 1; }
}"""


def _install_file(path: str, text: str) -> list[str]:
    """Write `text` to `path` atomically, mode 0644 (the temporary name is no *.conf/*.service)."""
    directory, name = posixpath.split(path)
    tmp = posixpath.join(directory, f".{name}.hostkit-new")
    return [
        f"mkdir -p {shlex.quote(directory)}",
        f"printf %s {shlex.quote(text)} > {shlex.quote(tmp)}",
        f"chmod 0644 {shlex.quote(tmp)}",
        f"mv -f {shlex.quote(tmp)} {shlex.quote(path)}",
    ]


def sysctl_apply_command(live: dict[str, str], file_text: str | None) -> str:
    """Write `live` (path -> value) to /proc/sys and check each read-back, then install the file.

    Live values go first: a value the kernel rejects stops the command before it is persisted.
    """
    lines = ["set -e"]
    if live:
        lines.append(_SYSCTL_SET)
        lines += [
            f"hostkit_sysctl {shlex.quote(path)} {shlex.quote(value)} {shlex.quote(sysctl_key(path))}"
            for path, value in sorted(live.items())
        ]
    if file_text is not None:
        lines += _install_file(SYSCTL_FILE, file_text)
    return "\n".join(lines)


def thp_apply_command(unit_text: str | None, restart: bool, wanted: dict[str, str]) -> str:
    """Install the unit when `unit_text` is given; (re)enable it; restart it to apply the values."""
    unit = shlex.quote(THP_UNIT)
    lines = ["set -e"]
    if unit_text is not None:
        lines += _install_file(THP_UNIT_PATH, unit_text)
        lines.append("systemctl daemon-reload")
    # reenable also drops a symlink left by an older [Install] section.
    lines.append(f"systemctl reenable --quiet {unit}")
    if restart:
        lines.append(
            f"systemctl restart {unit} || {{ journalctl -u {unit} -b -n 20 --no-pager >&2; exit 1; }}"
        )
        for name, value in sorted(wanted.items()):
            sysfs = shlex.quote(f"{THP_DIR}/{name}")
            lines.append(
                f"grep -qF {shlex.quote(f'[{value}]')} {sysfs} || "
                f"{{ echo \"hostkit: {THP_DIR}/{name} is '$(cat {sysfs})' after {THP_UNIT} ran, wanted {value}\" >&2;"
                " exit 1; }"
            )
    return "\n".join(lines)


def thp_remove_command() -> str:
    unit = shlex.quote(THP_UNIT)
    return "\n".join([
        "set -e",
        f"systemctl disable --quiet {unit}",
        f"rm -f {shlex.quote(THP_UNIT_PATH)}",
        "systemctl daemon-reload",
    ])


# -- operations ----------------------------------------------------------------------------


def _refusal(summary: str, reasons: list[str]) -> FunctionCommand:
    return FunctionCommand(callbacks.fail_host, ([summary, *(f"  {reason}" for reason in reasons)],), {})


def _notice(message: str) -> None:
    """Log once per run: at prepare when pyinfra checks for changes, else at execute."""
    if host.state.is_executing != host.state.should_check_for_changes():
        host.log_styled(message, fg="yellow", log_func=logger.warning)


def _checked(plan: KernelPlan, check) -> Any:
    try:
        return check(plan)
    except ValueError as error:
        raise OperationValueError(str(error)) from None


@operation()
def sysctl_settings(plan: KernelPlan, scope: SnapshotScope):
    """
    Apply the plan's sysctl values live, check them in /proc/sys, and persist them in SYSCTL_FILE.

    + plan: the host's KernelPlan
    + scope: the host plan's snapshot scope
    """
    wanted = _checked(plan, wanted_sysctl)
    state: KernelState = snapshot(host, scope).kernel

    conflicts = sysctl_conflicts(state, plan)
    if conflicts and plan.sysctl_conflicts == "error":
        yield _refusal(
            "sysctl: other files would override hostkit's values at boot (set sysctl_conflicts: warn to go on):",
            [str(conflict) for conflict in conflicts],
        )
        return
    for override in conflicts + sysctl_conf_overrides(state, plan):
        _notice(f"sysctl: {override}")

    file_text = render_sysctl_file(plan)
    stale = {path: value for path, value in wanted.items() if state.live.get(path, "") != value}
    if not stale and state.hostkit_sysctl_text == file_text:
        return
    mark_changed(host, "kernel")
    yield sysctl_apply_command(stale, None if state.hostkit_sysctl_text == file_text else file_text)


@operation()
def transparent_hugepages(plan: KernelPlan, scope: SnapshotScope):
    """
    Apply thp_enabled/thp_defrag live and at every boot through the THP_UNIT oneshot unit.

    + plan: the host's KernelPlan (thp_enabled/thp_defrag None: leave that file alone)
    + scope: the host plan's snapshot scope
    """
    wanted = _checked(plan, wanted_thp)
    snap = snapshot(host, scope)
    state: KernelState = snap.kernel

    if not wanted:
        if state.thp_unit_text is not None:
            mark_changed(host, "kernel")
            yield thp_remove_command()
        return
    if not state.thp_supported:
        _notice(f"THP: this kernel has no transparent hugepage support ({THP_DIR} is missing); "
                "thp_enabled and thp_defrag are skipped")
        return
    refusals = thp_refusals(state, plan, snap.system.kernel_cmdline)
    if refusals:
        yield _refusal("THP: refusing to set transparent hugepages:", refusals)
        return

    unit_text = render_thp_unit(plan)
    unit_changed = state.thp_unit_text != unit_text
    live_stale = any(
        (state.thp_enabled if name == "enabled" else state.thp_defrag).selected != value
        for name, value in wanted.items()
    )
    if not (unit_changed or live_stale or not state.thp_unit_enabled):
        return
    mark_changed(host, "kernel")
    yield thp_apply_command(unit_text if unit_changed else None, unit_changed or live_stale, wanted)
