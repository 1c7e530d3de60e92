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
@click.option("--unit", default=VLLM_UNIT, show_default=True,
              help="The vLLM unit whose cgroup memory is sampled (an instance's own on a host with vllm_instances).")
@click.option("--instance", "only_instance", metavar="NAME", default=None,
              help="On a --watch host of the --inventory with vllm_instances: this instance alone (default: each).")
@click.option("--out", "out_dir", default="smoke-report", show_default=True, type=click.Path(file_okay=False),
              help="Directory for smoke-report.json and smoke-memory.png.")
def smoke(url: str, concurrency: int, request_count: int, max_tokens: int, time_limit: float, request_timeout: float,
          model: str | None, api_key_env: str | None, watch_host: str | None, local: bool, inventory: str | None,
          settle: float, unit: str, only_instance: str | None, out_dir: str) -> None:
    """Send bounded concurrent /v1/completions requests to URL (only there) and report.

    When the --inventory's --watch host has vllm_instances, each instance (or --instance NAME) is
    loaded in turn at URL's host and the instance's port, with its vllm_api_key unless
    --api-key-env is given, its report under OUT/NAME.

    Exits 1 when a request failed, an OOM kill happened during the run, or memory could not be watched.
    """
    from hostkit.smoke.load import api_base

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
    options = {"concurrency": concurrency, "requests": request_count, "max_tokens": max_tokens,
               "request_timeout": request_timeout, "time_limit": time_limit, "settle_s": settle}

    instances = _instances(url, watch_host, inventory, only_instance)
    if instances is None:
        ok = _smoke_one(url, base, api_key, _sampler(watch_host, local, inventory, unit), Path(out_dir), model, options)
    else:
        ok = True
        for target in instances:
            click.echo(f"{target.unit}: {target.url}")
            sampler = _sampler(watch_host, local, inventory, target.unit)
            ok &= _smoke_one(target.url, api_base(target.url), api_key or target.api_key, sampler,
                             Path(out_dir) / target.name, model, options)
    raise SystemExit(0 if ok else 1)


def _instances(url: str, watch_host: str | None, inventory: str | None, only: str | None):
    """The --watch host's instances to load, or None when it has none (vllm.service, or no inventory)."""
    from hostkit.smoke.instances import instance_targets

    if not (inventory and watch_host):
        if only:
            raise click.UsageError("--instance needs --inventory and --watch HOST (whose vllm_instances it names)")
        return None
    from hostkit.fleet.inventory import load_inventory
    from hostkit.profile.validation import ProfileError, profile_from_data

    data = dict(load_inventory(inventory)).get(watch_host)
    if data is None:
        raise click.UsageError(f"no host {watch_host!r} in {inventory}")
    try:
        profile = profile_from_data(watch_host, data)
    except ProfileError as error:
        raise click.UsageError(f"invalid inventory data of {watch_host}:\n{error}") from None
    if not profile.vllm_instances:
        if only:
            raise click.UsageError(f"{watch_host} has no vllm_instances")
        return None
    try:
        return instance_targets(url, profile, only)
    except ValueError as error:
        raise click.UsageError(str(error)) from None


def _sampler(watch_host: str | None, local: bool, inventory: str | None, unit: str):
    from hostkit.smoke.sampler import LocalSampler, SshSampler, ssh_argv_for

    if local:
        return LocalSampler(unit)
    if watch_host:
        try:
            return SshSampler(ssh_argv_for(watch_host, inventory), watch_host, unit)
        except KeyError as error:
            raise click.UsageError(str(error.args[0])) from None
    return None


def _smoke_one(url: str, base: str, api_key: str | None, sampler, out_dir: Path, model: str | None,
               options: dict) -> bool:
    """One server's run and report (`model`: the one asked for, else the first it serves); whether it passed."""
    from hostkit.smoke.load import served_model
    from hostkit.smoke.report import summary_text, write_report
    from hostkit.smoke.run import smoke_run

    try:
        model = model or served_model(base, api_key)
    except (OSError, RuntimeError, ValueError) as error:
        raise click.ClickException(f"cannot list the served model: {error}") from None
    run = smoke_run(url, base, model, api_key=api_key, sampler=sampler, **options)
    settings = {"concurrency": options["concurrency"], "requests": options["requests"],
                "max_tokens": options["max_tokens"], "time_limit_s": options["time_limit"],
                "request_timeout_s": options["request_timeout"], "watch": run.watch, "settle_s": options["settle_s"]}
    report_path, chart_path = write_report(run, settings, out_dir)
    click.echo(summary_text(run))
    click.echo(f"report: {report_path}" + (f", chart: {chart_path}" if chart_path else ""))
    if run.samples and chart_path is None:
        click.echo("no memory chart: it needs matplotlib (pip install 'vllm-hostkit[chart]')")
    return run.ok
