"""`hostkit smoke`: concurrent completions against a vLLM server while watching host memory and swap."""

from __future__ import annotations

import os
from pathlib import Path

import click

from hostkit.paths import VLLM_UNIT


@click.command()
@click.argument("url")
@click.option("--concurrency", default=20, show_default=True, type=click.IntRange(min=1, max=512))
@click.option("--requests", "request_count", default=100, show_default=True, type=click.IntRange(min=1),
              help="How many requests in all.")
@click.option("--max-tokens", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--time-limit", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds after which no new request starts.")
@click.option("--request-timeout", default=300.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds one request may take.")
@click.option("--model", default=None, help="Model name to request (default: the first in /v1/models).")
@click.option("--api-key-env", metavar="VAR", default=None, help="Environment variable that holds the API key.")
@click.option("--watch", "watch_host", metavar="HOST", default=None,
              help="Sample this host's memory over ssh (an inventory host name, or an ssh destination).")
@click.option("--local", is_flag=True, help="Sample this machine's memory (the server runs here).")
@click.option("--inventory", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Inventory that defines the --watch host's ssh settings.")
@click.option("--settle", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait after the load for swap to come back toward its baseline.")
@click.option("--unit", default=VLLM_UNIT, show_default=True, help="The vLLM unit whose cgroup memory is sampled.")
@click.option("--out", "out_dir", default="smoke-report", show_default=True, type=click.Path(file_okay=False),
              help="Directory for smoke-report.json and smoke-memory.png.")
def smoke(url: str, concurrency: int, request_count: int, max_tokens: int, time_limit: float, request_timeout: float,
          model: str | None, api_key_env: str | None, watch_host: str | None, local: bool, inventory: str | None,
          settle: float, unit: str, out_dir: str) -> None:
    """Send bounded concurrent /v1/completions requests to URL (only there) and report.

    Exits 1 when a request failed, an OOM kill happened during the run, or memory could not be watched.
    """
    from hostkit.smoke.load import api_base, served_model
    from hostkit.smoke.report import summary_text, write_report
    from hostkit.smoke.run import smoke_run
    from hostkit.smoke.sampler import LocalSampler, SshSampler, ssh_argv_for

    if watch_host and local:
        raise click.UsageError("give --watch HOST or --local, not both")
    if inventory and not watch_host:
        raise click.UsageError("--inventory only says how to reach the --watch host")
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise click.UsageError(f"environment variable {api_key_env} is not set")
    try:
        base = api_base(url)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    sampler = None
    if local:
        sampler = LocalSampler(unit)
    elif watch_host:
        try:
            sampler = SshSampler(ssh_argv_for(watch_host, inventory), watch_host, unit)
        except KeyError as error:
            raise click.UsageError(str(error.args[0])) from None
    try:
        model = model or served_model(base, api_key)
    except (OSError, RuntimeError, ValueError) as error:
        raise click.ClickException(f"cannot list the served model: {error}") from None
    run = smoke_run(url, base, model, concurrency=concurrency, requests=request_count, max_tokens=max_tokens,
                    api_key=api_key, request_timeout=request_timeout, time_limit=time_limit, settle_s=settle,
                    sampler=sampler)
    settings = {"concurrency": concurrency, "requests": request_count, "max_tokens": max_tokens,
                "time_limit_s": time_limit, "request_timeout_s": request_timeout, "watch": run.watch,
                "settle_s": settle}
    report_path, chart_path = write_report(run, settings, Path(out_dir))
    click.echo(summary_text(run))
    click.echo(f"report: {report_path}" + (f", chart: {chart_path}" if chart_path else ""))
    if run.samples and chart_path is None:
        click.echo("no memory chart: it needs matplotlib (pip install 'vllm-hostkit[chart]')")
    raise SystemExit(0 if run.ok else 1)
