"""Verification results as text, JSON and JUnit XML (one testsuite per host), and the exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from xml.etree import ElementTree

from hostkit.verify.checks import NOT_APPLICABLE, PASS, CheckResult
from hostkit.verify.runner import HostReport

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREACHABLE = 2  # also usage errors and invalid inventory data


def exit_code(reports: Sequence[HostReport]) -> int:
    """2 when any host could not be verified (its checks are unknown), else 1 on any failure."""
    if any(not report.reachable for report in reports):
        return EXIT_UNREACHABLE
    return EXIT_FAILED if any(not report.ok for report in reports) else EXIT_OK


def _status(report: HostReport) -> str:
    return "UNREACHABLE" if not report.reachable else "ok" if report.ok else "FAILED"


def summary(reports: Sequence[HostReport]) -> str:
    passed = sum(report.ok for report in reports)
    unreachable = sum(not report.reachable for report in reports)
    failed = len(reports) - passed - unreachable
    return f"{len(reports)} hosts: {passed} passed, {failed} failed, {unreachable} unreachable"


def to_text(reports: Sequence[HostReport], verbose: bool = False) -> str:
    lines = []
    for report in reports:
        passed = sum(check.status == PASS for check in report.checks)
        skipped = sum(check.status == NOT_APPLICABLE for check in report.checks)
        commands = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in report.command_seconds.items())
        lines.append(
            f"{report.name}: {_status(report)} ({passed}/{len(report.checks) - skipped} checks passed"
            f"{f', {skipped} not applicable' if skipped else ''}; "
            f"{report.remote_commands} remote commands{': ' + commands if commands else ''}; "
            f"{report.seconds:.1f}s in all)"
        )
        if report.error:
            lines.append(f"  ERROR {report.error}")
        for check in report.checks:
            if not check.ok:
                lines.append(f"  FAIL  [{check.area}] {check.message()}")
            elif check.not_applicable:
                lines.append(f"  n/a   [{check.area}] {check.message()}")
            elif verbose:
                lines.append(f"  ok    [{check.area}] {check.name}: {check.actual}")
        lines.extend(f"  WARN  {warning}" for warning in report.warnings)
    lines.append(summary(reports))
    return "\n".join(lines) + "\n"


def to_json(reports: Sequence[HostReport]) -> str:
    return json.dumps(
        {
            "ok": exit_code(reports) == EXIT_OK,
            "exit_code": exit_code(reports),
            "summary": summary(reports),
            "hosts": [
                {
                    "name": report.name,
                    "ok": report.ok,
                    "reachable": report.reachable,
                    "error": report.error,
                    "remote_commands": report.remote_commands,
                    "seconds": round(report.seconds, 3),
                    "command_seconds": {name: round(sec, 3) for name, sec in report.command_seconds.items()},
                    "warnings": report.warnings,
                    "checks": [_check_json(c) for c in report.checks],
                }
                for report in reports
            ],
        },
        indent=2,
    ) + "\n"


def _check_json(check: CheckResult) -> dict:
    data = {"area": check.area, "name": check.name, "ok": check.ok, "expected": check.expected,
            "actual": check.actual, "fix": check.fix}
    # Only a check that does not apply says more: ok (no failure), and why it was not checked.
    if check.not_applicable:
        data.update(status=NOT_APPLICABLE, reason=check.not_applicable)
    return data


def to_junit(reports: Sequence[HostReport]) -> str:
    root = ElementTree.Element("testsuites", name="hostkit verify")
    for report in reports:
        failures = len(report.failures)
        skipped = sum(check.status == NOT_APPLICABLE for check in report.checks)
        suite = ElementTree.SubElement(
            root, "testsuite", name=report.name, tests=str(max(1, len(report.checks))),
            failures=str(failures), errors=str(0 if report.reachable else 1), skipped=str(skipped),
            time=f"{report.seconds:.3f}",
        )
        properties = ElementTree.SubElement(suite, "properties")
        ElementTree.SubElement(properties, "property", name="remote_commands", value=str(report.remote_commands))
        if not report.reachable:
            case = ElementTree.SubElement(suite, "testcase", classname=f"{report.name}.connection", name="reachable")
            ElementTree.SubElement(case, "error", message=report.error or "").text = report.error
        for check in report.checks:
            case = ElementTree.SubElement(suite, "testcase", classname=f"{report.name}.{check.area}", name=check.name)
            if not check.ok:
                ElementTree.SubElement(case, "failure", message=check.message()).text = check.message()
            elif check.not_applicable:
                ElementTree.SubElement(case, "skipped", message=check.not_applicable)
            else:
                ElementTree.SubElement(case, "system-out").text = check.actual
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
