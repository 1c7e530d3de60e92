"""The CI example of a self-hosted runner on the GPU host itself (examples/ci/), run as the job
runs it: examples/ci/self-check.sh INSIDE a lab container host, against that host (`@local`),
with hostkit installed there from a wheel built from this checkout, the vLLM stand-in in place
of vLLM and the lab data (no NVMe: a container has no disks of its own).

- `provision`: pyinfra's local connector runs the main deploy, `hostkit verify` passes: exit 0,
  and the JUnit has a testcase per check of `hostkit verify`, the ones a container leaves to its
  host (swap, NVMe, sysctl, THP; the kernel log it cannot read) skipped;
- vllm.service stopped, `verify`: exit 1, and the JUnit names the failed checks.
Each time, `hostkit verify` over SSH from the controller against the same host gives the same
JUnit testcases with the same outcomes, and the same exit status. In both states the pytest
plugin (`python -m pytest --pyinfra-inventory INVENTORY tests/host`) run on the host through
`@local` and from the controller over SSH gives each test the same outcome, the one verify's
checks of its area give; and `hostkit doctor --format json` through `@local` and over SSH gives
the same findings with the same severities, and the same exit status.

Then a wedged nvidia-smi (first on PATH, sleeping for ever) with HOSTKIT_NVIDIA_SMI_TIMEOUT=3:
verify and doctor through `@local` exit 1 within WEDGED_BOUND_S and name the command that timed
out and its deadline, as they do over SSH.

One container, one hostkit install (python3-venv from Debian, hostkit's dependencies from PyPI).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.e2e.conftest import lab_data, lab_inventory
from hostkit_lab.standin.install import install_standin

pytestmark = pytest.mark.lab
HOST_KIND = "container"

REPO = Path(__file__).resolve().parents[2]
CI = "/root/ci"  # on the lab host: checkout/ (what the job checks out), the wheel, inventory.py
VENV = "/opt/hostkit-ci"
# What the job needs from its checkout: the script and the deploy (hostkit comes from the wheel).
CHECKOUT_FILES = ("examples/ci/self-check.sh", "examples/ci/inventory.py", "deploys/vllm_host.py",
                  "tests/host/test_host_state.py")
# No NVMe in a container; the rest is inventories/lab.py's LAB_DATA.
DATA = {"nvme_device": None}
LEFT_TO_HOST = {("swap", "NVMe"), ("swap", "swap"), ("kernel", "sysctl"), ("kernel", "THP")}
# Also the container's host's, where the container cannot read them: the kernel log, and the
# memory controller when the controller's hybrid cgroups make it read-only inside.
MAYBE_LEFT_TO_HOST = {("oom", "no OOM kills since boot"), ("vllm", "memory limit in force")}
STOPPED_FAILS = {("vllm", "unit active"), ("vllm", "server process"), ("vllm", "ready (/health)")}
# tests/host/test_host_state.py: each test asserts one area of verify's checks.
PLUGIN_AREAS = {"test_swap": "swap", "test_kernel": "kernel", "test_gpu": "gpu", "test_vllm_unit": "vllm",
                "test_no_oom_kills": "oom"}
WEDGED_S = 3  # HOSTKIT_NVIDIA_SMI_TIMEOUT for the wedged nvidia-smi
WEDGED_BOUND_S = 60
FAKE_NVIDIA_SMI = "/usr/local/bin/nvidia-smi"
FIGURES: dict[str, float] = {}


def say(message: str) -> None:
    print(f"[test_ci_self_check] {message}", flush=True)


def report(**figures) -> None:
    print(json.dumps({"test": "ci self check", **figures}), flush=True)


def timed(name: str, started: float) -> float:
    seconds = round(time.monotonic() - started, 1)
    FIGURES[name] = seconds
    return seconds


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


def plugin_outcomes(junit: str) -> dict[str, str]:
    """{test: passed | failed | error | skipped} of a JUnit written by pytest for one host, the
    host's parameter (`[local]`, `[paramiko://NAME]`) left off."""
    result = {}
    for case in ElementTree.fromstring(junit).iter("testcase"):
        name = case.get("name").split("[", 1)[0]
        assert name not in result, junit
        result[name] = next((outcome for outcome in ("failure", "error", "skipped") if case.find(outcome) is not None),
                            "passed").replace("failure", "failed")
    return result


def areas_of(verify_outcomes: dict[tuple[str, str], str]) -> dict[str, str]:
    """What each plugin test gives for verify's check outcomes: failed on a failed check of its
    area (or of the plan), skipped when every check of its area is skipped, else passed."""
    plan_failed = any(outcome == "failed" for (area, _), outcome in verify_outcomes.items() if area == "plan")
    result = {}
    for test, area in PLUGIN_AREAS.items():
        mine = [outcome for (check_area, _), outcome in verify_outcomes.items() if check_area == area]
        result[test] = ("failed" if plan_failed or "failed" in mine
                        else "skipped" if mine and set(mine) == {"skipped"} else "passed")
    return result


def findings_of(document: dict) -> dict[str, str]:
    """{finding code: severity} of `hostkit doctor --format json` for one host."""
    (host,) = document["hosts"]
    return {finding["code"]: finding["severity"] for finding in host["findings"]}


@pytest.fixture(scope="module")
def module_clock():
    started = time.monotonic()
    yield started
    FIGURES["module_s"] = round(time.monotonic() - started, 1)
    report(**FIGURES)
    say(f"module took {time.monotonic() - started:.0f} s (container, install; provision, verify, the plugin "
        "and doctor on the host and over SSH, serving and stopped; a wedged nvidia-smi)")


@pytest.fixture(scope="module")
def ci_host(module_clock, shared_lab_host, tmp_path_factory):
    """The lab host with hostkit installed from this checkout's wheel, the job's files in CI and
    the vLLM stand-in: a self-hosted runner's GPU host before its first job."""
    lab_host = shared_lab_host
    say(f"{lab_host.name} up after {timed('host_up_s', module_clock):.0f} s")
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
    say(f"wheel built, python3-venv and hostkit installed, stand-in in place: {timed('install_s', started):.0f} s")
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


def on_host(lab_host, command: str, env: str = "", timeout: float = 600) -> subprocess.CompletedProcess:
    """`command` on the lab host in CI, with the venv's hostkit and pytest first on PATH."""
    return lab_host.ssh(f"cd {CI} && {env} PATH={VENV}/bin:$PATH {command}", timeout=timeout)


def from_controller(*argv: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=REPO, timeout=timeout,
                          env={**os.environ, **(env or {})})


def hostkit_from_controller(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return from_controller("-c", "from hostkit.cli.main import main; main()", *args, env=env)


def ssh_inventory(lab_host, tmp_path: Path) -> Path:
    path = tmp_path / "ssh_inventory.py"
    return path if path.exists() else lab_inventory(path, lab_host, DATA)


def verify_over_ssh(lab_host, tmp_path: Path) -> tuple[int, str]:
    """`hostkit verify` from the controller over SSH, the same data: (exit status, the JUnit)."""
    junit = tmp_path / "ssh.xml"
    proc = hostkit_from_controller("verify", str(ssh_inventory(lab_host, tmp_path)), "--junitxml", str(junit))
    assert junit.exists(), proc.stdout + proc.stderr
    return proc.returncode, junit.read_text()


def plugin_both_ways(lab_host, tmp_path: Path, state: str) -> tuple[dict[str, str], dict[str, str]]:
    """The pytest plugin on tests/host: on the host through `@local`, then from the controller over
    SSH; each (exit status checked against its JUnit) as {test: outcome}."""
    junit = f"{CI}/plugin-{state}.xml"
    started = time.monotonic()
    run = on_host(lab_host, f"python -m pytest --pyinfra-inventory {CI}/inventory.py checkout/tests/host "
                            f"-p no:cacheprovider --junitxml {junit}")
    timed(f"plugin_local_{state}_s", started)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    junit_text = lab_host.ssh(f"cat {junit}", check=True).stdout
    local = plugin_outcomes(junit_text)
    assert set(local) == set(PLUGIN_AREAS), run.stdout[-3000:]
    assert 'name="test_vllm_unit[local]"' in junit_text  # testinfra's local backend, no ssh
    assert run.returncode == (1 if "failed" in local.values() else 0), run.stdout[-3000:]

    ssh_junit = tmp_path / f"plugin-{state}.xml"
    started = time.monotonic()
    over_ssh = from_controller("-m", "pytest", "--pyinfra-inventory", str(ssh_inventory(lab_host, tmp_path)),
                               "tests/host", "-p", "no:cacheprovider", "-p", "no:xdist", "--junitxml", str(ssh_junit))
    timed(f"plugin_ssh_{state}_s", started)
    assert over_ssh.returncode == run.returncode, over_ssh.stdout[-3000:]
    say(f"the pytest plugin, {state}: @local {local}, exit {run.returncode}")
    return local, plugin_outcomes(ssh_junit.read_text())


def doctor_both_ways(lab_host, tmp_path: Path, state: str) -> tuple[tuple[int, dict], tuple[int, dict]]:
    """`hostkit doctor --format json` on the host through `@local` and from the controller over
    SSH: each (exit status, {finding code: severity})."""
    started = time.monotonic()
    run = on_host(lab_host, "hostkit doctor inventory.py --format json")
    timed(f"doctor_local_{state}_s", started)
    document = json.loads(run.stdout)
    assert document["unreachable"] == [] and document["exit_code"] == run.returncode, run.stdout + run.stderr
    started = time.monotonic()
    over_ssh = hostkit_from_controller("doctor", str(ssh_inventory(lab_host, tmp_path)), "--format", "json")
    timed(f"doctor_ssh_{state}_s", started)
    ssh_document = json.loads(over_ssh.stdout)
    assert ssh_document["unreachable"] == [] and ssh_document["exit_code"] == over_ssh.returncode, over_ssh.stderr
    say(f"doctor, {state}: @local exit {run.returncode} {findings_of(document)}; "
        f"over SSH exit {over_ssh.returncode} {findings_of(ssh_document)}")
    return (run.returncode, findings_of(document)), (over_ssh.returncode, findings_of(ssh_document))


def test_the_shipped_inventory_is_one_local_host():
    namespace: dict = {}
    exec(compile((REPO / "examples/ci/inventory.py").read_text(), "examples/ci/inventory.py", "exec"), namespace)
    assert [name for name, _ in namespace["hosts"]] == ["@local"]


def test_provision_then_verify_the_plugin_and_doctor_on_the_host_itself_as_over_ssh(ci_host, tmp_path):
    started = time.monotonic()
    status, output, junit = self_check(ci_host, "provision")
    timed("self_check_provision_s", started)
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

    # The pytest plugin: swap and kernel skipped (left to the container's host), nothing failed.
    plugin_local, plugin_ssh = plugin_both_ways(ci_host, tmp_path, "serving")
    assert plugin_local == plugin_ssh == areas_of(local)
    assert plugin_local["test_swap"] == plugin_local["test_kernel"] == "skipped"
    assert plugin_local["test_gpu"] == plugin_local["test_vllm_unit"] == "passed"

    (doctor_status, findings), (ssh_doctor_status, ssh_findings) = doctor_both_ways(ci_host, tmp_path, "serving")
    assert findings == ssh_findings
    assert doctor_status == ssh_doctor_status == 0, findings
    assert "critical" not in findings.values()


def test_a_stopped_unit_fails_the_job_the_plugin_and_doctor_as_over_ssh(ci_host, tmp_path):
    ci_host.ssh("systemctl stop vllm.service", check=True)
    started = time.monotonic()
    status, output, junit = self_check(ci_host, "verify")
    timed("self_check_verify_stopped_s", started)
    assert status == 1, output[-4000:]
    assert "==> Provisioning" not in output
    local = outcomes(junit)
    assert {check for check, outcome in local.items() if outcome == "failed"} == STOPPED_FAILS, local
    assert "expected active/running; actual inactive/dead" in failure_messages(junit)["unit active"]

    ssh_status, ssh_junit = verify_over_ssh(ci_host, tmp_path)
    assert ssh_status == 1
    assert outcomes(ssh_junit) == local

    # The plugin fails the vllm area alone, both ways.
    plugin_local, plugin_ssh = plugin_both_ways(ci_host, tmp_path, "stopped")
    assert plugin_local == plugin_ssh == areas_of(local)
    assert {test for test, outcome in plugin_local.items() if outcome == "failed"} == {"test_vllm_unit"}

    (doctor_status, findings), (ssh_doctor_status, ssh_findings) = doctor_both_ways(ci_host, tmp_path, "stopped")
    assert findings == ssh_findings
    assert doctor_status == ssh_doctor_status == 1 and findings["vllm-not-running"] == "critical", findings


def test_a_wedged_nvidia_smi_fails_verify_and_doctor_within_their_deadlines_naming_it(ci_host, tmp_path):
    # Serving again first, so that what fails below is the GPU's alone.
    ci_host.ssh("systemctl start vllm.service", check=True)
    ssh_status, ssh_junit = verify_over_ssh(ci_host, tmp_path)
    assert ssh_status == 0, failure_messages(ssh_junit)

    named = f"timed out after {WEDGED_S} s"
    try:
        ci_host.ssh(f"printf '#!/bin/sh\\nexec sleep 100000\\n' >{FAKE_NVIDIA_SMI} && chmod 755 {FAKE_NVIDIA_SMI} "
                    f"&& [ \"$(command -v nvidia-smi)\" = {FAKE_NVIDIA_SMI} ]", check=True)
        env = f"HOSTKIT_NVIDIA_SMI_TIMEOUT={WEDGED_S}"
        started = time.monotonic()
        verified = on_host(ci_host, "hostkit verify inventory.py --format json", env=env, timeout=300)
        seconds = timed("wedged_verify_local_s", started)
        assert seconds < WEDGED_BOUND_S and verified.returncode == 1, (seconds, verified.stdout, verified.stderr)
        (host,) = json.loads(verified.stdout)["hosts"]
        assert host["reachable"], host
        failed = {(check["area"], check["name"]): check["actual"] for check in host["checks"] if not check["ok"]}
        assert failed and {area for area, _ in failed} == {"gpu"}, failed
        assert any(f"nvidia-smi --query-gpu {named}" in actual for actual in failed.values()), failed

        started = time.monotonic()
        doctored = on_host(ci_host, "hostkit doctor inventory.py --format json", env=env, timeout=300)
        seconds = timed("wedged_doctor_local_s", started)
        assert seconds < WEDGED_BOUND_S and doctored.returncode == 1, (seconds, doctored.stdout, doctored.stderr)
        document = json.loads(doctored.stdout)
        (timed_out,) = [f for f in document["hosts"][0]["findings"] if f["code"] == "command-timed-out"]
        assert timed_out["severity"] == "critical" and f"nvidia-smi --query-gpu {named}" in timed_out["problem"]
        say(f"wedged nvidia-smi through @local: verify {failed}; doctor: {timed_out['problem']}")

        # Over SSH, with the same deadline on the controller: the same failures.
        ssh_env = {"HOSTKIT_NVIDIA_SMI_TIMEOUT": str(WEDGED_S)}
        started = time.monotonic()
        ssh_verified = hostkit_from_controller("verify", str(ssh_inventory(ci_host, tmp_path)), "--format", "json",
                                               env=ssh_env)
        timed("wedged_verify_ssh_s", started)
        (ssh_host,) = json.loads(ssh_verified.stdout)["hosts"]
        assert ssh_verified.returncode == 1
        assert {(check["area"], check["name"]): check["actual"] for check in ssh_host["checks"]
                if not check["ok"]} == failed
        started = time.monotonic()
        ssh_doctored = hostkit_from_controller("doctor", str(ssh_inventory(ci_host, tmp_path)), "--format", "json",
                                               env=ssh_env)
        timed("wedged_doctor_ssh_s", started)
        assert ssh_doctored.returncode == 1 and findings_of(json.loads(ssh_doctored.stdout)) == findings_of(document)
    finally:
        ci_host.ssh(f"rm -f {FAKE_NVIDIA_SMI}", check=True)
