"""The names hostkit gives things on a host: units, files and directories.

At the bottom of the package: every layer may import it, and it imports nothing, so a
fact, a unit file and the planner name a path the same way without reaching up to another.
"""

from __future__ import annotations

SYSTEMD_UNIT_DIR = "/etc/systemd/system"
VLLM_UNIT = "vllm.service"
VLLM_UNIT_PATH = f"{SYSTEMD_UNIT_DIR}/{VLLM_UNIT}"
THP_UNIT = "vllm-hostkit-thp.service"
SWAP_FILE_NAME = "vllm-hostkit.swap"
# The boot-time unit that finds nvme_device by its /dev/disk/by-id name, formats it when
# blank, mounts it and re-creates the swap file under it (hostkit.operations.nvme_boot).
NVME_UNIT = "vllm-hostkit-nvme.service"
SYSCTL_FILE = "/etc/sysctl.d/99-zz-vllm-hostkit.conf"
CONFIG_DIR = "/etc/vllm-hostkit"
VLLM_ENV_FILE = f"{CONFIG_DIR}/vllm.env"
NVME_SETTINGS_FILE = f"{CONFIG_DIR}/nvme.conf"
# hostkit's own filesystem on nvme_device, known by this label without fstab: 12 characters,
# the most xfs allows (ext4: 16).
NVME_LABEL = "vllm-hostkit"
# RHEL 8's own python, where python3 is not on PATH: the host-side probes run under it.
PLATFORM_PYTHON = "/usr/libexec/platform-python"
WATCHDOG_UNIT = "vllm-hostkit-watchdog.service"
WATCHDOG_UNIT_PATH = f"{SYSTEMD_UNIT_DIR}/{WATCHDOG_UNIT}"
WATCHDOG_SCRIPT_PATH = "/usr/local/sbin/vllm-watchdog"
# The watchdog unit's StateDirectory= under /var/lib, and its state file there.
WATCHDOG_STATE_DIRECTORY = "vllm-hostkit"
WATCHDOG_STATE_PATH = f"/var/lib/{WATCHDOG_STATE_DIRECTORY}/watchdog.json"
DEPLOY_LOCK_DIR = "/run/vllm-hostkit"
DEPLOY_LOCK_PATH = f"{DEPLOY_LOCK_DIR}/deploy.lock"
# vLLM's caches (Hugging Face, torch.compile) where the host has no NVMe mount for them.
DEFAULT_CACHE_DIR = "/var/cache/vllm"


def vllm_instance_unit(instance: str) -> str:
    return f"vllm@{instance}.service"


def vllm_unit_of(instance: str | None) -> str:
    """The unit of one of vllm_instances, or vllm.service (None)."""
    return VLLM_UNIT if instance is None else vllm_instance_unit(instance)


def is_vllm_unit(unit: str | None) -> bool:
    """Whether `unit` is one of hostkit's vLLM units: vllm.service or an instance's."""
    return unit == VLLM_UNIT or (unit or "").startswith("vllm@") and (unit or "").endswith(".service")


def vllm_instance_env_file(instance: str) -> str:
    return f"{CONFIG_DIR}/vllm@{instance}.env"


def watchdog_instance_unit(instance: str) -> str:
    """The watchdog of vllm@NAME.service: a concrete unit of its own, as vllm@NAME.service is."""
    return f"vllm-hostkit-watchdog@{instance}.service"


def watchdog_instance_state_path(instance: str) -> str:
    return f"/var/lib/{WATCHDOG_STATE_DIRECTORY}/watchdog@{instance}.json"


def watchdog_unit_of(instance: str | None) -> str:
    """The watchdog of vllm.service (None) or of vllm@NAME.service."""
    return WATCHDOG_UNIT if instance is None else watchdog_instance_unit(instance)


def watchdog_state_path_of(instance: str | None) -> str:
    return WATCHDOG_STATE_PATH if instance is None else watchdog_instance_state_path(instance)
