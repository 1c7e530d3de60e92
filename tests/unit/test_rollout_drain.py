"""Drain around restarts and --max-unavailable: the pure parts and the rollout loop."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hostkit.profile.validation import ProfileError, profile_from_data
from hostkit.rollout.batches import BatchSpecError, limit_down, model_limits, parse_batches, parse_max_failed, \
    parse_max_unavailable, split_batches
from hostkit.rollout.drain import IDLE_SOURCE, run_hook
from hostkit.rollout.engine import RolloutSettings, run_rollout
from hostkit.rollout.idle import running_requests, wait_idle
from hostkit.rollout.report import GateCheck, read_report
from test_rollout_engine import FakeFleet

# The stand-in's /metrics while it serves one request (hostkit_lab/standin/vllm_standin.py), and
# vLLM's own form with labels, one series per engine.
STANDIN_METRICS = """# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 1
vllm:num_requests_waiting 0
"""
VLLM_METRICS = """vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
vllm:num_requests_running_total_seconds 9.0
"""


# -- --max-unavailable ---------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "hosts", "limit"), [("25%", 3, 1), ("25%", 8, 2), ("25%", 10, 2), ("1", 10, 1),
                                                      ("50%", 5, 2), ("100%", 4, 4), ("3", 2, 3)])
def test_max_unavailable_limits(spec, hosts, limit):
    assert parse_max_unavailable(spec).limit(hosts) == limit


@pytest.mark.parametrize("spec", ["0", "0%", "-1", "1.5", "120%", "a quarter", ""])
def test_bad_max_unavailable_is_refused(spec):
    with pytest.raises(BatchSpecError, match="--max-unavailable"):
        parse_max_unavailable(spec)


def test_default_batches_never_take_more_than_a_quarter_of_a_models_hosts():
    hosts = [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(4)]
    down = {name: {name[0]: 1} for name in hosts}
    batches = limit_down(split_batches(hosts, parse_batches("1,25%,100%")), down,
                         model_limits(down.values(), parse_max_unavailable("25%")))
    assert sorted(name for batch in batches for name in batch) == sorted(hosts)
    for batch in batches:
        assert sum(name.startswith("a") for name in batch) <= 2 and sum(name.startswith("b") for name in batch) <= 1
    assert batches[0] == ["a0"]  # the canary stays alone


def test_hosts_that_serve_nothing_are_not_limited():
    down = {"x": {}, "y": {}, "a": {"m": 1}, "b": {"m": 1}}
    batches = limit_down([["x", "y", "a", "b"]], down, model_limits(down.values(), parse_max_unavailable("1")))
    assert batches == [["x", "y", "a"], ["b"]]


# -- the idle wait -------------------------------------------------------------------------------


def test_running_requests_sums_the_series():
    assert running_requests(STANDIN_METRICS) == 1
    assert running_requests(VLLM_METRICS) == 3
    assert running_requests("other_metric 1\n") is None


class _Metrics(BaseHTTPRequestHandler):
    answers: list[str] = []

    def do_GET(self):
        body = (self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_wait_idle_waits_for_the_running_requests_to_end(metrics_server):
    _, url = metrics_server
    _Metrics.answers = [STANDIN_METRICS, STANDIN_METRICS, STANDIN_METRICS.replace("running 1", "running 0")]
    result = wait_idle(url, timeout=10, poll_interval=0.05)
    assert result["idle"] and result["running"] == 0 and "no running request" in result["detail"]


def test_wait_idle_gives_up_at_its_deadline(metrics_server):
    _, url = metrics_server
    _Metrics.answers = [VLLM_METRICS]
    started = time.monotonic()
    result = wait_idle(url, timeout=0.5, poll_interval=0.1)
    assert not result["idle"] and result["detail"] == "3 requests still running after 0s"
    assert time.monotonic() - started < 3


@pytest.mark.processes
def test_the_idle_script_on_a_host_needs_only_the_standard_library(metrics_server, tmp_path):
    _, url = metrics_server
    _Metrics.answers = [STANDIN_METRICS.replace("running 1", "running 0")]
    argv = [sys.executable, "-I", "-S", "-c", IDLE_SOURCE, json.dumps({"base_url": url, "timeout": 5})]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert json.loads(result.stdout)["idle"], result.stderr


def test_a_server_that_does_not_answer_runs_nothing():
    result = wait_idle("http://127.0.0.1:9", timeout=5)
    assert result["idle"] and "not serving" in result["detail"]


# -- the hooks -----------------------------------------------------------------------------------


@pytest.mark.processes
def test_a_hook_gets_the_host_name_last_and_in_its_environment(tmp_path):
    log = tmp_path / "log"
    script = f"import os, sys; open({str(log)!r}, 'a').write(sys.argv[1] + ' ' + sys.argv[2] + ' ' + os.environ['HOSTKIT_HOST'])"
    check = run_hook("drain", [sys.executable, "-c", script, "--pool=a"], "gpu-01", timeout=30)
    assert check.passed and check.detail.endswith("gpu-01 exited 0")
    assert log.read_text() == "--pool=a gpu-01 gpu-01"


@pytest.mark.processes
def test_a_failing_or_hanging_hook_says_so(tmp_path):
    failed = run_hook("drain", [sys.executable, "-c", "import sys; sys.exit('lb: no such backend')"], "gpu-01", 30)
    assert not failed.passed and "exited 1: lb: no such backend" in failed.detail
    started = time.monotonic()
    hung = run_hook("undrain", [sys.executable, "-c", "import time; time.sleep(60)"], "gpu-01", timeout=1)
    assert not hung.passed and "did not end within 1s and was stopped" in hung.detail
    assert time.monotonic() - started < 10
    missing = run_hook("drain", ["/no/such/lb"], "gpu-01", 5)
    assert not missing.passed and "could not run" in missing.detail


# -- profile keys --------------------------------------------------------------------------------


BASE = {"vllm_model": "m", "gpu_required": False}


def test_drain_commands_are_strings_or_lists():
    profile = profile_from_data("h", {**BASE, "rollout_drain_command": "lb drain --pool 'a b'",
                                      "rollout_undrain_command": ["lb", "undrain"]})
    assert profile.rollout_drain_command == ["lb", "drain", "--pool", "a b"]
    assert profile.rollout_undrain_command == ["lb", "undrain"]


@pytest.mark.parametrize(("key", "value"), [("rollout_drain_command", 7), ("rollout_drain_command", ["lb", 1]),
                                            ("rollout_undrain_command", []), ("rollout_drain_command", "lb 'open"),
                                            ("rollout_drain_timeout", -5), ("rollout_hook_timeout", 0)])
def test_bad_drain_settings_are_refused_naming_host_and_key(key, value):
    with pytest.raises(ProfileError) as caught:
        profile_from_data("gpu-07", {**BASE, key: value})
    assert f"host gpu-07: {key} = {value!r} is invalid" in str(caught.value)


# -- the rollout loop ----------------------------------------------------------------------------


class FakeDrainer:
    def __init__(self, fleet, drain_fails=(), idle_fails=()):
        self.fleet, self.drain_fails, self.idle_fails = fleet, set(drain_fails), set(idle_fails)
        self.events: list[str] = []
        fleet_deploy, fleet_gate = fleet.deploy, fleet.gate
        fleet.deploy = lambda names, dry: (self.events.extend(f"deploy {n}" for n in names), fleet_deploy(names, dry))[1]
        fleet.gate = lambda names: (self.events.extend(f"gate {n}" for n in names), fleet_gate(names))[1]

    def drains(self, name):
        return True

    def drain(self, names):
        self.events.extend(f"drain {n}" for n in names)
        return {n: [GateCheck("drain", n not in self.drain_fails, "lb"), GateCheck("idle", n not in self.idle_fails, "0")]
                for n in names}

    def undrain(self, names):
        self.events.extend(f"undrain {n}" for n in names)
        return {n: GateCheck("undrain", True, "lb") for n in names}


def roll(fleet, drainer, tmp_path, hosts, batches="1,100%", max_unavailable="25%", max_failed="0"):
    settings = RolloutSettings("inv.py", "deploy.py", parse_batches(batches), parse_max_failed(max_failed), "ready",
                               max_unavailable=parse_max_unavailable(max_unavailable))
    lines: list[str] = []
    report = run_rollout(hosts, settings, fleet.deploy, fleet.gate, report_path=tmp_path / "r.json",
                         progress=lines.append, models={name: "m" for name in hosts}, drainer=drainer)
    return report, lines


def test_each_host_is_drained_deployed_gated_and_undrained_in_order(tmp_path):
    fleet = FakeFleet()
    drainer = FakeDrainer(fleet)
    hosts = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]
    report, lines = roll(fleet, drainer, tmp_path, hosts)
    assert fleet.deployed == [["h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"], ["h8"]]  # 25% of 8 = 2 at once
    assert drainer.events[:8] == ["drain h1", "deploy h1", "gate h1", "undrain h1",
                                  "drain h2", "drain h3", "deploy h2", "deploy h3"]
    for record in report.hosts:
        assert [step for step, _ in record.timeline] == ["drain", "deploy", "gate", "undrain"]
        assert [check.name for check in record.drain] == ["drain", "idle", "undrain"]
    saved = read_report(tmp_path / "r.json")
    assert saved.max_unavailable == "25%" and saved.host("h1").timeline == report.host("h1").timeline
    assert "at most 25% of a model's hosts at once" in lines[0]
    assert "batch 2/5: undrained h2, h3" in lines


def test_a_failed_drain_is_not_deployed_and_goes_back_into_service(tmp_path):
    fleet = FakeFleet()
    drainer = FakeDrainer(fleet, idle_fails={"h2"})
    report, lines = roll(fleet, drainer, tmp_path, ["h1", "h2", "h3"], batches="1,100%", max_unavailable="100%",
                         max_failed="1")
    assert fleet.deployed == [["h1"], ["h3"]]
    assert report.host("h2").state == "failed" and report.host("h2").failure == "idle: 0"
    assert "undrain h2" in drainer.events and drainer.events.index("undrain h2") < drainer.events.index("deploy h3")


def test_a_host_that_fails_its_gate_stays_drained(tmp_path):
    fleet = FakeFleet(gate_fails={"h2"})
    drainer = FakeDrainer(fleet)
    report, lines = roll(fleet, drainer, tmp_path, ["h1", "h2", "h3"], max_unavailable="1")
    assert "undrain h2" not in drainer.events and "undrain h1" in drainer.events
    assert report.outcome == "halted" and report.host("h3").state == "untouched"
    assert any("left drained (failed after their drain): h2" in line for line in lines)
    assert json.loads((tmp_path / "r.json").read_text())["hosts"][1]["drain"][-1]["name"] == "idle"
