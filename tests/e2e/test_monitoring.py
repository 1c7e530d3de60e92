"""Memory monitoring end to end: the collector and Debian's node_exporter on a lab host, a real
Prometheus (the distribution's binary, hostkit_lab/prometheus.py) on this machine scraping it
through ssh port-forwards, and the shipped alert rules firing on a real memory overrun.

After a deploy of this module's data (node_exporter on, a 5 s collector interval, a small
MemoryMax with no MemoryHigh and no swap for the unit, so an overrun is killed at once) on each
host it uses: on the shared container host (`main_container`, systemd only, native speed) the
deploy converges, verify passes the monitoring checks (the textfile, node_exporter, the
timer), Prometheus scrapes node_exporter and the stand-in, and the collector's cost is
measured; on the shared `main_host` VM, whose kernel enforces MemoryMax (a container's memory
limits are its host's), a memory hog inside the vLLM unit's cgroup holds it above 90% of
MemoryMax until HostkitVllmMemoryPeakNearLimit fires, and grows until the OOM killer kills it,
which fires HostkitVllmOomKill and HostkitHostOomKill. On the VM the deploy leaves
node_exporter out (its apt install took about 130 s of the VM's time under qemu TCG) and
Prometheus reads the collector's file as node_exporter's textfile collector would, served as
it is (TEXTFILE_SERVER): node_exporter's relaying of that file is the container's test.
The rules are the shipped file with each `for:` shortened to 10 s: the expressions and
thresholds are the shipped ones.
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
import urllib.parse
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.monitoring import MonitoringFact
from hostkit.profile.validation import profile_from_data
from hostkit.fleet.pyinfra_runner import run_pyinfra
from hostkit_lab import exposition_server
from tests.e2e.conftest import MAIN_DEPLOY, REPO, lab_data, lab_inventory, main_host_for
from tests.e2e.test_doctor_smoke import forwarded, hostkit
from tests.e2e.vllm_unit import sh
from hostkit_lab.prometheus import api, firing, prometheus_server, shortened_rules
from tests.waiting import wait_for

pytestmark = pytest.mark.lab

MIB = 2**20
MONITORING_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"  # the profile's default
MEMORY_MAX_MIB = 256
MONITOR_DATA = {
    "vllm_served_model_name": "lab-model",
    "vllm_env": {"VLLM_STANDIN_LOAD_SECONDS": "2"},
    "vllm_ready_timeout": 240,
    "vllm_memory_max": f"{MEMORY_MAX_MIB}M",
    "vllm_memory_high": None,
    "vllm_memory_swap_max": "0",
    "monitoring_node_exporter": True,
    "monitoring_interval_s": 5,
}
# On the VM: node_exporter's part, done by the container's test, is left out of the deploy.
VM_DATA = {"monitoring_node_exporter": False}
# The collector's file over HTTP for Prometheus on the VM, as node_exporter re-exposes it.
TEXTFILE_SERVER = Path(exposition_server.__file__).read_text()
COLLECTOR_ARGS = ("--textfile-dir /tmp/hostkit-cost --unit vllm.service --interval 5 "
                  "--health-url http://127.0.0.1:8000/health --state-dir /tmp/hostkit-cost")

# Moves itself into the unit's cgroup, then allocates (and touches) MiB by MiB up to the
# target named in a control file, re-read every half second: the test raises it.
HOG = """
import os, sys, time
cgroup, control = sys.argv[1], sys.argv[2]
with open(cgroup + "/cgroup.procs", "w") as procs:
    procs.write(str(os.getpid()))
held = []
while True:
    target = int(open(control).read())
    while len(held) < target:
        held.append(bytearray(b"x" * 2**20))
    time.sleep(0.5)
"""


def exposed(text: str) -> dict[str, float]:
    """`name{labels}` -> value of a Prometheus text exposition."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


@pytest.fixture(scope="module")
def monitored(request, tmp_path_factory):
    """(lab host, inventory, rerun): the host of the parameter ("container" or "vm") deployed with
    MONITOR_DATA (and VM_DATA on the VM); on the container deployed again, the second run's output
    (None on the VM, whose test needs no rerun: test_main_deploy.py's proves the VM's no-change rerun)."""
    lab_host = main_host_for(request)
    data = {**MONITOR_DATA, **(VM_DATA if request.param == "vm" else {})}
    inventory = lab_inventory(tmp_path_factory.mktemp(f"monitoring-{request.param}") / "inventory.py", lab_host, data)
    first = run_pyinfra(inventory, MAIN_DEPLOY, cwd=REPO)
    assert first.ok, first.output[-4000:]
    assert "vLLM host | Memory monitoring" in first.changed
    if request.param == "vm":
        return lab_host, inventory, None
    second = run_pyinfra(inventory, MAIN_DEPLOY, cwd=REPO)
    assert second.ok, second.output[-4000:]
    return lab_host, inventory, second


# The textfile, node_exporter, Prometheus and promtool pipeline: systemd's, the container host.
ON_CONTAINER = pytest.mark.parametrize("monitored", ["container"], indirect=True)
# A memory overrun the kernel holds to MemoryMax and ends with an OOM kill: the VM.
ON_VM = pytest.mark.parametrize("monitored", ["vm"], indirect=True)


@ON_CONTAINER
def test_the_deploy_converges_and_verify_checks_the_collector(monitored):
    lab_host, inventory, rerun = monitored
    assert rerun.changed == [], f"a rerun changed: {rerun.changed}"
    assert "prometheus-node-exporter --collector.textfile.directory=/var/lib/prometheus/node-exporter" in sh(
        lab_host, "ps -eo args | grep [n]ode-exporter")
    def node_exporter_values() -> dict[str, float]:
        # node_exporter re-exposes the file (in its own number format).
        return exposed(sh(lab_host, "python3 -c \"import urllib.request;print(urllib.request.urlopen("
                                    "'http://127.0.0.1:9100/metrics', timeout=10).read().decode())\""))

    # One collector run's /health probe can miss its deadline on a loaded lab machine (CI,
    # 2026-12-01: up 0 right after the rerun): up within four runs.
    values = wait_for(lambda: (v := node_exporter_values()).get("hostkit_vllm_up") == 1 and v, 60,
                      "hostkit_vllm_up 1 in node_exporter's /metrics", interval=2, ignoring=OSError)
    # hostkit_vllm_memory_max_bytes is read from the unit's cgroup, which a container's kernel
    # does not give it: the VM's test below checks it.
    assert time.time() - values["hostkit_collector_last_success_timestamp_seconds"] < 60
    result = hostkit("verify", str(inventory), "--format", "json")
    (host,) = json.loads(result.stdout)["hosts"]
    monitoring = {check["name"]: check for check in host["checks"] if check["area"] == "monitoring"}
    assert set(monitoring) == {"collector installed", "collector timer active", "metrics file fresh",
                               "node_exporter serving"}
    assert all(check["ok"] for check in monitoring.values()), monitoring
    assert host["remote_commands"] == 2
    raw = sh(lab_host, MonitoringFact().command(scope=snapshot_scope(profile_from_data(lab_host.name, {**lab_data(), **MONITOR_DATA}))))
    print(raw)  # the snapshot section as the deploy reads it (tests/unit/fixtures/monitoring/)
    state = MonitoringFact().process(raw.splitlines())
    assert state.node_exporter_installed and state.timer_active == "active" and len(state.file_sha256) == 4


@ON_CONTAINER
def test_collector_cost_per_run(monitored):
    """Wall and CPU time of one collector run on the lab host (a container host: native speed), median of 10."""
    lab_host = monitored[0]
    script = ("import resource, subprocess, sys, time, json\n"
              "def cost(argv):\n"
              "    runs = []\n"
              "    for _ in range(10):\n"
              "        before = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
              "        started = time.monotonic()\n"
              "        subprocess.run(argv, check=True)\n"
              "        after = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
              "        runs.append((time.monotonic() - started, after.ru_utime + after.ru_stime"
              " - before.ru_utime - before.ru_stime))\n"
              "    return runs\n"
              "print(json.dumps({'collector': cost(['python3', '-I', '-S', "
              f"'/usr/local/lib/vllm-hostkit/monitoring-collector.py', *{COLLECTOR_ARGS.split()!r}]), "
              "'bare_python': cost(['python3', '-I', '-S', '-c', 'pass'])}))\n")
    measured = json.loads(sh(lab_host, f"mkdir -p /tmp/hostkit-cost && python3 -c {shlex.quote(script)}"))
    medians = {what: {"wall_s": round(statistics.median(r[0] for r in runs), 3),
                      "cpu_s": round(statistics.median(r[1] for r in runs), 3)} for what, runs in measured.items()}
    print(json.dumps({"medians_of_10": medians, "runs": measured}))
    written = sh(lab_host, "cat /tmp/hostkit-cost/hostkit.prom")
    print(written)  # a real metrics file (tests/unit/fixtures/monitoring/)
    # The cost is a printed figure (above), not a bound: under qemu TCG on a loaded 2-core machine
    # one run took 1.2 to 5.8 s. What the runs must show is a whole file, timed by the collector.
    metrics = exposed(written)
    assert metrics["hostkit_collector_duration_seconds"] > 0
    assert metrics["hostkit_collector_last_success_timestamp_seconds"] > 0
    assert "hostkit_vllm_up 1" in written


JOB_PORTS = {"node": 9100, "vllm": 8000}


@contextmanager
def prometheus(tmp_path: Path, host_name: str, targets: dict[str, str], paths: dict[str, str] | None = None):
    """A Prometheus server on loopback, scraping each job's URL every 5 s, with the shipped rules;
    the targets' `instance` is the lab host's name and the port on it, not the forwarded port;
    a job's metrics path is its entry in `paths`, /metrics otherwise.

    Not every 2 s: the scrape timeout is at most the interval. In CI under load (2026-12-02) the
    node target's series went stale and no alert fired; the likely cause, not yet measured, is a
    lab host's node_exporter taking over 2 s to answer through the ssh forward."""
    rules = shortened_rules(tmp_path)
    config = json.dumps({
        "global": {"scrape_interval": "5s", "scrape_timeout": "5s", "evaluation_interval": "2s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "metrics_path": (paths or {}).get(job, "/metrics"),
             "static_configs": [{"targets": [urllib.parse.urlparse(url).netloc],
                                 "labels": {"instance": f"{host_name}:{JOB_PORTS[job]}"}}]}
            for job, url in targets.items()
        ],
    })
    with prometheus_server(tmp_path, config) as base:
        yield base


def last_scrapes(base: str) -> list[tuple]:
    return [(t["labels"]["job"], t["health"], t["lastScrapeDuration"], t["lastError"])
            for t in api(base, "targets")["activeTargets"]]


def scraping(stack: ExitStack, lab_host, tmp_path: Path, node_path: str = "/metrics") -> str:
    """Prometheus scraping the host's port 9100 (at `node_path`) as job node and the stand-in as
    job vllm, both up, hostkit_vllm_up scraped and the stand-in's model named; its URL."""
    node_url = stack.enter_context(forwarded(lab_host, 9100))
    vllm_url = stack.enter_context(forwarded(lab_host, 8000))
    base = stack.enter_context(prometheus(tmp_path, lab_host.name, {"node": node_url, "vllm": vllm_url},
                                          {"node": node_path}))
    wait_for(lambda: {job for job, health, *_ in last_scrapes(base) if health == "up"}
             == {"node", "vllm"}, 120, "both scrape targets up", interval=2, ignoring=OSError)
    wait_for(lambda: api(base, "query", query="hostkit_vllm_up")["result"], 30, "hostkit_vllm_up scraped",
             interval=2, ignoring=OSError)
    standin = api(base, "query", query='vllm:num_requests_running{job="vllm"}')["result"]
    assert standin and standin[0]["metric"]["model_name"] == "lab-model"
    return base


@ON_CONTAINER
def test_prometheus_scrapes_node_exporter_and_the_standin(monitored, tmp_path):
    lab_host = monitored[0]
    with ExitStack() as stack:
        base = scraping(stack, lab_host, tmp_path)
        up = api(base, "query", query='hostkit_vllm_up{job="node"}')["result"]
        assert up and up[0]["value"][1] == "1" and up[0]["metric"]["instance"] == f"{lab_host.name}:9100", up
        # node_exporter's own series beside the textfile's: the node job is node_exporter.
        assert api(base, "query", query='node_textfile_scrape_error{job="node"}')["result"]


@ON_VM
def test_alerts_fire_on_a_memory_overrun_in_the_unit(monitored, tmp_path):
    lab_host = monitored[0]
    cgroup = sh(lab_host, "systemctl show -p ControlGroup --value vllm.service").strip()
    cgroup_dir = f"/sys/fs/cgroup{cgroup}" if lab_host.cgroup == "v2" else f"/sys/fs/cgroup/memory{cgroup}"
    textfile = f"{MONITORING_TEXTFILE_DIR}/hostkit.prom"
    sh(lab_host, f"systemctl stop hostkit-textfile-http 2>/dev/null; systemd-run --quiet --unit=hostkit-textfile-http "
                 f"python3 -c {shlex.quote(TEXTFILE_SERVER)} 9100 {textfile}")
    with ExitStack() as stack:
        stack.callback(lambda: lab_host.ssh("systemctl stop hostkit-textfile-http"))
        base = scraping(stack, lab_host, tmp_path, node_path="/hostkit.prom")
        limit = api(base, "query", query="hostkit_vllm_memory_max_bytes")["result"]
        assert limit and float(limit[0]["value"][1]) == MEMORY_MAX_MIB * MIB, limit

        current = int(sh(lab_host, f"cat {cgroup_dir}/memory.current" if lab_host.cgroup == "v2"
                         else f"cat {cgroup_dir}/memory.usage_in_bytes")) // MIB
        # To 93% of MemoryMax: above the alert's 90%, below the kill (the hog's own interpreter
        # takes about 10 MiB besides what it allocates).
        near_limit = int(MEMORY_MAX_MIB * 0.93) - current - 10
        kills_before = sh(lab_host, "dmesg | grep -c 'Killed process' || true").strip()
        # Started by systemd, not under the ssh session (a background job there kept the
        # session open); it then moves itself into the vLLM unit's cgroup.
        sh(lab_host, f"echo {near_limit} > /tmp/hog-target && systemd-run --quiet --no-block --unit=hostkit-hog "
                     f"python3 -c {shlex.quote(HOG)} {cgroup_dir} /tmp/hog-target")
        try:
            peak_alert = wait_for(lambda: firing(base, "HostkitVllmMemoryPeakNearLimit"), 300,
                                  "HostkitVllmMemoryPeakNearLimit firing", interval=2, ignoring=OSError)
        except AssertionError as timed_out:
            seen = api(base, "query", query="hostkit_vllm_memory_peak_bytes / hostkit_vllm_memory_max_bytes")
            hog = sh(lab_host, "systemctl show -p ActiveState,MainPID hostkit-hog; cat /tmp/hog-target")
            raise AssertionError(f"{timed_out}; peak/max as scraped: {seen['result']}; hog: {hog}; "
                                 f"scrapes (job, health, seconds, error): {last_scrapes(base)}") from None
        print(f"scrapes with the hog near the limit (job, health, seconds, error): {last_scrapes(base)}")
        assert sh(lab_host, "dmesg | grep -c 'Killed process' || true").strip() == kills_before  # no kill yet

        sh(lab_host, f"echo {MEMORY_MAX_MIB * 2} > /tmp/hog-target")
        oom_alert = wait_for(lambda: firing(base, "HostkitVllmOomKill"), 150, "HostkitVllmOomKill firing",
                             interval=2, ignoring=OSError)
        host_alert = wait_for(lambda: firing(base, "HostkitHostOomKill"), 60, "HostkitHostOomKill firing",
                              interval=2, ignoring=OSError)
        assert "oom_memcg=/system.slice/vllm.service" in sh(lab_host, "dmesg")
        print(json.dumps({"alerts": [peak_alert, oom_alert, host_alert]}, indent=2))
        assert peak_alert["labels"]["severity"] == "warning" and oom_alert["labels"]["severity"] == "critical"
        assert "lower vllm_max_num_seqs" in peak_alert["annotations"]["summary"]
        # Under the kill's memory pressure one scrape of the node target can fail (CI: the query
        # came back empty right after both OOM alerts fired), and its series then read as stale.
        ooms = wait_for(lambda: api(base, "query", query="hostkit_vllm_oom_kills_total")["result"], 60,
                        "hostkit_vllm_oom_kills_total scraped after the kill", interval=2, ignoring=OSError)
        assert float(ooms[0]["value"][1]) >= 1
