"""hostkit against the equivalent Ansible playbook, on fresh lab hosts (issue 11).

    python bench/run.py                       # or: make bench
    python bench/run.py --runs 5 --out reports/bench.json
    python bench/run.py --skip-ansible --skip-fleet   # hostkit alone, quicker

What it measures, each on lab hosts (qemu TCG Debian 12 VMs, `hostkit_lab`) with the vLLM
stand-in (hostkit_lab/standin) installed at /opt/vllm/bin/vllm before any timing:

- deploy: `pyinfra HOST deploys/vllm_host.py` and `ansible-playbook bench/ansible/vllm_host.yml`,
  a first run on a freshly booted host and then a no-op rerun, `--runs` rounds; each round
  boots one fresh host per tool and alternates which tool goes first. Medians are reported.
- verify: `hostkit verify` on the hostkit host after its rerun, each round.
- fleet: 4 fresh hosts; the hostkit deploy on 1 of them alone against the other 3 together,
  first run once each, then `--runs` no-op reruns of each, alternating.

Remote commands per host come from the tools' own logs (pyinfra --debug, ansible -vvv; see
bench/counting.py), from the same runs that are timed; `hostkit verify` reports its own.
Booting is never timed. The load average is recorded at the start and around every
timed run: the lab VMs are CPU-bound, so a busy machine slows every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.counting import (  # noqa: E402
    ansible_remote_commands,
    median,
    per_host_max,
    pyinfra_remote_commands,
    pyinfra_uploads,
    ratio,
    targets,
)
from hostkit_lab import Lab, LabHost  # noqa: E402
from hostkit.fleet.pyinfra_runner import run_pyinfra, write_inventory  # noqa: E402
from hostkit_lab.standin.install import install_standin  # noqa: E402

DEPLOY = REPO / "deploys" / "vllm_host.py"
ANSIBLE_DIR = REPO / "bench" / "ansible"
PLAYBOOK = ANSIBLE_DIR / "vllm_host.yml"
DEFAULT_VENV = Path.home() / ".cache" / "vllm-hostkit" / "bench" / "ansible-venv"
LAB_DIR = REPO / ".lab" / "bench"
# Under heavy load an Ansible first run on a lab host has taken over 28 minutes.
RUN_TIMEOUT_S = 3600
# Fleet VMs get one vCPU each: under TCG a 2-vCPU guest alone can use both of this machine's
# cores, so 1 host against 3 would compare one VM with 2 cores to three VMs sharing 2. With
# one vCPU, the single host gets a core and the three get two between them.
FLEET_CPUS = 1


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def lab_data() -> dict:
    """The shipped lab inventory's data (inventories/lab.py), so the bench deploys what users do."""
    namespace: dict = {}
    exec(compile((REPO / "inventories" / "lab.py").read_text(), "inventories/lab.py", "exec"), namespace)
    return dict(namespace["LAB_DATA"])


@dataclass
class Measurement:
    tool: str  # hostkit | ansible
    kind: str  # first | noop | verify
    hosts: list[str]
    seconds: float
    ok: bool
    remote_commands: dict[str, int]  # per host
    round: int
    load_before: float
    load_after: float
    uploads: int = 0  # pyinfra file uploads (sftp), all hosts together
    module_executions: dict[str, int] = field(default_factory=dict)  # ansible
    changed: dict[str, list[str]] = field(default_factory=dict)  # per host: what the run changed
    error: str = ""
    log: str = ""  # where the run's full output was saved


def load1() -> float:
    return round(os.getloadavg()[0], 2)


# -- the tools ----------------------------------------------------------------------------


class Runner:
    def __init__(self, work: Path, ansible_bin: Path | None):
        self.work = work
        self.ansible_bin = ansible_bin
        self.serial = 0

    def _path(self, stem: str, suffix: str) -> Path:
        self.serial += 1
        return self.work / f"{self.serial:03d}-{stem}{suffix}"

    def pyinfra_inventory(self, hosts: list[LabHost], stem: str) -> Path:
        data = lab_data()
        return write_inventory(self._path(stem, ".py"), [(h.name, {**h.pyinfra_data(), **data}) for h in hosts])

    def hostkit(self, hosts: list[LabHost], kind: str, round_no: int) -> Measurement:
        stem = f"hostkit-{kind}-{'-'.join(h.name for h in hosts)}"
        inventory = self.pyinfra_inventory(hosts, stem)
        before = load1()
        run = run_pyinfra(inventory, DEPLOY, "--debug", cwd=REPO, timeout=RUN_TIMEOUT_S)
        log = self._path(stem, ".log")
        log.write_text(run.stderr + "\n--- stdout ---\n" + run.stdout)
        counts = pyinfra_remote_commands(run.stderr)
        measurement = Measurement(
            "hostkit", kind, [h.name for h in hosts], round(run.seconds, 2), run.ok,
            {h.name: counts.get(h.name, 0) for h in hosts}, round_no, before, load1(),
            uploads=pyinfra_uploads(run.stderr),
            changed={h.name: run.changed_on(h.name) for h in hosts},
            log=str(log),
        )
        if not run.ok:
            measurement.error = (run.stderr[-3000:] or run.stdout[-3000:]).strip()
        return measurement

    def verify(self, hosts: list[LabHost], round_no: int) -> Measurement:
        stem = f"verify-{'-'.join(h.name for h in hosts)}"
        inventory = self.pyinfra_inventory(hosts, stem)
        argv = [sys.executable, "-c", "from hostkit.cli.main import main; main()", "verify", str(inventory),
                "--format", "json"]
        before = load1()
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=RUN_TIMEOUT_S)
        seconds = time.monotonic() - started
        log = self._path(stem, ".log")
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            report = {"hosts": []}
        failed = {
            entry["name"]: [f"{c['area']}/{c['name']}: {c['actual']}" for c in entry["checks"] if not c["ok"]]
            + ([entry["error"]] if entry.get("error") else [])
            for entry in report["hosts"]
        }
        measurement = Measurement(
            "hostkit", "verify", [h.name for h in hosts], round(seconds, 2), proc.returncode == 0,
            {entry["name"]: entry["remote_commands"] for entry in report["hosts"]}, round_no, before, load1(),
            log=str(log),
        )
        if proc.returncode != 0:
            measurement.error = (json.dumps(failed) if report["hosts"] else proc.stderr[-3000:]).strip()
        return measurement

    def ansible(self, hosts: list[LabHost], kind: str, round_no: int) -> Measurement:
        stem = f"ansible-{kind}-{'-'.join(h.name for h in hosts)}"
        inventory = self._path(stem, ".json")
        inventory.write_text(json.dumps({"all": {"hosts": {
            h.name: {
                "ansible_host": "127.0.0.1",
                "ansible_port": h.port,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": h.key,
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={h.known_hosts} -o StrictHostKeyChecking=yes",
            }
            for h in hosts
        }}}, indent=2))
        stats = self._path(stem, ".stats.json")
        log = self._path(stem, ".log")
        with tempfile.TemporaryDirectory(prefix="cp-", dir="/tmp") as control_dir:
            env = {
                **os.environ,
                "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
                # A fresh ssh master per run: no run profits from the previous one's connection.
                "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir,
                "HOSTKIT_BENCH_ANSIBLE_STATS": str(stats),
                "ANSIBLE_NOCOLOR": "1",
            }
            argv = [str(self.ansible_bin / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-vvv"]
            before = load1()
            started = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=ANSIBLE_DIR, env=env,
                                  timeout=RUN_TIMEOUT_S)
            seconds = time.monotonic() - started
            after = load1()
            # Stop this run's ssh masters now rather than after ControlPersist's 60 s.
            for socket_path in Path(control_dir).iterdir():
                subprocess.run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "x"],
                               capture_output=True, timeout=30)
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
        per_host = json.loads(stats.read_text()) if stats.exists() else {}
        measurement = Measurement(
            "ansible", kind, [h.name for h in hosts], round(seconds, 2), proc.returncode == 0,
            ansible_remote_commands(proc.stdout + proc.stderr, {h.port: h.name for h in hosts}),
            round_no, before, after,
            module_executions={name: entry["module_executions"] for name, entry in per_host.items()},
            changed={name: entry["changed"] for name, entry in per_host.items()},
            log=str(log),
        )
        if proc.returncode != 0:
            measurement.error = proc.stdout[-3000:].strip()
        return measurement


def ensure_ansible(venv: Path) -> Path:
    """The bin directory of a virtualenv holding the `ansible` package (made on first use)."""
    bin_dir = venv / "bin"
    if not (bin_dir / "ansible-playbook").exists():
        say(f"installing the ansible package into {venv} (once; it is large)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "ansible"], check=True)
    return bin_dir


def ansible_version(bin_dir: Path) -> str:
    core = subprocess.run([str(bin_dir / "ansible-playbook"), "--version"], capture_output=True, text=True)
    bundle = subprocess.run([str(bin_dir / "python"), "-m", "pip", "show", "ansible"], capture_output=True, text=True)
    bundle_version = next((line.split(":", 1)[1].strip() for line in bundle.stdout.splitlines()
                           if line.startswith("Version:")), "?")
    return f"ansible {bundle_version} ({core.stdout.splitlines()[0].strip() if core.stdout else '?'})"


# -- the plan of runs ---------------------------------------------------------------------


def boot(lab: Lab, count: int, prefix: str, cpus: int = 2) -> list[LabHost]:
    say(f"booting {count} fresh lab host(s) ({prefix}*, {cpus} vCPU each); not timed")
    hosts = lab.up(count, prefix=prefix, cpus=cpus)
    for lab_host in hosts:
        install_standin(lab_host)
    return hosts


def record(results: list[Measurement], tool: str, kind: str, hosts: list[LabHost], round_no: int,
           run: Callable[[], Measurement]) -> Measurement:
    """Take one measurement and keep it; a run past RUN_TIMEOUT_S is kept as a failure."""
    try:
        measurement = run()
    except subprocess.TimeoutExpired as error:
        measurement = Measurement(tool, kind, [h.name for h in hosts], float(error.timeout), False, {}, round_no,
                                  load1(), load1(), error=f"timed out after {error.timeout} s")
    results.append(measurement)
    counts = ", ".join(f"{name} {count}" for name, count in measurement.remote_commands.items())
    status = "ok" if measurement.ok else "FAILED"
    say(f"{measurement.tool} {measurement.kind} on {len(measurement.hosts)} host(s): {measurement.seconds:.1f} s, "
        f"remote commands {counts}, {status} (load {measurement.load_before} -> {measurement.load_after})")
    if measurement.error:
        say(f"  error: {measurement.error[-1500:]}")
    return measurement


def deploy_rounds(lab: Lab, runner: Runner, runs: int, with_ansible: bool, results: list[Measurement]) -> None:
    for round_no in range(1, runs + 1):
        tools = ["hostkit", "ansible"] if with_ansible else ["hostkit"]
        if round_no % 2 == 0:
            tools.reverse()
        hosts = dict(zip(tools, boot(lab, len(tools), prefix=f"b{round_no}x")))
        try:
            for kind in ("first", "noop"):
                for tool in tools:
                    method = runner.hostkit if tool == "hostkit" else runner.ansible
                    record(results, tool, kind, [hosts[tool]], round_no,
                           lambda: method([hosts[tool]], kind, round_no))
            record(results, "hostkit", "verify", [hosts["hostkit"]], round_no,
                   lambda: runner.verify([hosts["hostkit"]], round_no))
        finally:
            for lab_host in hosts.values():
                lab.remove(lab_host.name)


def fleet_rounds(lab: Lab, runner: Runner, runs: int, results: list[Measurement]) -> None:
    hosts = boot(lab, 4, prefix="fleet", cpus=FLEET_CPUS)
    single, trio = hosts[:1], hosts[1:]
    try:
        for group in (single, trio):
            record(results, "hostkit", "first", group, 0, lambda: runner.hostkit(group, "first", 0))
        for round_no in range(1, runs + 1):
            for group in ([single, trio] if round_no % 2 else [trio, single]):
                record(results, "hostkit", "noop", group, round_no, lambda: runner.hostkit(group, "noop", round_no))
        record(results, "hostkit", "verify", trio, 0, lambda: runner.verify(trio, 0))
    finally:
        for lab_host in hosts:
            lab.remove(lab_host.name)


# -- report ----------------------------------------------------------------------------------


def select(results: list[Measurement], tool: str, kind: str, hosts: int, fleet: bool) -> list[Measurement]:
    return [m for m in results if m.tool == tool and m.kind == kind and len(m.hosts) == hosts
            and m.hosts[0].startswith("fleet") == fleet]


def seconds_of(measurements: list[Measurement]) -> list[float]:
    return [m.seconds for m in measurements if m.ok]


def summarise(results: list[Measurement]) -> dict:
    def figures(tool: str, kind: str, hosts: int = 1, fleet: bool = False) -> dict:
        chosen = select(results, tool, kind, hosts, fleet)
        return {
            "runs": len(chosen),
            "failed_runs": sum(not m.ok for m in chosen),
            # A no-op rerun that changed something was no no-op: its time is not comparable.
            "runs_that_changed_something": sum(any(m.changed.values()) for m in chosen),
            "median_s": median(seconds_of(chosen)),
            "all_s": [m.seconds for m in chosen],
            "max_remote_commands_per_host": per_host_max(m.remote_commands for m in chosen),
            "remote_commands_per_host": [m.remote_commands for m in chosen],
        }

    table = {
        "hostkit_first": figures("hostkit", "first"),
        "hostkit_noop": figures("hostkit", "noop"),
        "ansible_first": figures("ansible", "first"),
        "ansible_noop": figures("ansible", "noop"),
        "hostkit_verify": figures("hostkit", "verify"),
        "fleet_1_first": figures("hostkit", "first", 1, True),
        "fleet_3_first": figures("hostkit", "first", 3, True),
        "fleet_1_noop": figures("hostkit", "noop", 1, True),
        "fleet_3_noop": figures("hostkit", "noop", 3, True),
        "fleet_3_verify": figures("hostkit", "verify", 3, True),
    }
    verify_counts = [m.remote_commands for m in results if m.kind == "verify"]
    summary = {
        "first_speedup": ratio(table["ansible_first"]["median_s"], table["hostkit_first"]["median_s"]),
        "noop_speedup": ratio(table["ansible_noop"]["median_s"], table["hostkit_noop"]["median_s"]),
        "noop_commands_per_host": per_host_max(
            m.remote_commands for m in results if m.tool == "hostkit" and m.kind == "noop"),
        "verify_commands_per_host": per_host_max(verify_counts),
        "fleet_noop_ratio": ratio(table["fleet_3_noop"]["median_s"], table["fleet_1_noop"]["median_s"]),
        "fleet_first_ratio": ratio(table["fleet_3_first"]["median_s"], table["fleet_1_first"]["median_s"]),
    }
    return {"table": table, "summary": summary,
            "targets": [{"target": t.name, "value": t.value, "limit": t.limit, "met": t.met}
                        for t in targets(summary)]}


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def render_table(report: dict) -> str:
    t, s = report["table"], report["summary"]
    rows = [
        ("deploy, first run", t["hostkit_first"], t["ansible_first"], _x(s["first_speedup"])),
        ("deploy, no-op rerun", t["hostkit_noop"], t["ansible_noop"], _x(s["noop_speedup"])),
        ("verify (hostkit verify)", t["hostkit_verify"], None, ""),
    ]
    lines = [f"{'':26} {'hostkit':>10} {'cmds/host':>9}   {'ansible':>10} {'cmds/host':>9}   {'speedup':>7}   runs"]
    for label, ours, theirs, speedup in rows:
        runs = f"{ours['runs']}" + (f"/{theirs['runs']}" if theirs else "")
        lines.append(
            f"{label:26} {_s(ours['median_s']):>10} {_n(ours['max_remote_commands_per_host']):>9}   "
            f"{_s(theirs['median_s']) if theirs else '':>10} "
            f"{_n(theirs['max_remote_commands_per_host']) if theirs else '':>9}   {speedup:>7}   {runs}"
        )
    lines.append("")
    lines.append(f"{'hostkit fleet':26} {'1 host':>10} {'3 hosts':>10}   {'3 / 1':>7}   cmds/host (3 hosts)")
    for label, kind, key in (("first run", "first", "fleet_first_ratio"), ("no-op rerun", "noop", "fleet_noop_ratio")):
        one, three = t[f"fleet_1_{kind}"], t[f"fleet_3_{kind}"]
        lines.append(f"{label:26} {_s(one['median_s']):>10} {_s(three['median_s']):>10}   {_x(s[key]):>7}   "
                     f"{_n(three['max_remote_commands_per_host'])}")
    lines.append("")
    lines.append("Targets (issue 11):")
    for target in report["targets"]:
        verdict = {True: "met", False: "NOT met", None: "not measured"}[target["met"]]
        value = "-" if target["value"] is None else f"{round(target['value'], 2):g}"
        lines.append(f"  {verdict:12} {target['target']} (measured {value}, limit {target['limit']})")
    for key in ("hostkit_noop", "ansible_noop", "fleet_1_noop", "fleet_3_noop"):
        if t[key]["runs_that_changed_something"]:
            lines.append(f"WARNING: {t[key]['runs_that_changed_something']} {key} run(s) changed something "
                         "(see \"changed\" in the JSON)")
    lines.append("Times are medians of successful runs; cmds/host is the most any host ran in any run.")
    return "\n".join(lines)


def wait_for_quiet(max_load: float, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while load1() > max_load and time.monotonic() < deadline:
        say(f"load average {load1()} is above {max_load}; waiting (up to {wait_s:.0f} s in all)")
        time.sleep(30)
    if load1() > max_load:
        say(f"WARNING: load average {load1()} is above {max_load}: other work competes with the lab VMs "
            "for CPU, and every figure below is slower than on a quiet machine")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds of each measurement (default 3)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "bench.json", help="JSON results")
    parser.add_argument("--skip-ansible", action="store_true", help="measure hostkit alone")
    parser.add_argument("--skip-fleet", action="store_true", help="no 1-vs-3-hosts measurement")
    parser.add_argument("--ansible-venv", type=Path, default=DEFAULT_VENV,
                        help=f"virtualenv with the ansible package, made if missing (default {DEFAULT_VENV})")
    parser.add_argument("--max-load", type=float, default=3.0,
                        help="wait for the 1-minute load average to drop below this before starting")
    parser.add_argument("--wait-load", type=float, default=0, metavar="SECONDS",
                        help="how long to wait for that (default 0: warn and go on)")
    args = parser.parse_args(argv)

    ansible_bin = None if args.skip_ansible else ensure_ansible(args.ansible_venv)
    wait_for_quiet(args.max_load, args.wait_load)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_at_start = os.getloadavg()
    lab = Lab(LAB_DIR)
    lab.down()  # hosts left behind by an interrupted run
    work = Path(tempfile.mkdtemp(prefix="hostkit-bench-"))
    say(f"logs of every run: {work}")
    runner = Runner(work, ansible_bin)
    results: list[Measurement] = []
    try:
        deploy_rounds(lab, runner, args.runs, not args.skip_ansible, results)
        if not args.skip_fleet:
            fleet_rounds(lab, runner, args.runs, results)
    finally:
        lab.down()
    report = summarise(results)
    payload = {
        "started_at": started_at,
        "load_average_at_start": [round(value, 2) for value in load_at_start],
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "lab": f"Debian 12 qemu TCG VMs (hostkit_lab), 2 vCPUs ({FLEET_CPUS} for the fleet runs), 2 GiB,"
               " blank 8G NVMe; vLLM stand-in",
        "tools": {"hostkit": "pyinfra " + _pyinfra_version(), "ansible": ansible_version(ansible_bin) if ansible_bin else None},
        "commands": {
            "hostkit": f"python -m pyinfra INVENTORY {DEPLOY.relative_to(REPO)} -y --json --debug",
            "ansible": f"ansible-playbook -i INVENTORY {PLAYBOOK.relative_to(REPO)} -vvv (ANSIBLE_CONFIG=bench/ansible/ansible.cfg)",
            "verify": "hostkit verify INVENTORY --format json",
        },
        "logs": str(work),
        **report,
        "runs": [asdict(m) for m in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(render_table(report))
    print(f"\nload average at start {payload['load_average_at_start']}; JSON: {args.out}; logs: {work}")
    return 0 if all(m.ok for m in results) else 1


def _pyinfra_version() -> str:
    import pyinfra

    return getattr(pyinfra, "__version__", None) or _dist_version("pyinfra")


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    shutil.which("qemu-system-x86_64") or sys.exit("bench: qemu-system-x86_64 is not installed")
    sys.exit(main())
