"""Install the vLLM STAND-IN (not vLLM) on a lab host, where the real vLLM would be.

    from hostkit_lab.standin.install import install_standin
    install_standin(lab_host)                      # /opt/vllm/bin/vllm, vLLM 0.33.0 flags
    install_standin(lab_host, version="0.17.1")    # another release's flags

Layout on the host (the stand-in finds its library relative to itself):
    /opt/vllm/bin/vllm                                  hostkit_lab/standin/vllm_standin.py
    /opt/vllm/lib/vllm-standin/standin.json             {"version": ...}
    /opt/vllm/lib/vllm-standin/hostkit/vllm/flags.py    hostkit's flag logic and data,
    /opt/vllm/lib/vllm-standin/hostkit/vllm/flags.json  copied unchanged

One ssh round trip: a tar archive piped to `tar -x` on the host.
"""

from __future__ import annotations

import io
import json
import posixpath
import subprocess
import tarfile
from pathlib import Path

import hostkit

DEFAULT_COMMAND = "/opt/vllm/bin/vllm"
DEFAULT_VERSION = "0.33.0"
STANDIN = Path(__file__).with_name("vllm_standin.py")
_HOSTKIT = Path(hostkit.__file__).parent


def standin_files(version: str, command: str = DEFAULT_COMMAND) -> dict[str, tuple[bytes, int]]:
    """{path relative to the install prefix: (content, mode)}; the prefix is two levels above `command`."""
    lib = "lib/vllm-standin"
    return {
        f"bin/{posixpath.basename(command)}": (STANDIN.read_bytes(), 0o755),
        f"{lib}/standin.json": (json.dumps({"version": version}).encode(), 0o644),
        f"{lib}/hostkit/__init__.py": (b"", 0o644),
        f"{lib}/hostkit/vllm/__init__.py": (b"", 0o644),
        f"{lib}/hostkit/vllm/flags.py": ((_HOSTKIT / "vllm/flags.py").read_bytes(), 0o644),
        f"{lib}/hostkit/vllm/flags.json": ((_HOSTKIT / "vllm/flags.json").read_bytes(), 0o644),
    }


def standin_archive(version: str, command: str = DEFAULT_COMMAND) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, (content, mode) in standin_files(version, command).items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def install_standin(lab_host, version: str = DEFAULT_VERSION, command: str = DEFAULT_COMMAND) -> None:
    """Put the stand-in at `command` on `lab_host` (a hostkit_lab LabHost), pretending to be `version`."""
    prefix = posixpath.dirname(posixpath.dirname(command))
    remote = f"mkdir -p {prefix} && tar -xzf - -C {prefix} --no-same-owner && {command} --version"
    result = subprocess.run(lab_host.ssh_argv(remote), input=standin_archive(version, command),
                            capture_output=True, timeout=300)
    if result.returncode != 0 or result.stdout.decode().strip() != version:
        raise RuntimeError(f"{lab_host.name}: installing the vLLM stand-in failed: "
                           f"{result.stdout.decode()}{result.stderr.decode()}")
