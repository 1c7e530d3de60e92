"""Only hostkit's kernel tuning, planned from the host's data: the deploy of tests/e2e/test_kernel.py."""

from pyinfra import host

from hostkit.operations import kernel
from hostkit.plan.plans import KernelPlan
from hostkit.plan.scope import snapshot_scope
from hostkit.profile.validation import profile_from_data

profile = profile_from_data(host.name, host.data.dict())
plan = KernelPlan(
    sysctl=dict(profile.sysctl),
    sysctl_conflicts=profile.sysctl_conflicts,
    thp_enabled=profile.thp_enabled,
    thp_defrag=profile.thp_defrag,
)
scope = snapshot_scope(profile)
kernel.sysctl_settings(name="Kernel memory sysctls", plan=plan, scope=scope)
kernel.transparent_hugepages(name="Transparent hugepages", plan=plan, scope=scope)
