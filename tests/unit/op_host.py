"""pyinfra's current host as an operation test gives it: the snapshot sections the operation
reads, the answers to facts it asks for itself, a state that says whether pyinfra is
executing, and what the operation logged. The one fake pyinfra host of the unit tests."""

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

    def __init__(self, sections: dict, executing: bool = False, facts: dict | None = None):
        self._hostkit_snapshot = MemoisedSnapshot(self, None, HostSnapshot(sections))
        self.state = OpState(executing)
        self.current_op_global_arguments = {"_sudo": False, "_name": "ignored"}
        self.logged: list[str] = []
        self.facts = facts or {}  # fact class: its answer, whatever the arguments
        self.facts_asked: list[dict] = []

    def get_fact(self, fact_cls, **kwargs):
        self.facts_asked.append(kwargs)
        return self.facts[fact_cls]

    def log_styled(self, message, log_func=None, **kwargs):
        self.logged.append(message)


def refusal_text(command: FunctionCommand, op_host: OpHost) -> str:
    """Run a refusal callback as pyinfra would; it must fail the host. Returns what it logged."""
    assert isinstance(command, FunctionCommand)
    assert command.function(None, op_host, *command.args, **command.kwargs) is False
    return "\n".join(op_host.logged)
