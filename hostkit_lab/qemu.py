"""The lab's qemu: bookworm-backports' build, unpacked into the lab's cache once and run from
there, with its own firmware directory; the system's qemu is left as it is. bookworm's qemu 7.2
lost an emulated NVMe queue's writes under load (docs/testing.md, "The lab")."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hostkit_lab.apt import apt_get
from hostkit_lab.image import HOST_PREREQUISITES, cache_dir, cached_build
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


def lab_qemu() -> Qemu:
    """The unpacked qemu, fetched and unpacked first if no complete one is cached."""
    root = cached_build("qemu", "debian12", {"suite": SUITE, "packages": list(PACKAGES)}, _unpack,
                        HOST_PREREQUISITES)
    return Qemu(root / "usr" / "bin" / "qemu-system-x86_64", root / "usr" / "share" / "qemu")


def _unpack(spec: dict, root: Path) -> None:
    say(f"fetching qemu from {spec['suite']} for the lab (once)")
    shutil.rmtree(root, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="hostkit-lab-qemu-", dir=cache_dir()))
    try:
        (work / "sources").mkdir()
        (work / "sources" / f"{spec['suite']}.sources").write_text(SOURCE)
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True)
        (work / "debs").mkdir()
        # apt's lists and caches of its own, so the system's apt sees nothing of this suite.
        private = ("-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={work / 'sources'}",
                   "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
                   "-o", "APT::Sandbox::User=root")
        apt_get(*private, "update", "-qq")
        apt_get(*private, "download", "-qq", *(f"{package}/{spec['suite']}" for package in spec["packages"]),
                cwd=work / "debs")
        unpacked = work / "root"
        for deb in sorted((work / "debs").glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, timeout=300)
        _check_libraries(unpacked / "usr" / "bin" / "qemu-system-x86_64")
        (unpacked / "complete").touch()
        root.parent.mkdir(parents=True, exist_ok=True)
        unpacked.rename(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_libraries(binary: Path) -> None:
    listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True, timeout=60).stdout
    missing = [line.split()[0] for line in listed.splitlines() if "not found" in line]
    if missing:
        raise SystemExit(f"the lab's qemu ({binary}) needs libraries this machine lacks: {' '.join(missing)}"
                         " (install qemu-system-x86 from bookworm, which brings them)")
