#!/usr/bin/env python3
"""Plan this machine as a deploy would, outside any deploy: does vLLM's GPU memory fit?

It runs the snapshot's own command (`HostSnapshotFact().command(scope=...)`) with `sh -c`,
as pyinfra would, then the deploy's parsers, `hostkit.plan.snapshot_facts.planning_facts` and
`hostkit.plan.planner.plan_host`. Prints each GPU's memory split (the vLLM unit's, others'),
then PASS and the plan's GPU line, or REFUSED and every issue (exit 1), saying whether the
deploy would fail this host alone at execute time (`host_state`) or stop the whole run.

    python3 scripts/gpu_plan_check.py --data vllm_gpu_memory_utilization=0.85
    python3 scripts/gpu_plan_check.py --save-raw snapshot.txt   # keep the raw snapshot output
    python3 scripts/gpu_plan_check.py --from-file snapshot.txt  # plan a recorded output
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostkit.plan.scope import snapshot_scope
from hostkit.facts.snapshot import HostSnapshotFact  # noqa: E402
from hostkit.plan.snapshot_facts import planning_facts  # noqa: E402
from hostkit.plan.planner import PlanError, plan_host  # noqa: E402
from hostkit.profile.validation import profile_from_data  # noqa: E402

# No swap and no NVMe: this checks GPU memory only, on a machine hostkit does not manage.
BASE_DATA = {"vllm_model": "Qwen/Qwen2.5-7B-Instruct", "swap_enabled": False}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", default=[], metavar="KEY=JSON", help="a profile key")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-file", type=Path, help="plan this recorded snapshot output")
    source.add_argument("--save-raw", type=Path, help="also write the raw snapshot output here")
    return parser.parse_args(argv)


def profile_data(pairs: list[str]) -> dict:
    data = dict(BASE_DATA)
    for pair in pairs:
        key, _, text = pair.partition("=")
        try:
            data[key] = json.loads(text)
        except json.JSONDecodeError:
            data[key] = text
    return data


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    profile = profile_from_data("this-host", profile_data(args.data))
    fact = HostSnapshotFact()
    command = fact.command(scope=snapshot_scope(profile))
    if args.from_file:
        output = args.from_file.read_text()
    else:
        output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False).stdout
        if args.save_raw:
            args.save_raw.write_text(output)
    facts = planning_facts(fact.process(output.splitlines()))
    for gpu in facts.gpus:
        others = ", ".join(f"pid {p.pid} ({p.name or '?'}) {p.used_mib} MiB" for p in gpu.other_processes) or "none"
        units = "".join(f", {unit} {mib} MiB" for unit, mib in sorted(gpu.other_units_mib.items()))
        print(
            f"GPU {gpu.index}: {gpu.memory_used_mib} of {gpu.memory_total_mib} MiB used; vLLM unit {gpu.memory_vllm_mib} MiB;"
            f" others {gpu.memory_others_mib} MiB (processes: {others}{units})"
        )
    try:
        plan = plan_host(profile, facts, host_name="this-host")
    except PlanError as error:
        where = "fails this host alone at execute" if error.host_state_only else "stops the run at prepare"
        print(f"REFUSED ({where})")
        for issue in error.issues:
            print(f"  {issue} [host_state={issue.host_state}]")
        return 1
    for vllm in plan.instances.values() if plan.instances else (plan.vllm,):
        sizing = vllm.sizing
        name = f"instance {vllm.instance} " if vllm.instance else ""
        print(f"PASS {name}" + (f"KV cache {sizing.kv_budget_bytes} bytes per GPU at {sizing.gpu_memory_utilization}"
                                if sizing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
