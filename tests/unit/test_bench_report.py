"""bench/run.py's summary: which runs feed which figure, and the targets judged from them."""

from __future__ import annotations

from bench.run import Measurement, render_table, summarise


def run(tool, kind, hosts, seconds, commands, ok=True):
    return Measurement(tool, kind, hosts, seconds, ok, {h: commands for h in hosts}, 1, 0.5, 0.5)


RESULTS = [
    run("hostkit", "first", ["b1x1"], 30.0, 20),
    run("ansible", "first", ["b1x2"], 120.0, 90),
    run("hostkit", "noop", ["b1x1"], 3.0, 1),
    run("ansible", "noop", ["b1x2"], 60.0, 70),
    run("hostkit", "verify", ["b1x1"], 4.0, 2),
    run("hostkit", "first", ["b2x2"], 40.0, 20),
    run("ansible", "first", ["b2x1"], 100.0, 90),
    run("hostkit", "noop", ["b2x2"], 5.0, 1),
    run("ansible", "noop", ["b2x1"], 50.0, 70),
    # a failed run is shown but not timed
    run("hostkit", "noop", ["b3x1"], 0.5, 1, ok=False),
    run("hostkit", "first", ["fleet1"], 35.0, 20),
    run("hostkit", "first", ["fleet2", "fleet3", "fleet4"], 42.0, 21),
    run("hostkit", "noop", ["fleet1"], 4.0, 1),
    run("hostkit", "noop", ["fleet2", "fleet3", "fleet4"], 6.0, 1),
    run("hostkit", "verify", ["fleet2", "fleet3", "fleet4"], 6.0, 2),
]


def test_medians_and_speedups_come_from_the_matching_successful_runs():
    report = summarise(RESULTS)
    table, summary = report["table"], report["summary"]
    assert table["hostkit_first"]["median_s"] == 35.0
    assert table["ansible_first"]["median_s"] == 110.0
    assert table["hostkit_noop"]["median_s"] == 4.0  # the failed 0.5 s run is left out
    assert table["hostkit_noop"]["failed_runs"] == 1
    assert summary["first_speedup"] == 110.0 / 35.0
    assert summary["noop_speedup"] == 55.0 / 4.0
    assert summary["noop_commands_per_host"] == 1
    assert summary["verify_commands_per_host"] == 2
    assert summary["fleet_noop_ratio"] == 6.0 / 4.0
    assert summary["fleet_first_ratio"] == 42.0 / 35.0


def test_targets_and_table():
    report = summarise(RESULTS)
    met = {t["target"]: t["met"] for t in report["targets"]}
    assert met["no-op rerun at least 10x faster than Ansible"] is True
    assert met["first run at least 3x faster than Ansible"] is True
    assert met["3 hosts in at most 1.3x the time of 1 (no-op rerun)"] is False
    assert met["3 hosts in at most 1.3x the time of 1 (first run)"] is True
    text = render_table(report)
    assert "13.8x" in text and "NOT met" in text


def test_a_rerun_that_changed_something_is_flagged():
    changed = run("hostkit", "noop", ["b4x1"], 9.0, 3)
    changed.changed = {"b4x1": ["vLLM host | Swap file on NVMe"]}
    report = summarise([*RESULTS, changed])
    assert report["table"]["hostkit_noop"]["runs_that_changed_something"] == 1
    assert "WARNING: 1 hostkit_noop run(s) changed something" in render_table(report)
