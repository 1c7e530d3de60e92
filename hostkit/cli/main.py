"""The `hostkit` command."""

from __future__ import annotations

import click

from hostkit import __version__
from hostkit.cli.doctor import doctor
from hostkit.cli.lab import lab
from hostkit.cli.smoke import smoke
from hostkit.cli.plan import plan
from hostkit.cli.rollout import rollout
from hostkit.cli.verify import verify


@click.group()
@click.version_option(__version__, prog_name="hostkit")
def main() -> None:
    """Provision and verify GPU hosts for vLLM."""


main.add_command(lab)
main.add_command(doctor)
main.add_command(smoke)
main.add_command(plan)
main.add_command(rollout)
main.add_command(verify)
