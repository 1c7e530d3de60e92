"""pyinfra inventory hosts -> testinfra hostspecs and ssh_config blocks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import paramiko
import pytest
import testinfra
from testinfra.backend import parse_hostspec

from hostkit.smoke.sampler import ssh_argv_from_data
from hostkit.verify.targets import (
    InventoryError,
    Target,
    load_targets_isolated,
    targets_from_hosts,
    write_ssh_config,
)

PLAN_FIXTURES = Path(__file__).parent / "fixtures" / "plan"
LAB_KEY_DATA = {
    "ssh_hostname": "127.0.0.1",
    "ssh_port": 40022,
    "ssh_user": "root",
    "ssh_key": "/keys/lab key",
    "ssh_known_hosts_file": "/dev/null",
    "ssh_strict_host_key_checking": "no",
    "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct",
    "gpu_required": False,
}


def _target(name: str = "lab1", **data) -> Target:
    return targets_from_hosts([(name, {**LAB_KEY_DATA, **data})])[0]


def test_ssh_config_carries_pyinfra_connection_data(tmp_path):
    path = write_ssh_config([_target()], tmp_path / "ssh_config")
    config = paramiko.SSHConfig.from_path(str(path))
    entry = config.lookup("lab1")
    assert entry["hostname"] == "127.0.0.1"
    assert entry["port"] == "40022"
    assert entry["user"] == "root"
    assert entry["identityfile"] == ["/keys/lab key"]
    assert entry["stricthostkeychecking"] == "no"
    assert entry["userknownhostsfile"] == "/dev/null"
    assert path.stat().st_mode & 0o777 == 0o600


def test_host_name_is_the_default_hostname_and_other_keys_are_optional(tmp_path):
    target = targets_from_hosts([("gpu-01.example.com", {"vllm_model": "m/m", "gpu_required": False})])[0]
    entry = paramiko.SSHConfig.from_text(target.ssh_config_block()).lookup("gpu-01.example.com")
    assert entry["hostname"] == "gpu-01.example.com"
    assert "port" not in entry and "identityfile" not in entry


def test_hostspec_names_the_pyinfra_host_for_testinfra(tmp_path):
    spec = _target().hostspec("paramiko", tmp_path / "ssh_config")
    name, options = parse_hostspec(spec)
    assert name == "lab1"
    assert options["connection"] == "paramiko"
    assert options["ssh_config"] == str(tmp_path / "ssh_config")
    host = testinfra.get_host(spec)
    assert host.backend.get_pytest_id() == "paramiko://lab1"
    assert host.backend.ssh_config == str(tmp_path / "ssh_config")


def test_sudo_data_maps_to_testinfra_sudo(tmp_path):
    spec = _target(_sudo=True, _sudo_user="admin").hostspec("ssh", tmp_path / "c")
    _, options = parse_hostspec(spec)
    assert options["sudo"] is True and options["sudo_user"] == "admin"
    assert "sudo" not in parse_hostspec(_target().hostspec("ssh", tmp_path / "c"))[1]


def test_invalid_inventory_data_is_an_inventory_error_naming_the_key():
    with pytest.raises(InventoryError, match="vllm_port"):
        targets_from_hosts([("gpu-a1", {"vllm_model": "m/m", "vllm_port": 99999})])
    with pytest.raises(InventoryError, match="no host selected"):
        targets_from_hosts([])


@pytest.mark.processes
def test_load_targets_reads_group_data_like_pyinfra(tmp_path, monkeypatch):
    shutil.copytree(PLAN_FIXTURES, tmp_path / "inv")
    monkeypatch.chdir(tmp_path / "inv")
    targets = load_targets_isolated("inventory.py", ["gpu-b1"])
    assert [t.name for t in targets] == ["gpu-b1"]
    assert targets[0].data["ssh_hostname"] == "10.0.0.12"
    assert targets[0].profile.vllm_version == "0.10.2"


@pytest.mark.processes
def test_load_targets_isolated_reports_bad_inventories(tmp_path, monkeypatch):
    monkeypatch.chdir(PLAN_FIXTURES)
    with pytest.raises(InventoryError, match="swap_sise"):
        load_targets_isolated("inventory_bad.py")
    with pytest.raises(InventoryError, match="does not exist"):
        load_targets_isolated(str(tmp_path / "missing.py"))
    (tmp_path / "broken.py").write_text("hosts = [\n")
    with pytest.raises(InventoryError, match="cannot load inventory"):
        load_targets_isolated(str(tmp_path / "broken.py"))


@pytest.mark.parametrize(("given", "word"), [(False, "no"), ("off", "no"), (True, "yes"), ("accept-new", "accept-new")])
def test_one_reader_of_ssh_data_for_verify_and_smoke(given, word):
    """verify's ssh_config and smoke's ssh command line take the same words from pyinfra's keys."""
    data = {**LAB_KEY_DATA, "ssh_key": "~/keys/lab", "ssh_strict_host_key_checking": given}
    entry = paramiko.SSHConfig.from_text(_target(**data).ssh_config_block()).lookup("lab1")
    assert entry["stricthostkeychecking"] == word
    assert entry["identityfile"] == [os.path.expanduser("~/keys/lab")]
    argv = ssh_argv_from_data("lab1", data)
    assert f"StrictHostKeyChecking={word}" in argv
    assert argv[argv.index("-i") + 1] == os.path.expanduser("~/keys/lab")
    assert argv[-1] == "root@127.0.0.1" and argv[argv.index("-p") + 1] == "40022"


def test_local_is_testinfras_local_backend_and_no_ssh_host():
    from hostkit.verify.targets import targets_from_hosts, write_ssh_config

    off = {"vllm_enabled": False}
    local, remote = targets_from_hosts([("@local", {"_sudo": True, **off}), ("@ssh/gpu-01", off)])
    assert local.hostspec("ssh", "/x") == "local://?sudo=true" and local.backend_hostname == "local"
    assert remote.ssh_config_block().startswith("Host %40ssh%2Fgpu-01\n    HostName gpu-01\n")


def test_connectors_other_than_ssh_and_local_are_refused():
    from hostkit.verify.targets import InventoryError, targets_from_hosts

    with pytest.raises(InventoryError, match="not through @docker/c1"):
        targets_from_hosts([("@docker/c1", {})])
