"""The NVMe boot unit (NVME_UNIT) as hostkit wants it, from the host's NvmePlan and SwapPlan: the
unit, its settings file and the scripts it runs, and those of them the host has not got as
rendered. Pure: no host access; hostkit.operations.nvme_boot installs them, `hostkit verify`
checks them.
"""

from __future__ import annotations

import shlex

from hostkit import templates
from hostkit.desired.digest import text_sha256
from hostkit.desired.swap import swap_deadline_s
from hostkit.facts.storage import NVME_LIB_DIR, NVME_SCRIPTS, NVME_UNIT_PATH, NVME_WANTED_BY, StorageInfo
from hostkit.paths import NVME_LABEL, NVME_SETTINGS_FILE, NVME_UNIT, VLLM_UNIT
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.plan.swap_filesystems import FILL_METHODS, RESERVE_FRACTION, RESERVE_MIN_BYTES
from hostkit.remote import host_file

# How long the unit waits for udev to show the disk: udev announced a lab NVMe up to some
# seconds late under load (5 s was too short for fstab's device job, which starts earlier).
# Only vLLM waits for it, so a missing disk costs the boot nothing else.
NVME_WAIT_S = 30


def render_settings(nvme: NvmePlan, swap: SwapPlan) -> str:
    under_unit = swap.enabled and swap.boot == "unit" and swap.path is not None
    settings = {
        "hk_lib": NVME_LIB_DIR, "hk_by_id": nvme.by_id, "hk_mount": nvme.mount, "hk_fstype": nvme.fstype,
        "hk_fs_label": NVME_LABEL, "hk_wait_s": NVME_WAIT_S,
        "hk_swap_file": swap.path if under_unit else "",
        "hk_swap_size": swap.size_bytes if under_unit else 0,
        "hk_swap_priority": swap.priority,
        "hk_swap_method": FILL_METHODS[nvme.fstype],
        "hk_reserve_min": RESERVE_MIN_BYTES, "hk_reserve_fraction": RESERVE_FRACTION,
    }
    return ("# Managed by vllm-hostkit from the host's plan; read by " + NVME_UNIT + ".\n"
            + "".join(f"{name}={shlex.quote(str(value))}\n" for name, value in settings.items()))


def render_unit(nvme: NvmePlan, swap: SwapPlan) -> str:
    # A blank disk's boot writes the whole swap file, as the deploy does: the same deadline.
    timeout_s = NVME_WAIT_S + swap_deadline_s(swap)
    return templates().get_template("vllm-hostkit-nvme.service.j2").render(
        vllm_unit=VLLM_UNIT, script=f"{NVME_LIB_DIR}/nvme_boot.sh", settings=NVME_SETTINGS_FILE,
        timeout_s=timeout_s, wanted_by=NVME_WANTED_BY)


def wanted_files(nvme: NvmePlan, swap: SwapPlan) -> dict[str, str]:
    files = {f"{NVME_LIB_DIR}/{name}": host_file(name) for name in NVME_SCRIPTS}
    files[NVME_SETTINGS_FILE] = render_settings(nvme, swap)
    files[NVME_UNIT_PATH] = render_unit(nvme, swap)
    return files


def stale_files(nvme: NvmePlan, swap: SwapPlan, storage: StorageInfo) -> dict[str, str]:
    return {path: text for path, text in wanted_files(nvme, swap).items()
            if storage.nvme_unit_sha256.get(path) != text_sha256(text)}
