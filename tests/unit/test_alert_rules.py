"""The shipped alert rules through the real promtool (Debian's prometheus package, see
hostkit_lab/prometheus.py): `check rules` and the unit tests in tests/unit/promtool/."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hostkit.plan.gpu_policy import XID_RULES
from hostkit_lab.prometheus import prometheus_bin

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "hostkit" / "monitoring" / "alerts.rules.yml"
RULE_TESTS = REPO / "tests" / "unit" / "promtool" / "alerts_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    return prometheus_bin("promtool")


def run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.processes
def test_rules_pass_promtool_check(promtool):
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 14 rules found" in result.stdout


@pytest.mark.processes
def test_rules_pass_their_promtool_unit_tests(promtool):
    result = run(promtool, "test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_unit_tested_and_says_what_to_do():
    rules_text = RULES.read_text()
    tests_text = RULE_TESTS.read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules_text.splitlines() if line.strip().startswith("- alert:")]
    assert len(alerts) == 14
    for alert in alerts:
        assert f"alertname: {alert}\n        exp_alerts:\n          - exp_labels" in tests_text, f"{alert} never fires in a test"
    summaries = [line for line in rules_text.splitlines() if line.strip().startswith("summary:")]
    assert len(summaries) == len(alerts) and all(": " in s.split("summary:", 1)[1] for s in summaries)


@pytest.mark.processes
def test_a_wrong_threshold_fails_the_promtool_tests(promtool, tmp_path):
    """The rule tests can fail: the same tests against rules with the memory threshold moved."""
    (tmp_path / "hostkit" / "monitoring").mkdir(parents=True)
    (tmp_path / "hostkit" / "monitoring" / "alerts.rules.yml").write_text(
        RULES.read_text().replace("hostkit_vllm_memory_max_bytes > 0.90", "hostkit_vllm_memory_max_bytes > 0.96"))
    tests_dir = tmp_path / "tests" / "unit" / "promtool"
    tests_dir.mkdir(parents=True)
    (tests_dir / "alerts_test.yml").write_text(RULE_TESTS.read_text())
    result = run(promtool, "test", "rules", str(tests_dir / "alerts_test.yml"))
    assert result.returncode != 0
    assert "HostkitVllmMemoryPeakNearLimit" in result.stdout + result.stderr


def test_the_fatal_xid_alert_names_the_codes_the_gpu_check_fails_on():
    """One classification of Xid codes: the alert's is the GPU check's (XID_RULES)."""
    expr = next(line for line in RULES.read_text().split("- alert: HostkitGpuFatalXid", 1)[1].splitlines()
                if line.strip().startswith("expr:"))
    codes = {int(code) for code in re.search(r'code=~"([0-9|]+)"', expr).group(1).split("|")}
    assert codes == {code for code, rule in XID_RULES.items() if rule.fatal}
