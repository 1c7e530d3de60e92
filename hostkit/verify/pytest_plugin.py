"""pytest plugin: `pytest --pyinfra-inventory INVENTORY` runs testinfra tests on its hosts.

Each pyinfra host becomes a testinfra host with the same ssh settings (see
hostkit.verify.targets), handed to testinfra as `--hosts`, so every testinfra test runs
once per inventory host and its id carries the host name: `test_swap[paramiko://gpu-01]`.
`--connection ssh` picks testinfra's ssh backend instead of paramiko. `@local` runs on this
machine through testinfra's local backend (`test_swap[local]`).

Fixtures: `hostkit_report`, the checks of the current host (gathered once per host and
session, with the same two remote commands as `hostkit verify`), and `hostkit_target`.
`assert_area(report, area)` fails a test with every failed check of that area.

Under pytest-xdist, `--dist loadgroup` keeps each host's tests on one worker, so each
host is still gathered once. The inventory is loaded in a child process: pyinfra's CLI
package monkey-patches the standard library when imported, which pytest must not get.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

_TARGETS = pytest.StashKey[dict]()
_REPORTS = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hostkit", "vllm-hostkit verification")
    group.addoption("--pyinfra-inventory", metavar="INVENTORY",
                    help="Run testinfra tests on the hosts of this pyinfra inventory, with its ssh settings.")
    group.addoption("--pyinfra-limit", action="append", default=[], metavar="HOST",
                    help="Only these inventory hosts or groups (pyinfra --limit patterns); repeatable.")
    group.addoption("--hostkit-ready-timeout", type=int, metavar="SECONDS",
                    help="Wait at most this long for vLLM to become ready (default: vllm_ready_timeout).")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "xdist_group(name): keep tests of one group on one xdist worker")
    inventory = config.getoption("pyinfra_inventory", None)
    if not inventory:
        return
    from hostkit.verify.targets import InventoryError, load_targets_isolated, write_ssh_config

    # An xdist worker receives the controller's options, --hosts included: it rebuilds its own.
    if config.option.hosts and not hasattr(config, "workerinput"):
        raise pytest.UsageError("--pyinfra-inventory and --hosts exclude each other")
    try:
        targets = load_targets_isolated(inventory, config.getoption("pyinfra_limit"))
    except InventoryError as error:
        raise pytest.UsageError(str(error)) from None
    directory = tempfile.mkdtemp(prefix="hostkit-pytest-")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    ssh_config = write_ssh_config(targets, Path(directory) / "ssh_config")
    connection = config.option.connection or "paramiko"
    config.option.hosts = ",".join(target.hostspec(connection, ssh_config) for target in targets)
    config.stash[_TARGETS] = {target.backend_hostname: target for target in targets}
    config.stash[_REPORTS] = {}


# Before xdist's own hook, which turns xdist_group marks into the groups it schedules by.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _TARGETS not in config.stash:
        return
    for item in items:
        host = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")
        if host is not None:
            item.add_marker(pytest.mark.xdist_group(name=host.backend.get_hostname()))


@pytest.fixture(scope="module")
def hostkit_target(request: pytest.FixtureRequest, host):
    """The inventory host (name, data, validated profile) that `host` connects to."""
    from hostkit.verify.targets import attach_paramiko

    targets = request.config.stash.get(_TARGETS, None)
    if targets is None:
        pytest.skip("hostkit checks need --pyinfra-inventory INVENTORY")
    target = targets[host.backend.get_hostname()]
    try:
        attach_paramiko(host, target)
    except Exception as error:  # paramiko and socket errors alike: unreachable
        unreachable = f"{target.name}: cannot connect: {type(error).__name__}: {error}"
    else:
        return target
    pytest.fail(unreachable, pytrace=False)


@pytest.fixture(scope="module")
def hostkit_report(request: pytest.FixtureRequest, host, hostkit_target):
    """The checks of this host against its plan; gathered once per host per session."""
    from hostkit.verify.runner import verify_host

    reports = request.config.stash[_REPORTS]
    if hostkit_target.name not in reports:
        timeout = request.config.getoption("hostkit_ready_timeout")
        reports[hostkit_target.name] = verify_host(hostkit_target.name, host, hostkit_target.profile, timeout)
    report = reports[hostkit_target.name]
    if not report.reachable:
        pytest.fail(f"{report.name}: not verified: {report.error}", pytrace=False)
    return report


def assert_area(report, area: str) -> None:
    """Fail with every failed check of `area` (expected, actual, fix); a failed plan fails every area."""
    checks = [check for check in report.checks if check.area in (area, "plan")]
    failed = [check for check in checks if not check.ok]
    if failed:
        pytest.fail(f"{report.name}: " + "\n".join(check.message() for check in failed), pytrace=False)
    # An area a container leaves to its host (swap, sysctl, THP, NVMe) is skipped, as verify's
    # JUnit reports it, not passed.
    area_checks = [check for check in checks if check.area == area]
    if area_checks and all(check.not_applicable for check in area_checks):
        pytest.skip("; ".join(sorted({check.not_applicable for check in area_checks})))
