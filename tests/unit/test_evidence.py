"""docs/evidence/ is what scripts/evidence.py writes from reports/*.json, and nothing else."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]


def test_the_evidence_pages_are_the_reports_rendered():
    check = subprocess.run([sys.executable, "scripts/evidence.py", "--check"], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
