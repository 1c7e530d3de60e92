"""The boot-time unit that brings nvme_device and its swap file back (NVME_UNIT).

Instance-store NVMe comes back blank after a cloud stop/start. At each boot the unit runs
hostkit/remote/nvme_boot.sh: it finds the disk by its /dev/disk/by-id name (model and
serial), waits for it NVME_WAIT_S at most, formats it only if blank (nvme_format.sh, the
deploy's own check and mkfs), mounts it, and makes the swap file under nvme_mount again
(swap_lib.sh's hk_create) when it is missing. The deploy installs those scripts beside it,
as they are in this package, and writes its settings (NVME_SETTINGS_FILE) from the plan.

`nvme_boot(nvme=..., swap=...)` runs after prepare_nvme and swap_file, so the disk is mounted
and the swap file active when it takes them over: make-before-break, it installs and enables
the unit first, then removes the fstab lines of the fstab era (the mount by UUID with its
device timeout, and the swap file's line when the file is under nvme_mount). Nothing is
unmounted or swapped off: systemd keeps the active mount and swap as they are. Without an
NvmePlan it removes a unit installed before.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation

from hostkit.desired.nvme_boot import stale_files
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.storage import NVME_FILES, NVME_UNIT_PATH, StorageInfo
from hostkit.operations.kernel import _install_file
from hostkit.operations.swap import script
from hostkit.paths import NVME_SETTINGS_FILE, NVME_UNIT
from hostkit.plan.plans import NvmePlan, SwapPlan

# The install's deadline: its restart of the unit only confirms a mounted disk and an active file.
INSTALL_DEADLINE_S = 120


def fstab_era_steps(nvme: NvmePlan, swap: SwapPlan, storage: StorageInfo) -> list[str]:
    """Remove the fstab lines the unit replaces: the mount at nvme_mount, and the swap file's under it."""
    steps = []
    if storage.fstab_mount_entries(nvme.mount):
        steps.append(f"hk_fstab_put mount {shlex.quote(nvme.mount)} ''")
    if swap.enabled and swap.boot == "unit" and swap.path and storage.fstab_swap_entries(swap.path):
        steps.append(f"hk_fstab_put swap {shlex.quote(swap.path)} ''")
    return steps + (["hk_reload_if_fstab_changed"] if steps else [])


def install_steps(files: dict[str, str], enable: bool) -> list[str]:
    steps = []
    for path, text in files.items():
        steps += _install_file(path, text)
    if NVME_SETTINGS_FILE in files:
        steps.append(f"chmod 0644 {shlex.quote(NVME_SETTINGS_FILE)}")
    if NVME_UNIT_PATH in files:
        steps.append("systemctl daemon-reload")
    if enable:
        steps.append(f"systemctl enable --quiet {NVME_UNIT}")
    if files:
        # Run now, on the mounted disk and the active file: it only confirms them, and a unit
        # that cannot work here fails this deploy instead of the next boot.
        steps.append(f"systemctl restart {NVME_UNIT} || {{ journalctl -u {NVME_UNIT} -b -n 20 --no-pager >&2; exit 1; }}")
    return steps


def remove_steps() -> list[str]:
    return [f"systemctl disable --quiet {NVME_UNIT} 2>/dev/null || true",
            "rm -f -- " + " ".join(shlex.quote(path) for path in NVME_FILES),
            "systemctl daemon-reload"]


@operation()
def nvme_boot(nvme: NvmePlan | None, swap: SwapPlan, scope: SnapshotScope):
    """
    Install and enable NVME_UNIT for the plan's NVMe and swap file, then drop their fstab lines.

    + nvme: the host's NvmePlan; None removes the unit
    + swap: the host's SwapPlan (a file under nvme_mount is made again at boot)
    + scope: the host plan's snapshot scope
    """
    storage: StorageInfo = snapshot(host, scope).storage
    if nvme is None:
        if storage.nvme_unit_sha256 or storage.nvme_unit_enabled:
            mark_changed(host, "storage")
            yield "set -e\n" + "\n".join(remove_steps())
        return
    files = stale_files(nvme, swap, storage)
    steps = install_steps(files, enable=not storage.nvme_unit_enabled)
    steps += fstab_era_steps(nvme, swap, storage)
    if not steps:
        return
    mark_changed(host, "storage")
    yield script(steps)
