"""Rollout per instance (issue 35): --max-unavailable counts a served model's endpoints
fleet-wide (vllm.service, or each vllm@NAME.service), and a host with vllm_instances counts only
the instances that restart; drain and gate per instance.

The fleet below plays the deploy as hostkit's does it: a dry run names the unit of each
instance that would change, and a deploy restarts a host's changed instances one after the
other (the hosts of a batch side by side). It records which endpoints are out of service at
each step, drained or restarting, so the tests check what a load balancer would see.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hostkit.fleet.pyinfra_runner import write_inventory
from hostkit.profile.validation import profile_from_data
from hostkit.rollout import rollout
from hostkit.rollout.batches import parse_batches, parse_max_failed, parse_max_unavailable
from hostkit.rollout.drain import Drainer
from hostkit.rollout.endpoints import restarting
from hostkit.rollout.engine import RolloutSettings, run_rollout
from hostkit.rollout.gate import ServiceGate
from hostkit.rollout.pyinfra_batch import BatchDeploy, HostDeploy
from hostkit.rollout.render import summary_table
from hostkit.rollout.report import GateCheck, GateResult, read_report
import test_rollout_gate
from test_rollout_gate import KEY, MODEL
from hostkit_lab.net import free_port

standin = test_rollout_gate.standin  # the stand-in on loopback, a module fixture
PLAIN = None  # a host's "instances" when it runs vllm.service


class InstanceFleet:
    """Hosts -> {instance (None: vllm.service): served model}; `changes` -> the instances whose
    plan changed (a vllm.service host restarts on every deploy, as the rollout assumes)."""

    def __init__(self, hosts, changes, drained=False, dry_fails=()):
        self.hosts, self.changes = hosts, {name: list(changed) for name, changed in changes.items()}
        self.drained_hosts, self.dry_fails = drained, set(dry_fails)
        self.calls: list[tuple[list[str], bool]] = []
        self.out: set[str] = set()  # endpoints out of service now: drained or restarting
        self.seen: list[frozenset[str]] = []  # self.out at each step
        self.drain_asked: list[dict] = []

    def endpoint(self, host, instance):
        return f"{host}/{'vllm.service' if instance is None else f'vllm@{instance}.service'}"

    def model(self, endpoint):
        host, unit = endpoint.split("/")
        instance = None if unit == "vllm.service" else unit[len("vllm@"):-len(".service")]
        return self.hosts[host][instance]

    def deploy(self, names, dry):
        self.calls.append((list(names), dry))
        if dry:
            return BatchDeploy({name: self.plan(name) for name in names}, 0.5)
        # Step by step: at step k each host of the batch restarts its k-th changed instance.
        restarts = {name: list(self.hosts[name]) if PLAIN in self.hosts[name] else self.changes.get(name, [])
                    for name in names}
        for step in range(max((len(changed) for changed in restarts.values()), default=0)):
            down = {self.endpoint(name, changed[step]) for name, changed in restarts.items() if step < len(changed)}
            self.seen.append(frozenset(self.out | down))
        result = {name: HostDeploy(ok=True, changed=[f"vLLM host | vLLM unit {self.endpoint(name, i).split('/')[1]}"
                                                    for i in restarts[name]]) for name in names}
        for name in names:
            self.changes[name] = []
        return BatchDeploy(result, 1.0)

    def plan(self, name):
        if name in self.dry_fails:
            return HostDeploy(ok=False, failure="pyinfra --dry exited 1: ssh: connection refused")
        units = [self.endpoint(name, instance).split("/")[1] for instance in self.changes.get(name, [])]
        return HostDeploy(ok=True, would_change=["vLLM host | Kernel memory sysctls",
                                                 *(f"vLLM host | vLLM unit {unit}" for unit in units),
                                                 *(f"vLLM host | vLLM readiness gate of {unit}" for unit in units)])

    def gate(self, names):
        return {name: GateResult.of([GateCheck(f"{self.endpoint(name, i).split('/')[1]} completion", True, "ok")
                                     for i in self.hosts[name]], 0.1) for name in names}

    # The drain steps (hostkit.rollout.engine.Drain), when `drained`.
    def drains(self, name):
        return self.drained_hosts

    def drain(self, names, instances=None):
        self.drain_asked.append(dict(instances or {}))
        result = {}
        for name in names:
            listed = (instances or {}).get(name, [None]) if PLAIN not in self.hosts[name] else [None]
            self.out |= {self.endpoint(name, instance) for instance in listed}
            if listed:
                result[name] = [GateCheck("drain", True, "lb")]
        return result

    def undrain(self, names, instances=None):
        for name in names:
            self.out -= {self.endpoint(name, instance) for instance in self.hosts[name]}
        return {name: GateCheck("undrain", True, "lb") for name in names}

    # What the tests check.
    def peak(self) -> dict[str, int]:
        """Per model, the most of its endpoints out of service at one step."""
        peaks: Counter = Counter()
        for out in self.seen:
            for model, count in Counter(self.model(endpoint) for endpoint in out).items():
                peaks[model] = max(peaks[model], count)
        return dict(peaks)

    def hosts_fully_down(self) -> list[str]:
        return sorted({name for out in self.seen for name, served in self.hosts.items()
                       if all(self.endpoint(name, instance) in out for instance in served)})


def roll(fleet, tmp_path, order, max_unavailable="1", batches="100%", drainer=None, dry=False):
    settings = RolloutSettings("inv.py", "deploy.py", parse_batches(batches), parse_max_failed("0"), "ready", dry=dry,
                               max_unavailable=parse_max_unavailable(max_unavailable))
    lines: list[str] = []
    plain = {name: served[PLAIN] for name, served in fleet.hosts.items() if PLAIN in served}
    instances = {name: served for name, served in fleet.hosts.items() if PLAIN not in served}
    report = run_rollout(order, settings, fleet.deploy, fleet.gate, report_path=tmp_path / "report.json",
                         progress=lines.append, models=plain, drainer=drainer, instances=instances)
    return report, lines


def table_rows(report) -> dict[str, list[str]]:
    """The summary table's cells by the row's first (a host's, or an instance's `host/unit`)."""
    return {line.split()[0]: line.split()[1:] for line in summary_table(report).splitlines()[1:-1]}


TWO_BY_TWO = {"h1": {"a": "m", "b": "m"}, "h2": {"a": "m", "b": "m"}}


def test_two_replicas_per_host_roll_one_endpoint_of_the_model_at_a_time(tmp_path):
    fleet = InstanceFleet(TWO_BY_TWO, {"h1": ["a", "b"], "h2": ["a", "b"]})
    report, lines = roll(fleet, tmp_path, ["h1", "h2"])
    assert [batch.hosts for batch in report.batches] == [["h1"], ["h2"]]
    assert fleet.calls == [(["h1", "h2"], True), (["h1"], False), (["h2"], False)]
    assert fleet.seen == [{"h1/vllm@a.service"}, {"h1/vllm@b.service"}, {"h2/vllm@a.service"}, {"h2/vllm@b.service"}]
    assert fleet.peak() == {"m": 1} and fleet.hosts_fully_down() == []
    assert report.outcome == "completed" and report.max_unavailable == "1"
    assert lines[0] == ("instances, from a dry run of the deploy in 0.5s: h1/vllm@a.service (m) restarts; "
                        "h1/vllm@b.service (m) restarts; h2/vllm@a.service (m) restarts; h2/vllm@b.service (m) restarts")
    assert lines[1].endswith("at most 1 of a model's endpoints (hosts or instances) down at once")
    assert "batch 1/2: deployed in 1.0s: 1/1 changed; h1: changed vllm@a.service, vllm@b.service" in lines
    assert table_rows(report)["h1/vllm@a.service"] == ["changed", "1", "passed", "serves", "m"]
    endpoints = read_report(tmp_path / "report.json").host("h2").endpoints  # and a resume reads them back
    assert [(e.unit, e.model, e.restarts, e.changed) for e in endpoints] == [
        ("vllm@a.service", "m", True, ["vLLM host | vLLM unit vllm@a.service"]),
        ("vllm@b.service", "m", True, ["vLLM host | vLLM unit vllm@b.service"])]


def test_with_two_down_allowed_both_hosts_roll_together_still_one_replica_of_each_at_a_time(tmp_path):
    fleet = InstanceFleet(TWO_BY_TWO, {"h1": ["a", "b"], "h2": ["a", "b"]})
    report, _ = roll(fleet, tmp_path, ["h1", "h2"], max_unavailable="2")
    assert [batch.hosts for batch in report.batches] == [["h1", "h2"]]
    assert fleet.peak() == {"m": 2} and fleet.hosts_fully_down() == []


def test_an_instance_whose_plan_did_not_change_is_not_counted(tmp_path):
    hosts = {name: {"a": "m", "b": "m"} for name in ("h1", "h2", "h3")}
    fleet = InstanceFleet(hosts, {"h1": ["a"], "h3": ["b"]})  # h2: nothing changed
    report, lines = roll(fleet, tmp_path, ["h1", "h2", "h3"])
    assert [batch.hosts for batch in report.batches] == [["h1", "h2"], ["h3"]]
    assert fleet.seen == [{"h1/vllm@a.service"}, {"h3/vllm@b.service"}]
    assert "h1/vllm@b.service (m) no change" in lines[0]
    rows = table_rows(report)
    assert rows["h1/vllm@b.service"] == rows["h2/vllm@a.service"] == ["unchanged", "-", "passed", "serves", "m"]
    assert rows["h1/vllm@a.service"][:2] == ["changed", "1"] and rows["h2"][:3] == ["1", "done", "0"]


def test_drained_instances_count_from_drain_to_undrain_and_only_those_that_restart_drain(tmp_path):
    hosts = {"h1": {"a": "m", "b": "m"}, "h2": {"a": "m", "b": "m"}}
    fleet = InstanceFleet(hosts, {"h1": ["a"], "h2": ["b"]}, drained=True)
    report, _ = roll(fleet, tmp_path, ["h1", "h2"], drainer=fleet)
    assert [batch.hosts for batch in report.batches] == [["h1"], ["h2"]]
    assert fleet.drain_asked == [{"h1": ["a"]}, {"h2": ["b"]}]
    assert fleet.peak() == {"m": 1}


def test_a_host_whose_drained_replicas_exceed_the_budget_is_refused_naming_instances_and_model(tmp_path):
    fleet = InstanceFleet(TWO_BY_TWO, {"h1": ["a"], "h2": ["a", "b"]}, drained=True)
    with pytest.raises(ValueError) as refused:
        roll(fleet, tmp_path, ["h1", "h2"], drainer=fleet)
    assert str(refused.value).startswith(
        "no host was touched: h2/vllm@a.service, h2/vllm@b.service serve m and are drained together"
        " (rollout_drain_command) before h2's deploy: 2 of m's endpoints out of service at once, over"
        " --max-unavailable 1 (1 of m's endpoints).")
    assert fleet.calls == [(["h1", "h2"], True)]  # the dry run alone
    assert not (tmp_path / "report.json").exists()
    report, _ = roll(fleet, tmp_path, ["h1", "h2"], max_unavailable="2", drainer=fleet)
    assert report.outcome == "completed" and fleet.peak() == {"m": 2}


def test_a_mixed_fleet_counts_vllm_service_hosts_and_instances_of_each_model(tmp_path):
    hosts = {"p1": {PLAIN: "m"}, "i1": {"a": "m", "b": "n"}, "p2": {PLAIN: "m"}, "i2": {"a": "n", "b": "n"}}
    fleet = InstanceFleet(hosts, {"i1": ["a", "b"], "i2": ["a", "b"]})
    report, lines = roll(fleet, tmp_path, ["p1", "i1", "p2", "i2"])
    # m: p1, i1/a, p2 (one each at most); n: i1/b, i2 (i2 restarts its two one after the other).
    assert [batch.hosts for batch in report.batches] == [["p1", "i2"], ["i1"], ["p2"]]
    assert fleet.calls[0] == (["i1", "i2"], True)  # vllm.service hosts need no dry run
    assert fleet.peak() == {"m": 1, "n": 1} and fleet.hosts_fully_down() == ["p1", "p2"]
    assert report.host("p1").endpoints == []


def test_a_host_the_dry_run_fails_on_counts_every_instance(tmp_path):
    fleet = InstanceFleet(TWO_BY_TWO, {"h2": ["a"]}, drained=True, dry_fails={"h1"})
    with pytest.raises(ValueError, match="h1/vllm@a.service, h1/vllm@b.service serve m"):
        roll(fleet, tmp_path, ["h1", "h2"], drainer=fleet)


def test_a_fleet_without_instances_has_no_dry_run(tmp_path):
    fleet = InstanceFleet({"p1": {PLAIN: "m"}, "p2": {PLAIN: "m"}}, {})
    report, lines = roll(fleet, tmp_path, ["p1", "p2"])
    assert fleet.calls == [(["p1"], False), (["p2"], False)]
    assert lines[0] == "2 hosts in 2 batches (1, 1); gate ready; max failed 0; at most 1 of a model's hosts at once"


def test_the_dry_run_plan_names_an_instance_by_its_unit_alone():
    changing = ["vLLM host | vLLM unit vllm@ab.service", "vLLM readiness gate of vllm@c.service", "Swap file on NVMe"]
    assert restarting(changing, ["a", "ab", "b", "c"]) == ["ab", "c"]


# -- the gate and the drain of each instance, against the stand-in on loopback -------------------------


def instance_host(port_a: int, port_b: int, **data):
    return profile_from_data("@local", {
        "vllm_model": MODEL, "gpu_required": False, **data,
        "vllm_instances": {"a": {"gpus": [0], "vllm_port": port_a, "vllm_api_key": KEY},
                           "b": {"gpus": [1], "vllm_port": port_b, "vllm_api_key": KEY}}})


class _OtherModel(BaseHTTPRequestHandler):
    """A server that is healthy but serves another model."""

    def do_GET(self):
        body = b"{}" if self.path == "/health" else json.dumps({"data": [{"id": "other/model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def other_model():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtherModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_the_gate_checks_each_instance_at_its_own_port(standin, other_model, tmp_path):
    serving = int(standin.rsplit(":", 1)[1])
    profiles = {"@local": instance_host(serving, other_model)}
    result = ServiceGate(tmp_path / "unused.py", profiles, {"@local": {}}, timeout=5)(["@local"])["@local"]
    assert [(check.name, check.passed) for check in result.checks] == [
        ("vllm@a.service health", True), ("vllm@a.service models", True), ("vllm@a.service completion", True),
        ("vllm@b.service health", True), ("vllm@b.service models", False)]
    assert result.failure.startswith(f"vllm@b.service models: {MODEL} not served; the server lists ['other/model']")
    assert f"(from the controller to http://127.0.0.1:{other_model})" in result.checks[-1].detail


@pytest.mark.processes
def test_an_instance_drains_with_its_unit_and_port_and_waits_at_its_own_port(standin, tmp_path):
    serving = int(standin.rsplit(":", 1)[1])
    log = tmp_path / "lb.log"
    script = (f"import json, os, sys; open({str(log)!r}, 'a').write(json.dumps([sys.argv[1:], "
              "os.environ['HOSTKIT_HOST'], os.environ['HOSTKIT_UNIT'], os.environ['HOSTKIT_PORT']]) + '\\n')")
    hook = [sys.executable, "-c", script]
    profiles = {"@local": instance_host(serving, free_port(), rollout_drain_command=hook,
                                        rollout_undrain_command=hook, rollout_drain_timeout=5)}
    drainer = Drainer(tmp_path / "unused.py", profiles, {"@local": {}})
    drained = drainer.drain(["@local"], instances={"@local": ["a"]})["@local"]
    assert [(check.name, check.passed) for check in drained] == [("vllm@a.service drain", True),
                                                                 ("vllm@a.service idle", True)]
    assert "no running request" in drained[1].detail and "(from the controller)" in drained[1].detail
    undrained = drainer.undrain(["@local"], instances={"@local": ["a"]})["@local"]
    assert undrained.name == "undrain" and undrained.passed and undrained.detail.startswith("vllm@a.service: ")
    assert drainer.drain(["@local"], instances={"@local": []}) == {}  # no instance restarts: none drains
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [[["@local", "vllm@a.service"], "@local", "vllm@a.service", str(serving)]] * 2


def test_rollout_of_an_inventory_with_instances_dry_runs_them_first(tmp_path):
    path = write_inventory(tmp_path / "inventory.py", [
        ("gpu-1", {"vllm_model": "m/m", "gpu_required": False}),
        ("gpu-8", {"vllm_model": "m/m", "gpu_required": False,
                   "vllm_instances": {"a": {"gpus": [0]}, "b": {"gpus": [1], "vllm_port": 8001}}})])
    hosts = {"gpu-1": {PLAIN: "m/m"}, "gpu-8": {"a": "m/m", "b": "m/m"}}
    fleet = InstanceFleet(hosts, {"gpu-8": ["b"]})
    report = rollout(str(path), "deploy.py", batches="100%", max_unavailable="1", gate="none",
                     deployer=fleet.deploy, progress=lambda line: None, report_path=tmp_path / "r.json")
    assert fleet.calls == [(["gpu-8"], True), (["gpu-1"], False), (["gpu-8"], False)]
    assert [batch.hosts for batch in report.batches] == [["gpu-1"], ["gpu-8"]]
    assert [(e.unit, e.restarts) for e in report.host("gpu-8").endpoints] == [("vllm@a.service", False),
                                                                             ("vllm@b.service", True)]
    assert os.path.exists(tmp_path / "r.json")


def test_a_dry_rollout_shows_which_instances_would_restart(tmp_path):
    fleet = InstanceFleet(TWO_BY_TWO, {"h1": ["b"], "h2": ["a", "b"]})
    report, lines = roll(fleet, tmp_path, ["h1", "h2"], dry=True)
    assert all(dry for _, dry in fleet.calls) and fleet.seen == []
    assert [batch.hosts for batch in report.batches] == [["h1"], ["h2"]]
    rows = table_rows(report)
    assert rows["h1/vllm@a.service"][0] == "unchanged" and rows["h1/vllm@b.service"][0] == "restarts"
    assert "  h1: would change: vLLM host | Kernel memory sysctls, vLLM host | vLLM unit vllm@b.service, " \
           "vLLM host | vLLM readiness gate of vllm@b.service" in lines
