"""A rollout's unit of availability: one served vLLM endpoint, vllm.service or one of
vllm_instances (vllm@NAME.service), keyed by its host and instance.

`--max-unavailable` counts the endpoints of one served model that are out of service at once,
fleet-wide. What a host's deploy takes out of service at once:
- a host that runs vllm.service: its one endpoint, as before instances (whether or not it changes);
- a host with vllm_instances: only the instances whose unit would change (a `pyinfra --dry` of the
  deploy names the unit in the operation that would change it, as hostkit's deploy does:
  `vLLM unit vllm@NAME.service`); hostkit's deploy restarts them one after the other, each
  behind its readiness gate, so one endpoint of each of their models at most; drained first
  (rollout_drain_command), all of them stay out of service from the drain to the undrain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hostkit.paths import vllm_instance_unit, vllm_unit_of
from hostkit.profile.host_profile import HostProfile


@dataclass(frozen=True)
class Endpoint:
    host: str
    instance: str | None  # one of vllm_instances; None: vllm.service
    model: str  # the served model name

    @property
    def unit(self) -> str:
        return vllm_unit_of(self.instance)

    def __str__(self) -> str:
        return f"{self.host}/{self.unit}"


def instance_models(profile: HostProfile) -> dict[str, str]:
    """The served model of each instance the host runs, by instance name; empty without vllm_instances."""
    return {name: instance.served_model_name for name, instance in profile.vllm_instances.items()
            if instance.vllm_enabled}


def restarting(would_change: Sequence[str], instances: Iterable[str]) -> list[str]:
    """The instances whose unit a `pyinfra --dry` plan's changing operations name."""
    words = {word for operation in would_change for word in operation.split()}
    return [name for name in instances if vllm_instance_unit(name) in words]


def down_at_once(endpoints: Sequence[Endpoint], drained: bool) -> dict[str, int]:
    """Per served model, how many of a host's going-down `endpoints` are out of service at once
    (see the module docstring)."""
    counts = Counter(endpoint.model for endpoint in endpoints)
    if drained:
        return dict(counts)
    return {model: 1 for model in counts}


def over_budget(going_down: Mapping[str, Sequence[Endpoint]], drained: Mapping[str, bool],
                limits: Mapping[str, int], max_unavailable: str) -> str | None:
    """Why no batch can take a host (its drained endpoints of one model exceed the model's
    limit), naming the endpoints and the model; None when every host fits."""
    for host, endpoints in going_down.items():
        for model, count in down_at_once(endpoints, drained[host]).items():
            if count > limits[model]:
                named = ", ".join(str(endpoint) for endpoint in endpoints if endpoint.model == model)
                return (f"{named} serve {model} and are drained together (rollout_drain_command) before "
                        f"{host}'s deploy: {count} of {model}'s endpoints out of service at once, over "
                        f"--max-unavailable {max_unavailable} ({limits[model]} of {model}'s endpoints). "
                        f"Raise --max-unavailable, or roll {host} without a drain command: the deploy "
                        f"restarts a host's instances one after the other")
    return None
