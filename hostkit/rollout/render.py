"""The summary table printed at the end of a rollout."""

from __future__ import annotations

from hostkit.rollout.report import FAILED, HostRecord, RolloutReport


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _gate(record: HostRecord) -> str:
    if record.gate is None:
        return "-"
    return "passed" if record.gate.passed else "FAILED"


def _changes(record: HostRecord, dry: bool) -> str:
    operations = record.would_change if dry else record.changed
    return str(len(operations)) if operations or record.state != "untouched" else "-"


def summary_table(report: RolloutReport) -> str:
    header = ("HOST", "BATCH", "STATE", "WOULD CHANGE" if report.dry else "CHANGED", "GATE", "DEPLOY S", "GATE S", "NOTE")
    rows = [header]
    for record in report.hosts:
        note = record.failure if record.state == FAILED else ("done in the resumed run" if record.previous_run else "")
        rows.append((
            record.name,
            "-" if record.batch is None else ("prev" if record.previous_run else str(record.batch)),
            record.state,
            _changes(record, report.dry),
            _gate(record),
            _seconds(record.deploy_seconds),
            _seconds(record.gate_seconds),
            note or "",
        ))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    counts = ", ".join(f"{count} {state}" for state, count in report.counts().items())
    outcome = report.outcome + (f" ({report.halt_reason})" if report.halt_reason else "")
    lines.append(f"rollout {outcome}: {counts}; {report.seconds:.1f}s")
    return "\n".join(line.rstrip() for line in lines)
