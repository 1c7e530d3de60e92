"""`python -m hostkit_lab`: start, inspect, reboot and stop the local lab hosts."""

from __future__ import annotations

import json
import sys

import click

from hostkit_lab import Lab
from hostkit_lab.image import SUITES, base_image
from hostkit_lab.rootfs import base_rootfs


@click.group()
def lab() -> None:
    """Local test hosts: Debian VMs with systemd, sshd and a blank NVMe disk (qemu, TCG), or
    Debian containers with systemd and sshd (systemd-nspawn, native speed)."""


@lab.command()
@click.option("--hosts", "count", default=1, show_default=True, help="How many hosts to start.")
@click.option("--os", "os_name", type=click.Choice(sorted(SUITES)), default="debian12", show_default=True)
@click.option("--cgroup", type=click.Choice(["v2", "v1"]), default="v2", show_default=True)
@click.option("--cpus", default=2, show_default=True, help="vCPUs per VM.")
@click.option("--kind", type=click.Choice(["vm", "container"]), default="vm", show_default=True,
              help="vm: a kernel of its own (qemu TCG); container: systemd only, at native speed.")
def up(count: int, os_name: str, cgroup: str, cpus: int, kind: str) -> None:
    """Start COUNT fresh hosts and wait until ssh answers on each."""
    hosts = Lab().up(count, os_name=os_name, cgroup=cgroup, cpus=cpus, kind=kind)
    for lab_host in hosts:
        click.echo(f"{lab_host.name}\tssh -p {lab_host.port} root@127.0.0.1 ({lab_host.describe()})")


@lab.command()
@click.argument("os_names", nargs=-1, type=click.Choice(sorted(SUITES)))
@click.option("--kind", "kinds", type=click.Choice(["vm", "container"]), multiple=True,
              help="Only these kinds of host (default: both).")
def images(os_names: tuple[str, ...], kinds: tuple[str, ...]) -> None:
    """Build the cached VM images and container root filesystems of OS_NAMES (every release
    when none is named)."""
    for os_name in os_names or sorted(SUITES):
        if "vm" in (kinds or ("vm",)):
            click.echo(f"{os_name}\tvm\t{base_image(os_name).root_disk}")
        if "container" in (kinds or ("container",)):
            click.echo(f"{os_name}\tcontainer\t{base_rootfs(os_name).path}")


@lab.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def status(fmt: str) -> None:
    """Show the lab hosts and whether they answer ssh."""
    rows = Lab().status()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no lab hosts; start one with `python -m hostkit_lab up`")
    for row in rows:
        state = "up" if row["ssh"] else ("booting" if row["running"] else "stopped")
        click.echo(f"{row['name']}\t{state}\tport {row['port']}\t{row['description']}")


@lab.command(context_settings={"ignore_unknown_options": True})
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(host: str, command: tuple[str, ...]) -> None:
    """Open a shell on HOST, or run COMMAND there."""
    import os

    lab_host = Lab().host(host)
    argv = lab_host.ssh_argv(" ".join(command) if command else None)
    if not command:
        argv.insert(1, "-t")
    sys.stdout.flush()
    os.execvp(argv[0], argv)


@lab.command()
@click.argument("host")
def reboot(host: str) -> None:
    """Reboot HOST and wait until ssh answers from the new boot."""
    Lab().host(host).reboot()


@lab.command()
def down() -> None:
    """Stop every lab host and delete its disks (the cached base image stays)."""
    Lab().down()
    click.echo("lab is down")
