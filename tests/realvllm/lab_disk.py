"""Real vLLM for lab hosts: one read-only ext4 disk image with everything hostkit's install
needs offline, attached to a lab VM as a second virtio disk and mounted at hostkit_lab.real_vllm.DISK_MOUNT.

It holds the wheelhouse (wheelhouse.py), requirements.lock, a pip wheel (Debian 12's python3
has no ensurepip without python3-venv), the tiny model (tiny_model.py) and the Debian 12 deb
of libnuma1 (vLLM's CPU backend loads it; field notes). A disk rather than HTTP from the
controller: a qemu TCG guest reads a disk from the controller's page cache, while every byte
over the user network goes through slirp. Built with `mkfs.ext4 -d` in about 30 s, cached
beside the wheelhouse, keyed by the lock, the model's recipe and this file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostkit_lab.apt import apt_get
from hostkit_lab.real_vllm import DISK_MOUNT, MODEL_DIR
from tests.realvllm import tiny_model, wheelhouse

DEBS = ("libnuma1",)
SLACK_BYTES = 256 * 2**20
BUILD_TIMEOUT_S = 600


def pip_wheel(cache: Path) -> Path:
    """A pip wheel: this Python's bundled one, Debian's, or one downloaded once into cache."""
    import ensurepip

    found = [*sorted(Path(ensurepip.__file__).parent.glob("_bundled/pip-*.whl")),
             *sorted(Path("/usr/share/python-wheels").glob("pip-*.whl")), *sorted(cache.glob("pip-*.whl"))]
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(cache),
                    "pip"], check=True, timeout=300, capture_output=True)
    return sorted(cache.glob("pip-*.whl"))[0]


def _debs(cache: Path) -> list[Path]:
    cache.mkdir(parents=True, exist_ok=True)
    for name in DEBS:
        if not list(cache.glob(f"{name}_*.deb")):
            apt_get("download", name, cwd=cache)
    return sorted(cache.glob("*.deb"))


def disk_key(model: Path) -> str:
    recipe = Path(__file__).read_bytes() + wheelhouse.lock_key().encode() + model.name.encode()
    return hashlib.sha256(recipe).hexdigest()[:16]


def disk_image(model: Path, root: Path | None = None) -> Path:
    """The image for the cached wheelhouse and model, built when missing."""
    root = root or wheelhouse.cache_root()
    house = wheelhouse.wheelhouse(root=root).path
    final = root / f"disk-{disk_key(model)}.ext4"
    with wheelhouse.locked(root / "disk.lock"):
        if final.is_file():
            return final
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=root) as staging:
            tree = Path(staging) / "tree"
            shutil.copytree(house, tree, copy_function=os.link, ignore=shutil.ignore_patterns(wheelhouse.COMPLETE))
            shutil.copy2(wheelhouse.LOCK_FILE, tree / "requirements.lock")
            shutil.copy2(pip_wheel(root / "pip"), tree)
            shutil.copytree(model, tree / Path(MODEL_DIR).name)
            (tree / "debs").mkdir()
            for deb in _debs(root / "debs"):
                shutil.copy2(deb, tree / "debs")
            for path in tree.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            image = Path(staging) / "disk.ext4"
            size = wheelhouse.tree_bytes(tree) * 11 // 10 + SLACK_BYTES
            subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "wheelhouse", "-d", str(tree), str(image),
                            f"{size // 1024}k"], check=True, timeout=BUILD_TIMEOUT_S, capture_output=True)
            image.rename(final)
        for old in root.glob("disk-*.ext4"):
            if old != final:
                old.unlink(missing_ok=True)
        print(f"real-vLLM lab disk built in {time.monotonic() - started:.0f} s: {final}", file=sys.stderr)
    return final


def lab_disk() -> tuple[Path, Path]:
    """(image, model) from the cached real-vLLM venv (built when missing)."""
    python = wheelhouse.venv().path / "bin" / "python"
    model = tiny_model.cached_model(python, wheelhouse.lock_key(), wheelhouse.cache_root())
    return disk_image(model), model


# Run on the lab host, as root, once it has booted with the image as its second disk.
PREPARE_HOST = (
    f"mkdir -p {DISK_MOUNT} && (mountpoint -q {DISK_MOUNT} || mount -o ro /dev/vdb {DISK_MOUNT}) "
    f"&& dpkg -i {DISK_MOUNT}/debs/*.deb >/dev/null"
)
