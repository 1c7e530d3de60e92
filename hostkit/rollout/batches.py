"""Which hosts go in which batch, and how many failed hosts a rollout tolerates.

`--batches 1,25%,100%` lists cumulative stages: after the first batch 1 host is done,
after the second 25% of the hosts, after the third all of them. A count is a number
of hosts, a percentage is of all the hosts in the rollout, rounded up so a stage never
rounds to nothing. When the last stage falls short of every host, its step repeats:
`1,10%` rolls 1 host, then 10%, 20%, ... of them. Stages that add no host are dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_STAGE = re.compile(r"^(?P<number>\d+(\.\d+)?)(?P<percent>%?)$")


class BatchSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Stage:
    """A cumulative stage: a number of hosts, or a fraction of all hosts."""

    count: int | None = None
    fraction: Fraction | None = None

    def hosts(self, total: int) -> int:
        if self.count is not None:
            return min(self.count, total)
        return min(math.ceil(self.fraction * total), total)

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        percent = self.fraction * 100
        return f"{percent.numerator if percent.denominator == 1 else float(percent)}%"


def _stage(text: str) -> Stage:
    match = _STAGE.match(text.strip())
    if not match:
        raise BatchSpecError(f"batch stage {text!r}: expected a host count such as 1 or a percentage such as 25%")
    if match["percent"]:
        fraction = Fraction(match["number"]) / 100
        if not 0 < fraction <= 1:
            raise BatchSpecError(f"batch stage {text!r}: a percentage must be above 0% and at most 100%")
        return Stage(fraction=fraction)
    if "." in match["number"] or int(match["number"]) < 1:
        raise BatchSpecError(f"batch stage {text!r}: a host count must be a whole number >= 1")
    return Stage(count=int(match["number"]))


def parse_batches(spec: str) -> list[Stage]:
    """`1,25%,100%` as stages; BatchSpecError on anything else."""
    parts = [part for part in spec.split(",")]
    if not spec.strip() or any(not part.strip() for part in parts):
        raise BatchSpecError(f"--batches {spec!r}: expected comma-separated stages such as 1,25%,100%")
    try:
        return [_stage(part) for part in parts]
    except BatchSpecError as error:
        raise BatchSpecError(f"--batches {spec!r}: {error}") from None


def split_batches(hosts: Sequence[str], stages: Sequence[Stage]) -> list[list[str]]:
    """`hosts`, in order, cut into batches at the stages' cumulative sizes."""
    total = len(hosts)
    if total == 0:
        return []
    ends: list[int] = []
    for stage in stages:
        end = stage.hosts(total)
        if end > (ends[-1] if ends else 0):
            ends.append(end)
    step = stages[-1].hosts(total)
    while not ends or ends[-1] < total:
        ends.append(min((ends[-1] if ends else 0) + step, total))
    starts = [0, *ends[:-1]]
    return [list(hosts[start:end]) for start, end in zip(starts, ends)]


def order_hosts(hosts: Sequence[tuple[str, Mapping[str, Any]]], order_key: str | None = None) -> list[str]:
    """Host names in rollout order: inventory order, or ascending `data[order_key]`
    (hosts without the key keep inventory order after the others)."""
    if order_key is None:
        return [name for name, _ in hosts]
    keyed, unkeyed = [], []
    for position, (name, data) in enumerate(hosts):
        value = data.get(order_key)
        if value is None:
            unkeyed.append(name)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise BatchSpecError(f"host {name}: {order_key} = {value!r} must be a number or a string")
        keyed.append((value, position, name))
    kinds = {isinstance(value, str) for value, _, _ in keyed}
    if len(kinds) > 1:
        raise BatchSpecError(f"{order_key}: mixes numbers and strings across hosts; use one kind")
    return [name for _, _, name in sorted(keyed)] + unkeyed


@dataclass(frozen=True)
class MaxFailed:
    """How many hosts may fail, over the whole rollout, before it stops.

    A percentage is of the hosts in the rollout, rounded down: `10%` of 5 hosts is 0.
    """

    count: int | None = None
    fraction: Fraction | None = None

    def limit(self, total: int) -> int:
        if self.count is not None:
            return self.count
        return math.floor(self.fraction * total)

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        percent = self.fraction * 100
        return f"{percent.numerator if percent.denominator == 1 else float(percent)}%"


def parse_max_failed(spec: str) -> MaxFailed:
    match = _STAGE.match(spec.strip())
    if not match:
        raise BatchSpecError(f"--max-failed {spec!r}: expected a host count such as 0 or 2, or a percentage such as 10%")
    if match["percent"]:
        fraction = Fraction(match["number"]) / 100
        if fraction > 1:
            raise BatchSpecError(f"--max-failed {spec!r}: a percentage must be at most 100%")
        return MaxFailed(fraction=fraction)
    if "." in match["number"]:
        raise BatchSpecError(f"--max-failed {spec!r}: a host count must be a whole number")
    return MaxFailed(count=int(match["number"]))


DEFAULT_MAX_UNAVAILABLE = "25%"


@dataclass(frozen=True)
class MaxUnavailable:
    """How many endpoints of one served model (hosts, or instances: hostkit.rollout.endpoints)
    a batch may take out of service at once.

    A percentage is of that model's endpoints in the rollout, rounded down but at least 1:
    `25%` of 3 hosts is 1, of 8 hosts 2.
    """

    count: int | None = None
    fraction: Fraction | None = None

    def limit(self, total: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.floor(self.fraction * total))

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        percent = self.fraction * 100
        return f"{percent.numerator if percent.denominator == 1 else float(percent)}%"


def parse_max_unavailable(spec: str) -> MaxUnavailable:
    match = _STAGE.match(spec.strip())
    if not match:
        raise BatchSpecError(f"--max-unavailable {spec!r}: expected a host count such as 1 or a percentage such as 25%")
    if match["percent"]:
        fraction = Fraction(match["number"]) / 100
        if not 0 < fraction <= 1:
            raise BatchSpecError(f"--max-unavailable {spec!r}: a percentage must be above 0% and at most 100%")
        return MaxUnavailable(fraction=fraction)
    if "." in match["number"] or int(match["number"]) < 1:
        raise BatchSpecError(f"--max-unavailable {spec!r}: a host count must be a whole number >= 1")
    return MaxUnavailable(count=int(match["number"]))


def model_limits(served: Iterable[Mapping[str, int]], max_unavailable: MaxUnavailable) -> dict[str, int]:
    """Per model, how many of its endpoints may be out of service at once: `max_unavailable` of
    all of them (`served`: per host, model -> how many endpoints of it the host serves)."""
    totals: dict[str, int] = {}
    for counts in served:
        for model, count in counts.items():
            totals[model] = totals.get(model, 0) + count
    return {model: max_unavailable.limit(total) for model, total in totals.items()}


def limit_down(batches: Sequence[Sequence[str]], down: Mapping[str, Mapping[str, int]],
               limits: Mapping[str, int]) -> list[list[str]]:
    """`batches` split further, in order, so that no batch takes more than `limits[model]` of
    a model's endpoints out of service at once (`down`: host -> model -> how many endpoints of
    it the host's deploy takes down at once). Each host goes into the first part of its batch
    with room for its own, else into a new part at the end."""
    split: list[list[str]] = []
    for batch in batches:
        parts: list[tuple[list[str], dict[str, int]]] = []
        for name in batch:
            wanted = down.get(name, {})
            part = next((part for part in parts
                         if all(part[1].get(model, 0) + count <= limits[model] for model, count in wanted.items())), None)
            if part is None:
                part = ([], {})
                parts.append(part)
            part[0].append(name)
            for model, count in wanted.items():
                part[1][model] = part[1].get(model, 0) + count
        split.extend(names for names, _ in parts)
    return split
