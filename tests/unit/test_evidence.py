"""docs/evidence/ is what scripts/evidence.py writes from reports/*.json, and nothing else."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.record_run import figure_lines

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]


def test_the_evidence_pages_are_the_reports_rendered():
    check = subprocess.run([sys.executable, "scripts/evidence.py", "--check"], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


def test_figures_are_read_where_pytest_s_prints_them_after_a_tests_name():
    log = ('tests/e2e/test_real_vllm.py::test_oom[vm] {"test": "real vLLM", "killed": ["VLLM::Worker"]}\n'
           'PASSED\n{"test": "real vLLM", "rerun_s": 9.2}\nnot {"a figure": 1}\n')
    assert figure_lines(log) == [{"test": "real vLLM", "killed": ["VLLM::Worker"]}, {"test": "real vLLM", "rerun_s": 9.2}]


def test_the_readme_boot_line_quotes_medians_over_the_runs_that_timed_them():
    sys.path.insert(0, str(REPO / "scripts"))
    import evidence

    def run(blank_ssh):
        return {"figures": [{"test": "nvme boot", "case": "blank disk", "ssh": blank_ssh, "swap": blank_ssh + 7},
                            {"test": "nvme boot", "case": "no NVMe disk", "ssh": 30.0, "swap": None}]}

    line = evidence.nvme_boot_summary([run(35.0), run(36.0), run(71.0), {"figures": []}])
    assert "median of 3 CI runs" in line
    assert "a blank disk 36 s to ssh, swap on at 43 s; no disk 30 s; a foreign disk ?" in line
