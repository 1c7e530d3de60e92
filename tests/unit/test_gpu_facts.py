"""The gpu section's parser, on real H200 output and on edited copies of it."""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from hostkit.facts.gpu import (
    QUERY_FIELDS,
    GpuFact,
    parse_gpu_output,
    parse_query_row,
)
from hostkit.facts.kernel_log import XidEvent, parse_xid_line
from hostkit.facts.snapshot import MARKER, SECTIONS, parse_sections
from hostkit.plan.gpu_policy import GpuPolicy, evaluate

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
REFERENCE = FIXTURES / "h200-1gpu"


def section(name: str):
    return parse_gpu_output((FIXTURES / name).read_text().splitlines())


def test_query_fields_are_real_nvidia_smi_fields():
    header = next(csv.reader((REFERENCE / "query.csv").open(), skipinitialspace=True))
    real_fields = {re.sub(r" \[.*\]$", "", column) for column in header}
    assert set(QUERY_FIELDS) <= real_fields


def test_reference_nounits_row_parses_by_its_own_field_order():
    # query-nounits.csv was recorded with its own 11 fields; reorder it into QUERY_FIELDS.
    recorded_fields = (
        "index", "name", "driver_version", "persistence_mode", "memory.total",
        "ecc.mode.current", "ecc.errors.uncorrected.volatile.total", "retired_pages.pending",
        "remapped_rows.pending", "remapped_rows.failure", "mig.mode.current",
    )  # fmt: skip
    values = dict(zip(recorded_fields, (REFERENCE / "query-nounits.csv").read_text().strip().split(", ")))
    gpu = parse_query_row(", ".join(values.get(name, "[N/A]") for name in QUERY_FIELDS))
    assert gpu is not None
    assert (gpu.name, gpu.memory_total_mib, gpu.driver_version) == ("NVIDIA H200", 143771, "580.159.04")
    assert gpu.retired_pages_pending is None  # [N/A] on Hopper, which remaps rows instead


def test_h200_section_agrees_with_nvidia_smi_q():
    facts = section("h200.txt")
    detail = (REFERENCE / "nvidia-smi-q.txt").read_text()
    gpu = facts.gpus[0]
    assert f"Total                                          : {gpu.memory_total_mib} MiB" in detail
    assert "Persistence Mode                                   : Enabled" in detail and gpu.persistence_mode
    assert f"GPU UUID                                           : {gpu.uuid}" in detail
    assert "Remapping Failure Occurred                     : No" in detail
    assert gpu.remapped_rows_failure is False and gpu.remapped_rows_pending is False
    assert gpu.mig_enabled is False and gpu.ecc_enabled is True and gpu.ecc_uncorrected_volatile == 0


def test_device_run_section_parses():
    facts = parse_gpu_output((FIXTURES / "device-run" / "gpu-section.txt").read_text().splitlines())
    assert facts.driver_present and facts.nvidia_smi_error is None
    assert facts.gpu_count == 1 and [gpu.memory_total_mib for gpu in facts.gpus] == [143771]
    assert facts.module_version == facts.nvml_version == "580.159.04"
    assert facts.modules == ("nvidia_uvm", "nvidia")
    assert set(facts.device_nodes) == {
        "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
    }  # fmt: skip
    assert facts.persistenced_running is False  # persistence was set with the deprecated -pm 1
    assert facts.kernel_log_source == "dmesg" and facts.xids == () and facts.xid_total == 0
    assert facts.fabricmanager is None


def test_version_mismatch_keeps_both_versions():
    facts = section("version-mismatch.txt")
    assert (facts.module_version, facts.nvml_version) == ("570.133.20", "580.159.04")


def test_nvml_refusing_to_start_is_an_error_with_its_library_version():
    facts = section("nvml-mismatch.txt")
    assert facts.driver_present and facts.gpus == ()
    assert "Driver/library version mismatch" in facts.nvidia_smi_error
    assert (facts.module_version, facts.nvml_version) == ("570.133.20", "580.159")


def test_uncorrected_ecc_and_pending_remaps():
    assert section("ecc-uncorrected.txt").gpus[0].ecc_uncorrected_volatile == 3
    assert section("remapped-pending.txt").gpus[0].remapped_rows_pending is True
    assert section("remap-failure.txt").gpus[0].remapped_rows_failure is True


def test_na_and_missing_fields_read_as_unknown():
    gpu = section("na-fields.txt").gpus[0]
    assert gpu.persistence_mode is None and gpu.memory_used_mib is None
    assert gpu.ecc_enabled is None and gpu.ecc_uncorrected_volatile is None
    assert gpu.remapped_rows_pending is None
    # the row stopped two columns short
    assert gpu.remapped_rows_failure is None and gpu.mig_enabled is None
    assert gpu.memory_total_mib == 143771


def test_eight_gpus():
    facts = section("8gpu.txt")
    assert [gpu.index for gpu in facts.gpus] == list(range(8))
    assert len({gpu.bus_id for gpu in facts.gpus}) == 8
    assert [gpu.memory_total_mib for gpu in facts.gpus] == [143771] * 8


def test_missing_nvidia_uvm():
    facts = section("no-nvidia-uvm.txt")
    assert facts.modules == ("nvidia",)
    assert "/dev/nvidia-uvm" not in facts.device_nodes


def test_missing_nvidia_smi_is_a_fact():
    facts = section("no-nvidia-smi.txt")
    assert not facts.driver_present and facts.gpus == () and facts.nvidia_smi_error is None
    assert facts.module_version is None and facts.modules == ()


def test_persistenced_is_recognised_by_its_command_line():
    assert section("h200-persistenced.txt").persistenced_running
    fake = "@@gpu:persistenced@@\n/usr/bin/not-nvidia-persistenced-wrapper\n".splitlines()
    assert not parse_gpu_output(fake).persistenced_running


def test_xid_lines():
    facts = section("xids.txt")
    assert facts.kernel_log_source == "journalctl"
    assert [event.code for event in facts.xids] == [13, 79, 13]
    assert facts.xids[1] == XidEvent(
        device="PCI:0000:00:06", code=79, detail="pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert parse_xid_line("[  12.5] NVRM: Xid (PCI:0000:07:00): 48, An uncorrectable double bit error") == XidEvent(
        "PCI:0000:07:00", 48, "An uncorrectable double bit error"
    )
    assert parse_xid_line("[ 0.53] NVRM: loading NVIDIA UNIX Open Kernel Module") is None


def test_unreadable_kernel_log_is_unknown_not_clean():
    facts = section("kernel-log-unreadable.txt")
    assert facts.kernel_log_source is None and not facts.xid_log_readable


def test_fabric_manager_on_nvswitch_hosts():
    facts = section("nvswitch-fm-stale.txt")
    assert facts.fabricmanager.running and facts.fabricmanager.version == "570.133.20"
    assert section("h200.txt").fabricmanager is None


def test_gpu_is_a_snapshot_section():
    assert GpuFact in SECTIONS and GpuFact.section == "gpu"
    lines = [f"{MARKER} gpu", *(FIXTURES / "h200.txt").read_text().splitlines()]
    assert parse_sections(lines)["gpu"] == section("h200.txt")


def run_section_command(tmp_path: Path, path_dirs: list[Path]) -> list[str]:
    env = {"PATH": ":".join([*map(str, path_dirs), "/usr/bin", "/bin"])}
    result = subprocess.run(
        ["sh", "-c", GpuFact().command()], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0
    return result.stdout.splitlines()


def stub(directory: Path, name: str, body: str) -> None:
    (directory / name).write_text(f"#!/bin/sh\n{body}\n")
    (directory / name).chmod(0o755)


XID_LINE = "Nov 29 21:05:40 gpu-host kernel: NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', GPU has fallen off the bus."


@pytest.fixture
def kernel_logs(tmp_path) -> Path:
    """journalctl and dmesg stubs that log their calls to `called` and print `NAME.out`."""
    for name in ("journalctl", "dmesg"):
        stub(tmp_path, name, f"echo {name} >> {tmp_path}/called; cat {tmp_path}/{name}.out 2>/dev/null")
    return tmp_path


@pytest.mark.processes
def test_command_runs_without_nvidia_tools(tmp_path, kernel_logs):
    assert not Path("/proc/driver/nvidia/version").exists()
    lines = run_section_command(tmp_path, [kernel_logs])
    facts = GpuFact().process(lines)
    assert not facts.driver_present and facts.gpus == ()
    assert lines[-2:] == ["source=no-driver", "total=0"]
    assert facts.kernel_log_source == "no-driver" and facts.xid_log_readable and facts.xid_total == 0
    assert not (kernel_logs / "called").exists()  # no driver loaded: the kernel log is not read


@pytest.mark.processes
@pytest.mark.parametrize(
    ("journal", "dmesg", "source", "xids"),
    [
        (["boot", XID_LINE, XID_LINE], ["other"], "journalctl", 2),
        ([], ["boot", XID_LINE], "dmesg", 1),
        ([], [], None, 0),
    ],
)
def test_command_reads_the_first_readable_kernel_log_when_a_driver_is_loaded(
    tmp_path, kernel_logs, monkeypatch, journal, dmesg, source, xids
):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n")
    monkeypatch.setattr("hostkit.facts.gpu._DRIVER_VERSION", str(version))
    (kernel_logs / "journalctl.out").write_text("".join(line + "\n" for line in journal))
    (kernel_logs / "dmesg.out").write_text("".join(line + "\n" for line in dmesg))
    lines = run_section_command(tmp_path, [kernel_logs])
    facts = GpuFact().process(lines)
    assert facts.module_version == "580.159.04"
    assert facts.kernel_log_source == source and facts.xid_total == len(facts.xids) == xids
    assert lines[lines.index("@@gpu:xid@@") + 1] == f"source={source or 'none'}"
    assert lines[-1] == (f"total={xids}" if source else "source=none")


def test_no_driver_is_not_an_unreadable_kernel_log():
    facts = parse_gpu_output(["@@gpu:no-nvidia-smi@@", "@@gpu:xid@@", "source=no-driver", "total=0"])
    assert evaluate(GpuPolicy(required=True), facts).warnings == ()


@pytest.mark.processes
def test_command_passes_nvidia_smi_errors_through(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho 'Failed to initialize NVML: Driver/library version mismatch'\n"
        "echo 'NVML library version: 580.159'\nexit 18\n"
    )
    fake.chmod(0o755)
    facts = GpuFact().process(run_section_command(tmp_path, [tmp_path]))
    assert facts.driver_present and facts.gpus == ()
    assert facts.nvml_version == "580.159"
    assert facts.nvidia_smi_error.startswith("Failed to initialize NVML")


@pytest.mark.processes
@pytest.mark.parametrize("rows", [1, 3])
def test_command_reads_query_rows(tmp_path, rows):
    row = (FIXTURES / "h200.txt").read_text().splitlines()[1]
    fake = tmp_path / "nvidia-smi"
    expected_args = f"--query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"
    fake.write_text(
        f"#!/bin/sh\n[ \"$*\" = '{expected_args}' ] || {{ echo \"unexpected: $*\"; exit 2; }}\n"
        + "".join(f"echo '{row.replace('0,', f'{i},', 1)}'\n" for i in range(rows))
    )
    fake.chmod(0o755)
    facts = GpuFact().process(run_section_command(tmp_path, [tmp_path]))
    assert [gpu.index for gpu in facts.gpus] == list(range(rows))
