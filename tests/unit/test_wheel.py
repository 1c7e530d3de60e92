"""The product wheel works without a checkout: templates, host-side scripts and flag data are
package data, found from the installed package alone."""

from __future__ import annotations

import pytest

import subprocess
import sys
import zipfile
from pathlib import Path

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]

# Run from the unpacked wheel, with the checkout nowhere on the path before it.
PROBE = """
import hostkit, sys
from hostkit import templates
from hostkit.remote import host_file
from hostkit.vllm.flags import flags_for
assert hostkit.__file__.startswith(sys.argv[1]), hostkit.__file__
for name in sys.argv[2:]:
    templates().get_template(name)
print(bool(host_file("swap_lib.sh")), bool(flags_for("0.33.0")))
"""


def test_the_wheel_carries_its_package_data(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("vllm_hostkit-*.whl")
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(unpacked)
    assert "hostkit/templates/vllm.service.j2" in names
    assert "hostkit/remote/vllm_watchdog.py" in names
    assert not any(name.startswith(("templates/", "hostkit_lab/", "tests/")) for name in names)
    shipped = [name.removeprefix("hostkit/templates/") for name in names if name.startswith("hostkit/templates/")]
    assert sorted(shipped) == sorted(path.name for path in (REPO / "templates").iterdir())
    probe = subprocess.run([sys.executable, "-c", PROBE, str(unpacked), *shipped], capture_output=True, text=True,
                           cwd=tmp_path, env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split() == ["True", "True"]
