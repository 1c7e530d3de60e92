"""bench/counting.py: remote commands counted from real tool logs, and the issue's targets.

The pyinfra logs are real `--debug` output of deploys/vllm_host.py on a fresh lab host
(first run) and of the no-op rerun that followed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.counting import (
    Target,
    ansible_remote_commands,
    median,
    per_host_max,
    pyinfra_remote_commands,
    pyinfra_uploads,
    ratio,
    targets,
)

FIXTURES = Path(__file__).parent / "fixtures" / "bench"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_pyinfra_first_run_counts_every_remote_command_and_upload():
    log = fixture("pyinfra_debug_first_run.log")
    assert pyinfra_remote_commands(log) == {"bdev1": 20}
    assert pyinfra_uploads(log) == 2  # the unit to verify and the env file


def test_pyinfra_noop_rerun_is_one_snapshot_command():
    log = fixture("pyinfra_debug_noop_rerun.log")
    assert pyinfra_remote_commands(log) == {"bdev1": 1}
    assert pyinfra_uploads(log) == 0


def test_pyinfra_commands_are_counted_per_host():
    log = "\n".join([
        "    [pyinfra.connectors.ssh] Running command on web1: (pty=False) sh -c 'true'",
        "    [pyinfra.connectors.ssh] Running command on web2: (pty=False) sh -c 'true'",
        "    [pyinfra.connectors.ssh] Running command on web1: (pty=False) sh -c 'echo Running command on web3'",
        "--> Running command on localhost: true",  # the local connector, not a remote host
    ])
    assert pyinfra_remote_commands(log) == {"web1": 2, "web2": 1}


ANSIBLE_VVV = """\
<127.0.0.1> ESTABLISH SSH CONNECTION FOR USER: root
<127.0.0.1> SSH: EXEC ssh -C -o ControlMaster=auto -o ControlPersist=60s -o Port=40001 -o 'IdentityFile="/k"' -o KbdInteractiveAuthentication=no -o User="root" -o ConnectTimeout=10 -o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes -o 'ControlPath="/tmp/cp/1"' 127.0.0.1 '/bin/sh -c '"'"'/usr/bin/python3 && sleep 0'"'"''
<127.0.0.1> (0, b'{"changed": false}', b'')
<127.0.0.1> SSH: EXEC ssh -C -o ControlMaster=auto -o ControlPersist=60s -o Port=40002 -o 'IdentityFile="/k"' 127.0.0.1 '/bin/sh -c '"'"'/usr/bin/python3 && sleep 0'"'"''
<127.0.0.1> SSH: EXEC sftp -b - -C -o ControlMaster=auto -o ControlPersist=60s -o Port=40001 -o 'IdentityFile="/k"' '[127.0.0.1]'
<127.0.0.1> PUT /root/.ansible/tmp/source TO /root/.ansible/tmp/ansible-tmp-1/source
"""


def test_ansible_ssh_invocations_are_counted_per_host_by_port():
    counts = ansible_remote_commands(ANSIBLE_VVV, {40001: "a1", 40002: "a2", 40003: "a3"})
    assert counts == {"a1": 2, "a2": 1, "a3": 0}


def test_ansible_ssh_invocation_to_an_unknown_port_is_an_error_not_a_miss():
    with pytest.raises(ValueError, match="which host"):
        ansible_remote_commands(ANSIBLE_VVV, {40001: "a1"})


def test_summary_helpers():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([]) is None
    assert ratio(10.0, 2.0) == 5.0
    assert ratio(None, 2.0) is None and ratio(1.0, 0) is None
    assert per_host_max([{"a": 1, "b": 4}, {"a": 2}]) == 4
    assert per_host_max([]) is None


def test_targets_are_judged_in_the_right_direction():
    assert Target("speed", 12.0, 10, "min").met is True
    assert Target("speed", 9.9, 10, "min").met is False
    assert Target("commands", 5, 5, "max").met is True
    assert Target("commands", 6, 5, "max").met is False
    assert Target("unmeasured", None, 5, "max").verdict() == "not measured"
    judged = {t.name: t.met for t in targets({"noop_speedup": 20.0, "first_speedup": 2.0, "fleet_noop_ratio": 1.5})}
    assert judged["no-op rerun at least 10x faster than Ansible"] is True
    assert judged["first run at least 3x faster than Ansible"] is False
    assert judged["3 hosts in at most 1.3x the time of 1 (no-op rerun)"] is False
    assert judged["verify: at most 3 remote commands per host"] is None
