"""Unit directives newer than some systemd hostkit supports: the one table, and the pass that
fits a rendered unit to the host's systemd. Pure: no host access.

Templates are written for the newest systemd. `fit_unit` then rewrites each line whose
directive the host's systemd lacks: to the older equivalent where there is one, else to a
comment saying what was dropped (so `systemctl cat` shows it), and returns a note for the
plan. An unknown directive would make `systemd-analyze verify` warn ("Unknown key name ...,
ignoring"), which hostkit's deploy refuses, so the unit would never be installed.

First versions are from systemd's NEWS (the file in systemd/systemd, "CHANGES WITH N"):
Type=exec 240; ProtectHostname= and RestrictSUIDSGID= 242; PID 1 acting on OOM kills
(OOMPolicy=) 243; ProtectKernelLogs= 244; ProtectClock= 245; ProtectProc= 247;
RestartSteps= and RestartMaxDelaySec= 254; the @system-service system call group 241;
NUMAPolicy= and NUMAMask= 243.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DirectiveSupport:
    """`directive` is a key ("ProtectProc") or key=value ("Type=exec") as it appears in a unit."""

    directive: str
    since: int  # the first systemd release that has it
    before: str | None  # the line to use before `since`; None: drop it
    lost: str  # what a host before `since` goes without (for the plan note)

    def matches(self, line: str) -> bool:
        line = line.rstrip("\n")
        if "=" in self.directive:
            return line.startswith(self.directive) and line[len(self.directive):len(self.directive) + 1] in ("", " ")
        return line.startswith(f"{self.directive}=")


DIRECTIVES: tuple[DirectiveSupport, ...] = (
    DirectiveSupport("Type=exec", 240, "Type=simple",
                     "a missing vLLM command fails only after the start instead of failing the start"),
    DirectiveSupport("SystemCallFilter=@system-service", 241, None,
                     "the strict system call allow-list (the deny-list of the next line still applies)"),
    DirectiveSupport("ProtectHostname", 242, None, "hostname changes are not blocked"),
    DirectiveSupport("RestrictSUIDSGID", 242, None, "creating set-uid files is not blocked"),
    DirectiveSupport("OOMPolicy", 243, None,
                     "an OOM kill of one vLLM process does not stop the whole unit (vLLM exits when its engine dies;"
                     " the watchdog restarts a server left hanging)"),
    DirectiveSupport("NUMAPolicy", 243, None, "memory is not taken from the GPUs' NUMA node first"),
    DirectiveSupport("NUMAMask", 243, None, "memory is not taken from the GPUs' NUMA node first"),
    DirectiveSupport("ProtectKernelLogs", 244, None, "the kernel log is readable"),
    DirectiveSupport("ProtectClock", 245, None, "clock changes are blocked only by the system call filter"),
    DirectiveSupport("ProtectProc", 247, None, "other users' processes are visible in /proc"),
    DirectiveSupport("RestartSteps", 254, None, "the restart delay stays fixed instead of growing"),
    DirectiveSupport("RestartMaxDelaySec", 254, None, "the restart delay stays fixed instead of growing"),
)


def support_for(line: str) -> DirectiveSupport | None:
    return next((entry for entry in DIRECTIVES if entry.matches(line)), None)


def fit_unit(text: str, systemd_version: int | None) -> tuple[str, list[str]]:
    """`text` for a host with `systemd_version` (None: unknown, taken as the newest), and one
    note per directive replaced or dropped."""
    if not systemd_version:
        return text, []
    lines, notes = [], []
    for line in text.splitlines(keepends=True):
        entry = support_for(line)
        if entry is None or systemd_version >= entry.since:
            lines.append(line)
            continue
        newline = "\n" if line.endswith("\n") else ""
        if entry.before is None:
            lines.append(f"# {line.rstrip()}: dropped, needs systemd {entry.since} (host: {systemd_version}){newline}")
            notes.append(f"systemd {systemd_version}: no {entry.directive} (needs {entry.since}): {entry.lost}")
        else:
            lines.append(f"{entry.before}{newline}")
            notes.append(f"systemd {systemd_version}: {entry.before} instead of {entry.directive}"
                         f" (needs {entry.since}): {entry.lost}")
    return "".join(lines), list(dict.fromkeys(notes))
