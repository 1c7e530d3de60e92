"""bench/cure: what the benchmark reads off its records. The kernel logs are real
(`journalctl -k -o short-unix` of lab VMs the benchmark ran: tests/unit/fixtures/cure/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.cure import measure, report
from bench.cure.measure import Request
from bench.cure.probes import _unix, parse_sample
from bench.cure.scenarios import SCENARIOS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import evidence  # noqa: E402


def served(*spans: tuple[float, float, bool]) -> list[Request]:
    return [Request(sent, done, ok) for sent, done, ok in spans]


def test_an_outage_runs_from_the_first_failed_answer_to_the_next_success():
    requests = served((0, 3, True), (3, 6, True), (6, 7, False), (8, 9, False), (10, 40, False), (41, 44, True))
    assert measure.outages(requests, end=60) == [(7, 44)]
    assert measure.seconds_not_serving(requests, end=60) == 37


def test_a_host_that_never_serves_again_is_down_to_the_end_of_the_window():
    requests = served((0, 3, True), (3, 5, False), (6, 7, False))
    assert measure.outages(requests, end=100) == [(5, 100)]
    assert measure.serving_again_after(requests, measure.first_failure(requests), end=100) is None


def test_answers_are_taken_in_the_order_they_came_back_not_sent():
    # A slow success sent before the failure but answered after it ends no outage that began later.
    requests = served((0, 20, True), (1, 5, False), (6, 30, True))
    assert measure.outages(requests, end=40) == [(5, 20)]


def test_answers_after_the_end_of_the_window_are_not_counted():
    requests = served((0, 2, False), (3, 50, True))
    assert measure.outages(requests, end=10) == [(2, 10)]


def test_serving_again_counts_only_requests_sent_after_the_failure():
    # A request sent before the failure (in flight as it happened) is no proof of recovery.
    requests = served((0, 4, False), (1, 6, True), (5, 12, True))
    assert measure.first_failure(requests) == 4
    assert measure.serving_again_after(requests, 4, end=60) == 8


def test_no_failure_no_recovery_time():
    assert measure.serving_again_after(served((0, 1, True)), None, end=10) is None
    assert measure.first_failure(served((0, 1, True))) is None


def test_successes_per_second_in_buckets():
    requests = served((0, 1, True), (0, 4, True), (0, 6, True), (0, 7, False), (0, 11, True))
    assert measure.per_second(requests, end=12, step=5) == [(0, 0.4), (5, 0.2), (10, 0.2)]


def test_alert_lead_is_seconds_before_the_failure_negative_after():
    seen = {"HostkitSwapHigh": {"pending_s": 100.0, "firing_s": None},
            "HostkitVllmOomKill": {"pending_s": 250.0, "firing_s": 250.0}}
    leads = measure.alert_leads(seen, failure=240.0)
    assert leads["HostkitSwapHigh"] == {"pending_s": 100.0, "firing_s": None, "pending_lead_s": 140.0,
                                        "firing_lead_s": None}
    assert leads["HostkitVllmOomKill"]["firing_lead_s"] == -10.0
    assert measure.alert_leads(seen, failure=None)["HostkitSwapHigh"]["pending_lead_s"] is None


def test_spread_over_runs_counts_the_runs_without_the_figure():
    assert measure.spread([30.0, None, 10.0, 20.0]) == {"median": 20.0, "min": 10.0, "max": 30.0, "runs": 4,
                                                        "missing": 1}
    assert measure.spread([None])["median"] is None


def test_a_sampler_line_is_kilobytes_then_two_cgroup_byte_counts():
    sample = parse_sample(3.0, "5029036 2100000 1048572 1000000 2684354560 0\n")
    assert sample.mem_used == (5029036 - 2100000) * 1024
    assert sample.swap_used == 48572 * 1024
    assert sample.unit_bytes == 2684354560
    assert parse_sample(3.0, "cat: no such file") is None
    assert parse_sample(3.0, "1 2 3") is None


def test_prometheus_active_at_with_nanoseconds():
    assert _unix("2026-12-07T13:00:00.5Z") == pytest.approx(1796648400.5)
    assert _unix("2026-12-07T13:00:00Z") == 1796648400.0


def test_the_ramp_steps_concurrency_and_prompt_length_up_each_minute_within_max_model_len():
    shape = SCENARIOS[1].shape
    assert [shape(t) for t in (0, 61, 125, 185, 900)] == [(1, 64), (2, 256), (4, 512), (8, 900), (8, 900)]


def host_figures(succeeded: int, back: float | None, kills: list[str], failed_at: float | None = 60.0) -> dict:
    return {"requests": {"sent": succeeded + 5, "succeeded": succeeded, "failed": 5}, "not_serving_s": 100.0,
            "serving_again_after_s": back, "first_failure_s": failed_at,
            "peaks": {"swap_used_mib": 0, "mem_available_min_mib": 900},
            "kills": [{"process": process} for process in kills]}


def test_the_summary_takes_medians_per_scenario_and_setup_and_counts_recoveries():
    runs = [{"scenarios": {"2": {"hosts": {"bare": host_figures(10, None, []),
                                           "hostkit": host_figures(40, 300.0, [])}}}},
            {"scenarios": {"2": {"hosts": {"bare": host_figures(12, None, ["VLLM::Worker"]),
                                           "hostkit": host_figures(50, 500.0, [])}}}}]
    summary = report.summary(runs)
    assert summary["2"]["hostkit"]["serving_again_after_s"]["median"] == 400.0
    assert summary["2"]["hostkit"]["recovered_runs"] == 2
    assert summary["2"]["bare"]["recovered_runs"] == 0
    assert summary["2"]["bare"]["serving_again_after_s"]["missing"] == 2
    assert summary["2"]["bare"]["killed"] == ["VLLM::Worker"]
    assert summary["2"]["bare"]["succeeded"]["median"] == 11.0


def test_the_evidence_table_says_never_for_a_host_that_did_not_come_back_and_lists_alert_leads():
    bare, hostkit = host_figures(10, None, ["VLLM::Worker"]), host_figures(40, 300.0, [])
    bare["alerts"] = None
    hostkit["alerts"] = {"HostkitVllmDown": {"pending_s": 70.0, "firing_s": 670.0, "pending_lead_s": -10.0,
                                             "firing_lead_s": -610.0},
                         "HostkitSwapHigh": {"pending_s": 30.0, "firing_s": None, "pending_lead_s": 30.0,
                                             "firing_lead_s": None}}
    runs = [{"scenarios": {"2": {"hosts": {"bare": bare, "hostkit": hostkit}}}}]
    rows = evidence.cure_table({"summary": report.summary(runs), "runs": runs})
    bare_row, hostkit_row = rows[2], rows[3]
    assert "| 2 | bare | 10 | 5 | 100 | never | VLLM::Worker | 0 | no monitoring |" == bare_row
    assert hostkit_row.endswith("| 300 | nothing | 0 | VllmDown -610; SwapHigh +30 (pending only) |")


def test_the_kernel_log_gives_the_killed_process_its_cgroup_and_when_on_the_window_s_clock():
    journal = (Path(__file__).parent / "fixtures" / "cure" / "debian12-global-oom-vllm-worker.log").read_text()
    (kill,) = measure.kernel_kills(journal, window_start_unix=1796652700.0, host_offset_s=-0.37)
    assert (kill.process, kill.pid, kill.memcg, kill.system_wide) == (
        "VLLM::Worker", 3018, "/system.slice/vllm.service", True)
    # The `Killed process` line's stamp, 1796652833.953909, less the window's start and the host's offset.
    assert kill.at == pytest.approx(134.3239, abs=0.0001)


def test_a_kernel_log_without_a_kill_gives_none():
    assert measure.kernel_kills("-- No entries --\n1796652832.038662 cure1 kernel: eth0: link up\n", 0.0, 0.0) == []
