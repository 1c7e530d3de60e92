"""The end-to-end lanes: which xdist worker runs which tests, scheduled from measured durations.

The unit of scheduling is a host-sharing group: modules that share a host (MAIN_HOST_MODULES,
FLEET_MODULES, RELEASE_HOST_PARAMETERS in conftest) go together; every other module, or module[parameter] where a
parameter starts a host of its own, is a group alone. Groups are assigned longest first to
the lane with the least work so far (LPT), from the durations of the last measured run in
durations.json (`python -m tests.e2e.lanes --junit reports/e2e.xml` writes it). A group
that has no measurement yet counts as UNMEASURED_S.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from xml.etree import ElementTree

DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED_S = 300.0


def assign(durations: dict[str, float], lanes: int) -> dict[str, str]:
    """{group: lane name}: longest first, each to the least loaded lane (ties: the first)."""
    load = {f"lane-{chr(ord('a') + index)}": 0.0 for index in range(lanes)}
    schedule = {}
    for group in sorted(durations, key=lambda name: (-durations[name], name)):
        lane = min(load, key=lambda name: (load[name], name))
        schedule[group] = lane
        load[lane] += durations[group]
    return schedule


def measured(groups: list[str], path: Path = DURATIONS) -> dict[str, float]:
    recorded = json.loads(path.read_text())["groups"] if path.exists() else {}
    return {group: float(recorded.get(group, UNMEASURED_S)) for group in groups}


def group_durations(junit: Path, group_of) -> dict[str, float]:
    """Seconds per group from a junit XML (xunit1: each case's setup, call and teardown)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "")
        param = name[name.index("[") + 1:name.rindex("]")] if "[" in name else None
        group = group_of(Path(module).name, param)
        if group is not None:
            totals[group] += float(case.get("time", 0))
    return {group: round(seconds, 1) for group, seconds in sorted(totals.items())}


def main() -> None:
    from tests.e2e.conftest import group_of

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", type=Path, required=True, help="the junit XML of a make test run")
    args = parser.parse_args()
    found = group_durations(args.junit, group_of)
    recorded = json.loads(DURATIONS.read_text())["groups"] if DURATIONS.exists() else {}
    DURATIONS.write_text(json.dumps({"source": str(args.junit), "groups": {**recorded, **found}}, indent=2) + "\n")
    for group, seconds in found.items():
        print(f"{seconds:8.1f} s  {group}")


if __name__ == "__main__":
    main()
