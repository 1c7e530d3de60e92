"""The snapshot's scope for a host, from its profile: the one place the readers' inputs are chosen."""

from __future__ import annotations

from typing import Any

from hostkit.facts.scope import SnapshotScope
from hostkit.profile.host_profile import HostProfile, value_or_default


def snapshot_scope(profile: Any = None) -> SnapshotScope:
    """`profile` may be None or partial (a host with no inventory data, an operation's test):
    each key it lacks takes its declared default."""
    def key(name: str) -> Any:
        return value_or_default(profile, name)

    return SnapshotScope(
        swap_dir=key("swap_dir"),
        nvme_mount=key("nvme_mount"),
        nvme_device=key("nvme_device"),
        sysctl_keys=tuple(key("sysctl") or ()),
        vllm_install=bool(key("vllm_install")),
        vllm_package=key("vllm_package"),
        vllm_install_root=key("vllm_install_root"),
        vllm_command=key("vllm_command"),
        vllm_user=key("vllm_user"),
        vllm_host=key("vllm_host"),
        vllm_port=key("vllm_port"),
        textfile_dir=key("monitoring_textfile_dir"),
        model_dirs=local_model_dirs(profile),
        instance_commands=instance_commands(profile),
    )


def instance_commands(profile: Any) -> tuple[str, ...]:
    """The vllm_commands of vllm_instances other than the host's, each once, in inventory
    order. A partial profile (not a HostProfile) has none."""
    if not isinstance(profile, HostProfile):
        return ()
    commands = (instance.vllm_command for instance in profile.vllm_instances.values())
    return tuple(dict.fromkeys(command for command in commands if command != profile.vllm_command))


def local_model_dirs(profile: Any) -> tuple[str, ...]:
    """The local model directories of the servers the planner sizes: each of vllm_instances',
    else vllm.service's. A partial profile (not a HostProfile) has none."""
    if not isinstance(profile, HostProfile):
        return ()
    servers = list(profile.vllm_instances.values()) or [profile]
    return tuple(sorted({server.vllm_model for server in servers if server.model_is_local_dir}))
