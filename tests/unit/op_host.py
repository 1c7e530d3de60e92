"""pyinfra's current host as an operation test gives it: the snapshot sections the operation
reads, a state that says whether pyinfra is executing, and what the operation logged."""

from __future__ import annotations

from pyinfra.api import FunctionCommand

from hostkit.facts.snapshot import HostSnapshot, MemoisedSnapshot


class OpState:
    def __init__(self, executing: bool):
        self.is_executing = executing

    def should_check_for_changes(self) -> bool:
        return True


class OpHost:
    name = "fake"
    print_prefix = "[fake] "

    def __init__(self, sections: dict, executing: bool = False):
        self._hostkit_snapshot = MemoisedSnapshot(self, None, HostSnapshot(sections))
        self.state = OpState(executing)
        self.current_op_global_arguments = {"_sudo": False, "_name": "ignored"}
        self.logged: list[str] = []

    def log_styled(self, message, log_func=None, **kwargs):
        self.logged.append(message)


def refusal_text(command: FunctionCommand, op_host: OpHost) -> str:
    """Run a refusal callback as pyinfra would; it must fail the host. Returns what it logged."""
    assert isinstance(command, FunctionCommand)
    assert command.function(None, op_host, *command.args, **command.kwargs) is False
    return "\n".join(op_host.logged)
