"""The main job (`make demo`): start a lab host, provision it, prove the result.

1. `python -m hostkit_lab up` (unless a lab host is already up): a Debian VM with a blank NVMe disk.
2. Install the lab stand-in for `vllm` (lab hosts have no GPU and no internet; see hostkit_lab/standin).
3. `pyinfra inventories/lab.py deploys/vllm_host.py`: GPU check, NVMe + swap, sysctl, THP,
   the vLLM unit and its readiness gate.
4. The same deploy again: it must report no changes.
5. `hostkit verify inventories/lab.py`: the post-provision checks.

`--real` (`make demo-real`): the same on a container host named realvllm1 (systemd-nspawn,
native speed; swap, sysctls and THP are its controller's) that gets real vLLM's CPU build
instead of the stand-in, installed by the deploy itself (vllm_install) from a wheelhouse the
lab builds once (hostkit_lab/real_vllm/lab_disk.py), and ends with a real completion.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hostkit_lab import Lab, real_vllm  # noqa: E402
from hostkit.fleet.pyinfra_runner import run_pyinfra  # noqa: E402
from hostkit_lab.standin.install import install_standin  # noqa: E402

# The real deploy installs vLLM (about 15 min in a lab host) and starts it (about 10).
REAL_DEPLOY_TIMEOUT_S = 3600
COMPLETION_SH = REPO / "scripts" / "lab_completion.sh"

INVENTORY = REPO / "inventories" / "lab.py"
DEPLOY = REPO / "deploys" / "vllm_host.py"


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def main() -> int:
    real = "--real" in sys.argv[1:]
    summary: list[tuple[str, str]] = []
    lab = Lab()
    running = [h for h in lab.hosts() if h.pid is not None and h.reachable()]
    hosts = [h for h in running if real_vllm.serves_real_vllm(h.name) == real]
    if not hosts:
        started = time.monotonic()
        if real:
            from hostkit_lab.real_vllm.lab_disk import lab_tree

            step("Building the real-vLLM wheelhouse (cached: the wheels, their lock, a tiny model)")
            tree = lab_tree()
            step(f"Starting a real-vLLM container host (the wheelhouse read-only at {real_vllm.DISK_MOUNT})")
            hosts = lab.up(1, prefix=real_vllm.NAME_PREFIX, kind="container",
                           binds=(f"{tree}:{real_vllm.DISK_MOUNT}",))
        else:
            step("Starting a lab host (first run builds the base image: about two minutes)")
            hosts = lab.up(1)
        summary.append(("lab host up", f"{time.monotonic() - started:.0f} s"))
    names = ", ".join(h.name for h in hosts)
    limit = [arg for h in hosts for arg in ("--limit", h.name)]

    if real:
        step(f"Provisioning {names}: the deploy installs real vLLM 0.32 (CPU build) from the lab disk, "
             "with no index; then it starts (about 25 min in all)")
    else:
        step(f"Installing the vLLM stand-in on {names} (lab only: real hosts run real vLLM)")
        for lab_host in hosts:
            install_standin(lab_host)
        step(f"Provisioning {names}: pyinfra {INVENTORY.relative_to(REPO)} {DEPLOY.relative_to(REPO)}")
    timeout = REAL_DEPLOY_TIMEOUT_S if real else 1800
    first = run_pyinfra(INVENTORY, DEPLOY, *limit, cwd=REPO, timeout=timeout)
    print_run(first)
    if not first.ok:
        print(first.stderr[-4000:], file=sys.stderr)
        return 1
    summary.append(("first run", f"{first.seconds:.1f} s, {len(first.changed)} operations changed"))

    step("Running the same deploy again: it must change nothing")
    second = run_pyinfra(INVENTORY, DEPLOY, *limit, cwd=REPO, timeout=timeout)
    print_run(second)
    summary.append(("rerun", f"{second.seconds:.1f} s, {len(second.changed)} operations changed"))

    step(f"Verifying: hostkit verify {INVENTORY.relative_to(REPO)}")
    verify = subprocess.run(["hostkit", "verify", str(INVENTORY), *limit], cwd=REPO)
    summary.append(("verify", "all checks passed" if verify.returncode == 0 else f"FAILED (exit {verify.returncode})"))
    completed = True
    if real:
        step("A real completion from real vLLM (the key from the host's root-only env file, never in argv)")
        for lab_host in hosts:
            served = real_vllm.DATA["vllm_served_model_name"]
            answer = subprocess.run(lab_host.ssh_argv(f"sh -s -- {served}"), input=COMPLETION_SH.read_text(),
                                    text=True, capture_output=True, timeout=300)
            print(answer.stdout.strip() or answer.stderr.strip())
            completed = completed and answer.returncode == 0
        summary.append(("completion", "200 from real vLLM" if completed else "FAILED"))

    step("Summary")
    for label, value in summary:
        print(f"  {label:<14} {value}")
    for lab_host in hosts:
        print(f"  {lab_host.name:<14} ssh: python -m hostkit_lab ssh {lab_host.name}; "
              f"API: ssh -L 8000:127.0.0.1:8000 -p {lab_host.port} root@127.0.0.1")
    ok = first.ok and second.ok and not second.changed and verify.returncode == 0 and completed
    print("\nOK: the lab host is provisioned and verified." if ok else "\nFAILED: see above.")
    return 0 if ok else 1


def print_run(run) -> None:
    for op in run.operations:
        state = "error" if op.error else ("changed" if op.changed else "no change")
        print(f"  {op.name:<45} {state}")
    print(f"  ({run.seconds:.1f} s, exit {run.returncode})")


if __name__ == "__main__":
    sys.exit(main())
