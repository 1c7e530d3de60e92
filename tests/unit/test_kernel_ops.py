"""Kernel operations against fake snapshots: what they yield, refuse and leave alone.

The operations' generators run as pyinfra runs them (`_inner`, with a fake `host` in
pyinfra's context); the shell they yield runs under sh against a fake /proc/sys tree.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest
from pyinfra.api.exceptions import OperationValueError
from pyinfra.context import ctx_host

from hostkit.desired.kernel import render_sysctl_file, render_thp_unit, sysctl_conflicts, wanted_sysctl
from hostkit.facts.kernel import (
    KernelFact,
    KernelState,
    SysctlAssignment,
    SysctlFile,
    ThpSetting,
    sysctl_path,
)
from hostkit.facts.system import SystemFact
from hostkit.operations import kernel
from hostkit.paths import SYSCTL_FILE
from hostkit.plan.plans import KernelPlan
from hostkit.plan.scope import snapshot_scope
from hostkit.verify.checks import kernel_checks
from tests.unit.op_host import OpHost, refusal_text

PLAN = KernelPlan(
    sysctl={"vm.swappiness": "10", "net.ipv4.tcp_rmem": "4096 131072 6291456"},
    thp_enabled="madvise",
    thp_defrag="defer",
)
ENABLED = ("always", "madvise", "never")
DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")



def failed_kernel_checks(state, plan, kernel_cmdline=""):
    """`hostkit verify`'s kernel checks that fail on this state: what the operations left unconverged."""
    return [check.message() for check in kernel_checks(plan, state, kernel_cmdline, "h") if not check.ok]

def converged(plan: KernelPlan = PLAN, **changes) -> KernelState:
    """The state of a host that hostkit has already brought to `plan`."""
    ours = SysctlFile(SYSCTL_FILE, None, tuple(
        SysctlAssignment(n, sysctl_path(k), v) for n, (k, v) in enumerate(sorted(plan.sysctl.items()), 3)))
    state = KernelState(
        sysctl_files=(ours, SysctlFile("/usr/lib/sysctl.d/50-pid-max.conf", None,
                                       (SysctlAssignment(16, "kernel/pid_max", "4194304"),))),
        hostkit_sysctl_text=render_sysctl_file(plan),
        live=wanted_sysctl(plan),
        thp_supported=True,
        thp_enabled=ThpSetting(plan.thp_enabled or "always", ENABLED),
        thp_defrag=ThpSetting(plan.thp_defrag or "madvise", DEFRAG),
        thp_unit_text=render_thp_unit(plan) if plan.thp_enabled or plan.thp_defrag else None,
        thp_unit_enabled=bool(plan.thp_enabled or plan.thp_defrag),
    )
    return dataclasses.replace(state, **changes)


def with_files(state: KernelState, *files: SysctlFile) -> KernelState:
    return dataclasses.replace(state, sysctl_files=state.sysctl_files + files)


def FakeHost(state: KernelState, cmdline: str = "root=/dev/vda rw", executing: bool = False) -> OpHost:
    return OpHost({"kernel": state, "system": SystemFact().process([f"cmdline={cmdline}"])}, executing)


def run_op(op, fake: FakeHost, plan: KernelPlan = PLAN) -> list:
    with ctx_host.use(fake):
        return list(op._inner(plan, snapshot_scope()))


# -- sysctl ----------------------------------------------------------------------------------


def test_sysctl_converged_host_yields_nothing():
    fake = FakeHost(converged())
    assert run_op(kernel.sysctl_settings, fake) == []
    assert fake.logged == []


def test_sysctl_fresh_host_applies_live_then_persists_in_one_command():
    fake = FakeHost(converged(hostkit_sysctl_text=None, live={}))
    [command] = run_op(kernel.sysctl_settings, fake)
    assert "hostkit_sysctl vm/swappiness 10 vm.swappiness" in command
    assert "hostkit_sysctl net/ipv4/tcp_rmem '4096 131072 6291456' net.ipv4.tcp_rmem" in command
    assert command.index("hostkit_sysctl vm/") < command.index("mv -f /etc/sysctl.d/.99-zz-vllm-hostkit.conf")
    assert SYSCTL_FILE in command


def test_sysctl_only_a_drifted_live_value_is_rewritten():
    fake = FakeHost(converged(live={**wanted_sysctl(PLAN), "vm/swappiness": "60"}))
    [command] = run_op(kernel.sysctl_settings, fake)
    assert "hostkit_sysctl vm/swappiness 10" in command
    assert "tcp_rmem" not in command
    assert SYSCTL_FILE not in command


def test_sysctl_only_a_stale_file_is_rewritten():
    fake = FakeHost(converged(hostkit_sysctl_text="vm.swappiness = 10\n"))
    [command] = run_op(kernel.sysctl_settings, fake)
    assert "hostkit_sysctl" not in command
    assert f"mv -f /etc/sysctl.d/.99-zz-vllm-hostkit.conf.hostkit-new {SYSCTL_FILE}" in command


def test_sysctl_marks_the_snapshot_stale_when_it_changes_the_host():
    fake = FakeHost(converged(live={}), executing=True)
    run_op(kernel.sysctl_settings, fake)
    assert fake._hostkit_snapshot.stale == {"kernel"}


def test_sysctl_file_is_rendered_from_the_template():
    assert render_sysctl_file(PLAN).splitlines()[-2:] == [
        "net.ipv4.tcp_rmem = 4096 131072 6291456",
        "vm.swappiness = 10",
    ]
    assert render_sysctl_file(PLAN).startswith("# Managed by vllm-hostkit")


LATE_VENDOR = SysctlFile("/usr/lib/sysctl.d/zz-vendor.conf", None, (SysctlAssignment(4, "vm/swappiness", "60"),))


def test_sysctl_conflict_after_our_file_fails_the_host_with_file_key_and_value():
    fake = FakeHost(with_files(converged(live={}), LATE_VENDOR))
    [command] = run_op(kernel.sysctl_settings, fake)
    text = refusal_text(command, fake)
    assert "/usr/lib/sysctl.d/zz-vendor.conf:4 sets vm.swappiness = 60 (hostkit wants 10)" in text
    assert "sysctl_conflicts: warn" in text


def test_sysctl_conflict_in_warn_mode_is_logged_and_the_values_applied():
    plan = PLAN.model_copy(update={"sysctl_conflicts": "warn"})
    fake = FakeHost(with_files(converged(plan, live={}), LATE_VENDOR))
    [command] = run_op(kernel.sysctl_settings, fake, plan)
    assert isinstance(command, str) and "hostkit_sysctl vm/swappiness 10" in command
    assert any("zz-vendor.conf:4 sets vm.swappiness = 60" in line for line in fake.logged)


@pytest.mark.parametrize(
    "sysctl_file",
    [
        # Sorts before ours: ours is applied after it at boot.
        SysctlFile("/etc/sysctl.d/90-tuning.conf", None, (SysctlAssignment(1, "vm/swappiness", "60"),)),
        # /etc/sysctl.conf as Debian 12 reads it: 99-sysctl.conf < 99-zz-vllm-hostkit.conf.
        SysctlFile("/etc/sysctl.d/99-sysctl.conf", "/etc/sysctl.conf", (SysctlAssignment(1, "vm/swappiness", "60"),)),
        # After ours, but the same value.
        SysctlFile("/etc/sysctl.d/zz-same.conf", None, (SysctlAssignment(1, "vm/swappiness", "10"),)),
        # After ours, but a glob: systemd-sysctl never lets a glob override a named key.
        SysctlFile("/etc/sysctl.d/zz-glob.conf", None, (SysctlAssignment(1, "vm/swap*", "60"),)),
        # After ours, but only a glob exclusion.
        SysctlFile("/etc/sysctl.d/zz-neg.conf", None, (SysctlAssignment(1, "vm/swappiness", None),)),
        # After ours, another key.
        SysctlFile("/etc/sysctl.d/zz-other.conf", None, (SysctlAssignment(1, "vm/overcommit_memory", "1"),)),
    ],
)
def test_sysctl_settings_that_cannot_win_at_boot_are_no_conflict(sysctl_file):
    state = with_files(converged(), sysctl_file)
    assert sysctl_conflicts(state, PLAN) == []
    assert run_op(kernel.sysctl_settings, FakeHost(state)) == []


def test_sysctl_a_file_masked_by_etc_is_no_conflict():
    masking = SysctlFile("/etc/sysctl.d/zz-vendor.conf", None, ())
    state = with_files(converged(), masking, LATE_VENDOR)
    assert sysctl_conflicts(state, PLAN) == []


def test_sysctl_the_masking_file_itself_is_checked():
    run_copy = SysctlFile("/run/sysctl.d/zz-vendor.conf", None, (SysctlAssignment(2, "vm/swappiness", "1"),))
    [conflict] = sysctl_conflicts(with_files(converged(), run_copy, LATE_VENDOR), PLAN)
    assert conflict.file.path == "/run/sysctl.d/zz-vendor.conf"


def test_sysctl_etc_sysctl_conf_is_only_a_warning():
    conf = SysctlFile("/etc/sysctl.conf", None, (SysctlAssignment(7, "vm/swappiness", "60"),))
    fake = FakeHost(dataclasses.replace(converged(), sysctl_conf=conf))
    assert run_op(kernel.sysctl_settings, fake) == []
    assert fake.logged == [
        f"sysctl: /etc/sysctl.conf:7 sets vm.swappiness = 60 (hostkit wants 10); it would win over "
        f"{SYSCTL_FILE} on `sysctl --system`"
    ]


def test_sysctl_notices_are_logged_once_per_run():
    conf = SysctlFile("/etc/sysctl.conf", None, (SysctlAssignment(7, "vm/swappiness", "60"),))
    fake = FakeHost(dataclasses.replace(converged(), sysctl_conf=conf), executing=True)
    run_op(kernel.sysctl_settings, fake)
    assert fake.logged == []  # already logged while pyinfra prepared


@pytest.mark.parametrize(
    "sysctl",
    [{"vm.swap*": "1"}, {"vm.swappiness": "1\n2"}, {"vm.swappiness": " "}, {"vm..x": "1"}, {"-vm.x": "1"},
     {"vm.swappiness": "1", "vm/swappiness": "1"}, {"vm.a=b": "1"}],
)
def test_sysctl_bad_input_is_refused_while_preparing(sysctl):
    with pytest.raises(OperationValueError):
        run_op(kernel.sysctl_settings, FakeHost(converged()), KernelPlan(sysctl=sysctl))


# -- the sysctl command, run by sh against a fake /proc/sys ----------------------------------


def run_in(root: Path, command: str) -> subprocess.CompletedProcess:
    command = re.sub(r"(?<![\w/.])/(etc|proc)/", f"{root}/\\1/", command)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True)


@pytest.fixture
def proc_root(tmp_path):
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/net/ipv4").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/swappiness").write_text("60\n")
    (tmp_path / "proc/sys/net/ipv4/tcp_rmem").write_text("4096\t87380\t6291456\n")
    return tmp_path


@pytest.mark.processes
def test_sysctl_command_writes_checks_and_persists(proc_root):
    command = kernel.sysctl_apply_command(wanted_sysctl(PLAN), render_sysctl_file(PLAN))
    result = run_in(proc_root, command)
    assert result.returncode == 0, result.stderr
    assert (proc_root / "proc/sys/vm/swappiness").read_text() == "10\n"
    assert (proc_root / "proc/sys/net/ipv4/tcp_rmem").read_text() == "4096 131072 6291456\n"
    persisted = proc_root / SYSCTL_FILE.lstrip("/")
    assert persisted.read_text() == render_sysctl_file(PLAN)
    assert oct(persisted.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in persisted.parent.iterdir()] == [persisted.name]


@pytest.mark.processes
def test_sysctl_command_fails_on_a_missing_key_and_persists_nothing(proc_root):
    plan = KernelPlan(sysctl={"vm.swappiness": "10", "net.netfilter.nf_conntrack_max": "262144"})
    command = kernel.sysctl_apply_command(wanted_sysctl(plan), render_sysctl_file(plan))
    result = run_in(proc_root, command)
    assert result.returncode != 0
    assert "sysctl net.netfilter.nf_conntrack_max: /proc/sys/net/netfilter/nf_conntrack_max does not exist" \
        in result.stderr.replace(str(proc_root), "")
    assert not (proc_root / SYSCTL_FILE.lstrip("/")).exists()


@pytest.mark.processes
def test_sysctl_command_fails_when_the_value_does_not_stick(proc_root):
    # A file the write cannot replace stands in for a kernel that keeps its own value.
    (proc_root / "proc/sys/vm/swappiness").unlink()
    (proc_root / "proc/sys/vm/swappiness").mkdir()
    result = run_in(proc_root, kernel.sysctl_apply_command({"vm/swappiness": "10"}, None))
    assert result.returncode != 0
    assert "sysctl vm.swappiness: the kernel refused the value '10'" in result.stderr


@pytest.mark.processes
def test_sysctl_command_fails_when_the_read_back_differs(proc_root):
    # /dev/null takes the write and reads back empty, as a kernel that keeps its own value.
    (proc_root / "proc/sys/vm/swappiness").unlink()
    (proc_root / "proc/sys/vm/swappiness").symlink_to("/dev/null")
    result = run_in(proc_root, kernel.sysctl_apply_command({"vm/swappiness": "10"}, render_sysctl_file(PLAN)))
    assert result.returncode != 0
    assert "sysctl vm.swappiness reads back as '' after writing '10'" in result.stderr
    assert not (proc_root / SYSCTL_FILE.lstrip("/")).exists()


# -- transparent hugepages -------------------------------------------------------------------


def test_thp_converged_host_yields_nothing():
    assert run_op(kernel.transparent_hugepages, FakeHost(converged())) == []


def test_thp_unit_is_ordered_early_and_fails_loudly():
    unit = render_thp_unit(PLAN)
    lines = unit.splitlines()
    assert "DefaultDependencies=no" in lines
    assert "After=sysinit.target local-fs.target" in lines
    assert "Before=basic.target vllm.service" in lines
    assert "WantedBy=basic.target" in lines
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines
    assert [line for line in lines if line.startswith("ExecStart")] == [
        "ExecStart=/bin/sh -c 'echo madvise > /sys/kernel/mm/transparent_hugepage/enabled'",
        "ExecStart=/bin/sh -c 'echo defer > /sys/kernel/mm/transparent_hugepage/defrag'",
    ]
    assert "ExecStart=-" not in unit and "|| true" not in unit and "2>/dev/null" not in unit


def test_thp_unit_sets_only_what_the_plan_asks():
    unit = render_thp_unit(KernelPlan(sysctl={}, thp_defrag="never"))
    assert [line for line in unit.splitlines() if line.startswith("ExecStart")] == [
        "ExecStart=/bin/sh -c 'echo never > /sys/kernel/mm/transparent_hugepage/defrag'",
    ]


def test_thp_fresh_host_installs_reloads_enables_and_applies_in_one_command():
    fake = FakeHost(converged(thp_unit_text=None, thp_unit_enabled=False,
                              thp_enabled=ThpSetting("always", ENABLED), thp_defrag=ThpSetting("madvise", DEFRAG)))
    [command] = run_op(kernel.transparent_hugepages, fake)
    steps = [
        "mv -f /etc/systemd/system/.vllm-hostkit-thp.service.hostkit-new /etc/systemd/system/vllm-hostkit-thp.service",
        "systemctl daemon-reload",
        "systemctl reenable --quiet vllm-hostkit-thp.service",
        "systemctl restart vllm-hostkit-thp.service",
        "grep -qF '[defer]' /sys/kernel/mm/transparent_hugepage/defrag",
        "grep -qF '[madvise]' /sys/kernel/mm/transparent_hugepage/enabled",
    ]
    positions = [command.index(step) for step in steps]
    assert positions == sorted(positions)


def test_thp_drifted_live_value_restarts_the_unit_without_daemon_reload():
    fake = FakeHost(converged(thp_defrag=ThpSetting("always", DEFRAG)))
    [command] = run_op(kernel.transparent_hugepages, fake)
    assert "systemctl restart vllm-hostkit-thp.service" in command
    assert "daemon-reload" not in command and "printf" not in command


def test_thp_disabled_unit_is_only_enabled():
    [command] = run_op(kernel.transparent_hugepages, FakeHost(converged(thp_unit_enabled=False)))
    assert "systemctl reenable --quiet vllm-hostkit-thp.service" in command
    assert "daemon-reload" not in command and "restart" not in command


def test_thp_changed_unit_is_reloaded_and_rerun():
    [command] = run_op(kernel.transparent_hugepages, FakeHost(converged(thp_unit_text="[Unit]\n")))
    assert "systemctl daemon-reload" in command and "systemctl restart" in command


def test_thp_without_kernel_support_is_a_notice_and_a_skip():
    fake = FakeHost(converged(thp_supported=False, thp_enabled=None, thp_defrag=None, thp_unit_text=None))
    assert run_op(kernel.transparent_hugepages, fake) == []
    assert len(fake.logged) == 1 and "no transparent hugepage support" in fake.logged[0]


def test_thp_conflicting_kernel_command_line_is_refused_with_an_explanation():
    fake = FakeHost(converged(), cmdline="root=/dev/vda transparent_hugepage=always quiet")
    [command] = run_op(kernel.transparent_hugepages, fake)
    text = refusal_text(command, fake)
    assert "transparent_hugepage=always" in text and "thp_enabled is madvise" in text
    assert "GRUB_CMDLINE_LINUX" in text


def test_thp_matching_kernel_command_line_is_fine():
    fake = FakeHost(converged(), cmdline="transparent_hugepage=always transparent_hugepage=madvise")
    assert run_op(kernel.transparent_hugepages, fake) == []


def test_thp_value_the_kernel_lacks_is_refused():
    plan = PLAN.model_copy(update={"thp_defrag": "defer+madvise"})
    fake = FakeHost(converged(plan, thp_defrag=ThpSetting("madvise", ("always", "defer", "madvise", "never"))))
    [command] = run_op(kernel.transparent_hugepages, fake, plan)
    assert "does not offer 'defer+madvise'" in refusal_text(command, fake)


def test_thp_left_alone_removes_an_installed_unit():
    plan = KernelPlan(sysctl={})
    [command] = run_op(kernel.transparent_hugepages, FakeHost(converged()), plan)
    assert "systemctl disable --quiet vllm-hostkit-thp.service" in command
    assert "rm -f /etc/systemd/system/vllm-hostkit-thp.service" in command
    assert run_op(kernel.transparent_hugepages, FakeHost(converged(plan)), plan) == []


def test_thp_bad_value_is_refused_while_preparing():
    with pytest.raises(OperationValueError):
        run_op(kernel.transparent_hugepages, FakeHost(converged()), KernelPlan(sysctl={}, thp_enabled="sometimes"))


def test_verify_names_wanted_thp_on_a_kernel_without_it():
    # The deploy skips THP there with a notice; verify keeps the host from passing as tuned.
    state = converged(thp_supported=False, thp_enabled=None, thp_defrag=None, thp_unit_text=None,
                      thp_unit_enabled=False)
    (failure,) = failed_kernel_checks(state, PLAN)
    assert "this kernel has no transparent hugepage support" in failure


def test_operations_read_the_state_the_fact_parses():
    """A converged host, as the fact would report it, gives no mismatch and no change."""
    lines = [f"sysctl.file {SYSCTL_FILE}"]
    lines += [f"sysctl.ours {line}" for line in render_sysctl_file(PLAN).splitlines()]
    lines += ["sysctl.live vm/swappiness=10", "sysctl.live net/ipv4/tcp_rmem=4096 131072 6291456 "]
    lines += ["thp.enabled always [madvise] never", "thp.defrag always [defer] defer+madvise madvise never"]
    lines += ["thp.unit-file"] + [f"thp.unit {line}" for line in render_thp_unit(PLAN).splitlines()]
    lines += ["thp.unit-enabled"]
    state = KernelFact().process(lines)
    assert failed_kernel_checks(state, PLAN) == []
    assert run_op(kernel.sysctl_settings, FakeHost(state)) == []
    assert run_op(kernel.transparent_hugepages, FakeHost(state)) == []
