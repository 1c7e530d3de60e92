"""The exit status of `hostkit plan`, `hostkit verify` and `hostkit doctor`: one contract, so a
pipeline can act on it without knowing which command ran."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a host fails or would be refused, whatever the reason
EXIT_UNUSABLE = 2  # a usage error (click's own too), or a host that could not be reached or read

# Each command's --help ends with it; docs/design.md quotes it.
CONTRACT = (
    "Exit status: 0 every host is fine; 1 a host fails or would be refused, whatever the reason; "
    "2 a usage error, or a host that could not be reached (its verdict is unknown, so 2 wins over 1). "
    "--format json carries every problem and the exit status."
)


def exit_status(failed: bool, unreachable: bool) -> int:
    if unreachable:
        return EXIT_UNUSABLE
    return EXIT_FAILED if failed else EXIT_OK
