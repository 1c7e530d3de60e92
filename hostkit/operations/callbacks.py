"""What operations hand to pyinfra to run at execute time (FunctionCommand), and what those
callbacks need to run commands of their own."""

from __future__ import annotations

from typing import Any

from pyinfra import logger
from pyinfra.api import Host, State
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS


def fail_host(state: State, host: Host, lines: list[str]) -> bool:
    """Log `lines` in red; returning False fails this host only (an exception in an
    operation's generator would stop every host)."""
    for line in lines:
        host.log_styled(line, fg="red", log_func=logger.error)
    return False


def connector_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The connector's share (_sudo, _timeout etc.) of an operation's global arguments."""
    return {key: arguments[key] for key in CONNECTOR_ARGUMENT_KEYS if key in arguments}


def current_connector_arguments(op_host: Host) -> dict[str, Any]:
    """The running operation's connector arguments, for commands its callbacks run themselves."""
    return connector_arguments(op_host.current_op_global_arguments or {})
