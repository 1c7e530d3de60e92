"""The vLLM systemd unit and its environment file, rendered from a VllmPlan. Pure: no host access.

The unit holds everything that is not secret (argv, environment, limits, sandboxing), so
`systemctl cat vllm` shows the whole service. The API key goes only to the environment
file, root-only, which systemd reads before dropping privileges; it never reaches argv,
so it stays out of `ps`.

vllm_instances: each instance gets a unit file of its own, /etc/systemd/system/vllm@NAME.service,
rendered from the same template, rather than one systemd template (vllm@.service with %i)
for all. Each instance has its own MemoryMax= and the rest of its limits, its own ExecStart=
flags and CUDA_VISIBLE_DEVICES: a template would need a drop-in per instance for each of
them, and two files per instance to compare. A concrete file under the instance's name is
what systemd loads for vllm@NAME.service, and restarting it restarts no sibling.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from hostkit import templates
from hostkit.facts.vllm_service import MANAGED_MARKER, ModeAndOwnership, VllmServiceState, env_file_of
from hostkit.paths import vllm_unit_of
from hostkit.plan.plans import VllmPlan
from hostkit.desired.directives import fit_unit

# Rendered units are checked here, under their real name, before they replace the installed one.
VERIFY_DIR = "/run/vllm-hostkit/verify"
# systemd creates /var/lib/<StateDirectory> for the service user: its home directory.
STATE_DIRECTORY = "vllm"
HOME_DIR = f"/var/lib/{STATE_DIRECTORY}"
# The environment file holds secrets: root's alone, in a directory of root's alone.
ENV_FILE_STAT = ModeAndOwnership("600", "root", "root")
ENV_DIR_STAT = ModeAndOwnership("700", "root", "root")

HARDENING_LEVELS = ("standard", "strict")

# Characters that need no quoting in a systemd unit value.
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
# Paths under these are hidden by ProtectHome=yes; a model or venv there needs read-only.
_HOME_PREFIXES = ("/home/", "/root/", "/run/user/")


class UnitError(ValueError):
    """The plan cannot be written as a unit (bad input, found while preparing)."""


def verify_path(instance: str | None = None) -> str:
    """Where the rendered unit of vllm.service (None) or an instance is checked."""
    return f"{VERIFY_DIR}/{vllm_unit_of(instance)}"


VERIFY_PATH = verify_path()


def _quoted(text: str) -> str:
    if "\0" in text:
        raise UnitError(f"NUL byte in unit value {text!r}")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def config_word(value: str) -> str:
    """One word of a unit setting (a path, an Environment= assignment): % specifiers escaped."""
    text = value.replace("%", "%%")
    return text if _PLAIN.fullmatch(value) else _quoted(text)


def exec_word(arg: str) -> str:
    """One argv word of ExecStart=: also escapes $, which systemd expands in command lines."""
    text = arg.replace("%", "%%").replace("$", "$$")
    return text if _PLAIN.fullmatch(arg) else _quoted(text)


def exec_line(argv: list[str]) -> str:
    if not argv or not argv[0].startswith("/"):
        raise UnitError(f"ExecStart needs an absolute command path first, got {argv[:1]!r}")
    return " ".join(exec_word(arg) for arg in argv)


def env_file_value(value: str) -> str:
    """A double-quoted EnvironmentFile value; systemd unescapes \\ \" $ ` inside double quotes."""
    if "\n" in value or "\0" in value:
        raise UnitError("environment file values cannot hold newlines or NUL bytes")
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


def service_environment(plan: VllmPlan) -> dict[str, str]:
    """Caches on plan.cache_dir (the NVMe mount when there is one); plan.env wins, but not
    over an instance's GPUs, which its plan is sized on."""
    cache_dir = plan.cache_dir.rstrip("/") or "/"
    environment = {
        "HF_HOME": f"{cache_dir}/huggingface",
        "VLLM_CACHE_ROOT": f"{cache_dir}/vllm",
        "XDG_CACHE_HOME": cache_dir,
    }
    environment.update(plan.env)
    if plan.gpu_indices:
        environment["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(plan)
    return dict(sorted(environment.items()))


def cuda_visible_devices(plan: VllmPlan) -> str:
    """An instance's GPUs by UUID, which survives renumbering; by index where the facts
    hold no UUID (unknown_uuids says so)."""
    return ",".join(uuid or str(index) for index, uuid in _gpus(plan))


def unknown_uuids(plan: VllmPlan) -> str | None:
    """Why an instance's CUDA_VISIBLE_DEVICES names a GPU by index, or None."""
    unnamed = [str(index) for index, uuid in _gpus(plan) if not uuid]
    if not unnamed:
        return None
    return (f"{vllm_unit_of(plan.instance)}: GPU {', '.join(unnamed)} has no UUID in the facts: CUDA_VISIBLE_DEVICES"
            " names it by index, which a renumbering of the GPUs (one lost or added) moves")


def _gpus(plan: VllmPlan) -> list[tuple[int, str]]:
    uuids = plan.gpu_uuids or [""] * len(plan.gpu_indices)
    return list(zip(plan.gpu_indices, uuids))


def memory_directives(plan: VllmPlan) -> list[tuple[str, int]]:
    """cgroup v2: MemoryMax/MemoryHigh/MemorySwapMax. v1 has no high or swap knob for systemd,
    and MemoryLimit= (memory.limit_in_bytes) is the directive that v1 systemd honours."""
    if plan.cgroup_version == 1:
        return [] if plan.memory_max_bytes is None else [("MemoryLimit", plan.memory_max_bytes)]
    directives = [
        ("MemoryMax", plan.memory_max_bytes),
        ("MemoryHigh", plan.memory_high_bytes),
        ("MemorySwapMax", plan.memory_swap_max_bytes),
    ]
    return [(name, value) for name, value in directives if value is not None]


def protect_home(plan: VllmPlan) -> str:
    """`read-only` when the command, a model path or a path in the environment lies under /home."""
    words = [*plan.argv, *plan.env.values(), plan.cache_dir]
    return "read-only" if any(word.startswith(_HOME_PREFIXES) for word in words) else "yes"


def render_unit(plan: VllmPlan) -> str:
    """The text of /etc/systemd/system/vllm.service, or of an instance's vllm@NAME.service,
    for `plan`. UnitError on bad input."""
    return fit_unit(_render_newest(plan), plan.systemd_version)[0]


def unit_notes(plan: VllmPlan) -> list[str]:
    """What the unit goes without on the plan's systemd, for the plan's notes."""
    if not plan.enabled:
        return []
    try:
        return fit_unit(_render_newest(plan), plan.systemd_version)[1]
    except UnitError:
        return []  # the vLLM operation reports it


def _render_newest(plan: VllmPlan) -> str:
    if plan.hardening not in HARDENING_LEVELS:
        raise UnitError(f"vllm_hardening must be one of {HARDENING_LEVELS}, not {plan.hardening!r}")
    if plan.user in ("", "root") or plan.user.isdigit():
        raise UnitError(f"vllm_user must name a non-root user, not {plan.user!r}")
    if not plan.cache_dir.startswith("/"):
        raise UnitError(f"the cache directory must be an absolute path, not {plan.cache_dir!r}")
    for what, secret in (("the API key", plan.api_key), ("the HF token", plan.hf_token)):
        if secret is not None and any(secret.get_secret_value() in arg for arg in plan.argv):
            raise UnitError(f"{what} appears in argv; it belongs in the environment file only")
    return templates().get_template("vllm.service.j2").render(
        plan=plan,
        exec_start=exec_line(plan.argv),
        environment=[config_word(f"{key}={value}") for key, value in service_environment(plan).items()],
        memory=memory_directives(plan),
        cache_dir=config_word(plan.cache_dir),
        protect_home=protect_home(plan),
        env_file=env_file_of(plan.instance),
        home_dir=HOME_DIR,
        state_directory=STATE_DIRECTORY,
    )


def render_env(plan: VllmPlan) -> str:
    """The text of the environment file: the API key and the HF token, when set. It holds secrets:
    never log it, compare it by hash."""
    secrets = {}
    if plan.api_key is not None:
        secrets["VLLM_API_KEY"] = env_file_value(plan.api_key.get_secret_value())
    if plan.hf_token is not None:
        secrets["HF_TOKEN"] = env_file_value(plan.hf_token.get_secret_value())
    return templates().get_template("vllm.env.j2").render(secrets=secrets, unit=vllm_unit_of(plan.instance))


def unplanned_units(planned: Collection[str] | None, current: VllmServiceState) -> list[str | None]:
    """hostkit's vLLM units on the host that the plan does not run, by instance name (None:
    vllm.service): `planned` the plan's instance names, None when vllm.service is the host's
    server; `current` the snapshot's vllm section, which looks at vllm.service.

    Instances leave the host with vllm.service (its port may be one of theirs), and vllm.service
    with every instance; an instance left out of vllm_instances leaves alone. A vllm.service
    not written by hostkit is left alone: the parse check and the gate report its clash.
    """
    on_host = sorted(set(current.instance_units) | set(current.instance_env_files))
    unplanned: list[str | None] = [name for name in on_host if planned is None or name not in planned]
    classic_ours = current.unit_text is None or current.unit_text.startswith(MANAGED_MARKER)
    if planned is not None and classic_ours and (current.unit_sha256 or current.env_sha256):
        unplanned.insert(0, None)
    return unplanned
