"""Connect to an inventory's hosts with pyinfra's API and read hostkit facts from them.

Used by the commands that only look (`hostkit plan`, `hostkit doctor`): no operations run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gevent import monkey

# pyinfra's CLI patches the standard library for gevent before anything else; API users
# must do the same or parallel connections deadlock.
monkey.patch_all()

from pyinfra.api import Config, Host, State  # noqa: E402
from pyinfra.api.connect import connect_all, disconnect_all  # noqa: E402
from pyinfra.context import ctx_state  # noqa: E402
from pyinfra_cli.inventory import make_inventory_from_files  # noqa: E402

from hostkit.profile.host_profile import limited_hosts  # noqa: E402


@contextmanager
def connected_hosts(inventory_path: str, limit: Sequence[str] | None = None) -> Iterator[list[Host]]:
    """The inventory's hosts (limited like `pyinfra --limit`), connected; unreachable ones left out."""
    state = State()
    with ctx_state.use(state):
        inventory = make_inventory_from_files(inventory_path, cwd=os.getcwd())
    names = {h.name for h in limited_hosts(inventory, limit)}
    state.init(inventory, Config(), initial_limit=[h for h in inventory if h.name in names])
    connect_all(state)
    try:
        yield [h for h in state.inventory.iter_activated_hosts() if h.name in names]
    finally:
        disconnect_all(state)
