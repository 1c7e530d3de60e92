"""Security audit of a container host after the main deploy (deploys/vllm_host.py, lab data,
vLLM stand-in): file modes and owners, a non-root service, the API key kept out of argv, the unit
file, pyinfra's output (also at -vvv --debug) and the journal, and the unit's exposure score.
All of it is systemd's and the deploy's: the files that only a VM gets (the swap file, the THP
unit, the sysctl file) are checked by test_main_deploy.py.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.lab_shell import assert_root_owned, sh
from hostkit_lab.standin.install import install_standin


SECRET = "e2e-security-secret-8c1f"
DATA = {
    "vllm_api_key": SECRET,
    "vllm_served_model_name": "lab-model",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 180,
}
HOST_KIND = "container"
ENV_FILE = "/etc/vllm-hostkit/vllm.env"
MAX_EXPOSURE = 2.5


@pytest.fixture(scope="module")
def provisioned(shared_lab_host, tmp_path_factory):
    """(host, runs): the host after a deploy of a new key, then a rerun at -vvv --debug --diff that
    rewrites the env file (a new key) so the secret passes through pyinfra while it logs all."""
    from hostkit.fleet.pyinfra_runner import run_pyinfra
    from tests.e2e.conftest import MAIN_DEPLOY, REPO, lab_inventory

    install_standin(shared_lab_host)
    directory = tmp_path_factory.mktemp("security")
    runs = []
    for index, (key, extra) in enumerate(((f"{SECRET}-first", ()), (SECRET, ("-vvv", "--debug", "--diff")))):
        inventory = lab_inventory(directory / f"inventory{index}.py", shared_lab_host, {**DATA, "vllm_api_key": key})
        run = run_pyinfra(inventory, MAIN_DEPLOY, *extra, cwd=REPO)
        assert run.ok, run.output[-4000:]
        runs.append(run)
    assert "vllm.env" in runs[1].output  # the debug run uploaded the key
    return shared_lab_host, runs


def test_environment_file_is_not_world_readable(provisioned):
    host, _ = provisioned
    mode, user, group = sh(host, f"stat -c '%a %U %G' {ENV_FILE}").split()
    assert int(mode, 8) & 0o007 == 0 and (user, group) == ("root", "root"), mode
    assert int(sh(host, "stat -c %a /etc/vllm-hostkit").strip(), 8) & 0o007 == 0
    assert host.ssh(f"runuser -u vllm -- cat {ENV_FILE}").returncode == 1  # not even the service user


def test_the_unit_file_is_root_owned_and_not_writable_by_others(provisioned):
    host, _ = provisioned
    assert_root_owned(host, "/etc/systemd/system/vllm.service")


def test_service_runs_as_non_root(provisioned):
    host, _ = provisioned
    pid = sh(host, "systemctl show -p MainPID --value vllm.service").strip()
    assert pid != "0"
    users = set(sh(host, f"ps -o user= --pid {pid} --ppid {pid}").split())
    assert users == {"vllm"}, users


def test_secret_is_absent_from_argv_unit_and_journal(provisioned):
    host, _ = provisioned
    places = {
        "argv": "ps -eo args=",
        "/proc cmdlines": "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '",
        "unit file": "systemctl cat vllm.service",
        "unit properties": "systemctl show vllm.service",
        "journal": "journalctl --no-pager -o cat",
    }
    for place, command in places.items():
        assert SECRET not in sh(host, command), f"the API key shows in {place}"
    # The key is in one file, where it belongs, and in no other the deploy could have written.
    holders = sh(host, f"grep -rlsF -- {SECRET} /etc /run /var/lib /opt /tmp /root /home || true").split()
    assert holders == [ENV_FILE], holders


def test_secret_is_absent_from_pyinfra_output_even_at_debug(provisioned):
    _, runs = provisioned
    for run in runs:
        assert SECRET not in run.output, " ".join(run.argv)


def test_systemd_exposure_score_is_at_most_2_5(provisioned):
    host, _ = provisioned
    report = sh(host, "systemd-analyze security --no-pager vllm.service")
    exposure = float(re.search(r"Overall exposure level for vllm\.service: ([\d.]+)", report).group(1))
    assert exposure <= MAX_EXPOSURE, report
