"""`hostkit rollout`: a canary batch, then the rest batch by batch, each behind a health gate."""

from __future__ import annotations

import time
from pathlib import Path

import click

from hostkit.profile.validation import ProfileError
from hostkit.rollout import BatchSpecError, rollout as run
from hostkit.rollout.render import summary_table


@click.command()
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False))
@click.option("--deploy", default="hostkit.deploy.vllm_host", show_default=True,
              help="What pyinfra runs on each batch: a deploy file, or a deploy function by its module path.")
@click.option("--batches", default="1,25%,100%", show_default=True,
              help="Cumulative stages: host counts or percentages of the hosts; the first is the canary.")
@click.option("--max-failed", default="0", show_default=True,
              help="Failed hosts tolerated over the whole rollout: a count, or a percentage of the hosts.")
@click.option("--max-unavailable", default="25%", show_default=True,
              help="Endpoints of one served model (hosts, or instances of vllm_instances) that a batch may"
                   " take out of service at once: a count, or a percentage of that model's endpoints (rounded"
                   " down, at least 1). Splits --batches further.")
@click.option("--gate", type=click.Choice(["verify", "ready", "none"]), default="verify", show_default=True,
              help="After each batch: verify = hostkit verify + readiness + a completion; ready = readiness + a completion.")
@click.option("--gate-timeout", type=float, default=None,
              help="Seconds each host may take to become ready [default: its vllm_ready_timeout].")
@click.option("--order-key", default=None,
              help="Roll hosts in ascending order of this data key (e.g. rollout_order) instead of inventory order.")
@click.option("--resume", "resume", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A report of an earlier rollout: skip its done hosts, retry its failed ones, roll the rest.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Where to write the JSON report [default: rollout-<UTC time>.json].")
@click.option("--dry", is_flag=True, help="Show the batches and what would change on each host; change nothing.")
def rollout(inventory: str, deploy: str, batches: str, max_failed: str, max_unavailable: str, gate: str,
            gate_timeout: float | None,
            order_key: str | None, resume: str | None, report_path: str | None, dry: bool) -> None:
    """Roll DEPLOY out over INVENTORY without taking the fleet down.

    Every host's data is checked before any host is touched. Exits 1 when the rollout
    halted (later hosts untouched; fix, then --resume the report), 2 on bad input.
    """
    report_path = report_path or f"rollout-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}{'-dry' if dry else ''}.json"
    try:
        report = run(inventory, deploy, batches=batches, max_failed=max_failed, max_unavailable=max_unavailable,
                     gate=gate, order_key=order_key,
                     dry=dry, resume=resume, report_path=report_path, gate_timeout=gate_timeout,
                     progress=lambda line: click.echo(line, err=True))
    except ProfileError as error:
        refusal = click.ClickException(f"invalid inventory data, no host was touched:\n{error}")
        refusal.exit_code = 2
        raise refusal from None
    except (BatchSpecError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    click.echo(summary_table(report))
    click.echo(f"report: {Path(report_path)}")
    if report.outcome == "halted":
        raise SystemExit(1)
