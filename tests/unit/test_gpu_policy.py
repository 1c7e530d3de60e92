"""The GPU policy's verdicts, and the verify_gpu operation inside a real pyinfra run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.operations import python

import hostkit.operations.gpu as gpu_operations
from hostkit.facts.gpu import GpuFacts, parse_gpu_output
from hostkit.facts.snapshot import HostSnapshot
from hostkit.plan.gpu_policy import XID_RULES, GpuPolicy, evaluate, version_tuple, versions_match
from hostkit.plan.planner import gpu_plan
from hostkit.plan.plans import GpuPlan
from hostkit.plan.scope import snapshot_scope
from hostkit.profile.host_profile import HostProfile

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def facts(name: str) -> GpuFacts:
    return parse_gpu_output((FIXTURES / name).read_text().splitlines())


def failed_checks(policy: GpuPolicy, name: str) -> list[str]:
    return [failure.check for failure in evaluate(policy, facts(name)).failures]


def profile(**gpu_keys) -> HostProfile:
    return HostProfile(vllm_enabled=False, **gpu_keys)


def test_policy_from_profile():
    planned = gpu_plan(
        profile(gpu_count=8, gpu_min_driver="999", gpu_require_persistence=False, gpu_tolerated_xids=[13, 31],
                gpu_hold_driver_packages=True)
    )
    policy = planned.policy
    assert (policy.required, policy.count, policy.min_driver) == (True, 8, "999")
    assert not policy.require_persistence and policy.tolerated_xids == {13, 31}
    assert planned.hold_driver_packages
    assert gpu_plan(profile()) == GpuPlan() and GpuPlan().policy == GpuPolicy()


@pytest.mark.parametrize("fixture", ["h200.txt", "device-run/gpu-section.txt"])
def test_real_h200_passes_with_a_one_line_summary(fixture):
    verdict = evaluate(GpuPolicy(count=1, min_driver="580.65"), facts(fixture))
    assert verdict.ok and verdict.failures == ()
    assert verdict.summary == (
        "1x NVIDIA H200 143771 MiB, driver 580.159.04, persistence on, ECC clean, no Xid since boot"
    )
    assert "\n" not in verdict.summary
    # Persistence was turned on with the deprecated `nvidia-smi -pm 1`: pass, but say so.
    assert verdict.warnings == ("persistence mode is on but nvidia-persistenced is not running",)
    assert evaluate(GpuPolicy(), facts("h200-persistenced.txt")).warnings == ()


def test_impossible_policy_lists_every_failure_with_expected_and_actual():
    verdict = evaluate(GpuPolicy(count=8, min_driver="999"), facts("device-run/gpu-section.txt"))
    assert not verdict.ok
    by_check = {failure.check: failure for failure in verdict.failures}
    assert set(by_check) == {"GPU count", "driver version"}
    assert (by_check["GPU count"].expected, by_check["GPU count"].actual) == ("8", "1 (1x NVIDIA H200 143771 MiB)")
    assert (by_check["driver version"].expected, by_check["driver version"].actual) == (">= 999", "580.159.04")
    report = verdict.report()
    assert "expected 8, actual 1" in report and "expected >= 999, actual 580.159.04" in report


def test_eight_gpus_pass_a_count_of_eight_and_fail_a_count_of_one():
    assert evaluate(GpuPolicy(count=8), facts("8gpu.txt")).summary.startswith("8x NVIDIA H200 143771 MiB,")
    assert failed_checks(GpuPolicy(count=1), "8gpu.txt") == ["GPU count"]


@pytest.mark.parametrize(
    ("fixture", "checks"),
    [
        ("version-mismatch.txt", ["driver version match"]),
        ("nvml-mismatch.txt", ["nvidia-smi", "driver version match", "GPU count"]),
        ("ecc-uncorrected.txt", ["uncorrected ECC errors (volatile)"]),
        ("remapped-pending.txt", ["remapped rows pending"]),
        ("remap-failure.txt", ["row remapping failure"]),
        ("no-nvidia-uvm.txt", ["kernel modules", "device nodes"]),
        ("na-fields.txt", ["persistence mode"]),
        ("xids.txt", ["Xid errors since boot"]),
        ("nvswitch-fm-stale.txt", ["nvidia-fabricmanager (NVSwitch)"]),
        ("no-nvidia-smi.txt", ["NVIDIA driver", "GPU count"]),
    ],
)
def test_each_fault_fails_its_own_checks(fixture, checks):
    assert failed_checks(GpuPolicy(), fixture) == checks


def test_failure_details():
    failures = {f.check: f for f in evaluate(GpuPolicy(), facts("version-mismatch.txt")).failures}
    assert failures["driver version match"].actual == "kernel module 570.133.20"
    assert "580.159.04" in failures["driver version match"].expected
    assert "reboot" in failures["driver version match"].fix
    verdict = evaluate(GpuPolicy(), facts("xids.txt"))
    assert verdict.failures[0].actual == "Xid 79 x1 (GPU has fallen off the bus; NVIDIA: RESTART_BM)"
    assert any(warning.startswith("Xid since boot that NVIDIA puts down to an application") and "Xid 13 x2" in warning
               for warning in verdict.warnings)


def test_thresholds_and_tolerated_xids_relax_checks():
    assert evaluate(GpuPolicy(max_ecc_uncorrected=3), facts("ecc-uncorrected.txt")).ok
    assert evaluate(GpuPolicy(max_remapped_rows_pending=1), facts("remapped-pending.txt")).ok
    assert evaluate(GpuPolicy(require_persistence=False), facts("na-fields.txt")).ok
    assert failed_checks(GpuPolicy(tolerated_xids=frozenset({13})), "xids.txt") == ["Xid errors since boot"]
    verdict = evaluate(GpuPolicy(tolerated_xids=frozenset({79})), facts("xids.txt"))
    assert verdict.ok and verdict.summary.endswith("only tolerated or warning Xid 13, 79")
    quiet = evaluate(GpuPolicy(tolerated_xids=frozenset({13, 79})), facts("xids.txt"))
    assert quiet.ok and not any("Xid" in warning for warning in quiet.warnings)


def test_unreadable_kernel_log_passes_but_is_not_called_clean():
    verdict = evaluate(GpuPolicy(), facts("kernel-log-unreadable.txt"))
    assert verdict.ok and verdict.summary.endswith("Xid unknown")
    assert any("Xid errors unknown" in warning for warning in verdict.warnings)


def test_no_gpu_expected():
    verdict = evaluate(GpuPolicy(required=False), facts("no-nvidia-smi.txt"))
    assert verdict.ok and verdict.summary == "no GPU expected (no nvidia-smi)"
    # A host that does have GPUs is still checked.
    assert not evaluate(GpuPolicy(required=False), facts("ecc-uncorrected.txt")).ok


def test_version_comparison():
    assert version_tuple("580.159.04") == (580, 159, 4)
    assert version_tuple("580.159.04") > version_tuple("580.65.06") > version_tuple("580")
    assert version_tuple("999") > version_tuple("580.159.04")
    assert versions_match("580.159.04", "580.159")  # NVML's error text gives major.minor
    assert not versions_match("570.133.20", "580.159")


# --- the operation, run by pyinfra itself -----------------------------------------------


def run_deploy(monkeypatch, facts_by_host: dict[str, GpuFacts], gpu_profile: HostProfile):
    """verify_gpu then a marker op on every host; the snapshot is served from fixtures."""
    monkeypatch.setattr(
        gpu_operations, "snapshot", lambda host, scope: HostSnapshot({"gpu": facts_by_host[host.name]})
    )
    inventory = Inventory((list(facts_by_host), {}))
    state = State(inventory, Config())
    for host in inventory:
        state.activate_host(host)
    reached: list[str] = []
    verify = add_op(state, gpu_operations.verify_gpu, plan=gpu_plan(gpu_profile), scope=snapshot_scope(gpu_profile))
    add_op(state, python.call, function=lambda: reached.append("after"), name="after")
    failed = set()
    try:
        run_ops(state)
    finally:
        failed = {host.name for host in state.failed_hosts}
    return state, verify, reached, failed


def test_failing_host_fails_alone_at_execute_time(monkeypatch):
    hosts = {"gpu-ok": facts("h200.txt"), "gpu-bad": facts("ecc-uncorrected.txt")}
    state, verify, reached, failed = run_deploy(monkeypatch, hosts, profile())
    assert failed == {"gpu-bad"}
    assert reached == ["after"]  # the healthy host went on to the next operation
    by_name = {host.name: host for host in state.inventory}
    assert verify[by_name["gpu-ok"]].did_succeed() and not verify[by_name["gpu-ok"]].did_change()
    assert verify[by_name["gpu-bad"]].did_error()


def test_passing_host_yields_nothing(monkeypatch):
    state, verify, reached, failed = run_deploy(monkeypatch, {"gpu-ok": facts("h200.txt")}, profile(gpu_count=1))
    host = next(iter(state.inventory))
    assert failed == set() and reached == ["after"]
    assert verify[host]._maybe_is_change is False  # prepare saw no change: reruns report none
    assert state.get_results_for_host(host).success_ops == 2


def test_impossible_profile_fails_the_only_host(monkeypatch, caplog):
    with pytest.raises(Exception, match="No hosts remaining"):
        run_deploy(monkeypatch, {"gpu-a": facts("h200.txt")}, profile(gpu_count=8, gpu_min_driver="999"))
    assert "GPU count: expected 8, actual 1" in caplog.text
    assert "driver version: expected >= 999, actual 580.159.04" in caplog.text


def test_no_gpu_expected_passes_through_the_operation(monkeypatch):
    hosts = {"cpu-only": facts("no-nvidia-smi.txt")}
    _, _, reached, failed = run_deploy(monkeypatch, hosts, profile(gpu_required=False))
    assert failed == set() and reached == ["after"]


def test_facts_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts("h200.txt").gpus[0].index = 3  # type: ignore[misc]


def xid_section(*codes: int) -> GpuFacts:
    """The real H200 section (no Xid) with one kernel log line per code, in the driver's format."""
    lines = (FIXTURES / "h200.txt").read_text().splitlines()
    at = lines.index("@@gpu:xid@@") + 2  # after source=
    logged = [f"Nov 29 21:02:11 gpu-host kernel: NVRM: Xid (PCI:0000:00:06): {code}, pid=4242, name=python3" for code in codes]
    lines[at:] = [*logged, f"total={len(codes)}", *[line for line in lines[at:] if not line.startswith("total=")]]
    return parse_gpu_output(lines)


@pytest.mark.parametrize("code", [13, 31, 43, 45, 94])
def test_application_fault_xids_only_warn(code):
    verdict = evaluate(GpuPolicy(), xid_section(code))
    assert verdict.ok, verdict.report()
    assert any(f"Xid {code} x1" in warning for warning in verdict.warnings)


@pytest.mark.parametrize("code", [48, 64, 74, 79, 95, 119, 120])
def test_xids_that_need_a_reset_or_reboot_fail_the_host(code):
    verdict = evaluate(GpuPolicy(), xid_section(13, code))
    assert [f.check for f in verdict.failures] == ["Xid errors since boot"]
    assert verdict.failures[0].actual.startswith(f"Xid {code} x1 (")
    assert evaluate(GpuPolicy(tolerated_xids=frozenset({code})), xid_section(13, code)).ok


def test_a_code_outside_the_table_fails_unless_tolerated():
    assert not evaluate(GpuPolicy(), xid_section(57)).ok
    assert "(not in hostkit's table)" in evaluate(GpuPolicy(), xid_section(57)).failures[0].actual
    assert evaluate(GpuPolicy(tolerated_xids=frozenset({57})), xid_section(57)).ok


def test_every_rule_names_the_catalog_action():
    actions = {rule.nvidia_action for rule in XID_RULES.values()}
    assert actions <= {"RESTART_APP", "IGNORE", "WORKFLOW_XID_45", "XID_154", "RESET_GPU", "RESTART_BM",
                       "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"}
    assert all(rule.fatal == (rule.nvidia_action in {"RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"})
               for rule in XID_RULES.values())


def test_a_timed_out_command_is_a_warning_of_the_gpu_verdict():
    lines = (FIXTURES / "h200.txt").read_text().splitlines()
    at = lines.index("@@gpu:xid@@")
    lines[at + 1:] = ["source=journalctl", "@@hostkit-timeout@@ journalctl -k -b timed out after 30 s"]
    facts_ = parse_gpu_output(lines)
    assert facts_.kernel_log_source is None and facts_.timeouts == ("journalctl -k -b timed out after 30 s",)
    assert "journalctl -k -b timed out after 30 s" in evaluate(GpuPolicy(), facts_).warnings
