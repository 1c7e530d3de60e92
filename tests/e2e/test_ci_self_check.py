"""The CI example of a self-hosted runner on the GPU host itself (examples/ci/), run as the job
runs it: examples/ci/self-check.sh INSIDE a lab container host, against that host (`@local`),
with hostkit installed there from a wheel built from this checkout, the vLLM stand-in in place
of vLLM and the lab data (no NVMe: a container has no disks of its own).

- `provision`: pyinfra's local connector runs the main deploy, `hostkit verify` passes: exit 0,
  and the JUnit has a testcase per check of `hostkit verify`, the ones a container leaves to its
  host (swap, NVMe, sysctl, THP; the kernel log it cannot read) skipped;
- vllm.service stopped, `verify`: exit 1, and the JUnit names the failed checks.
Each time, `hostkit verify` over SSH from the controller against the same host gives the same
JUnit testcases with the same outcomes, and the same exit status.

One container, one hostkit install (python3-venv from Debian, hostkit's dependencies from PyPI).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.e2e.conftest import lab_data, lab_inventory
from tests.standin.install import install_standin

pytestmark = pytest.mark.lab
HOST_KIND = "container"

REPO = Path(__file__).resolve().parents[2]
CI = "/root/ci"  # on the lab host: checkout/ (what the job checks out), the wheel, inventory.py
VENV = "/opt/hostkit-ci"
# What the job needs from its checkout: the script and the deploy (hostkit comes from the wheel).
CHECKOUT_FILES = ("examples/ci/self-check.sh", "examples/ci/inventory.py", "deploys/vllm_host.py")
# No NVMe in a container; the rest is inventories/lab.py's LAB_DATA.
DATA = {"nvme_device": None}
LEFT_TO_HOST = {("swap", "NVMe"), ("swap", "swap"), ("kernel", "sysctl"), ("kernel", "THP")}
# Also the container's host's, where the container cannot read them: the kernel log, and the
# memory controller when the controller's hybrid cgroups make it read-only inside.
MAYBE_LEFT_TO_HOST = {("oom", "no OOM kills since boot"), ("vllm", "memory limit in force")}
STOPPED_FAILS = {("vllm", "unit active"), ("vllm", "server process"), ("vllm", "ready (/health)")}


def say(message: str) -> None:
    print(f"[test_ci_self_check] {message}", flush=True)


def build_wheel(directory: Path) -> Path:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(directory), str(REPO)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = directory.glob("vllm_hostkit-*.whl")
    return wheel


def controller_ca_bundle() -> Path | None:
    """The CA bundle pip trusts on the controller, when it is not pip's own: the container's pip
    must trust it too where PyPI is reached through a TLS-inspecting proxy."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return Path(os.environ[name])
    return None


def job_archive(wheel: Path, inventory: str, ca_bundle: Path | None) -> bytes:
    """The runner's side of the job: the checkout's files, the wheel, the lab's `@local` inventory
    (and the controller's CA bundle, if any, as ca.pem)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        def add(name: str, content: bytes, mode: int) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            archive.addfile(info, io.BytesIO(content))
        for relative in CHECKOUT_FILES:
            path = REPO / relative
            add(f"checkout/{relative}", path.read_bytes(), path.stat().st_mode & 0o777)
        add(f"dist/{wheel.name}", wheel.read_bytes(), 0o644)
        add("inventory.py", inventory.encode(), 0o644)
        if ca_bundle is not None:
            add("ca.pem", ca_bundle.read_bytes(), 0o644)
    return buffer.getvalue()


def outcomes(junit: str) -> dict[tuple[str, str], str]:
    """{(area, check): passed | failed | skipped} of a JUnit written by `hostkit verify` for one host."""
    (suite,) = ElementTree.fromstring(junit).iter("testsuite")
    result = {}
    for case in suite.iter("testcase"):
        area = case.get("classname").rsplit(".", 1)[1]
        result[(area, case.get("name"))] = ("failed" if case.find("failure") is not None
                                            else "skipped" if case.find("skipped") is not None else "passed")
    return result


def failure_messages(junit: str) -> dict[str, str]:
    return {case.get("name"): case.find("failure").get("message")
            for case in ElementTree.fromstring(junit).iter("testcase") if case.find("failure") is not None}


@pytest.fixture(scope="module")
def module_clock():
    started = time.monotonic()
    yield started
    say(f"module took {time.monotonic() - started:.0f} s (container, install, provision, verify on the host and over SSH, twice)")


@pytest.fixture(scope="module")
def ci_host(module_clock, shared_lab_host, tmp_path_factory):
    """The lab host with hostkit installed from this checkout's wheel, the job's files in CI and
    the vLLM stand-in: a self-hosted runner's GPU host before its first job."""
    lab_host = shared_lab_host
    say(f"{lab_host.name} up after {time.monotonic() - module_clock:.0f} s")
    started = time.monotonic()
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    inventory = f"hosts = [('@local', {{**{lab_data()!r}, **{DATA!r}}})]\n"
    ca_bundle = controller_ca_bundle()
    copied = subprocess.run(lab_host.ssh_argv(f"mkdir -p {CI} && tar -xzf - -C {CI} --no-same-owner"),
                            input=job_archive(wheel, inventory, ca_bundle), capture_output=True, timeout=300)
    assert copied.returncode == 0, copied.stderr.decode()
    install = (
        "export DEBIAN_FRONTEND=noninteractive && "
        "timeout 300 apt-get update -q >/tmp/apt.log 2>&1 && "
        "timeout 300 apt-get install -y -q python3-venv >>/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }; "
        f"timeout 60 python3 -m venv {VENV} && "
        f"timeout 600 {VENV}/bin/pip install -q --disable-pip-version-check "
        f"{f'--cert {CI}/ca.pem ' if ca_bundle else ''}{CI}/dist/{wheel.name} && "
        f"{VENV}/bin/hostkit --version"
    )
    installed = lab_host.ssh(install, timeout=1200)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    install_standin(lab_host)
    say(f"wheel built, python3-venv and hostkit installed, stand-in in place: {time.monotonic() - started:.0f} s")
    return lab_host


def self_check(lab_host, mode: str) -> tuple[int, str, str]:
    """The job's command on the lab host: (exit status, its output, the JUnit it wrote)."""
    out = f"{CI}/out-{mode}"
    started = time.monotonic()
    run = lab_host.ssh(f"cd {CI}/checkout && PATH={VENV}/bin:$PATH "
                       f"examples/ci/self-check.sh {mode} {CI}/inventory.py {out}; echo \"exit=$?\"", timeout=1800)
    output = run.stdout + run.stderr
    assert run.stdout.rstrip().splitlines()[-1].startswith("exit="), output[-3000:]
    status = int(run.stdout.rstrip().splitlines()[-1].removeprefix("exit="))
    junit = lab_host.ssh(f"cat {out}/verify.xml", check=True).stdout
    say(f"self-check.sh {mode} on the host against itself: exit {status} in {time.monotonic() - started:.0f} s")
    return status, output, junit


def verify_over_ssh(lab_host, tmp_path: Path) -> tuple[int, str]:
    """`hostkit verify` from the controller over SSH, the same data: (exit status, the JUnit)."""
    inventory = lab_inventory(tmp_path / "ssh_inventory.py", lab_host, DATA)
    junit = tmp_path / "ssh.xml"
    proc = subprocess.run([sys.executable, "-c", "from hostkit.cli.main import main; main()", "verify",
                           str(inventory), "--junitxml", str(junit)], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    assert junit.exists(), proc.stdout + proc.stderr
    return proc.returncode, junit.read_text()


def test_the_shipped_inventory_is_one_local_host():
    namespace: dict = {}
    exec(compile((REPO / "examples/ci/inventory.py").read_text(), "examples/ci/inventory.py", "exec"), namespace)
    assert [name for name, _ in namespace["hosts"]] == ["@local"]


def test_provision_then_verify_on_the_host_itself_as_over_ssh(ci_host, tmp_path):
    status, output, junit = self_check(ci_host, "provision")
    assert status == 0, output[-4000:]
    assert "==> Provisioning: pyinfra -y" in output and "==> Verifying: hostkit verify" in output
    assert '<testsuite name="@local"' in junit
    local = outcomes(junit)
    skipped = {check for check, outcome in local.items() if outcome == "skipped"}
    assert LEFT_TO_HOST <= skipped <= LEFT_TO_HOST | MAYBE_LEFT_TO_HOST, local
    assert "failed" not in local.values(), local
    assert {area for area, _ in local} >= {"gpu", "vllm", "oom", "monitoring"}, local
    say(f"JUnit of @local: {len(local)} testcases, {len(skipped)} skipped: {sorted(name for _, name in skipped)}")

    ssh_status, ssh_junit = verify_over_ssh(ci_host, tmp_path)
    assert ssh_status == 0, ssh_junit
    assert outcomes(ssh_junit) == local


def test_a_stopped_unit_fails_the_job_as_over_ssh(ci_host, tmp_path):
    ci_host.ssh("systemctl stop vllm.service", check=True)
    status, output, junit = self_check(ci_host, "verify")
    assert status == 1, output[-4000:]
    assert "==> Provisioning" not in output
    local = outcomes(junit)
    assert {check for check, outcome in local.items() if outcome == "failed"} == STOPPED_FAILS, local
    assert "expected active/running; actual inactive/dead" in failure_messages(junit)["unit active"]

    ssh_status, ssh_junit = verify_over_ssh(ci_host, tmp_path)
    assert ssh_status == 1
    assert outcomes(ssh_junit) == local
