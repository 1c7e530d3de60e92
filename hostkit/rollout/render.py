"""The summary table printed at the end of a rollout."""

from __future__ import annotations

from hostkit.rollout.report import FAILED, RELEASE_CHECK, EndpointRecord, HostRecord, RolloutReport, endpoint_check


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _gate(record: HostRecord) -> str:
    if record.gate is None:
        return "-"
    return "passed" if record.gate.passed else "FAILED"


def _changes(record: HostRecord, dry: bool) -> str:
    operations = record.would_change if dry else record.changed
    return str(len(operations)) if operations or record.state != "untouched" else "-"


def _release(record: HostRecord) -> str:
    """The vLLM release the gate's verify found in service, without its torch build."""
    checks = record.gate.checks if record.gate else []
    found = [check.detail.split(" (", 1)[0] for check in checks if check.name == RELEASE_CHECK]
    return found[0] if found else "-"


def _endpoint_row(record: HostRecord, endpoint: EndpointRecord, dry: bool) -> tuple[str, ...]:
    """One of a host's instances under the host's row: whether it changes, its gate checks."""
    if dry or record.state == "untouched":
        state = "restarts" if endpoint.restarts else "unchanged"
    else:
        state = "changed" if endpoint.changed else "unchanged"
    checks = [check for check in (record.gate.checks if record.gate else ())
              if check.name.startswith(endpoint_check(endpoint.unit, ""))]
    gate = "-" if not checks else ("passed" if all(check.passed for check in checks) else "FAILED")
    return (f"  {endpoint.label(record.name)}", "", state, str(len(endpoint.changed)) if endpoint.changed else "-",
            gate, "", "", "", f"serves {endpoint.model}")


def summary_table(report: RolloutReport) -> str:
    header = ("HOST", "BATCH", "STATE", "WOULD CHANGE" if report.dry else "CHANGED", "GATE", "RELEASE", "DEPLOY S",
              "GATE S", "NOTE")
    rows = [header]
    for record in report.hosts:
        note = record.failure if record.state == FAILED else ("done in the resumed run" if record.previous_run else "")
        rows.append((
            record.name,
            "-" if record.batch is None else ("prev" if record.previous_run else str(record.batch)),
            record.state,
            _changes(record, report.dry),
            _gate(record),
            _release(record),
            _seconds(record.deploy_seconds),
            _seconds(record.gate_seconds),
            note or "",
        ))
        rows.extend(_endpoint_row(record, endpoint, report.dry) for endpoint in record.endpoints)
    widths = [max(len(row[column]) for row in rows) for column in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    counts = ", ".join(f"{count} {state}" for state, count in report.counts().items())
    outcome = report.outcome + (f" ({report.halt_reason})" if report.halt_reason else "")
    lines.append(f"rollout {outcome}: {counts}; {report.seconds:.1f}s")
    return "\n".join(line.rstrip() for line in lines)
