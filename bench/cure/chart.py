"""One PNG per scenario: for each host side by side, memory and swap used (and the co-tenant)
over the window above, successful requests a second below; the fault, the kernel's kills,
serving again and the alerts that fired marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def draw(title: str, hosts: dict[str, dict], path: Path) -> None:
    figure, axes = plt.subplots(2, len(hosts), figsize=(6 * len(hosts), 6), sharex=True, squeeze=False)
    top = max(max(h["series"]["mem_used_mib"] + h["series"]["swap_used_mib"] + [1]) for h in hosts.values())
    rate_top = max(max([v for _, v in h["series"]["ok_per_s"]] + [0.1]) for h in hosts.values())
    for column, (setup, figures) in enumerate(hosts.items()):
        memory, rate = axes[0][column], axes[1][column]
        points = figures["series"]
        memory.plot(points["t_s"], points["mem_used_mib"], label="memory used")
        memory.plot(points["t_s"], points["swap_used_mib"], label="swap used")
        if any(points["neighbour_mib"]):
            memory.plot(points["t_s"], points["neighbour_mib"], label="co-tenant", linestyle=":", color="tab:purple")
        memory.set_ylim(0, top * 1.1)
        memory.set_ylabel("MiB")
        memory.set_title(f"{setup}: {figures['requests']['succeeded']} of {figures['requests']['sent']} served")
        rate.step([t for t, _ in points["ok_per_s"]], [v for _, v in points["ok_per_s"]], where="post",
                  color="tab:green")
        rate.set_ylim(0, rate_top * 1.2)
        rate.set_ylabel("successful requests / s")
        rate.set_xlabel("seconds")
        for axis in (memory, rate):
            _marks(axis, figures)
        memory.legend(loc="upper left", fontsize=8)
    figure.suptitle(f"{title}\n(dashed: the fault; red: an OOM kill; green: serving again; orange: an alert fired)",
                    fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _marks(axis, figures: dict) -> None:
    if figures["fault_at_s"] is not None:
        axis.axvline(figures["fault_at_s"], color="black", linestyle="--", linewidth=1)
    for kill in figures["kills"]:
        axis.axvline(kill["at_s"], color="red", linewidth=1.5)
    again = figures["serving_again_after_s"]
    if again is not None and figures["first_failure_s"] is not None:
        axis.axvline(figures["first_failure_s"] + again, color="tab:green", linestyle="-.", linewidth=1.5)
    for alert in (figures["alerts"] or {}).values():
        if alert.get("firing_s") is not None:
            axis.axvline(alert["firing_s"], color="orange", linestyle=":", linewidth=1.5)
