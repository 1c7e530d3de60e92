"""The main job (`make demo`): start a lab host, provision it, prove the result.

1. `hostkit lab up` (unless a lab host is already up): a Debian VM with a blank NVMe disk.
2. Install the lab stand-in for `vllm` (lab hosts have no GPU and no internet; see tests/standin).
3. `pyinfra inventories/lab.py deploys/vllm_host.py`: GPU check, NVMe + swap, sysctl, THP,
   the vLLM unit and its readiness gate.
4. The same deploy again: it must report no changes.
5. `hostkit verify inventories/lab.py`: the post-provision checks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hostkit.lab import Lab  # noqa: E402
from hostkit.pyinfra_runner import run_pyinfra  # noqa: E402
from tests.standin.install import install_standin  # noqa: E402

INVENTORY = REPO / "inventories" / "lab.py"
DEPLOY = REPO / "deploys" / "vllm_host.py"


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def main() -> int:
    summary: list[tuple[str, str]] = []
    lab = Lab()
    hosts = [h for h in lab.hosts() if h.pid is not None and h.reachable()]
    if not hosts:
        step("Starting a lab host (first run builds the base image: about two minutes)")
        started = time.monotonic()
        hosts = lab.up(1)
        summary.append(("lab host up", f"{time.monotonic() - started:.0f} s"))
    names = ", ".join(h.name for h in hosts)

    step(f"Installing the vLLM stand-in on {names} (lab only: real hosts run real vLLM)")
    for lab_host in hosts:
        install_standin(lab_host)

    step(f"Provisioning {names}: pyinfra {INVENTORY.relative_to(REPO)} {DEPLOY.relative_to(REPO)}")
    first = run_pyinfra(INVENTORY, DEPLOY, cwd=REPO)
    print_run(first)
    if not first.ok:
        print(first.stderr[-4000:], file=sys.stderr)
        return 1
    summary.append(("first run", f"{first.seconds:.1f} s, {len(first.changed)} operations changed"))

    step("Running the same deploy again: it must change nothing")
    second = run_pyinfra(INVENTORY, DEPLOY, cwd=REPO)
    print_run(second)
    summary.append(("rerun", f"{second.seconds:.1f} s, {len(second.changed)} operations changed"))

    step(f"Verifying: hostkit verify {INVENTORY.relative_to(REPO)}")
    verify = subprocess.run(["hostkit", "verify", str(INVENTORY)], cwd=REPO)
    summary.append(("verify", "all checks passed" if verify.returncode == 0 else f"FAILED (exit {verify.returncode})"))

    step("Summary")
    for label, value in summary:
        print(f"  {label:<14} {value}")
    for lab_host in hosts:
        print(f"  {lab_host.name:<14} ssh: hostkit lab ssh {lab_host.name}; "
              f"API: ssh -L 8000:127.0.0.1:8000 -p {lab_host.port} root@127.0.0.1")
    ok = first.ok and second.ok and not second.changed and verify.returncode == 0
    print("\nOK: the lab host is provisioned and verified." if ok else "\nFAILED: see above.")
    return 0 if ok else 1


def print_run(run) -> None:
    for op in run.operations:
        state = "error" if op.error else ("changed" if op.changed else "no change")
        print(f"  {op.name:<45} {state}")
    print(f"  ({run.seconds:.1f} s, exit {run.returncode})")


if __name__ == "__main__":
    sys.exit(main())
