"""The `hostkit` command."""

from __future__ import annotations

# As pyinfra's CLI does, before anything opens a socket or starts a subprocess: connections,
# probes and the ssh backend's subprocesses then run concurrently on gevent's pool.
from gevent import monkey

monkey.patch_all()

import click  # noqa: E402

from hostkit import __version__  # noqa: E402
from hostkit.cli.doctor import doctor  # noqa: E402
from hostkit.cli.smoke import smoke  # noqa: E402
from hostkit.cli.plan import plan  # noqa: E402
from hostkit.cli.rollout import rollout  # noqa: E402
from hostkit.cli.verify import verify  # noqa: E402


@click.group()
@click.version_option(__version__, prog_name="hostkit")
def main() -> None:
    """Provision and verify GPU hosts for vLLM."""


main.add_command(doctor)
main.add_command(smoke)
main.add_command(plan)
main.add_command(rollout)
main.add_command(verify)
