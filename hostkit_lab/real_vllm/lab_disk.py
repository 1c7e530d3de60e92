"""Real vLLM for lab hosts: what an air-gapped fleet's wheelhouse holds, nothing more.

The wheelhouse (wheelhouse.py), requirements.lock and the tiny model (tiny_model.py), as one
tree of hard links beside the cached wheelhouse, mounted at hostkit_lab.real_vllm.DISK_MOUNT:
- a container host binds the tree read-only;
- a VM gets it as a read-only ext4 disk image (`mkfs.ext4 -d`, about 30 s), its second virtio
  disk: a qemu TCG guest reads a disk from the controller's page cache, while every byte over
  the user network goes through slirp.
The OS packages the install needs (python3-venv, libnuma1) are hostkit's deploy's to add, from
the host's package repositories, as on a fresh host: nothing is staged on the host by a test.
Both are cached, keyed by the lock, the model's recipe and this file.
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

from hostkit_lab.real_vllm import DISK_MOUNT, MODEL_DIR
from hostkit_lab.real_vllm import tiny_model, wheelhouse

SLACK_BYTES = 256 * 2**20
BUILD_TIMEOUT_S = 600


def disk_key(model: Path) -> str:
    recipe = Path(__file__).read_bytes() + wheelhouse.lock_key().encode() + model.name.encode()
    return hashlib.sha256(recipe).hexdigest()[:16]


def wheelhouse_tree(model: Path, root: Path | None = None) -> Path:
    """The tree of the cached wheelhouse, its lock and `model`, built when missing."""
    root = root or wheelhouse.cache_root()
    house = wheelhouse.wheelhouse(root=root).path
    final = root / f"tree-{disk_key(model)}"
    with wheelhouse.locked(root / "tree.lock"):
        if final.is_dir():
            return final
        with tempfile.TemporaryDirectory(dir=root) as staging:
            tree = Path(staging) / "tree"
            shutil.copytree(house, tree, copy_function=os.link, ignore=shutil.ignore_patterns(wheelhouse.COMPLETE))
            shutil.copy2(wheelhouse.LOCK_FILE, tree / "requirements.lock")
            shutil.copytree(model, tree / Path(MODEL_DIR).name)
            for path in tree.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            tree.rename(final)
        for old in root.glob("tree-*"):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def disk_image(tree: Path) -> Path:
    """`tree` as a read-only ext4 image beside it, built when missing."""
    final = tree.with_name(f"disk-{tree.name.removeprefix('tree-')}.ext4")
    with wheelhouse.locked(tree.parent / "disk.lock"):
        if final.is_file():
            return final
        started = time.monotonic()
        staging = final.with_suffix(".partial")
        size = wheelhouse.tree_bytes(tree) * 11 // 10 + SLACK_BYTES
        subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "wheelhouse", "-d", str(tree), str(staging),
                        f"{size // 1024}k"], check=True, timeout=BUILD_TIMEOUT_S, capture_output=True)
        staging.rename(final)
        for old in tree.parent.glob("disk-*.ext4"):
            if old != final:
                old.unlink(missing_ok=True)
        print(f"real-vLLM lab disk built in {time.monotonic() - started:.0f} s: {final}", file=sys.stderr)
    return final


def lab_tree() -> Path:
    """The tree from the cached real-vLLM venv's model (both built when missing)."""
    python = wheelhouse.venv().path / "bin" / "python"
    return wheelhouse_tree(tiny_model.cached_model(python, wheelhouse.lock_key(), wheelhouse.cache_root()))


# Run on a VM host, as root, once it has booted with the image as its second disk.
MOUNT_DISK = f"mkdir -p {DISK_MOUNT} && (mountpoint -q {DISK_MOUNT} || mount -o ro /dev/vdb {DISK_MOUNT})"
