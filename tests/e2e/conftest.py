"""Fixtures for end-to-end tests on lab hosts: real Debian VMs, real pyinfra over real SSH.

- `lab`: the test lab (its own directory, so it never touches hosts started by `python -m hostkit_lab up`).
- Two kinds of host: a VM (qemu TCG, a kernel of its own: swap, sysctls, THP, NVMe, reboots,
  memory limits and OOM kills) or a container (systemd-nspawn, systemd only, native speed).
  A module says which it needs in `HOST_KIND` ("vm" unless it says "container"); the
  fixtures below start hosts of that kind.
- `lab_host`: a fresh host per test (a qcow2 overlay and a sparse raw NVMe disk: seconds plus a boot), removed afterwards.
- `shared_lab_host`: one fresh host per module, shared by that module's tests.
- `main_host`: a fresh VM with the vLLM stand-in, shared by the modules in MAIN_HOST_MODULES:
  test_main_deploy.py provisions it, the modules after it deploy their own data on it.
- `main_container`: a fresh container host with the stand-in, shared by the tests of
  MAIN_HOST_MODULES that need only systemd (their host parameter "container"; "vm" is
  `main_host`): `main_host_for(request)` gives a module's parametrised fixture the one it asks for.
- `lab_fleet`: three fresh container hosts with the stand-in, shared by the modules in FLEET_MODULES.
- `release_host(shared_hosts, os_name)`: the Debian 11 (cgroup v1) or 13 (cgroup v2) VM that
  test_distros.py provisions with the main deploy and test_vllm_service.py's kernel-cgroup tests reuse.
- `lab_host_factory(os_name=..., cgroup=..., kind=...)`: fresh hosts of other kinds.
- `run_deploy(host_or_hosts, data=None, deploy=..., extra=())` (`module_run_deploy` for module
  fixtures): the pyinfra CLI on a temporary
  inventory holding those hosts with the lab data plus `data`; returns a PyinfraRun.
- `lab_inventory(path, host_or_hosts, data=None)`: that inventory, for tests that run something else
  on it (hostkit verify or rollout, pyinfra in the background).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from hostkit_lab import Lab, LabHost
from hostkit.fleet.pyinfra_runner import PyinfraRun, run_pyinfra, write_inventory
from tests.e2e import lanes
from hostkit_lab.standin.install import install_standin

REPO = Path(__file__).resolve().parents[2]
MAIN_DEPLOY = REPO / "deploys" / "vllm_host.py"


def lab_data() -> dict:
    """The lab inventory's data, read from the shipped inventory so tests and users agree."""
    namespace: dict = {}
    exec(compile((REPO / "inventories" / "lab.py").read_text(), "inventories/lab.py", "exec"), namespace)
    return dict(namespace["LAB_DATA"])


def lab_inventory(path: Path, hosts, data: dict | None = None, per_host_data: dict | None = None) -> Path:
    """A pyinfra inventory at `path` of lab hosts, each with its connection data, the lab data,
    `data` and its own entry in `per_host_data` (the later win); a value UNSET drops its key."""
    return write_inventory(path, [
        lab_entry(lab_host.name, lab_host, {**(data or {}), **(per_host_data or {}).get(lab_host.name, {})})
        for lab_host in (hosts if isinstance(hosts, (list, tuple)) else [hosts])
    ])


def lab_entry(name: str, lab_host: LabHost, data: dict) -> tuple[str, dict]:
    """An inventory entry `name` that reaches `lab_host`: its connection data, the lab data and
    `data` (the later win); a value UNSET drops its key."""
    host_data = {**lab_host.pyinfra_data(), **lab_data(), **data}
    return name, {key: value for key, value in host_data.items() if value is not UNSET}


# `make test` runs the end-to-end modules on pytest-xdist workers, one lane each, scheduled
# from measured durations (tests/e2e/lanes.py). Lab VMs in tests get one CPU each: two
# single-CPU VMs under qemu TCG run side by side at full speed on a 2-core machine (measured:
# 44 and 46 s for a workload that took one VM alone 46 s), where two 2-CPU VMs slow each
# other down (57 and 58 s). Container hosts run at native speed beside them.
LAB_CPUS = 1

# Boots are the slowest part of the lab (qemu TCG), so some modules share hosts. Those run
# first, in this order, next to the others sharing their hosts, and each shared host is removed
# after the last test that uses it (see pytest_runtest_teardown). The rest run in file order.
MAIN_HOST_MODULES = ("test_main_deploy.py", "test_bad_input.py", "test_doctor_smoke.py", "test_monitoring.py")
# Their tests that need only systemd (a test parameter "container") share one container host
# instead, in the same module order: the VM keeps swap, the kernel's settings, memory limits and
# OOM kills, and the main deploy end to end (a parameter "vm", or none).
MAIN_GROUP, MAIN_CONTAINER_GROUP = "main host", "main container"
FLEET_MODULES = ("test_rollout.py", "test_verify.py")
# The other releases' VMs, one each, with the cgroup version their users mostly run: test_distros.py
# provisions each with the main deploy (so it goes first), then test_vllm_service.py's tests of
# what the cgroup version changes converge the vLLM unit on it. A boot each saved under qemu TCG.
RELEASE_HOSTS = {"debian11": "v1", "debian13": "v2"}
RELEASE_HOST_PARAMETERS = {("test_distros.py", "debian11"): "debian11", ("test_distros.py", "debian13"): "debian13",
                           ("test_vllm_service.py", "v1"): "debian11", ("test_vllm_service.py", "v2"): "debian13"}
MODULE_ORDER = (*MAIN_HOST_MODULES, *FLEET_MODULES, "test_distros.py")
# Modules whose parameter starts a host of its own: each such module[parameter] is a lane group.
HOST_PARAMETERS = {
    "test_vllm_service.py": ("container", "v2", "v1"),
    "test_kernel.py": ("debian12", "debian13"),
    "test_distros.py": ("debian11", "debian13"),
    "test_real_vllm.py": ("container", "vm"),
}
# Real vLLM at native speed in containers, CPU-bound for minutes: side by side in the two lanes
# they took 980 s and 1257 s (cold CI run of 6a42048), about twice their time alone. One lane
# runs them one after the other.
REAL_VLLM_CONTAINERS = ("test_real_vllm.py[container]", "test_cure.py")
REAL_VLLM_CONTAINERS_GROUP = "real vLLM containers"
# Kernel tuning on Debian 13 (marker other_release): `make e2e-releases`, not `make test`.
OTHER_RELEASE = ("test_kernel.py[debian13]",)

# The data test_rollout.py leaves `lab_fleet` on: test_verify.py starts from a converged fleet
# (its own first deploy changes nothing), and from three fresh hosts when run alone.
FLEET_DATA = {
    "vllm_served_model_name": "lab-model-v2",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 120,
}


def group_of(module: str, param: str | None) -> str:
    """The lane group of a test in `module` whose parameter id is `param`: its hosts' sharers,
    or REAL_VLLM_CONTAINERS_GROUP."""
    group = _hosts_group(module, param)
    return REAL_VLLM_CONTAINERS_GROUP if group in REAL_VLLM_CONTAINERS else group


def _hosts_group(module: str, param: str | None) -> str:
    if module in MAIN_HOST_MODULES:
        return MAIN_CONTAINER_GROUP if "container" in (param or "").split("-") else MAIN_GROUP
    if module in FLEET_MODULES:
        return "fleet"
    if module in HOST_PARAMETERS:
        for part in (param or "").split("-"):
            if (module, part) in RELEASE_HOST_PARAMETERS:
                return release_group(RELEASE_HOST_PARAMETERS[module, part])
            if part in HOST_PARAMETERS[module]:
                return f"{module}[{part}]"
        raise LookupError(f"{module}[{param}]: its host parameter is none of {HOST_PARAMETERS[module]}")
    return module


def release_group(os_name: str) -> str:
    return f"{os_name} host"


def item_group(item) -> str:
    return group_of(Path(str(item.fspath)).name, item.callspec.id if hasattr(item, "callspec") else None)


def run_order(item) -> tuple[int, int]:
    """Unit tests first, then the end-to-end modules in MODULE_ORDER, then the others."""
    path = Path(str(item.fspath))
    if "e2e" not in path.parts:
        return (0, 0)
    return (1, MODULE_ORDER.index(path.name) if path.name in MODULE_ORDER else len(MODULE_ORDER))


def _selected(config, items) -> list:
    """The items that `-m` will keep (pytest deselects after this hook)."""
    expression = config.getoption("markexpr")
    if not expression:
        return list(items)
    compiled = Expression.compile(expression)
    return [item for item in items
            if compiled.evaluate(lambda name, item=item: item.get_closest_marker(name) is not None)]


def _lane_count(config) -> int:
    """xdist's worker count. Each worker collects and schedules for itself: it must see the
    count that the controller was given (its own -n is unset)."""
    workerinput = getattr(config, "workerinput", None)
    workers = workerinput["workercount"] if workerinput else config.getoption("numprocesses", None)
    return workers if isinstance(workers, int) and workers > 0 else 1


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Before the other hooks (xdist reads the xdist_group marks in its own): each end-to-end
    test's marks and lane. After them (pytest reorders by fixture parameters in its own): the
    run order, and in each module the container's tests before the VMs'. Host fixtures are
    module-scoped and parametrised by host, and pytest's reordering takes a one-value
    parametrize (["container"], ["vm"]) of two tests for the same parameter (both index 0), so
    it would leave them interleaved and start a container host again at every switch."""
    e2e = [item for item in items if "e2e" in Path(str(item.fspath)).parts]
    for item in e2e:
        item.add_marker(pytest.mark.lab)
        if item_group(item) in OTHER_RELEASE:
            item.add_marker(pytest.mark.other_release)
    groups = sorted({item_group(item) for item in _selected(config, e2e)})
    schedule = lanes.assign(lanes.measured(groups), _lane_count(config))
    for item in e2e:
        item.add_marker(pytest.mark.xdist_group(schedule.get(item_group(item), "unscheduled")))
    items.sort(key=run_order)  # stable: file order within each rank
    yield
    items.sort(key=lambda item: (run_order(item), not on_a_container(item)))


def on_a_container(item) -> bool:
    """Whether the item's host parameter is a container host's."""
    return "container" in (item.callspec.id.split("-") if hasattr(item, "callspec") else ())


class SharedHosts:
    """Hosts that a lane group's modules share: started on first use, removed after the group's
    last test (all of a group's tests run on one worker, in order)."""

    def __init__(self, lab: Lab):
        self.lab = lab
        self.started: dict[str, list[LabHost]] = {}

    def get(self, group: str, count: int, prefix: str, **up) -> list[LabHost]:
        if group not in self.started:
            self.started[group] = self.lab.up(count, prefix=prefix, **up)
        return self.started[group]

    def release_unused(self, still_needed) -> None:
        for group in [name for name in self.started if name not in still_needed]:
            for lab_host in self.started.pop(group):
                self.lab.remove(lab_host.name)


_SHARED_HOSTS = pytest.StashKey[SharedHosts]()


def pytest_runtest_teardown(item, nextitem):
    shared = item.session.stash.get(_SHARED_HOSTS, None)
    if shared is not None and shared.started:
        items = item.session.items
        later = items[items.index(item) + 1:]
        shared.release_unused({item_group(later_item) for later_item in later})


def _lab_hosts(value, depth: int = 0):
    if isinstance(value, LabHost):
        yield value
    elif depth < 2 and isinstance(value, (tuple, list)):
        for part in value:
            yield from _lab_hosts(part, depth + 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries its lab hosts' kernel trouble and the free disk of the lab:
    what tells a host's fault under load (a reset NVMe, an OOM kill, a full disk) from the code's."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    hosts = {lab_host.name: lab_host for value in getattr(item, "funcargs", {}).values()
             for lab_host in _lab_hosts(value)}
    for name, lab_host in hosts.items():
        report.sections.append((f"lab host {name}: kernel console", lab_host.kernel_trouble()))
    if hosts:
        lab_dir = next(iter(hosts.values())).path.parent
        free = shutil.disk_usage(lab_dir if lab_dir.exists() else Path.cwd())
        report.sections.append(("lab disk", f"{free.free / 2**30:.1f} GiB free of {free.total / 2**30:.0f} GiB"))


@pytest.fixture(scope="session")
def shared_hosts(lab, request) -> SharedHosts:
    shared = SharedHosts(lab)
    request.session.stash[_SHARED_HOSTS] = shared
    yield shared
    shared.release_unused(())


@pytest.fixture(scope="session")
def main_host(shared_hosts) -> LabHost:
    (lab_host,) = shared_hosts.get(MAIN_GROUP, 1, prefix="main")
    install_standin(lab_host)
    return lab_host


@pytest.fixture(scope="session")
def main_container(shared_hosts) -> LabHost:
    (lab_host,) = shared_hosts.get(MAIN_CONTAINER_GROUP, 1, prefix="mainc", kind="container")
    install_standin(lab_host)
    return lab_host


def main_host_for(request) -> LabHost:
    """For a fixture of MAIN_HOST_MODULES parametrised by host: `main_container` for the
    parameter "container", `main_host` (the VM) for "vm"."""
    if request.param not in ("container", "vm"):
        raise ValueError(f"{request.fixturename}: host parameter {request.param!r}; 'container' or 'vm'")
    return request.getfixturevalue("main_container" if request.param == "container" else "main_host")


def release_host(shared_hosts: SharedHosts, os_name: str) -> LabHost:
    """The shared VM of `os_name` (RELEASE_HOSTS), with the stand-in."""
    group = release_group(os_name)
    fresh = group not in shared_hosts.started
    (lab_host,) = shared_hosts.get(group, 1, prefix=f"rel{os_name[-2:]}x", os_name=os_name,
                                   cgroup=RELEASE_HOSTS[os_name])
    if fresh:
        install_standin(lab_host)
    return lab_host


@pytest.fixture(scope="session")
def lab_fleet(shared_hosts) -> list[LabHost]:
    hosts = shared_hosts.get("fleet", 3, prefix="fleet", kind="container")
    for lab_host in hosts:
        install_standin(lab_host)
    return hosts


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Lab:
    # One lab per pytest process: xdist workers must not share lab.json.
    base = Path(os.environ.get("HOSTKIT_TEST_LAB_DIR", REPO / ".lab"))
    directory = base / f"tests-{os.getpid()}"
    test_lab = Lab(directory, cpus=LAB_CPUS)
    yield test_lab
    test_lab.down()
    shutil.rmtree(directory, ignore_errors=True)


def host_kind(module) -> str:
    """The kind of lab host a test module needs: its HOST_KIND, a VM unless it says otherwise."""
    kind = getattr(module, "HOST_KIND", "vm")
    if kind not in ("vm", "container"):
        raise ValueError(f"{module.__name__}: HOST_KIND is {kind!r}; 'vm' or 'container'")
    return kind


class _Factory:
    def __init__(self, lab: Lab, prefix: str, kind: str):
        self.lab = lab
        self.prefix = prefix
        self.kind = kind
        self.started: list[LabHost] = []

    def __call__(self, os_name: str = "debian12", cgroup: str = "v2", count: int = 1, kind: str | None = None):
        hosts = self.lab.up(count, os_name=os_name, cgroup=cgroup, prefix=self.prefix, kind=kind or self.kind)
        self.started.extend(hosts)
        return hosts[0] if count == 1 else hosts

    def cleanup(self) -> None:
        for lab_host in self.started:
            self.lab.remove(lab_host.name)


@pytest.fixture
def lab_host_factory(lab, request):
    factory = _Factory(lab, prefix=f"t{abs(hash(request.node.nodeid)) % 10000}x", kind=host_kind(request.module))
    yield factory
    factory.cleanup()


@pytest.fixture
def lab_host(lab_host_factory) -> LabHost:
    return lab_host_factory()


@pytest.fixture(scope="module")
def shared_lab_host(lab, request) -> LabHost:
    factory = _Factory(lab, prefix=f"m{abs(hash(request.module.__name__)) % 10000}x", kind=host_kind(request.module))
    lab_host = factory()
    yield lab_host
    factory.cleanup()


@pytest.fixture
def run_deploy(tmp_path):
    return deploy_runner(tmp_path)


@pytest.fixture(scope="module")
def module_run_deploy(tmp_path_factory):
    """run_deploy for module-scoped fixtures."""
    return deploy_runner(tmp_path_factory.mktemp("deploy"))


def deploy_runner(tmp_path: Path):
    counter = iter(range(1000))

    def run(hosts, data: dict | None = None, deploy: str | Path = MAIN_DEPLOY, extra=(),
            per_host_data: dict | None = None, timeout: float = 1800) -> PyinfraRun:
        inventory = lab_inventory(tmp_path / f"inventory_{next(counter)}.py", hosts, data, per_host_data)
        return run_pyinfra(inventory, deploy, *extra, cwd=REPO, timeout=timeout)

    return run


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


# Pass as a data value to drop a lab default key from the inventory.
UNSET = _Unset()
