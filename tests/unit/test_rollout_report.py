import json

import pytest

from hostkit.rollout.report import (
    GateCheck,
    GateResult,
    HostRecord,
    RolloutReport,
    read_report,
    resume_selection,
)


def report_with(*records: HostRecord, dry: bool = False) -> RolloutReport:
    return RolloutReport("inv.py", "deploy.py", "1,100%", "0", "ready", dry=dry, hosts=list(records))


def test_report_round_trips_through_json(tmp_path):
    gate = GateResult.of([GateCheck("health", True, "HTTP 200", 0.1), GateCheck("completion", False, "HTTP 500", 0.2)], 0.3)
    report = report_with(
        HostRecord("a", batch=1, state="done", changed=["Swap file"], deploy_seconds=3.0, gate=GateResult.of([], 0.1)),
        HostRecord("b", batch=2, state="failed", gate=gate, failure="gate: completion: HTTP 500"),
        HostRecord("c", batch=2),
    )
    report.write(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["counts"] == {"done": 1, "failed": 1, "untouched": 1}
    assert data["hosts"][1]["gate"]["checks"][1] == {"name": "completion", "passed": False, "detail": "HTTP 500", "seconds": 0.2}
    again = read_report(tmp_path / "r.json")
    assert again == report
    assert again.host("b").gate.failure == "completion: HTTP 500"
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("text", ["not json", "{}", json.dumps({"version": 99}), json.dumps({"version": 1})])
def test_unreadable_reports_are_refused(tmp_path, text):
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(ValueError, match="cannot resume"):
        read_report(tmp_path / "r.json")


def test_resume_selection_keeps_order_and_skips_only_done_hosts():
    previous = report_with(
        HostRecord("a", state="done"), HostRecord("b", state="failed"), HostRecord("c", state="untouched"),
        HostRecord("d", state="done"),
    )
    assert resume_selection(previous, ["a", "b", "c", "d", "e"]) == (["a", "d"], ["b", "c", "e"])
    with pytest.raises(ValueError, match="--dry"):
        resume_selection(report_with(HostRecord("a", state="planned"), dry=True), ["a"])

