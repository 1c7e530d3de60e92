"""`hostkit verify`: check provisioned hosts against their plans."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from hostkit.exit_codes import CONTRACT
from hostkit.facts.deadline import NVIDIA_SMI_ENV, NVIDIA_SMI_S


@click.command(epilog=CONTRACT, help=f"""Check every host of INVENTORY against the plan the deploy makes for it.

Swap, kernel tuning, GPU health, the vLLM unit and its readiness, and OOM kills since boot,
with two remote commands per host, each within a deadline. `@local` in INVENTORY is this
machine (no ssh). nvidia-smi's deadline is {NVIDIA_SMI_S} s (environment: {NVIDIA_SMI_ENV}).
""")
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--limit", "limits", multiple=True, metavar="HOST",
              help="Only these hosts or groups (pyinfra --limit patterns); repeatable.")
@click.option("--junitxml", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Also write JUnit XML here: one testsuite per host.")
@click.option("-n", "--parallel", default=10, show_default=True, type=click.IntRange(min=1),
              help="Hosts verified at once.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--connection", type=click.Choice(["paramiko", "ssh"]), default="paramiko", show_default=True,
              help="testinfra backend for ssh hosts: paramiko, or the ssh command (@local runs locally).")
@click.option("--ready-timeout", type=click.IntRange(min=0), metavar="SECONDS",
              help="Wait at most this long for vLLM to become ready (default: the host's vllm_ready_timeout).")
@click.option("-v", "--verbose", is_flag=True, help="List passing checks too.")
def verify(inventory: str, limits: tuple[str, ...], junitxml: Path | None, parallel: int, fmt: str,
           connection: str, ready_timeout: int | None, verbose: bool) -> None:
    from hostkit.verify.report import EXIT_UNREACHABLE, exit_code, to_json, to_junit, to_text
    from hostkit.verify.runner import verify_targets
    from hostkit.verify.targets import InventoryError, load_targets

    try:
        targets = load_targets(inventory, limits)
    except InventoryError as error:
        click.echo(f"hostkit verify: {error}", err=True)
        sys.exit(EXIT_UNREACHABLE)
    reports = verify_targets(targets, connection=connection, parallel=parallel, ready_timeout_s=ready_timeout)
    if junitxml is not None:
        junitxml.write_text(to_junit(reports))
    click.echo(to_json(reports) if fmt == "json" else to_text(reports, verbose=verbose), nl=False)
    sys.exit(exit_code(reports))
