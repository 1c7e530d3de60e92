"""Record a run as evidence in reports/, from the run's own outputs.

    python3 tests/record_run.py --log ci.log --junit reports/e2e.xml [--junit reports/realvllm.xml]
        --command "bash .ci/run" --note "clean clone, HOME empty, qemu/mmdebstrap/nspawn removed"
    python3 tests/record_run.py --device-log run.log --command "bash scripts/h200_self_check.sh"
        --note "the device tool's nvidia-h200"

A `make test` run becomes reports/ci-run-DATE-COMMIT.json:
What it reads: the log's first `ci:` line (cores, memory) and its `rc=N seconds=S` line (written by
the command that timed the run), each junit's totals, the end-to-end lane groups' durations
(tests/e2e/lanes.py) and the JSON figure lines the tests printed (`{"test": ...}`).
`scripts/evidence.py` turns every reports/*.json into docs/evidence/.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.conftest import group_of  # noqa: E402
from tests.e2e.lanes import assign, group_durations  # noqa: E402


def totals(junit: Path) -> dict:
    suites = list(ElementTree.parse(junit).getroot().iter("testsuite"))
    count = {key: sum(int(suite.get(key, 0)) for suite in suites) for key in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for suite in suites for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {**count, "seconds": round(sum(float(suite.get("time", 0)) for suite in suites), 1), "failed": failed}


FIGURE = re.compile(r'\{"test": .*\}$')


def figure_lines(text: str) -> list[dict]:
    """The JSON lines tests print (`{"test": ...}`), also where pytest -s puts one after a test's name."""
    return [json.loads(match.group(0)) for line in text.splitlines() if (match := FIGURE.search(line))]


def figures(junit: Path) -> list[dict]:
    return [figure for case in ElementTree.parse(junit).getroot().iter("testcase")
            for out in case.iter("system-out") for figure in figure_lines(out.text or "")]


def device_steps(log: str) -> list[dict]:
    """A device run's log (scripts/h200_self_check.sh): each `## step` with the commands' exit
    statuses and what they printed."""
    steps = []
    for block in log.split("\n## ")[1:]:
        title, _, body = block.partition("\n")
        exits = [int(code) for code in re.findall(r"^exit (\d+)$", body, re.MULTILINE)]
        output = [line for line in body.splitlines() if line and not re.match(r"^exit \d+$", line)]
        steps.append({"step": title.strip(), "exit_statuses": exits, "output": output})
    return steps


def record_device_run(args) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    return {"kind": "device-run", "date": time.strftime("%Y-%m-%d"), "commit": commit, "command": args.command,
            "note": args.note, "steps": device_steps(args.device_log.read_text(errors="replace"))}


def write(record: dict, name: str) -> None:
    out = REPO / "reports" / name
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path)
    parser.add_argument("--junit", type=Path, action="append", default=[])
    parser.add_argument("--device-log", type=Path)
    parser.add_argument("--command", required=True, help="the command that was run, as run")
    parser.add_argument("--note", default="", help="what the machine had and did not have")
    parser.add_argument("--lanes", type=int, default=2)
    args = parser.parse_args()
    if args.device_log:
        record = record_device_run(args)
        write(record, f"device-run-{record['date']}-{Path(args.command.split()[-1]).stem}.json")
        return 0
    if not (args.log and args.junit):
        parser.error("a make test run needs --log and --junit")

    log = args.log.read_text(errors="replace")
    machine = re.search(r"^ci: (.*)$", log, re.MULTILINE)
    ended = re.search(r"^rc=(\d+) seconds=(\d+)$", log, re.MULTILINE)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    e2e = next((path for path in args.junit if path.name == "e2e.xml"), None)
    groups = group_durations(e2e, group_of) if e2e else {}
    schedule = assign(groups, args.lanes)
    lanes = {lane: round(sum(seconds for group, seconds in groups.items() if schedule[group] == lane) / 60, 1)
             for lane in sorted(set(schedule.values()))}
    record = {
        "kind": "ci-run",
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit,
        "command": args.command,
        "note": args.note,
        "machine": machine.group(1) if machine else None,
        "exit_status": int(ended.group(1)) if ended else None,
        "wall_s": int(ended.group(2)) if ended else None,
        "suites": {path.stem: totals(path) for path in args.junit},
        "lane_minutes": lanes,
        "groups_s": groups,
        # A run with -s (make e2e-real) leaves them in its log, not in the junit XML.
        "figures": [figure for path in args.junit for figure in figures(path)] or figure_lines(log),
    }
    # `make e2e-real` and other targets beside CI's own command: named apart, same kind and page.
    run_name = "ci-run" if args.command.endswith(".ci/run") else re.sub(r"\W+", "-", args.command.split()[-1])
    write(record, f"{run_name}-{record['date']}-{commit}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
