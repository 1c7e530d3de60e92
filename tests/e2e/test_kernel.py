"""Kernel tuning on real Debian 12 and 13 hosts: apply, rerun, reboot, change, conflicts.

One host per OS walks through every step, so the whole story costs one boot and one reboot.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.kernel import KernelFact, KernelState
from hostkit.verify.checks import kernel_checks
from hostkit.paths import SYSCTL_FILE, THP_UNIT
from hostkit.plan.plans import KernelPlan

pytestmark = [pytest.mark.lab, pytest.mark.slow]

KERNEL_DEPLOY = Path(__file__).parent / "kernel_deploy.py"
OPERATIONS = ["Kernel memory sysctls", "Transparent hugepages"]
SYSCTL = {"vm.swappiness": "10", "kernel.printk": "4 4 1 7"}
REBOOT_TIMEOUT_S = 1200


def kernel_state(lab_host) -> KernelState:
    return KernelFact().process(lab_host.ssh(KernelFact().command(snapshot_scope()), check=True).stdout.splitlines())


def live(lab_host, path: str) -> str:
    return " ".join(lab_host.ssh(f"cat {path}", check=True).stdout.split())


def thp(lab_host, name: str) -> str:
    return live(lab_host, f"/sys/kernel/mm/transparent_hugepage/{name}")


def assert_effective(lab_host, swappiness: str, defrag: str) -> None:
    assert live(lab_host, "/proc/sys/vm/swappiness") == swappiness
    assert live(lab_host, "/proc/sys/kernel/printk") == "4 4 1 7"
    assert "[madvise]" in thp(lab_host, "enabled").split()
    assert f"[{defrag}]" in thp(lab_host, "defrag").split()


def monotonic_activation(lab_host, unit: str) -> int:
    out = lab_host.ssh(f"systemctl show -P ActiveEnterTimestampMonotonic {unit}", check=True).stdout
    return int(out.strip())


@pytest.mark.parametrize("os_name", ["debian12", "debian13"])
def test_kernel_tuning_end_to_end(lab_host_factory, run_deploy, os_name):
    lab_host = lab_host_factory(os_name=os_name)
    deploy = partial(run_deploy, lab_host, deploy=KERNEL_DEPLOY)
    data = {"sysctl": SYSCTL, "thp_enabled": "madvise", "thp_defrag": "defer"}

    # Debian 12's systemd links /etc/sysctl.d/99-sysctl.conf to /etc/sysctl.conf; Debian 13 has no link.
    assert kernel_state(lab_host).reads_sysctl_conf_at_boot() == (os_name == "debian12")

    # A vendor file sorting after hostkit's would win at boot: refused, host untouched.
    lab_host.ssh("printf 'vm.swappiness = 60\\n' > /usr/lib/sysctl.d/zz-vendor.conf", check=True)
    run = deploy(data)
    assert not run.ok
    assert "/usr/lib/sysctl.d/zz-vendor.conf:1 sets vm.swappiness = 60 (hostkit wants 10)" in run.output
    assert lab_host.ssh(f"test -e {SYSCTL_FILE}").returncode == 1

    # "warn" says the same and applies anyway.
    run = deploy({**data, "sysctl_conflicts": "warn"})
    assert run.ok, run.output
    assert "/usr/lib/sysctl.d/zz-vendor.conf:1 sets vm.swappiness = 60" in run.output
    assert run.changed_on(lab_host.name) == OPERATIONS
    assert_effective(lab_host, "10", "defer")
    assert lab_host.ssh(f"systemd-analyze verify /etc/systemd/system/{THP_UNIT}").returncode == 0

    # Without the vendor file, and with a local file sorting before hostkit's (no conflict):
    # the rerun changes nothing.
    lab_host.ssh("rm /usr/lib/sysctl.d/zz-vendor.conf && printf 'vm.swappiness = 60\\n' > /etc/sysctl.d/90-local.conf",
                 check=True)
    run = deploy(data)
    assert run.ok, run.output
    assert run.changed_on(lab_host.name) == []

    # After a reboot: hostkit's file wins over 90-local.conf, and the THP unit ran before basic.target.
    # The long timeout is for a busy lab machine: under qemu TCG a reboot there has taken 15 min.
    lab_host.reboot(timeout=REBOOT_TIMEOUT_S)
    assert_effective(lab_host, "10", "defer")
    assert monotonic_activation(lab_host, THP_UNIT) <= monotonic_activation(lab_host, "basic.target")
    plan = KernelPlan(sysctl=SYSCTL, thp_enabled="madvise", thp_defrag="defer")
    cmdline = live(lab_host, "/proc/cmdline")
    assert [c.message() for c in kernel_checks(plan, kernel_state(lab_host), cmdline, lab_host.name) if not c.ok] == []

    # Changed values converge on the next run, and the run after that changes nothing.
    changed = {"sysctl": {**SYSCTL, "vm.swappiness": "20"}, "thp_enabled": "madvise", "thp_defrag": "madvise"}
    run = deploy(changed)
    assert run.ok, run.output
    assert run.changed_on(lab_host.name) == OPERATIONS
    assert_effective(lab_host, "20", "madvise")
    assert deploy(changed).changed_on(lab_host.name) == []

    # A drifted live value is put back.
    lab_host.ssh("echo 61 > /proc/sys/vm/swappiness && echo always > /sys/kernel/mm/transparent_hugepage/defrag",
                 check=True)
    run = deploy(changed)
    assert run.changed_on(lab_host.name) == OPERATIONS
    assert_effective(lab_host, "20", "madvise")

    # A local file sorting after hostkit's is a conflict too.
    lab_host.ssh("printf '# local\\nvm.swappiness=5\\n' > /etc/sysctl.d/zzz-local.conf", check=True)
    run = deploy(changed)
    assert not run.ok
    assert "/etc/sysctl.d/zzz-local.conf:2 sets vm.swappiness = 5 (hostkit wants 20)" in run.output
