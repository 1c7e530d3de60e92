"""The container hosts' root filesystem: a minimal Debian with systemd, sshd and the lab's key.

A directory tree, not a disk image: each container boots an overlay of it, so the tree is
shared read-only by every container of one release. Built once by mmdebstrap and cached
beside the VM images, keyed the same way by a hash of its recipe.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hostkit_lab.image import authorise, cache_dir, cached_build, debootstrap, recipe
from hostkit_lab.progress import say

# What a VM image has, less what only a machine of its own needs (kernel, udev, dhcp, mkfs).
PACKAGES = (
    "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "procps", "util-linux", "kmod",
    "curl", "ca-certificates", "psmisc",
)
# Bump when the customisation below changes in a way the package list doesn't show.
RECIPE_REVISION = 1

PREREQUISITES = {
    "systemd-nspawn": "systemd-container",
    "slirp4netns": "slirp4netns",
    "mmdebstrap": "mmdebstrap",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
}


@dataclass(frozen=True)
class RootFs:
    path: Path
    os: str

    def host_key(self) -> str:
        """The sshd host key in the tree (every container of this release shares it)."""
        return (self.path / "etc/ssh/ssh_host_ed25519_key.pub").read_text().strip()


def container_recipe(os_name: str) -> dict:
    return {**recipe(os_name, PACKAGES), "kind": "container", "revision": RECIPE_REVISION}


def base_rootfs(os_name: str) -> RootFs:
    """The cached root filesystem for `os_name`, building it first if needed."""
    built = cached_build("rootfs", os_name, container_recipe(os_name), _build, PREREQUISITES)
    return RootFs(built / "root", os_name)


def _build(spec: dict, built: Path) -> None:
    started = time.monotonic()
    say(f"building container root filesystem {built.name} (Debian {spec['suite']}, once; about a minute)")
    if built.exists():
        shutil.rmtree(built)
    work = Path(tempfile.mkdtemp(prefix="hostkit-lab-rootfs-", dir=cache_dir()))
    try:
        rootfs = work / "root"
        debootstrap(spec, rootfs)
        _customise(rootfs, spec["authorized_key"])
        (work / "complete").touch()
        built.parent.mkdir(parents=True, exist_ok=True)
        work.rename(built)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"  root filesystem ready in {time.monotonic() - started:.0f} s")


def _customise(rootfs: Path, authorized_key: str) -> None:
    authorise(rootfs, authorized_key)
    # nspawn names each container's host (--hostname) and gives it a machine id (--uuid);
    # mmdebstrap copied the controller's name, and a file here would win over both.
    (rootfs / "etc/hostname").unlink(missing_ok=True)
    (rootfs / "etc/machine-id").unlink(missing_ok=True)
    (rootfs / "etc/hosts").write_text("127.0.0.1 localhost\n")
    # The journal is persistent, as on a real server and on the VM hosts.
    (rootfs / "var/log/journal").mkdir(parents=True, exist_ok=True)
