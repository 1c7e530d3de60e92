"""The vLLM STAND-IN packaged as a wheel of the distribution `vllm`, for hostkit's own vLLM
install (vllm_install) in the lab: pip installs it into a release venv like a real vLLM.

    from hostkit_lab.standin.wheel import standin_wheel
    standin_wheel(wheelhouse, "0.33.0")               # vllm-0.33.0-py3-none-any.whl
    standin_wheel(wheelhouse, "0.33.1", crash=True)   # a release that fails to start

The wheel has vLLM's CLI module, `vllm.entrypoints.cli.main:main` (what hostkit's entry
point, hostkit/remote/vllm_cli.py, runs), which runs hostkit_lab/standin/vllm_standin.py with the flag
data of its release beside it. `crash=True` makes the server exit 1 while loading
(VLLM_STANDIN_CRASH), after its parser has accepted the flags, as a broken release would.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from hostkit_lab.standin.install import standin_files

CLI_MAIN = Path(__file__).with_name("wheel_cli_main.py")


def _wheel_files(version: str, crash: bool) -> dict[str, bytes]:
    files = {"vllm/__init__.py": b"", "vllm/entrypoints/__init__.py": b"", "vllm/entrypoints/cli/__init__.py": b""}
    main = CLI_MAIN.read_text().replace("CRASH = False", f"CRASH = {crash}")
    files["vllm/entrypoints/cli/main.py"] = main.encode()
    for name, (content, _) in standin_files(version).items():
        # bin/vllm is the stand-in itself; lib/vllm-standin/ holds its flag data and release.
        target = "vllm/standin/vllm_standin.py" if name.startswith("bin/") else name.replace(
            "lib/vllm-standin/", "vllm/standin/lib/")
        files[target] = content
    files["vllm/standin/lib/standin.json"] = json.dumps({"version": version}).encode()
    return files


def standin_wheel(directory: Path, version: str, crash: bool = False) -> Path:
    dist_info = f"vllm-{version}.dist-info"
    files = _wheel_files(version, crash)
    files[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()
    files[f"{dist_info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: vllm-hostkit tests\n"
                                   b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{dist_info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{dist_info}/RECORD"]).encode()
    path = Path(directory) / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files.items()):
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 12, 1, 0, 0, 0)), content)
    return path
