"""How the rollout controller's time grows with the number of hosts.

Beyond what the lab can boot: N simulated hosts on pyinfra's own `@fake` connector (every
command takes `--latency` seconds, like a round trip, and succeeds). The rollout is the
real one: `hostkit.rollout.rollout` with the pyinfra CLI per batch (`--limit` per host) and
the health gate through each host's pyinfra connection (the probe's answer is canned: the
hosts run nothing). The deploy has `--ops` operations and one fact per host.

    python3 bench/rollout_scale.py                  # 10, 100 and 500 hosts
    python3 bench/rollout_scale.py --hosts 10,50 --out /tmp/scale.json

Prints a table and writes JSON: wall seconds, the controller's CPU seconds (this process
plus its pyinfra children), and both per host.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hostkit.fleet.pyinfra_runner import write_inventory  # noqa: E402
from hostkit.rollout import rollout  # noqa: E402

PASSING_PROBE = json.dumps([
    {"name": "health", "passed": True, "detail": "HTTP 200", "seconds": 0.0},
    {"name": "models", "passed": True, "detail": "serves bench-model", "seconds": 0.0},
    {"name": "completion", "passed": True, "detail": "answered", "seconds": 0.0},
])

DEPLOY = '''
from pyinfra.facts.server import Command
from pyinfra.operations import server

configured = host.get_fact(Command, "cat /etc/bench-config")
for step in range({ops}):
    server.shell(name=f"Configure step {{step}}", commands=[f"configure --step {{step}}"])
'''


def controller_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench(count: int, latency: float, ops: int, batches: str, workdir: Path) -> dict:
    data = {
        "fake_delay": latency,
        "fake_delay_jitter": 0,
        "fake_responses": {"python3 -c": PASSING_PROBE},
        "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct",
        "vllm_served_model_name": "bench-model",
        "vllm_api_key": "bench-key-not-secret",
        "gpu_required": False,
    }
    # One `@fake/a,b,...` entry: pyinfra 3.10 rescans every installed distribution's entry
    # points for each `@connector` host it loads (about 0.1 s a host here), a cost ssh hosts,
    # which are named without `@`, never pay; the connector expands this entry once.
    names = ",".join(f"h{index:04d}" for index in range(count))
    inventory = write_inventory(workdir / f"inventory_{count}.py", [(f"@fake/{names}", data)])
    deploy = workdir / "deploy.py"
    deploy.write_text("from pyinfra import host\n" + DEPLOY.format(ops=ops))
    cpu_before, started = controller_cpu(), time.monotonic()
    report = rollout(inventory, deploy, batches=batches, gate="ready", report_path=workdir / f"report_{count}.json",
                     progress=lambda line: None)
    wall = time.monotonic() - started
    cpu = controller_cpu() - cpu_before
    assert report.outcome == "completed" and report.counts() == {"done": count}, report.halt_reason
    deploy_s = sum(batch.deploy_seconds or 0 for batch in report.batches)
    gate_s = sum(batch.gate_seconds or 0 for batch in report.batches)
    return {
        "hosts": count,
        "batches": [len(batch.hosts) for batch in report.batches],
        "wall_s": round(wall, 2),
        "deploy_s": round(deploy_s, 2),
        "gate_s": round(gate_s, 2),
        "controller_cpu_s": round(cpu, 2),
        "wall_s_per_host": round(wall / count, 4),
        "cpu_s_per_host": round(cpu / count, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="10,100,500", help="comma-separated host counts")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per simulated remote command")
    parser.add_argument("--ops", type=int, default=8, help="operations in the simulated deploy")
    parser.add_argument("--batches", default="1,25%,100%")
    parser.add_argument("--out", default="rollout_scale.json")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="rollout-scale-") as workdir:
        for count in (int(text) for text in args.hosts.split(",")):
            rows.append(bench(count, args.latency, args.ops, args.batches, Path(workdir)))
            print(f"{count} hosts: {rows[-1]['wall_s']}s", file=sys.stderr)

    header = ("hosts", "batches", "wall s", "deploy s", "gate s", "cpu s", "wall s/host", "cpu s/host")
    keys = ("hosts", "batches", "wall_s", "deploy_s", "gate_s", "controller_cpu_s", "wall_s_per_host", "cpu_s_per_host")
    table = [header, *[tuple(str(row[key]) for key in keys) for row in rows]]
    widths = [max(len(line[column]) for line in table) for column in range(len(header))]
    for line in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))
    result = {
        "setup": {"latency_s": args.latency, "ops": args.ops, "batches": args.batches, "gate": "ready",
                  "connector": "@fake", "python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "results": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
