"""Connect to an inventory's hosts with pyinfra's API and read hostkit facts from them.

Used by the commands that only look (`hostkit plan`, `hostkit doctor`): no operations run.
The caller has patched the standard library for gevent (the `hostkit` command does, first),
or parallel connections deadlock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyinfra.api import Config, Host, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory_from_files

from hostkit.fleet.inventory import limited_hosts


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
