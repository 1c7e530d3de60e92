"""The `hostkit` command."""

from __future__ import annotations

import click

from hostkit import __version__
from hostkit.commands.lab import lab


@click.group()
@click.version_option(__version__, prog_name="hostkit")
def main() -> None:
    """Provision and verify GPU hosts for vLLM."""


main.add_command(lab)
