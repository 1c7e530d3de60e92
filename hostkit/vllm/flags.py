"""Which `vllm serve` options each vLLM release accepts, and how to spell them.

The data (vllm/flags.json) was read from the argparse parsers of eight real
releases; 0.4.3 has no `vllm serve`, its parser is the one behind
`python -m vllm.entrypoints.openai.api_server`. vLLM exits at once on an option it does
not know, so a systemd unit with one crash-loops: hostkit renders only options that the
target release has.

Releases between the recorded ones use the flag set of the nearest recorded release at
or below them (comparing major.minor.micro, so 0.8.5 uses 0.8.5.post1), minus options
whose removal is documented in between (`--swap-space`, gone from 0.18.0). Releases newer
than the newest recorded one use its flag set.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

OLDEST_SUPPORTED = "0.4.3"

# The V1 engine is the default from this release on: it prefills in chunks unless told not
# to, ignores --swap-space, and sizes its batches by its own rules.
V1_DEFAULT_FROM = (0, 8, 0)

# Removals that happened between recorded releases: option -> first release without it.
DOCUMENTED_REMOVALS = {"--swap-space": "0.18.0"}

# The inventory keys that map to one engine option each (hostkit renders these itself), in
# the order of the unit's ExecStart: a new order would restart every host's vLLM.
ENGINE_OPTIONS: dict[str, str] = {
    "vllm_tensor_parallel_size": "--tensor-parallel-size",
    "vllm_gpu_memory_utilization": "--gpu-memory-utilization",
    "vllm_max_model_len": "--max-model-len",
    "vllm_max_num_seqs": "--max-num-seqs",
    "vllm_enable_chunked_prefill": "--enable-chunked-prefill",
    "vllm_max_num_batched_tokens": "--max-num-batched-tokens",
    "vllm_dtype": "--dtype",
    "vllm_quantization": "--quantization",
    "vllm_kv_cache_dtype": "--kv-cache-dtype",
    "vllm_cpu_offload_gb": "--cpu-offload-gb",
    "vllm_swap_space": "--swap-space",
}

# Options hostkit sets from other inventory keys, or that would put a secret into argv.
RESERVED_OPTIONS: dict[str, str] = {
    "--host": "vllm_host",
    "--port": "vllm_port",
    "--served-model-name": "vllm_served_model_name",
    "--model": "vllm_model",
    "--api-key": "vllm_api_key (it goes to the env file, never to argv)",
    "--hf-token": "vllm_hf_token (it goes to the env file as HF_TOKEN, never to argv or the unit)",
}

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")
_INT_TYPES = {"int"}
_HUMAN_INT_TYPES = {"human_readable_int", "human_readable_int_or_auto"}
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")


class FlagError(ValueError):
    pass


def parse_version(text: str) -> tuple[int, int, int, int]:
    """(major, minor, micro, post) of a release such as "0.8.5.post1"; FlagError if not one."""
    match = _VERSION.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise FlagError(f"{text!r} is not a vLLM release number such as 0.33.0 or 0.8.5.post1")
    major, minor, micro, post = match.groups()
    return int(major), int(minor), int(micro), int(post or 0)


def _release(text: str) -> tuple[int, int, int]:
    return parse_version(text)[:3]


def runs_v1_by_default(version: str) -> bool:
    """True when `version` starts the V1 engine unless told otherwise."""
    return _release(version) >= V1_DEFAULT_FROM


@dataclass(frozen=True)
class Flag:
    options: tuple[str, ...]
    dest: str
    default: Any
    choices: tuple[Any, ...] | None
    nargs: int | str | None
    type: str | None

    @property
    def is_switch(self) -> bool:
        """Takes no value: `--enable-x` / `--no-enable-x` style."""
        return self.nargs == 0

    @property
    def is_store_boolean(self) -> bool:
        """vLLM's StoreBoolean (0.5-0.6): `--enable-x` alone, or `--enable-x=false`."""
        return self.nargs == "?" and self.type is None

    @property
    def name(self) -> str:
        return self.options[0]

    def is_off_spelling(self, option: str) -> bool:
        """True for the option string that stores False into this switch's dest."""
        dashed = self.dest.replace("_", "-")
        if option == f"--no-{dashed}":
            return True
        for on, off in (("enable-", "disable-"), ("disable-", "enable-")):
            if dashed.startswith(on) and option == f"--{off}{dashed[len(on):]}":
                return True
        return False

    def switch_option(self, value: bool) -> str | None:
        """The option string that sets this switch to `value`; None if the release has none."""
        for option in self.options:
            if option.startswith("--") and self.is_off_spelling(option) == (not value):
                return option
        return None

    def value_problem(self, value: Any) -> str | None:
        """Why this release's parser would refuse `value`, or None. Ranges are not argparse's job."""
        text = str(value)
        if self.choices is not None and text not in {str(c) for c in self.choices if c is not None}:
            allowed = ", ".join(str(c) for c in self.choices if c is not None)
            return f"{self.name} accepts {allowed}"
        if self.type in _INT_TYPES and not re.fullmatch(r"-?\d+", text):
            return f"{self.name} takes a whole number"
        if self.type in _HUMAN_INT_TYPES and not _HUMAN_INT.match(text):
            if not (self.type == "human_readable_int_or_auto" and text == "auto"):
                return f"{self.name} takes a whole number (or 32k-style in this release)"
        if self.type == "float":
            try:
                float(text)
            except ValueError:
                return f"{self.name} takes a number"
        return None


@dataclass(frozen=True)
class FlagSet:
    requested: str  # the release asked for
    recorded: str  # the recorded release whose parser data is used
    entry_point: str  # "serve" (vllm serve MODEL) or "api_server" (python -m ... --model MODEL)
    flags: tuple[Flag, ...]
    _by_option: dict[str, Flag] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_option = {option: flag for flag in self.flags for option in flag.options}
        object.__setattr__(self, "_by_option", by_option)

    @property
    def option_strings(self) -> frozenset[str]:
        return frozenset(self._by_option)

    def get(self, option: str) -> Flag | None:
        return self._by_option.get(option)

    def has(self, option: str) -> bool:
        return option in self._by_option

    def default(self, option: str) -> Any:
        flag = self._by_option.get(option)
        return None if flag is None else flag.default

    def choices(self, option: str) -> tuple[Any, ...] | None:
        flag = self._by_option.get(option)
        return None if flag is None else flag.choices

    @property
    def runs_v1_by_default(self) -> bool:
        return runs_v1_by_default(self.requested)

    def render(self, options: dict[str, Any]) -> list[str]:
        """argv words for `options` ({option string: value}) in this release's spelling.

        None skips an option. A switch takes True or False and is written in the release's
        on/off spelling (omitted when off is its default and it has no off spelling). A
        list repeats values after one option (nargs "+"). FlagError for anything the release
        would refuse.
        """
        argv: list[str] = []
        for option, value in options.items():
            if value is None:
                continue
            flag = self.get(option)
            if flag is None:
                raise FlagError(f"vLLM {self.requested} has no {option}")
            argv.extend(_render_one(self.requested, option, flag, value))
        return argv


@cache
def _data() -> dict[str, Any]:
    text = resources.files("hostkit").joinpath("vllm/flags.json").read_text()
    return json.loads(text)


def known_versions() -> list[str]:
    """Recorded releases, oldest first."""
    return sorted(_data()["releases"], key=parse_version)


def recorded_version_for(version: str) -> str:
    """The recorded release whose flags `version` is taken to have; FlagError below 0.4.3."""
    wanted = _release(version)
    if wanted < _release(OLDEST_SUPPORTED):
        raise FlagError(f"vLLM {version} is older than {OLDEST_SUPPORTED}, the oldest release hostkit supports")
    candidates = [known for known in known_versions() if _release(known) <= wanted]
    return candidates[-1]


@cache
def flags_for(version: str) -> FlagSet:
    data = _data()
    recorded = recorded_version_for(version)
    release = data["releases"][recorded]
    flags = []
    for index in release["flags"]:
        options, dest, default, choices, nargs, type_ = data["flags"][index]
        removed_in = DOCUMENTED_REMOVALS.get(options[0])
        if removed_in and _release(version) >= _release(removed_in):
            continue
        flags.append(Flag(tuple(options), dest, default, None if choices is None else tuple(choices), nargs, type_))
    return FlagSet(version, recorded, release["entry_point"], tuple(flags))


def _render_one(version: str, option: str, flag: Flag, value: Any) -> list[str]:
    if flag.is_switch:
        if not isinstance(value, bool):
            raise FlagError(f"{option} is a switch in vLLM {version}: give true or false, not {value!r}")
        if flag.is_off_spelling(option):
            # "--no-enable-prefix-caching": true is written as given; false would be a double negative.
            if value:
                return [option]
            raise FlagError(f"{option}: false is a double negative, write {flag.switch_option(True) or flag.name}")
        if value:
            return [option]
        spelled = flag.switch_option(False)
        if spelled is not None:
            return [spelled]
        if not flag.default:
            return []
        raise FlagError(f"vLLM {version} has no way to turn {flag.name} off")
    if flag.is_store_boolean:
        if not isinstance(value, bool):
            raise FlagError(f"{option} takes true or false in vLLM {version}, not {value!r}")
        return [f"{option}={'true' if value else 'false'}"]
    if isinstance(value, bool):
        raise FlagError(f"{option} takes a value in vLLM {version}, not {value}")
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) > 1 and flag.nargs not in ("+", "*"):
        raise FlagError(f"{option} takes one value in vLLM {version}")
    if not values:
        raise FlagError(f"{option} needs a value")
    for item in values:
        problem = flag.value_problem(item)
        if problem:
            raise FlagError(f"vLLM {version}: {problem}, not {item!r}")
    return [option, *(_format_value(item) for item in values)]


def _format_value(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 else repr(value)
    return str(value)
