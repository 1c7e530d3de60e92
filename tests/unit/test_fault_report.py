"""scripts/fault_report.py's summary, from junit XML as pytest writes it (xunit1)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location("fault_report", Path(__file__).parents[2] / "scripts" / "fault_report.py")
fault_report = importlib.util.module_from_spec(spec)
sys.modules["fault_report"] = fault_report  # dataclasses look their module up
spec.loader.exec_module(fault_report)

CASE = 'classname="tests.e2e.test_bad_input" name="test_bad_input_is_refused_naming_host_and_key[{}]" time="2.0"'


def junit(tmp_path, *cases: str) -> Path:
    path = tmp_path / "faults.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return path


def passed(classname: str, name: str, seconds: float = 1.0) -> str:
    return f'<testcase classname="{classname}" name="{name}" time="{seconds}"/>'


def every_test_passing() -> list[str]:
    cases = [f"<testcase {CASE.format(i)}/>" for i in range(31)]
    cases.append(passed("tests.e2e.test_bad_input", "test_the_host_is_unchanged_after_each_case"))
    for fault in fault_report.FAULTS:
        path, name = fault.node.split("::")
        cases.append(passed(path.removesuffix(".py").replace("/", "."), name, 60))
    cases.append(passed("tests.e2e.test_security", "test_service_runs_as_non_root"))
    return cases


def test_all_passing_is_summarised_as_refused_survived_and_held(tmp_path):
    text, ok = fault_report.summary(fault_report.read_junit(junit(tmp_path, *every_test_passing())))
    assert ok
    assert "Bad input: 31 bad inventory hosts tried" in text and "31 refused with a non-zero exit" in text
    assert text.count("survived") == len(fault_report.FAULTS)
    assert "held   service runs as non root" in text


def test_a_failed_case_or_a_missing_fault_fails_the_report(tmp_path):
    cases = every_test_passing()
    cases[3] = f'<testcase {CASE.format(3)}><failure message="AssertionError: exit 0">x</failure></testcase>'
    text, ok = fault_report.summary(fault_report.read_junit(junit(tmp_path, *cases)))
    assert not ok and "NOT REFUSED PROPERLY: 3: AssertionError: exit 0" in text

    text, ok = fault_report.summary(fault_report.read_junit(junit(tmp_path, *every_test_passing()[:-2])))
    assert not ok and "NOT RUN" in text


def test_xdist_lane_suffixes_are_dropped_and_only_covered_tests_are_counted(tmp_path):
    cases = [case.replace('" time=', '@lane-b" time=') for case in every_test_passing()]
    cases.append(passed("tests.e2e.test_kernel", "test_kernel_tuning_end_to_end[debian12]@lane-a", 100))
    text, ok = fault_report.summary(fault_report.read_junit(junit(tmp_path, *cases)))
    assert ok and text.count("survived") == len(fault_report.FAULTS)
    assert f"{len(every_test_passing())} tests, {len(every_test_passing())} passed" in text
