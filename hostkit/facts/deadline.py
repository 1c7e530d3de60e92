"""Deadlines for the remote commands inside the snapshot's facts.

A wedged GPU can hang `nvidia-smi`, a stuck systemd can hang `systemctl`. Each such call
runs through the shell function `hk_deadline SECONDS WHAT COMMAND...`, which kills the
command at its deadline and prints `TIMED_OUT WHAT timed out after SECONDS s` into the
output, where the fact's parser finds it. The deploy then fails that host alone, before
anything changes, with that line (hostkit.operations.gpu.snapshot_finished).
"""

from __future__ import annotations

import os

TIMED_OUT = "@@hostkit-timeout@@"
# The controller's environment may change it for every command hostkit composes: shorter to
# test a wedged nvidia-smi quickly, longer for a driver that is slow to answer.
NVIDIA_SMI_ENV = "HOSTKIT_NVIDIA_SMI_TIMEOUT"
NVIDIA_SMI_S = int(os.environ.get(NVIDIA_SMI_ENV, "30"))
KERNEL_LOG_S = 30
SYSTEMCTL_S = 20
# A model directory may be on a network filesystem that hangs.
MODEL_CONFIG_S = 10
# After the deadline's TERM, how long until KILL: a process in D state ignores TERM.
KILL_AFTER_S = 5

DEADLINE_FUNCTION = (
    "hk_deadline() { hk_s=$1 hk_what=$2; shift 2;"
    f" timeout -k {KILL_AFTER_S} \"$hk_s\" \"$@\"; hk_rc=$?;"
    f" case $hk_rc in 124|137) echo \"{TIMED_OUT} $hk_what timed out after $hk_s s\" ;; esac;"
    " return $hk_rc; }"
)


def timed_out_lines(lines: list[str]) -> tuple[str, ...]:
    """What timed out, one message a command, from a fact's output lines."""
    return tuple(line[len(TIMED_OUT):].strip() for line in lines if line.startswith(TIMED_OUT))
