"""Fixtures for end-to-end tests on lab hosts: real Debian VMs, real pyinfra over real SSH.

- `lab`: the test lab (its own directory, so it never touches hosts started by `hostkit lab up`).
- `lab_host`: a fresh host per test (a qcow2 overlay: seconds plus a boot), removed afterwards.
- `shared_lab_host`: one provisioned-once host per module, for read-only checks.
- `lab_host_factory(os_name=..., cgroup=...)`: fresh hosts of other kinds.
- `run_deploy(host_or_hosts, data=None, deploy=..., extra=())`: the pyinfra CLI on a temporary
  inventory holding those hosts with the lab data plus `data`; returns a PyinfraRun.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hostkit.lab import Lab, LabHost
from hostkit.pyinfra_runner import PyinfraRun, run_pyinfra, write_inventory

REPO = Path(__file__).resolve().parents[2]
MAIN_DEPLOY = REPO / "deploys" / "vllm_host.py"


def lab_data() -> dict:
    """The lab inventory's data, read from the shipped inventory so tests and users agree."""
    namespace: dict = {}
    exec(compile((REPO / "inventories" / "lab.py").read_text(), "inventories/lab.py", "exec"), namespace)
    return dict(namespace["LAB_DATA"])


# End-to-end tests left out of `make test` and CI; `make e2e-all` runs them. Each passed on a
# quiet lab on 2026-11-30, module by module. With them, CI would take well over its 40 minutes
# on 2 cores under qemu TCG (pytest's durations, 2026-11-30: faults 16.7 min, 5 of them one
# wait since cut from 300 s to 60 s; vLLM service 15.7; rollout 8.1; security 3.9;
# doctor/smoke 3.6; bad input 2.1). Two pytest-xdist workers gained little: the VMs already
# keep both cores busy. Each one's issue stays open while it is here.
PENDING_LAB = {
    "test_bad_input.py", "test_doctor_smoke.py", "test_faults.py", "test_rollout.py",
    "test_security.py", "test_vllm_service.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if "e2e" in path.parts:
            item.add_marker(pytest.mark.lab)
            if path.name in PENDING_LAB or f"{path.name}::{item.name}" in PENDING_LAB:
                item.add_marker(pytest.mark.pending_lab)


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Lab:
    directory = Path(os.environ.get("HOSTKIT_TEST_LAB_DIR", REPO / ".lab" / f"tests-{os.getpid()}"))
    test_lab = Lab(directory)
    yield test_lab
    test_lab.down()
    shutil.rmtree(directory, ignore_errors=True)


class _Factory:
    def __init__(self, lab: Lab, prefix: str):
        self.lab = lab
        self.prefix = prefix
        self.started: list[LabHost] = []

    def __call__(self, os_name: str = "debian12", cgroup: str = "v2", count: int = 1):
        hosts = self.lab.up(count, os_name=os_name, cgroup=cgroup, prefix=self.prefix)
        self.started.extend(hosts)
        return hosts[0] if count == 1 else hosts

    def cleanup(self) -> None:
        for lab_host in self.started:
            self.lab.remove(lab_host.name)


@pytest.fixture
def lab_host_factory(lab, request):
    factory = _Factory(lab, prefix=f"t{abs(hash(request.node.nodeid)) % 10000}x")
    yield factory
    factory.cleanup()


@pytest.fixture
def lab_host(lab_host_factory) -> LabHost:
    return lab_host_factory()


@pytest.fixture(scope="module")
def shared_lab_host(lab, request) -> LabHost:
    factory = _Factory(lab, prefix=f"m{abs(hash(request.module.__name__)) % 10000}x")
    lab_host = factory()
    yield lab_host
    factory.cleanup()


@pytest.fixture
def run_deploy(tmp_path):
    counter = iter(range(1000))

    def run(hosts, data: dict | None = None, deploy: str | Path = MAIN_DEPLOY, extra=(),
            per_host_data: dict | None = None) -> PyinfraRun:
        hosts = hosts if isinstance(hosts, (list, tuple)) else [hosts]
        entries = []
        for lab_host in hosts:
            host_data = {**lab_host.pyinfra_data(), **lab_data(), **(data or {})}
            host_data.update((per_host_data or {}).get(lab_host.name, {}))
            entries.append((lab_host.name, {k: v for k, v in host_data.items() if v is not UNSET}))
        inventory = write_inventory(tmp_path / f"inventory_{next(counter)}.py", entries)
        return run_pyinfra(inventory, deploy, *extra, cwd=REPO)

    return run


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


# Pass as a data value to drop a lab default key from the inventory.
UNSET = _Unset()
