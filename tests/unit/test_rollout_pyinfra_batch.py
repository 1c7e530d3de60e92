"""Reading pyinfra's --json output per host. Fixtures are real pyinfra 3.10 runs of
fixtures/rollout/fake_deploy.py over fixtures/rollout/fake_inventory.py (@fake hosts):
h1 already configured, h3's restart fails, h4 outside the --limit."""

import json
import shutil
from pathlib import Path

import pytest

from hostkit.fleet.pyinfra_runner import PyinfraRun
from hostkit.rollout.pyinfra_batch import PyinfraBatchDeployer, limit_args, read_batch, redact

FIXTURES = Path(__file__).parent / "fixtures" / "rollout"
BATCH = ["@fake/h1", "@fake/h2", "@fake/h3"]


def recorded(name: str) -> PyinfraRun:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    return PyinfraRun(data["argv"], data["returncode"], data["stdout"], data["stderr"], seconds=2.25)


def test_real_run_gives_changes_and_failures_per_host():
    batch = read_batch(recorded("run-one-failed"), BATCH, dry=False)
    assert batch.seconds == 2.25
    h1, h2, h3 = (batch.hosts[name] for name in BATCH)
    assert h1.ok and h1.changed == ["Restart the service"]  # its configuration was already right
    assert h2.ok and h2.changed == ["Write the configuration", "Restart the service"]
    assert not h3.ok and h3.errors == ["Restart the service"]
    assert h3.failure == "operation failed: Restart the service: unit failed"  # its own words, from the log


def test_dry_run_gives_what_would_change_per_host():
    batch = read_batch(recorded("dry-plan"), BATCH, dry=True)
    assert batch.hosts["@fake/h1"].would_change == ["Restart the service"]
    assert batch.hosts["@fake/h2"].would_change == ["Write the configuration", "Restart the service"]
    assert all(host.ok and not host.changed for host in batch.hosts.values())


def test_a_run_refused_while_preparing_fails_the_whole_batch():
    batch = read_batch(recorded("run-refused-at-prepare"), BATCH, dry=False)
    assert all(not host.ok for host in batch.hosts.values())
    assert "pyinfra exited 1 without results" in batch.hosts["@fake/h1"].failure
    assert "nothing was changed on any host" in batch.hosts["@fake/h1"].failure


def test_when_every_host_failed_the_log_still_gives_the_operations():
    # pyinfra prints no JSON then ("No hosts remaining!").
    batch = read_batch(recorded("run-all-failed"), ["@fake/h3"], dry=False)
    h3 = batch.hosts["@fake/h3"]
    assert not h3.ok
    assert h3.changed == ["Write the configuration"] and h3.errors == ["Restart the service"]
    assert h3.failure == "operation failed: Restart the service: unit failed"


def test_a_batch_host_missing_from_the_results_is_not_counted_as_done():
    batch = read_batch(recorded("run-one-failed"), ["@fake/h2", "@fake/typo"], dry=False)
    assert batch.hosts["@fake/h2"].ok
    assert not batch.hosts["@fake/typo"].ok and "not part of the pyinfra run" in batch.hosts["@fake/typo"].failure


def test_limit_args_and_redaction():
    assert limit_args(["a", "b"]) == ["--limit=a", "--limit=b"]
    assert limit_args(["gpu[1]"]) == ["--limit=gpu[[]1]"]
    assert redact("curl -H 'Bearer s3cret' x", ["s3cret"]) == "curl -H 'Bearer ********' x"


@pytest.mark.processes
def test_deployer_limits_the_real_cli_to_the_batch(tmp_path):
    for name in ("fake_inventory.py", "fake_deploy.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    deploy = PyinfraBatchDeployer(tmp_path / "fake_inventory.py", tmp_path / "fake_deploy.py", cwd=tmp_path)

    planned = deploy(["@fake/h2", "@fake/h4"], dry=True)
    assert set(planned.hosts) == {"@fake/h2", "@fake/h4"}
    assert planned.hosts["@fake/h4"].would_change == ["Write the configuration", "Restart the service"]

    ran = deploy(["@fake/h1", "@fake/h3"], dry=False)
    assert ran.hosts["@fake/h1"].ok and ran.hosts["@fake/h1"].changed == ["Restart the service"]
    assert not ran.hosts["@fake/h3"].ok
