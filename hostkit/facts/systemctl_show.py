"""`systemctl show` of a unit: run on the host within a deadline, and its output read back.

`SHOW_FUNCTIONS` defines, for a caller's script, hostkit/remote/systemctl_show.sh's
`hk_show UNIT PROPERTY...` (the `Property=value` lines) and `hk_show_value UNIT PROPERTY
[OPTION...]` (one value), both through hk_deadline: past SYSTEMCTL_S they print the
deadline's TIMED_OUT line instead (hostkit.facts.deadline).
"""

from __future__ import annotations

from collections.abc import Iterable

from hostkit.facts.deadline import DEADLINE_FUNCTION, SYSTEMCTL_S
from hostkit.remote import host_file

SHOW_FUNCTIONS = "\n".join((f"hk_systemctl_s={SYSTEMCTL_S}", DEADLINE_FUNCTION, host_file("systemctl_show.sh")))


def parse_show(lines: Iterable[str]) -> dict[str, str]:
    """The `Property=value` lines of `systemctl show`, values as printed; a line without `=`
    (the deadline's TIMED_OUT line) is no property."""
    properties = {}
    for line in lines:
        name, sep, value = line.partition("=")
        if sep:
            properties[name] = value
    return properties
