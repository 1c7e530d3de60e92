"""The lab's qemu: bookworm-backports' build, unpacked into the lab's cache once.

bookworm's qemu 7.2 emulated NVMe lost a queue's writes under load: abort, controller reset,
controller disabled, a swap `dd` failing with EIO, ext4 read-only. It did so in the three CI runs
of 2026-12-07 (test_swap's resize beside real vLLM in a container) and in a local repro with the
lab machine's disk idle, and again with `ioeventfd=on`. The system's qemu is left as it is: the
lab runs its own binary with its own firmware directory.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hostkit_lab.apt import apt_get
from hostkit_lab.image import cache_dir
from hostkit_lab.progress import say

SUITE = "bookworm-backports"
SOURCE = f"""Types: deb
URIs: http://deb.debian.org/debian
Suites: {SUITE}
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
PACKAGES = ("qemu-system-x86", "qemu-system-common", "qemu-system-data")


@dataclass(frozen=True)
class Qemu:
    binary: Path
    data_dir: Path  # qemu's -L: its option ROMs; the BIOS comes from the system's seabios

    def version(self) -> str:
        return subprocess.run([str(self.binary), "--version"], capture_output=True, text=True,
                              check=True, timeout=30).stdout.splitlines()[0]


def lab_qemu() -> Qemu:
    """The unpacked qemu, fetched and unpacked first if no complete one is cached."""
    root = cache_dir() / "qemu" / SUITE
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / "unpack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "complete").exists():
            _unpack(root)
    return Qemu(root / "usr" / "bin" / "qemu-system-x86_64", root / "usr" / "share" / "qemu")


def _unpack(root: Path) -> None:
    say(f"fetching qemu from {SUITE} for the lab (once)")
    work = Path(tempfile.mkdtemp(prefix="hostkit-lab-qemu-", dir=root.parent))
    try:
        (work / "sources").mkdir()
        (work / "sources" / f"{SUITE}.sources").write_text(SOURCE)
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True)
        (work / "debs").mkdir()
        # apt's lists and caches of its own, so the system's apt sees nothing of this suite.
        private = ("-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={work / 'sources'}",
                   "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
                   "-o", "APT::Sandbox::User=root")
        apt_get(*private, "update", "-qq")
        apt_get(*private, "download", "-qq", *(f"{package}/{SUITE}" for package in PACKAGES), cwd=work / "debs")
        unpacked = work / "root"
        for deb in sorted((work / "debs").glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, timeout=300)
        _check_libraries(unpacked / "usr" / "bin" / "qemu-system-x86_64")
        shutil.rmtree(root, ignore_errors=True)
        unpacked.rename(root)
        (root / "complete").touch()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_libraries(binary: Path) -> None:
    listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True, timeout=60).stdout
    missing = [line.split()[0] for line in listed.splitlines() if "not found" in line]
    if missing:
        raise SystemExit(f"the lab's qemu ({binary}) needs libraries this machine lacks: {' '.join(missing)}"
                         " (install qemu-system-x86 from bookworm, which brings them)")
