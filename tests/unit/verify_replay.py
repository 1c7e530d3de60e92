"""A lab host's recorded snapshot and probe output, replayed through a fake testinfra host.

fixtures/verify/debian12-converged.*.txt: the snapshot command's and the probe command's
output on a Debian 12 lab host right after `deploys/vllm_host.py` with LAB_DATA below
(the lab inventory's data when they were recorded) and the vLLM stand-in;
debian12-broken.*.txt: the same host after swapoff, `sysctl -w vm.swappiness=60`,
`systemctl stop vllm`, THP enabled set to always and RestartSec edited in the unit file.
"""

from __future__ import annotations

from pathlib import Path

from testinfra.backend.base import CommandResult

from hostkit.facts.snapshot import MARKER as SNAPSHOT_MARKER
from hostkit.facts.snapshot import HostSnapshotFact
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.desired.digest import text_sha256
from hostkit.desired.kernel import render_sysctl_file, render_thp_unit
from hostkit.desired.nvme_boot import wanted_files
from hostkit.desired.watchdog import watchdog_plan
from hostkit.plan.planner import plan_host
from hostkit.paths import NVME_LABEL
from hostkit.profile.validation import profile_from_data
from hostkit.verify.probes import MARKER as PROBE_MARKER
from hostkit.desired.vllm_unit import render_env, render_unit

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
SECRET = "lab-secret-not-for-production"
LAB_DATA = {
    "gpu_required": False,
    "nvme_device": "/dev/nvme0n1",
    "swap_size": "1G",
    "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct",
    "vllm_max_model_len": 4096,
    "vllm_ready_timeout": 180,
    "vllm_api_key": SECRET,
    # What "auto" planned for this host when it was recorded (in MiB steps; GiB steps since).
    "vllm_memory_max": "989M",
    "vllm_memory_high": "890M",
    "vllm_memory_swap_max": "512M",
    # Recorded before hostkit had a collector: such a host passes with monitoring off.
    "monitoring_enabled": False,
}


def recorded(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


STORAGE_MARK = "%%hostkit-storage:"
# udev's by-id links of a lab VM's NVMe disk (the storage section's by-id part, recorded).
BY_ID = (Path(__file__).parent / "fixtures" / "storage" / "debian12-by-id.txt").read_text().splitlines()


def storage_today(snapshot: list[str]) -> list[str]:
    """A snapshot recorded before the NVMe boot unit, with its storage parts as today's deploy
    leaves that host: udev's by-id links (recorded on a lab VM), the filesystem's label, the
    unit's files as rendered and enabled, and no fstab line for the mount or the swap file
    under it (the unit took them over)."""
    if f"{STORAGE_MARK}by-id" in snapshot:
        return snapshot
    out: list[str] = []
    part = None
    for line in snapshot:
        if line.startswith(STORAGE_MARK):
            part = line[len(STORAGE_MARK):]
            if part == "dirs":
                out += [f"{STORAGE_MARK}by-id", *BY_ID, f"{STORAGE_MARK}nvme-unit", "@@nvme-unit@@", "enabled"]
        elif part == "fstab" and line.split()[1:2] == ["/mnt/nvme"] or part == "fstab" and line.startswith("/mnt/nvme/"):
            continue
        elif part == "devices" and line.startswith("blkid:TYPE="):
            out.append(f"blkid:LABEL={NVME_LABEL}")
        out.append(line)
    plan = plan_host(profile_from_data("lab1", LAB_DATA), planning_facts(HostSnapshotFact().process(
        [line for line in out if line != "@@nvme-unit@@"])))
    sums = [f"sha256 {text_sha256(text)}  {path}" for path, text in wanted_files(plan.nvme, plan.swap).items()]
    index = out.index("@@nvme-unit@@")
    return out[:index] + sums + out[index + 1:]


def rendered_today(snapshot: list[str], keep_unit: bool = False) -> list[str]:
    """A recorded snapshot with hostkit's rendered files (sysctl file, THP unit, vLLM unit
    and environment file) as today's templates render them: a deploy writes what they render
    now, and a template change is no verification bug. `keep_unit`: a unit file the recording
    broke on purpose keeps its recorded hash."""
    snapshot = storage_today(snapshot)
    plan = plan_host(profile_from_data("lab1", LAB_DATA), planning_facts(HostSnapshotFact().process(snapshot)))
    replacements = {
        "sysctl.ours ": [f"sysctl.ours {line}" for line in render_sysctl_file(plan.kernel).splitlines()],
        "thp.unit ": [f"thp.unit {line}" for line in render_thp_unit(plan.kernel).splitlines()],
        "env_sha256=": [f"env_sha256={text_sha256(render_env(plan.vllm))}"],
    }
    if not keep_unit:
        replacements["unit_sha256="] = [f"unit_sha256={text_sha256(render_unit(plan.vllm))}"]
    out: list[str] = []
    for line in snapshot:
        prefix = next((p for p in replacements if line.startswith(p)), None)
        if prefix is None:
            out.append(line)
        elif replacements[prefix] is not None:
            out.extend(replacements[prefix])
            replacements[prefix] = None  # a multi-line file is replaced once, at its first line
    return out


def probed_today(probe: list[str]) -> list[str]:
    """A recorded probe output plus the health watchdog's section, which the recordings
    predate: the watchdog as today's deploy installs it, running (hashes of today's files)."""
    if f"{PROBE_MARKER}watchdog@@" in probe:
        return probe
    profile = profile_from_data("lab1", LAB_DATA)
    plan = plan_host(profile, planning_facts(HostSnapshotFact().process(
        storage_today(recorded("debian12-converged.snapshot.txt")))))
    wanted = watchdog_plan(plan.watchdog, plan.vllm)
    section = [f"{PROBE_MARKER}watchdog@@", f"unit_sha256={text_sha256(wanted.unit_text)}",
               f"script_sha256={text_sha256(wanted.script_text)}", "LoadState=loaded", "ActiveState=active",
               "SubState=running", "UnitFileState=enabled", "NeedDaemonReload=no"]
    return [*probe, *section]


class FakeHost:
    """A testinfra host whose `run` answers the snapshot and probe commands with recorded output."""

    def __init__(self, error: Exception | None = None):
        self.outputs = {
            SNAPSHOT_MARKER: "\n".join(rendered_today(recorded("debian12-converged.snapshot.txt"))),
            PROBE_MARKER: "\n".join(probed_today(recorded("debian12-converged.probe.txt"))),
        }
        self.error = error
        self.commands: list[str] = []

    def run(self, command: str, *args: str) -> CommandResult:
        script = command % args if args else command
        self.commands.append(args[-1] if args else command)  # the script; a deadline wrapper comes first
        if self.error is not None:
            raise self.error
        stdout = next(text for marker, text in self.outputs.items() if marker in script)
        return CommandResult(backend=None, exit_status=0, command=script.encode(), _stdout=stdout, _stderr="")
