"""The shipped post-provision checks, one test per area and host.

Run: pytest --pyinfra-inventory INVENTORY tests/host [--pyinfra-limit HOST] [-n 4 --dist loadgroup]
The expectations come from the plan that hostkit's planner makes for each host, exactly
as the deploy does (hostkit.verify.checks); `hostkit verify INVENTORY` runs the same checks.
"""

from hostkit.verify.pytest_plugin import assert_area


def test_swap(hostkit_report):
    """Active at the planned path and size, on NVMe, mode 600 root, brought back at boot (the NVMe boot unit, or fstab with nofail)."""
    assert_area(hostkit_report, "swap")


def test_kernel(hostkit_report):
    """Effective sysctl values, THP enabled and defrag, the THP unit installed and enabled."""
    assert_area(hostkit_report, "kernel")


def test_gpu(hostkit_report):
    """The host's gpu_* policy (driver, count, persistence, ECC, pending retirements, Xid)."""
    assert_area(hostkit_report, "gpu")


def test_vllm_unit(hostkit_report):
    """Enabled, active, as rendered, memory limits and flags in effect, non-root, key not in argv, ready."""
    assert_area(hostkit_report, "vllm")


def test_no_oom_kills(hostkit_report):
    """No 'Killed process' in the kernel log since boot."""
    assert_area(hostkit_report, "oom")
