"""A PNG of host memory and swap over a smoke run, with the load's start and end marked."""

from __future__ import annotations

from pathlib import Path

from hostkit.sizes import format_size
from hostkit.smoke.load import percentile
from hostkit.smoke.run import SmokeRun

GIB = 2**30


def render_chart(run: SmokeRun, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot
    from matplotlib import pyplot as plt

    load, samples = run.load, run.samples
    t = [s.t - load.started_at for s in samples]
    end = load.ended_at - load.started_at
    swap, ram = run.swap(), run.ram()

    fig, (ax_ram, ax_swap) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5), height_ratios=(3, 2))
    latencies = load.latencies()
    p50, p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
    verdict = "PASS" if run.ok else "FAIL"
    title = (f"hostkit smoke: {run.watch or 'host'} - {load.succeeded}/{load.planned} requests ok, "
             f"{load.failed} failed, {load.concurrency} concurrent")
    if p50 is not None:
        title += f", latency p50 {p50:.2f} s / p95 {p95:.2f} s"
    fig.suptitle(f"{verdict}   {title}", fontsize=11, color="black" if run.ok else "firebrick", fontweight="bold")

    ax_ram.plot(t, [s.ram_used / GIB for s in samples], color="tab:blue", lw=2, label="host RAM used")
    unit = [(x, s.unit_current / GIB) for x, s in zip(t, samples, strict=True) if s.unit_current is not None]
    if unit:
        ax_ram.plot([x for x, _ in unit], [y for _, y in unit], color="tab:purple", lw=1.5, label="vLLM unit memory (cgroup)")
    ax_ram.axhline(ram.total / GIB, color="tab:blue", ls="--", lw=1, label=f"RAM total {ram.total / GIB:.1f} GiB")
    ax_ram.set_ylim(0, ram.total / GIB * 1.08)
    ax_ram.set_ylabel("RAM (GiB)")

    ax_swap.plot(t, [s.swap_used / GIB for s in samples], color="tab:red", lw=2, label="swap used")
    if swap.total:
        ax_swap.axhline(swap.total / GIB, color="tab:red", ls="--", lw=1, label=f"swap total {swap.total / GIB:.1f} GiB")
        ax_swap.set_ylim(0, swap.total / GIB * 1.08)
    else:
        ax_swap.text(0.5, 0.5, "no swap on this host", transform=ax_swap.transAxes, ha="center", va="center")
        ax_swap.set_ylim(0, 1)
    ax_swap.axhline(swap.baseline / GIB, color="gray", ls=":", lw=1.2, label="swap baseline (before load)")
    verdict_swap = "back toward baseline" if swap.recovered else "did NOT come back"
    ax_swap.set_title(
        f"swap used: {format_size(swap.baseline)} before -> peak {format_size(swap.peak)} -> "
        f"{format_size(swap.final)} at the end ({verdict_swap})",
        fontsize=9, loc="left", color="black" if swap.recovered else "firebrick",
    )
    ax_swap.set_ylabel("swap (GiB)")
    ax_swap.set_xlabel("seconds since load start")

    for ax in (ax_ram, ax_swap):
        ax.axvspan(0, end, color="orange", alpha=0.12, lw=0)
        ax.axvline(0, color="darkorange", lw=1.5)
        ax.axvline(end, color="darkorange", lw=1.5, ls="--")
        ax.grid(alpha=0.3)
    ax_ram.text(0, 1.01, " load start", transform=ax_ram.get_xaxis_transform(), color="darkorange", fontsize=9,
                va="bottom")
    ax_ram.text(end, 1.01, " load end", transform=ax_ram.get_xaxis_transform(), color="darkorange", fontsize=9,
                va="bottom")
    if run.oom_lines:
        ax_ram.text(0.99, 0.05, f"OOM during run: {len(run.oom_kills)} kill(s)", transform=ax_ram.transAxes,
                    ha="right", color="firebrick", fontweight="bold")
    ax_ram.legend(loc="best", fontsize=8, framealpha=0.9)
    ax_swap.legend(loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
