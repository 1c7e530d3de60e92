"""The vLLM settings in effect, read back from a server command line.

The command line comes from the running process (or the unit's ExecStart when the server
is not running). Options are read with the installed release's own flag data
(hostkit.vllm.flags), so switches and valued options split correctly and an option that
release lacks is found: vLLM exits at once on one, and the unit crash-loops.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hostkit.vllm.flags import DOCUMENTED_REMOVALS, FlagError, FlagSet, flags_for
from hostkit.vllm.runtime import INSTALLED_ENTRY_POINT

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's own script, and the one hostkit's install puts in each release's venv (a lab host
# running real vLLM showed doctor reading nothing from `.../bin/hostkit-vllm serve ...`).
SERVE_SCRIPTS = ("vllm", INSTALLED_ENTRY_POINT)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_HUMAN_INT = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>[kKmMgGtT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class ServerArgs:
    """A vLLM server command line, split: the model and each option as given."""

    model: str | None
    options: dict[str, Any] = field(default_factory=dict)  # option string -> value (True/False for switches)
    order: tuple[str, ...] = ()  # option strings in command-line order


def _is_option(word: str) -> bool:
    return word.startswith("-") and not _NUMBER.match(word)


def server_words(argv: Iterable[str]) -> list[str] | None:
    """The words after `vllm serve` (either of SERVE_SCRIPTS, any path, any interpreter before
    it) or `-m vllm.entrypoints.openai.api_server`; None if the command line is neither."""
    words = list(argv)
    for index, word in enumerate(words):
        if word == API_SERVER_MODULE:
            return words[index + 1:]
        if word.rsplit("/", 1)[-1] in SERVE_SCRIPTS and index + 1 < len(words) and words[index + 1] == "serve":
            return words[index + 2:]
    return None


def parse_server_args(argv: tuple[str, ...] | list[str], flag_set: FlagSet | None) -> ServerArgs | None:
    words = server_words(argv)
    if words is None:
        return None
    model = None
    options: dict[str, Any] = {}
    order: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not _is_option(word):
            if model is None:
                model = word  # `vllm serve MODEL`
            continue
        option, has_inline, inline = word.partition("=")
        flag = flag_set.get(option) if flag_set else None
        if has_inline:
            value: Any = inline
        elif flag is not None and flag.is_switch:
            value = not flag.is_off_spelling(option)
        elif flag is not None and flag.is_store_boolean:
            nxt = words[index] if index < len(words) else ""
            if nxt.lower() in ("true", "false"):
                value, index = nxt.lower() == "true", index + 1
            else:
                value = True
        elif index < len(words) and not _is_option(words[index]):
            value, index = words[index], index + 1
        else:
            value = True  # an unknown option without a value, or a value-less one at the end
        if option == "--model" and isinstance(value, str):
            model = value
        options[option] = value
        order.append(option)
    return ServerArgs(model=model, options=options, order=tuple(order))


def human_int(text: Any) -> int | None:
    """vLLM's human-readable ints: 32768, "32k" (x1000), "32K" (x1024)."""
    if isinstance(text, bool):
        return None
    match = _HUMAN_INT.match(str(text).strip())
    if not match:
        return None
    unit = match["unit"]
    factor = _DECIMAL.get(unit) or _BINARY.get(unit) or 1
    return int(float(match["number"]) * factor)


def _float(text: Any) -> float | None:
    try:
        return None if isinstance(text, bool) else float(text)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class VllmSettings:
    """The settings in effect. `*_default` is True where the command line leaves vLLM's default."""

    version: str | None
    version_source: str | None  # "installed" (read from the host) | "inventory" (vllm_version) | None
    argv_source: str  # "process" | "unit" (the configured ExecStart; nothing is running)
    model: str | None
    options: dict[str, Any]
    unknown_options: tuple[str, ...]  # options `version` does not have
    gpu_memory_utilization: float | None
    gpu_memory_utilization_default: bool
    max_num_seqs: int | None  # None: vLLM picks (256, or 1024 on large GPUs in recent releases)
    max_model_len: int | None  # None: the model's own context length
    chunked_prefill: bool | None  # None: vLLM decides (on in the V1 engine, 0.8 and later)
    max_num_batched_tokens: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "version_source": self.version_source,
            "argv_source": self.argv_source,
            "model": self.model,
            "options": self.options,
            "unknown_options": list(self.unknown_options),
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "gpu_memory_utilization_default": self.gpu_memory_utilization_default,
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
            "chunked_prefill": self.chunked_prefill,
            "max_num_batched_tokens": self.max_num_batched_tokens,
        }


def removal_note(option: str) -> str:
    removed_in = DOCUMENTED_REMOVALS.get(option)
    return f" (removed in {removed_in})" if removed_in else ""


def _value(args: ServerArgs, flag_set: FlagSet | None, canonical: str) -> tuple[Any, bool]:
    """(value, given) of an option under any of its spellings in this release."""
    flag = flag_set.get(canonical) if flag_set else None
    spellings = flag.options if flag else (canonical,)
    for option in spellings:
        if option in args.options:
            return args.options[option], True
    if flag is not None:
        for option in args.options:
            if flag.is_off_spelling(option):
                return False, True
    if flag_set is None and canonical == "--enable-chunked-prefill":
        for off in ("--no-enable-chunked-prefill", "--disable-chunked-prefill"):
            if off in args.options:
                return False, True
    return (flag.default if flag else None), False


def effective_settings(
    argv: tuple[str, ...], argv_source: str, version: str | None, version_source: str | None
) -> VllmSettings | None:
    flag_set = None
    if version:
        try:
            flag_set = flags_for(version)
        except FlagError:
            flag_set = None
    args = parse_server_args(argv, flag_set)
    if args is None:
        return None
    unknown = tuple(option for option in args.order if flag_set is not None and not flag_set.has(option))

    utilization, given = _value(args, flag_set, "--gpu-memory-utilization")
    seqs, _ = _value(args, flag_set, "--max-num-seqs")
    model_len, _ = _value(args, flag_set, "--max-model-len")
    chunked, chunked_given = _value(args, flag_set, "--enable-chunked-prefill")
    batched, _ = _value(args, flag_set, "--max-num-batched-tokens")
    if isinstance(chunked, str):  # StoreBoolean-era `--enable-chunked-prefill=false`
        chunked = chunked.lower() == "true"
    return VllmSettings(
        version=version,
        version_source=version_source,
        argv_source=argv_source,
        model=args.model,
        options=args.options,
        unknown_options=unknown,
        gpu_memory_utilization=_float(utilization),
        gpu_memory_utilization_default=not given,
        max_num_seqs=human_int(seqs) if seqs is not None else None,
        max_model_len=human_int(model_len) if model_len not in (None, "auto") else None,
        chunked_prefill=chunked if chunked_given or isinstance(chunked, bool) else None,
        max_num_batched_tokens=human_int(batched) if batched is not None else None,
    )
