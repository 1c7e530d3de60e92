"""The report of a benchmark run: every run's figures and, per scenario and setup, the median
and spread over runs of the figures the table shows. Pure."""

from __future__ import annotations

from bench.cure.measure import spread

# (figure, how to read it off one host's figures)
SUMMARISED = {
    "succeeded": lambda h: h["requests"]["succeeded"],
    "failed": lambda h: h["requests"]["failed"],
    "not_serving_s": lambda h: h["not_serving_s"],
    "serving_again_after_s": lambda h: h["serving_again_after_s"],
    "swap_used_peak_mib": lambda h: h["peaks"]["swap_used_mib"],
    "mem_available_min_mib": lambda h: h["peaks"]["mem_available_min_mib"],
    "oom_kills": lambda h: len(h["kills"]),
}


def summary(runs: list[dict]) -> dict:
    """scenario -> setup -> figure -> spread over the runs that had that scenario and setup."""
    table: dict = {}
    for run in runs:
        for number, scenario in run["scenarios"].items():
            for setup, figures in scenario["hosts"].items():
                per_setup = table.setdefault(number, {}).setdefault(setup, {"runs": []})
                per_setup["runs"].append(figures)
    return {number: {setup: {name: spread([read(h) for h in entry["runs"]]) for name, read in SUMMARISED.items()}
                     | {"killed": sorted({k["process"] for h in entry["runs"] for k in h["kills"]}),
                        "recovered_runs": sum(h["serving_again_after_s"] is not None for h in entry["runs"]
                                              if h["first_failure_s"] is not None)}
                     for setup, entry in setups.items()}
            for number, setups in table.items()}
