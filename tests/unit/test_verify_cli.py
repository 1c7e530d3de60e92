"""`hostkit verify` as a user runs it (a subprocess: the command monkey-patches the standard
library for gevent, which must not leak into this test process): usage errors and
unreachable hosts exit 2, with the JSON and JUnit reports still written."""

from __future__ import annotations

import pytest

import json
import socket
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from verify_replay import LAB_DATA

pytestmark = pytest.mark.processes


def hostkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", "from hostkit.cli.main import main; main()", *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def inventory(tmp_path: Path, **extra) -> Path:
    hosts = [("gpu-01", {"ssh_hostname": "127.0.0.1", "ssh_port": closed_port(), "ssh_user": "root",
                         **LAB_DATA, **extra})]
    path = tmp_path / "inventory.py"
    path.write_text(f"hosts = {hosts!r}\n")
    return path


def test_an_unreachable_host_exits_2_and_is_reported(tmp_path):
    junit = tmp_path / "report.xml"
    proc = hostkit("verify", str(inventory(tmp_path)), "--format", "json", "--junitxml", str(junit), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    host = json.loads(proc.stdout)["hosts"][0]
    assert (host["name"], host["reachable"], host["remote_commands"]) == ("gpu-01", False, 0)
    assert host["error"].startswith("cannot connect: NoValidConnectionsError")
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert (suite.get("name"), suite.get("errors")) == ("gpu-01", "1")


def test_invalid_inventory_data_exits_2_naming_the_key(tmp_path):
    proc = hostkit("verify", str(inventory(tmp_path, vllm_port=99999, swap_sise="1G")), cwd=tmp_path)
    assert proc.returncode == 2
    assert "host gpu-01: vllm_port = 99999 is invalid" in proc.stderr
    assert "swap_sise" in proc.stderr and "did you mean swap_size?" in proc.stderr
    assert proc.stdout == ""


def test_a_missing_inventory_or_an_empty_limit_exits_2(tmp_path):
    proc = hostkit("verify", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = hostkit("verify", str(inventory(tmp_path)), "--limit", "gpu-99", cwd=tmp_path)
    assert proc.returncode == 2 and "no host selected" in proc.stderr


def test_bad_options_are_usage_errors(tmp_path):
    proc = hostkit("verify", str(inventory(tmp_path)), "--format", "yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "Invalid value for '--format'" in proc.stderr
    proc = hostkit("verify", str(inventory(tmp_path)), "-n", "0", cwd=tmp_path)
    assert proc.returncode == 2
