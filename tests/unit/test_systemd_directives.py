"""The systemd directive table and the unit fitted to a host's systemd: which directives each
supported release gets, and `systemd-analyze verify` on the systemd of this machine."""

from __future__ import annotations

import re
import subprocess

import pytest

from hostkit.operations import vllm_service as ops
from hostkit.desired.directives import DIRECTIVES, fit_unit, support_for
from hostkit.desired.vllm_unit import render_unit, unit_notes
from tests.unit.test_vllm_unit import PLAN, local_systemd_version, needs_systemd_analyze

# Ubuntu 22.04 has 249, RHEL 9 252, Ubuntu 24.04 255; RHEL 8 239, Debian 11 247, 12 252, 13 257.
NEWER_THAN_239 = {"Type=exec": 240, "ProtectHostname": 242, "RestrictSUIDSGID": 242, "OOMPolicy": 243,
                  "ProtectKernelLogs": 244, "ProtectClock": 245, "ProtectProc": 247, "RestartSteps": 254,
                  "RestartMaxDelaySec": 254}


def directives(text: str) -> set[str]:
    return {line.split("=", 1)[0] for line in text.splitlines() if re.match(r"^[A-Z][A-Za-z]+=", line)}


def test_the_table_holds_what_systemds_news_says():
    assert {entry.directive: entry.since for entry in DIRECTIVES if entry.directive in NEWER_THAN_239} \
        == NEWER_THAN_239
    assert support_for("Type=exec").before == "Type=simple"
    assert support_for("Type=execute") is None and support_for("Type=simple") is None
    assert support_for("ProtectProc=invisible").before is None
    assert support_for("# ProtectProc=invisible") is None  # comments are left alone


@pytest.mark.parametrize("version", [239, 247, 249, 252, 255, 257])
def test_each_release_gets_exactly_the_directives_it_has(version):
    unit = render_unit(PLAN.model_copy(update={"systemd_version": version}))
    present = directives(unit)
    for name, since in NEWER_THAN_239.items():
        key = name.split("=")[0]
        if name == "Type=exec":
            assert ("\nType=exec\n" in unit) == (version >= since), version
            assert ("\nType=simple\n" in unit) == (version < since), version
        else:
            assert (key in present) == (version >= since), (version, key)
    # What every supported release has stays in.
    for key in ("Restart", "RestartSec", "StartLimitBurst", "KillMode", "TimeoutStopSec", "ProtectSystem",
                "SystemCallFilter", "MemoryMax", "PrivateMounts"):
        assert key in present, (version, key)
    assert "\nRestart=always\n" in unit and "\nRestartSec=10\n" in unit


def test_dropped_directives_are_shown_as_comments_and_noted_in_the_plan():
    old = PLAN.model_copy(update={"systemd_version": 239})
    unit = render_unit(old)
    assert "\n# ProtectProc=invisible: dropped, needs systemd 247 (host: 239)\n" in unit
    notes = unit_notes(old)
    assert "systemd 239: Type=simple instead of Type=exec (needs 240): " \
           "a missing vLLM command fails only after the start instead of failing the start" in notes
    assert any(note.startswith("systemd 239: no RestartSteps (needs 254)") for note in notes)
    assert len(notes) == len(set(notes)) == 9
    assert unit_notes(PLAN.model_copy(update={"systemd_version": 257})) == []


def test_unknown_version_renders_for_the_newest():
    newest = render_unit(PLAN.model_copy(update={"systemd_version": None}))
    assert newest == render_unit(PLAN.model_copy(update={"systemd_version": 257})).replace(", systemd 257", "")
    assert fit_unit("RestartSteps=5\n", 0) == ("RestartSteps=5\n", [])


def test_strict_hardening_before_241_drops_only_the_allow_list():
    unit = render_unit(PLAN.model_copy(update={"systemd_version": 239, "hardening": "strict"}))
    assert "\n# SystemCallFilter=@system-service: dropped" in unit
    assert "\nSystemCallFilter=~@privileged\n" in unit


@pytest.mark.processes
@needs_systemd_analyze
def test_the_newest_unit_is_refused_by_an_older_systemd_and_the_fitted_one_is_not(tmp_path):
    """The reason for the table: systemd-analyze verify warns on directives it does not know,
    and the deploy refuses a unit with warnings."""
    local = local_systemd_version()
    if local is None or local >= 254:
        pytest.skip(f"needs a systemd before 254 here, this one is {local}")
    argv = ["/bin/true", *PLAN.argv[1:]]
    for version, refused in ((None, True), (local, False)):
        unit = tmp_path / "vllm.service"
        unit.write_text(render_unit(PLAN.model_copy(update={"argv": argv, "systemd_version": version})))
        result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        problems = ops.verify_problems(result.returncode == 0, (result.stdout + result.stderr).splitlines(), str(unit))
        assert bool(problems) == refused, (version, problems)
        if refused:
            assert any("RestartSteps" in line for line in problems)


def test_coloured_verify_output_is_still_read():
    """Measured in Debian 11's own root (systemd 247) with TERM=xterm: the warnings come coloured."""
    coloured = ["\x1b[0;1;38;5;185m/run/vllm-hostkit/verify/vllm.service:38: Unknown key name 'RestartSteps' "
                "in section 'Service', ignoring.\x1b[0m"]
    assert ops.verify_problems(True, coloured) == [
        "/run/vllm-hostkit/verify/vllm.service:38: Unknown key name 'RestartSteps' in section 'Service', ignoring."]
