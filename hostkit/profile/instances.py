"""`vllm_instances`: several vLLM servers on one host, each a name and its overrides.

An instance's profile is the host's raw data with the instance's overrides laid over it,
validated as a whole HostProfile, so each default is still declared once (on HostProfile)
and a per-instance `vllm_version` derives its own `vllm_command`. Only `vllm_*` keys may be
overridden, and `gpus` (the instance's `vllm_gpus`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

INSTANCES_KEY = "vllm_instances"
# The instance's own word for vllm_gpus, the one key an instance writes differently.
GPUS_KEY = "gpus"
# A systemd template instance (vllm@NAME.service) and a file name, as written.
INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
NAME_ALLOWED = "instance names of 1-32 lower-case letters, digits, '_' or '-', starting with a letter or digit"
# vllm_* keys an instance may not set, and why.
HOST_ONLY = {
    INSTANCES_KEY: "an instance has no instances of its own",
    "vllm_gpus": f"an instance writes it as {GPUS_KEY}",
    "vllm_enabled": f"an instance in {INSTANCES_KEY} runs; leave it out of {INSTANCES_KEY} to run it no more",
}
KEYS_ALLOWED = f"{GPUS_KEY} or vllm_* keys other than {', '.join(HOST_ONLY)}"


def key_path(instance: str, field: str = "") -> str:
    """How an issue names a profile field of an instance: vllm_instances['NAME'].gpus."""
    return raw_key_path(instance, instance_key(field) if field else None)


def instance_key(field: str) -> str:
    """The key an instance writes for a profile field: `gpus` for vllm_gpus."""
    return GPUS_KEY if field == "vllm_gpus" else field


def profile_field(key: str) -> str:
    """The profile field an instance's key sets."""
    return "vllm_gpus" if key == GPUS_KEY else key


def key_refusal(key: Any, fields: Mapping[str, Any]) -> str | None:
    """Why an instance may not set `key` (`fields`: HostProfile's), or None."""
    if key == GPUS_KEY:
        return None
    if key in HOST_ONLY:
        return HOST_ONLY[key]
    if not (isinstance(key, str) and key.startswith("vllm_")):
        return "an instance overrides only vLLM's keys; the host's other keys are the host's"
    return None if key in fields else "not a hostkit key"


def data_problems(instances: Any, fields: Mapping[str, Any]) -> list[tuple[str, Any, Any, str, str]]:
    """(name, key, value, allowed, reason) for each bad instance name (key None) or key in the
    raw `vllm_instances`; the type check reports a value that is not a mapping."""
    if not isinstance(instances, Mapping):
        return []
    problems = []
    for name, overrides in instances.items():
        if not isinstance(name, str) or not INSTANCE_NAME.fullmatch(name):
            problems.append((name, None, name, NAME_ALLOWED,
                             "the name becomes a systemd unit instance (vllm@NAME.service) and a file name"))
        elif isinstance(overrides, Mapping):
            problems.extend((name, key, value, KEYS_ALLOWED, refusal) for key, value in overrides.items()
                            if (refusal := key_refusal(key, fields)))
    return problems


def raw_key_path(instance: Any, key: Any = None) -> str:
    """An instance's key as its overrides write it: vllm_instances['NAME'].swap_size."""
    return f"{INSTANCES_KEY}[{instance!r}]" + ("" if key is None else f".{key}")


def merged(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The host's raw data with each instance's overrides laid over the host's own keys (the
    instance's profile data), `gpus` as vllm_gpus. A name or key the instance may not have
    is left for data_problems to report (validation removes them before this runs)."""
    instances = data.get(INSTANCES_KEY)
    if not isinstance(instances, Mapping) or not instances:
        return data
    host = {key: value for key, value in data.items() if key != INSTANCES_KEY}
    laid = {
        name: {**host, **{profile_field(key): value for key, value in overrides.items()}}
        if isinstance(overrides, Mapping) else overrides
        for name, overrides in instances.items()
    }
    return {**data, INSTANCES_KEY: laid}

