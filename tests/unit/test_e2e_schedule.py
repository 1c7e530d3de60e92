"""`make test`'s end-to-end selection as pytest really collects it (tests/e2e/conftest.py's
collection hook): every test on a lane, the Debian 13 kernel run left to `make e2e-releases`,
and each shared host's modules in the order their tests build on."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import MAIN_HOST_MODULES

REPO = Path(__file__).resolve().parents[2]
MAKE_TEST_MARKS = re.search(r'^XDIST := .* -m "([^"]+)"', (REPO / "Makefile").read_text(), re.M).group(1)


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    out = tmp_path_factory.mktemp("schedule") / "items.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "--collect-only", "-q", "-p", "no:xdist",
         "-p", "tests.unit.e2e_schedule_probe", "-m", MAKE_TEST_MARKS],
        cwd=REPO, capture_output=True, text=True, timeout=120, env={"E2E_SCHEDULE_OUT": str(out), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


pytestmark = pytest.mark.processes


def test_every_test_has_a_lane(collected):
    assert collected
    assert [item["nodeid"] for item in collected if item["lane"] in (None, "unscheduled")] == []


def test_kernel_tuning_on_debian13_is_not_in_make_test(collected):
    kernel = [item["nodeid"] for item in collected if item["nodeid"].startswith("tests/e2e/test_kernel.py")]
    assert kernel and not [nodeid for nodeid in kernel if "debian13" in nodeid]


def test_the_main_deploy_runs_first_on_the_main_host_then_its_sharers_in_order(collected):
    main = [item["nodeid"] for item in collected
            if item["nodeid"].split("::")[0].rsplit("/", 1)[-1] in MAIN_HOST_MODULES and "container" not in item["nodeid"]]
    assert main[0].startswith("tests/e2e/test_main_deploy.py::test_deploy_converges"), main[:3]
    modules = [nodeid.split("::")[0].rsplit("/", 1)[-1] for nodeid in main]
    assert sorted(modules, key=MAIN_HOST_MODULES.index) == modules


def test_each_module_runs_its_container_tests_before_its_vm_tests(collected):
    """A module's container host is started once, not again after each VM test."""
    modules = {item["nodeid"].split("::")[0] for item in collected}
    assert "tests/e2e/test_vllm_service.py" in modules
    for module in modules:
        kinds = ["container" if "[container" in item["nodeid"] else "vm" for item in collected
                 if item["nodeid"].startswith(f"{module}::")]
        assert kinds == sorted(kinds), f"{module}: {kinds}"
