"""Kernel memory tuning state: sysctl configuration and live values, transparent hugepages.

The command prints tagged lines:

- `thp.enabled <sysfs text>` / `thp.defrag <sysfs text>` (e.g. `always [madvise] never`),
  or `thp.absent` when the kernel has no THP support;
- `thp.unit-file` and the installed hostkit THP unit verbatim as `thp.unit <line>`;
  `thp.unit-enabled` when the unit's `WantedBy=` symlink exists;
- for every `*.conf` in the directories systemd-sysctl reads, highest precedence first:
  `sysctl.file <path>`, `sysctl.link <target>` when it is a symlink, then its setting lines
  as `sysctl.line <n>:<text>` (comments and blank lines dropped), except hostkit's own file,
  which comes verbatim as `sysctl.ours <line>`;
- `/etc/sysctl.conf` itself the same way (`sysctl.conf-file`, `sysctl.conf-line`): procps
  `sysctl --system` applies it after every sysctl.d file, whether systemd-sysctl reads it
  or not;
- `sysctl.live <path>=<value>` or `sysctl.missing <path>` for every key that hostkit's
  file sets and every key of the profile's `sysctl`: the planner checks the wanted values
  against the running kernel before anything changes (hostkit.plan.sysctl_values).

How systemd-sysctl reads these files (systemd src/sysctl/sysctl.c, conf-files.c): every
`*.conf` in /etc/sysctl.d, /run/sysctl.d, /usr/local/lib/sysctl.d, /usr/lib/sysctl.d (and
/lib/sysctl.d, read by split-usr builds; on merged-usr hosts it is /usr/lib/sysctl.d); a basename in an earlier
directory masks the same basename in later ones; the survivors are applied in order of
basename and the last assignment of a key wins. A glob key never overrides a key that some
file sets explicitly. systemd-sysctl never opens /etc/sysctl.conf itself. Measured on the lab
hosts: Debian 12 (systemd 252, procps 4.0.2) has the link /etc/sysctl.d/99-sysctl.conf ->
../sysctl.conf, shipped by the systemd package, so /etc/sysctl.conf is read at boot as
99-sysctl.conf; Debian 13 (systemd 257, procps 4.0.4) has neither the link nor the file, and
a /etc/sysctl.conf created there is ignored at boot. Whether a host reads /etc/sysctl.conf at
boot is therefore whether such a link is there (`KernelState.reads_sysctl_conf_at_boot`).
procps `sysctl --system` is another matter: on both it applies /etc/sysctl.conf, when that
exists, after every sysctl.d file.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from hostkit.remote import host_file
from hostkit.facts.scope import SnapshotScope
from hostkit.paths import SYSCTL_FILE, THP_UNIT

# Highest precedence first, as systemd's CONF_PATHS("sysctl.d").
SYSCTL_DIRS: tuple[str, ...] = (
    "/etc/sysctl.d",
    "/run/sysctl.d",
    "/usr/local/lib/sysctl.d",
    "/usr/lib/sysctl.d",
    "/lib/sysctl.d",
)
SYSCTL_CONF = "/etc/sysctl.conf"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
THP_UNIT_PATH = f"/etc/systemd/system/{THP_UNIT}"
# The THP unit's [Install] WantedBy= target; the template and the fact both use it.
THP_WANTED_BY = "basic.target"
THP_WANTS_LINK = f"/etc/systemd/system/{THP_WANTED_BY}.wants/{THP_UNIT}"


def sysctl_path(key: str) -> str:
    """A sysctl key as its path under /proc/sys, by systemd's and procps' rule.

    `vm.swappiness` -> `vm/swappiness`. When the first separator is a dot, dots and slashes
    swap (`net.ipv4.conf.eth0/100.rp_filter` -> `net/ipv4/conf/eth0.100/rp_filter`); when it
    is a slash, the key is already a path.
    """
    key = key.strip()
    for char in key:
        if char == "/":
            return key
        if char == ".":
            return key.translate(str.maketrans("./", "/."))
    return key


def sysctl_key(path: str) -> str:
    """The dotted name of a /proc/sys path, for messages (`vm/swappiness` -> `vm.swappiness`)."""
    return path.translate(str.maketrans("./", "/."))


def squeeze(value: str) -> str:
    """Whitespace-insensitive form of a value: /proc/sys separates fields with tabs."""
    return " ".join(value.split())


def is_glob(key: str) -> bool:
    return any(char in key for char in "*?[")


@dataclass(frozen=True)
class SysctlAssignment:
    line: int
    key: str  # as its /proc/sys path
    value: str | None  # squeezed; None for a `-key` line, which only excludes the key from globs
    ignore_failure: bool = False


@dataclass(frozen=True)
class SysctlFile:
    path: str
    link_target: str | None = None  # resolved target when the file is a symlink
    assignments: tuple[SysctlAssignment, ...] = ()

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    def describe(self) -> str:
        return f"{self.path} (-> {self.link_target})" if self.link_target else self.path


@dataclass(frozen=True)
class ThpSetting:
    """One THP sysfs file: `always [madvise] never` -> selected `madvise`."""

    selected: str
    choices: tuple[str, ...]


@dataclass(frozen=True)
class KernelState:
    sysctl_files: tuple[SysctlFile, ...] = ()  # every sysctl.d file, highest precedence directory first
    sysctl_conf: SysctlFile | None = None  # /etc/sysctl.conf, when it exists
    hostkit_sysctl_text: str | None = None  # hostkit's sysctl file verbatim, None when absent
    live: dict[str, str | None] = field(default_factory=dict)  # path -> squeezed value; None: no such key
    thp_supported: bool = False
    thp_enabled: ThpSetting | None = None
    thp_defrag: ThpSetting | None = None
    thp_unit_text: str | None = None  # the installed THP unit verbatim, None when absent
    thp_unit_enabled: bool = False

    def boot_sysctl_files(self) -> list[SysctlFile]:
        """The sysctl.d files systemd-sysctl applies at boot, in the order it applies them."""
        by_name: dict[str, SysctlFile] = {}
        for sysctl_file in self.sysctl_files:
            by_name.setdefault(sysctl_file.name, sysctl_file)
        return [by_name[name] for name in sorted(by_name)]

    def reads_sysctl_conf_at_boot(self) -> bool:
        return any(f.link_target == SYSCTL_CONF for f in self.boot_sysctl_files())


def parse_sysctl_line(number: int, text: str) -> SysctlAssignment | None:
    """One line of a sysctl.d file, as systemd-sysctl's parse_file() reads it."""
    text = text.strip()
    if not text or text[0] in "#;":
        return None
    key, has_value, value = text.partition("=")
    key = key.strip()
    ignore_failure = key.startswith("-")
    if ignore_failure:
        key = key[1:]
    if not key:
        return None
    if not has_value:
        # `-key` alone excludes a key from globs; anything else is a syntax error systemd skips.
        return SysctlAssignment(number, sysctl_path(key), None) if ignore_failure else None
    return SysctlAssignment(number, sysctl_path(key), squeeze(value), ignore_failure)


# Shell builtins, apart from one awk for the live values, readlink for symlinks and tr for a
# key like net.ipv4.conf.eth0/100.rp_filter: under qemu TCG every process costs a good
# fraction of a second, and this runs on every snapshot. The script reads the variables
# that command() sets before it.
_COMMAND = host_file("kernel.sh")


class KernelFact(FactBase):
    section = "kernel"

    takes_scope = True

    def command(self, scope: SnapshotScope) -> str:
        # The keys are dotted names without spaces or shell characters (hostkit.profile.host_profile).
        wanted = sorted({sysctl_path(key) for key in scope.sysctl_keys})
        variables = {
            "THP": THP_DIR, "UNIT": THP_UNIT_PATH, "WANTS": THP_WANTS_LINK,
            "DIRS": " ".join(SYSCTL_DIRS), "OURS": SYSCTL_FILE, "CONF": SYSCTL_CONF,
            "WANTED": " ".join(wanted),
        }
        assignments = "".join(f"{name}={shlex.quote(value)}\n" for name, value in variables.items())
        return assignments + _COMMAND

    def process(self, output: list[str]) -> KernelState:
        files: list[SysctlFile] = []
        current: dict | None = None
        conf: dict | None = None
        ours: list[str] | None = None
        unit: list[str] | None = None
        live: dict[str, str | None] = {}
        thp: dict[str, ThpSetting] = {}
        thp_absent = False
        unit_enabled = False

        def close_file() -> None:
            if current is not None:
                files.append(SysctlFile(current["path"], current["link"], tuple(current["assignments"])))

        for line in output:
            tag, _, rest = line.partition(" ")
            if tag == "sysctl.file":
                close_file()
                current = {"path": rest, "link": None, "assignments": []}
                if rest == SYSCTL_FILE:
                    ours = []
            elif tag == "sysctl.link" and current is not None:
                current["link"] = rest
            elif tag == "sysctl.line" and current is not None:
                _add_numbered(current["assignments"], rest)
            elif tag == "sysctl.ours" and ours is not None and current is not None:
                ours.append(rest)
                assignment = parse_sysctl_line(len(ours), rest)
                if assignment is not None:
                    current["assignments"].append(assignment)
            elif tag == "sysctl.conf-file":
                conf = {"path": SYSCTL_CONF, "link": None, "assignments": []}
            elif tag == "sysctl.conf-line" and conf is not None:
                _add_numbered(conf["assignments"], rest)
            elif tag == "sysctl.live":
                path, _, value = rest.partition("=")
                live[path] = squeeze(value)
            elif tag == "sysctl.missing":
                live[rest] = None
            elif tag in ("thp.enabled", "thp.defrag"):
                setting = parse_thp_setting(rest)
                if setting is not None:
                    thp[tag] = setting
            elif tag == "thp.absent":
                thp_absent = True
            elif tag == "thp.unit-file":
                unit = []
            elif tag == "thp.unit" and unit is not None:
                unit.append(rest)
            elif tag == "thp.unit-enabled":
                unit_enabled = True
        close_file()

        return KernelState(
            sysctl_files=tuple(files),
            sysctl_conf=SysctlFile(conf["path"], None, tuple(conf["assignments"])) if conf else None,
            hostkit_sysctl_text=_text(ours),
            live=live,
            thp_supported=not thp_absent and "thp.enabled" in thp and "thp.defrag" in thp,
            thp_enabled=thp.get("thp.enabled"),
            thp_defrag=thp.get("thp.defrag"),
            thp_unit_text=_text(unit),
            thp_unit_enabled=unit_enabled,
        )


def _add_numbered(assignments: list[SysctlAssignment], numbered: str) -> None:
    number, _, text = numbered.partition(":")
    if number.isdigit():
        assignment = parse_sysctl_line(int(number), text)
        if assignment is not None:
            assignments.append(assignment)


def _text(lines: list[str] | None) -> str | None:
    if lines is None:
        return None
    return "".join(line + "\n" for line in lines)


def parse_thp_setting(text: str) -> ThpSetting | None:
    choices = text.split()
    selected = [choice[1:-1] for choice in choices if choice.startswith("[") and choice.endswith("]")]
    if len(selected) != 1:
        return None
    return ThpSetting(selected[0], tuple(choice.strip("[]") for choice in choices))
