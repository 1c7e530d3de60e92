"""The lab's base image: a minimal Debian with systemd, sshd and the lab's key, built once.

The image is cached outside the repo, keyed by a hash of its recipe, so a changed recipe
builds a new image and an unchanged one is reused across runs and checkouts.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hostkit_lab.apt import apt_get
from hostkit_lab.progress import say

SUITES = {"debian11": "bullseye", "debian12": "bookworm", "debian13": "trixie"}
# mmdebstrap's default suites for bullseye include its security suite, which answered 404 for
# linux-image-cloud-amd64 (measured 2026-12-01); the release and -updates suites of the Debian
# mirror alone build it. The other releases keep mmdebstrap's defaults (and their cached images).
DEBIAN_MIRROR = "http://deb.debian.org/debian"
MIRRORS = {
    "debian11": tuple(f"deb {DEBIAN_MIRROR} {suite} main" for suite in ("bullseye", "bullseye-updates")),
}

PACKAGES = (
    "systemd-sysv", "udev", "kmod", "openssh-server", "linux-image-cloud-amd64", "python3",
    "iproute2", "ifupdown", "isc-dhcp-client", "procps", "util-linux", "e2fsprogs", "dbus",
    "curl", "ca-certificates", "xfsprogs", "btrfs-progs", "psmisc",
)
ROOT_DISK_SIZE = "6G"
# Bump when the customisation below changes in a way the package list doesn't show.
RECIPE_REVISION = 3

HOST_PREREQUISITES = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "mmdebstrap": "mmdebstrap",
    "ssh-keygen": "openssh-client",
    "mkfs.ext4": "e2fsprogs",
}


def cache_dir() -> Path:
    return Path(os.environ.get("HOSTKIT_LAB_CACHE", Path.home() / ".cache" / "vllm-hostkit" / "lab"))


@dataclass(frozen=True)
class BaseImage:
    root_disk: Path
    kernel: Path
    initrd: Path
    os: str

    def host_key(self) -> str:
        """The sshd host key baked into the image (every lab host of this image shares it)."""
        cached = self.root_disk.parent / "ssh_host_ed25519_key.pub"
        if not cached.exists():
            key = subprocess.run(
                ["debugfs", "-R", "cat /etc/ssh/ssh_host_ed25519_key.pub", str(self.root_disk)],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
            if not key.startswith("ssh-ed25519 "):
                raise RuntimeError(f"no ed25519 host key in {self.root_disk}")
            cached.write_text(key + "\n")
        return cached.read_text().strip()


def ensure_prerequisites(prerequisites: dict[str, str] = HOST_PREREQUISITES) -> None:
    """Install the Debian packages of the `tool: package` pairs whose tool is missing."""
    missing = sorted({pkg for tool, pkg in prerequisites.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"the lab needs these packages: {' '.join(missing)} (run as root to install them)")
    say(f"installing lab prerequisites with apt: {' '.join(missing)}")
    apt_get("update", "-qq")
    apt_get("install", "-y", "-qq", "--no-install-recommends", *missing)


def ssh_key() -> Path:
    """The lab's private key, generated once and baked into every image."""
    key = cache_dir() / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vllm-hostkit-lab", "-f", str(key)],
                       check=True)
    return key


def recipe(os_name: str, packages: tuple[str, ...] = PACKAGES) -> dict:
    spec = {
        "suite": SUITES[os_name],
        "packages": sorted(packages),
        "root_disk_size": ROOT_DISK_SIZE,
        "revision": RECIPE_REVISION,
        "authorized_key": ssh_key().with_suffix(".pub").read_text().strip(),
    }
    if os_name in MIRRORS:  # only there, so the other releases' recipe hashes stay as they were
        spec["mirrors"] = list(MIRRORS[os_name])
    return spec


def base_image(os_name: str) -> BaseImage:
    """The cached base image for `os_name`, building it first if needed."""
    image_dir = cached_build("images", os_name, recipe(os_name), _build, HOST_PREREQUISITES)
    return BaseImage(image_dir / "root.raw", image_dir / "vmlinuz", image_dir / "initrd.img", os_name)


def cached_build(kind: str, os_name: str, spec: dict, build, prerequisites: dict[str, str]) -> Path:
    """The directory of `kind` for `os_name` keyed by `spec`'s hash, made by `build(spec, dir)`
    first if no complete one is cached."""
    if os_name not in SUITES:
        raise SystemExit(f"unknown lab os {os_name!r}: choose one of {', '.join(SUITES)}")
    cache_dir().mkdir(parents=True, exist_ok=True)
    # Parallel test workers share the cache: one installs and builds, the others wait for it.
    with open(cache_dir() / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_prerequisites(prerequisites)
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        built = cache_dir() / kind / f"{os_name}-{digest}"
        if not (built / "complete").exists():
            build(spec, built)
    return built


def debootstrap(spec: dict, rootfs: Path) -> None:
    """mmdebstrap `spec`'s suite and packages into `rootfs`."""
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(spec['packages'])}",
         spec["suite"], str(rootfs), *spec.get("mirrors", ())],
        check=True,
    )


def authorise(rootfs: Path, authorized_key: str) -> None:
    """root logs in over ssh with the lab's key only."""
    ssh_dir = rootfs / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(authorized_key + "\n")
    (ssh_dir / "authorized_keys").chmod(0o600)
    (rootfs / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (rootfs / "etc/ssh/sshd_config.d/lab.conf").write_text("PermitRootLogin prohibit-password\nUseDNS no\n")


def _build(spec: dict, image_dir: Path) -> None:
    started = time.monotonic()
    say(f"building lab image {image_dir.name} (Debian {spec['suite']}, once; about a minute)")
    if image_dir.exists():
        shutil.rmtree(image_dir)
    work = Path(tempfile.mkdtemp(prefix="hostkit-lab-build-", dir=cache_dir()))
    try:
        rootfs = work / "rootfs"
        debootstrap(spec, rootfs)
        say("  debootstrap done; customising")
        _customise(rootfs, spec["authorized_key"])
        staging = work / "image"
        staging.mkdir()
        kernel = sorted((rootfs / "boot").glob("vmlinuz-*"))[-1]
        initrd = sorted((rootfs / "boot").glob("initrd.img-*"))[-1]
        shutil.copy(kernel, staging / "vmlinuz")
        shutil.copy(initrd, staging / "initrd.img")
        subprocess.run(["mkfs.ext4", "-q", "-L", "labroot", "-d", str(rootfs), str(staging / "root.raw"),
                        spec["root_disk_size"]], check=True)
        (staging / "recipe.json").write_text(json.dumps(spec, indent=2))
        (staging / "complete").touch()
        image_dir.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(image_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"  image ready in {time.monotonic() - started:.0f} s")


def _customise(rootfs: Path, authorized_key: str) -> None:
    (rootfs / "etc/fstab").write_text("LABEL=labroot / ext4 defaults,errors=remount-ro 0 1\n")
    (rootfs / "etc/network/interfaces").write_text(
        "auto lo\niface lo inet loopback\n\nallow-hotplug eth0\niface eth0 inet dhcp\n"
    )
    authorise(rootfs, authorized_key)
    # systemd.hostname= on the kernel command line names each host.
    (rootfs / "etc/hostname").unlink(missing_ok=True)
    (rootfs / "etc/hosts").write_text("127.0.0.1 localhost\n")
    # An empty machine-id makes each overlay generate its own at first boot.
    (rootfs / "etc/machine-id").write_text("")
    # The journal is persistent, as on a real server, so OOM kills survive a reboot's check.
    (rootfs / "var/log/journal").mkdir(parents=True, exist_ok=True)
