"""Where the snapshot looks beyond hostkit's own fixed paths: the places an inventory chooses.

The planner makes it from a host's profile (hostkit.plan.scope); the facts take it as it is,
so no reader of the host depends on the inventory's schema.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SnapshotScope:
    swap_dir: str
    nvme_mount: str | None
    nvme_device: str | None
    sysctl_keys: tuple[str, ...]
    vllm_install: bool
    vllm_package: str
    vllm_install_root: str
    vllm_command: str
    vllm_user: str
    vllm_host: str
    vllm_port: int
    textfile_dir: str
    # The local model directories (vllm_model "/...") of the servers the plan sizes: vllm.service's,
    # or each instance's; the snapshot reads their config.json.
    model_dirs: tuple[str, ...] = ()
    # The vllm_command of each of vllm_instances that is not the host's: the snapshot reads the
    # release behind each beside the host's.
    instance_commands: tuple[str, ...] = ()
