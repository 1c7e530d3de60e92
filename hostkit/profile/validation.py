"""An inventory's data checked against hostkit's keys: every issue of every host, named by
host, key, value and what is allowed, before any host is touched."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hostkit.profile.host_profile import ALLOWED, HOSTKIT_PREFIXES, SIZE_KEYS, HostProfile, mask
from hostkit.sizes import format_size
from hostkit.vllm import model_catalog
from hostkit.vllm.flags import DOCUMENTED_REMOVALS, ENGINE_OPTIONS, RESERVED_OPTIONS, FlagError, flags_for
from hostkit.vllm.runtime import INSTALLED_ENTRY_POINT

@dataclass(frozen=True)
class DataIssue:
    host: str
    key: str
    value: Any
    allowed: str  # what the key accepts; empty when a hint says it better
    reason: str = ""  # why this value is refused, when "not allowed" is not obvious
    hint: str = ""  # what to do instead

    def __str__(self) -> str:
        parts = [self.reason, f"allowed {self.allowed}" if self.allowed else "", self.hint]
        return f"host {self.host}: {self.key} = {self.value!r} is invalid: " + "; ".join(p for p in parts if p)


class ProfileError(Exception):
    def __init__(self, issues: Sequence[DataIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


def _unknown_key_issue(host: str, key: str, value: Any) -> DataIssue:
    close = difflib.get_close_matches(key, list(HostProfile.model_fields), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "see the inventory data contract for the keys hostkit reads"
    return DataIssue(host, key, mask(key, value), "", reason="not a hostkit key", hint=hint)


def _field_issues(host: str, data: Mapping[str, Any], error: ValidationError) -> list[DataIssue]:
    issues: dict[str, DataIssue] = {}
    for detail in error.errors():
        field = str(detail["loc"][0])
        if field in issues:
            continue  # a union reports one error per member
        ctx = detail.get("ctx") or {}
        raw = data.get(field)
        if detail["type"] == "hostkit":
            issues[field] = DataIssue(host, ctx.get("key", field), mask(field, ctx.get("value", raw)), ctx["allowed"])
        else:
            issues[field] = DataIssue(host, field, mask(field, raw), ALLOWED[field])
    return list(issues.values())


def profile_from_data(host_name: str, data: Mapping[str, Any]) -> HostProfile:
    """Validate one host's data (pyinfra's `host.data.dict()`); ProfileError lists every issue.

    Keys outside hostkit's prefixes (pyinfra's ssh_*, _sudo, your own) are ignored.
    """
    issues: list[DataIssue] = []
    fields: dict[str, Any] = {}
    for key, value in data.items():
        if key in HostProfile.model_fields:
            fields[key] = value
        elif key.startswith(HOSTKIT_PREFIXES):
            issues.append(_unknown_key_issue(host_name, key, value))
    for key in SIZE_KEYS:
        value = fields.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
            issues.append(DataIssue(host_name, key, value, ALLOWED[key], reason="a bare number is ambiguous"))
            del fields[key]
    try:
        profile = HostProfile(**fields)
    except ValidationError as error:
        issues.extend(_field_issues(host_name, fields, error))
        raise ProfileError(issues) from None
    issues.extend(cross_field_issues(host_name, profile))
    if issues:
        raise ProfileError(issues)
    return profile


def validate_inventory(hosts: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, HostProfile]:
    """Profiles by host name; one ProfileError with the issues of every host."""
    profiles: dict[str, HostProfile] = {}
    issues: list[DataIssue] = []
    for name, data in hosts:
        try:
            profiles[name] = profile_from_data(name, data)
        except ProfileError as error:
            issues.extend(error.issues)
    if issues:
        raise ProfileError(issues)
    return profiles


def cross_field_issues(host: str, profile: HostProfile) -> list[DataIssue]:
    """What vLLM or the kernel would refuse although each field is fine on its own."""
    issues: list[DataIssue] = []
    p = profile
    if isinstance(p.vllm_memory_max, int) and isinstance(p.vllm_memory_high, int) and p.vllm_memory_high > p.vllm_memory_max:
        issues.append(
            DataIssue(
                host, "vllm_memory_high", format_size(p.vllm_memory_high), f"at most vllm_memory_max ({format_size(p.vllm_memory_max)})"
            )
        )
    if p.vllm_enabled:
        issues.extend(_vllm_issues(host, p))
    return issues


def _vllm_issues(host: str, p: HostProfile) -> list[DataIssue]:
    """What the release, its flags and the model would refuse, in the order a user fixes them."""
    version = p.vllm_version
    flag_set = flags_for(version)
    issues: list[DataIssue] = []
    if not p.vllm_model:
        issues.append(DataIssue(host, "vllm_model", None, ALLOWED["vllm_model"], reason="required when vllm_enabled is true"))
    issues += _command_issues(host, p, version, flag_set)
    issues += _engine_option_issues(host, p, version, flag_set)
    issues += _extra_args_issues(host, p, version, flag_set)
    issues += _batch_issues(host, p)
    issues += _model_issues(host, p)
    return issues


def _command_issues(host: str, p: HostProfile, version: str, flag_set) -> list[DataIssue]:
    if flag_set.entry_point != "api_server" or os.path.basename(p.vllm_command) not in ("vllm", INSTALLED_ENTRY_POINT):
        return []
    return [DataIssue(
        host,
        "vllm_command",
        p.vllm_command,
        "",
        reason=f"vLLM {version} has no `vllm serve`; hostkit runs `python -m vllm.entrypoints.openai.api_server`",
        hint="point vllm_command at the vLLM environment's python, e.g. /opt/vllm/bin/python",
    )]


def _engine_option_issues(host: str, p: HostProfile, version: str, flag_set) -> list[DataIssue]:
    """Each vllm_* engine key's value, as the release's parser would take it."""
    issues = []
    for key, option in ENGINE_OPTIONS.items():
        value = getattr(p, key)
        if value is None or value == "auto":
            continue
        try:
            flag_set.render({option: value})
        except FlagError as error:
            removed_in = DOCUMENTED_REMOVALS.get(option)
            reason = str(error) + (f" (removed in {removed_in})" if removed_in and not flag_set.has(option) else "")
            issues.append(DataIssue(host, key, value, f"null (not passed) or a value vLLM {version} accepts", reason=reason))
    return issues


def _extra_args_issues(host: str, p: HostProfile, version: str, flag_set) -> list[DataIssue]:
    """vllm_extra_args: options the release has, that no hostkit key sets, with values it takes."""
    managed = {flag_set.get(option).dest for option in (*ENGINE_OPTIONS.values(), *RESERVED_OPTIONS) if flag_set.has(option)}
    issues = []
    for option, setting in p.vllm_extra_args.items():
        key = f"vllm_extra_args[{option!r}]"
        flag = flag_set.get(option)
        if option in RESERVED_OPTIONS or (flag is not None and flag.dest in managed):
            owner = RESERVED_OPTIONS.get(option) or next(
                (k for k, o in ENGINE_OPTIONS.items() if flag_set.get(o) is not None and flag_set.get(o).dest == flag.dest),
                "a hostkit key",
            )
            issues.append(
                DataIssue(host, key, mask(option, setting), "", reason="hostkit sets this option", hint=f"set {owner} instead")
            )
            continue
        if flag is None:
            close = difflib.get_close_matches(option, sorted(flag_set.option_strings), n=1, cutoff=0.75)
            hint = f"did you mean {close[0]}?" if close else "use an option string from `vllm serve --help`"
            removed_in = DOCUMENTED_REMOVALS.get(option)
            reason = f"vLLM {version} has no {option}" + (f" (removed in {removed_in})" if removed_in else "")
            issues.append(DataIssue(host, key, setting, "", reason=reason, hint=hint))
            continue
        try:
            flag_set.render({option: setting})
        except FlagError as error:
            issues.append(DataIssue(host, key, setting, f"a value vLLM {version} accepts", reason=str(error)))
    return issues


def _batch_issues(host: str, p: HostProfile) -> list[DataIssue]:
    """The token budget against the sequences, the context and the expected request."""
    issues = []
    seqs, batched = p.vllm_max_num_seqs, p.vllm_max_num_batched_tokens
    if isinstance(seqs, int) and isinstance(batched, int) and batched < seqs:
        issues.append(
            DataIssue(
                host,
                "vllm_max_num_batched_tokens",
                batched,
                f"at least vllm_max_num_seqs ({seqs})",
                reason="vLLM refuses a token budget smaller than the number of sequences",
            )
        )
    model_len = p.vllm_max_model_len
    if p.vllm_enable_chunked_prefill is False and isinstance(batched, int) and model_len and batched < model_len:
        issues.append(
            DataIssue(
                host,
                "vllm_max_num_batched_tokens",
                batched,
                f"at least vllm_max_model_len ({model_len}), or enable chunked prefill",
                reason="without chunked prefill a whole prompt must fit in one batch",
            )
        )

    expected = p.vllm_expected_tokens_per_request
    if expected and model_len and expected > model_len:
        issues.append(
            DataIssue(
                host,
                "vllm_expected_tokens_per_request",
                expected,
                f"at most vllm_max_model_len ({model_len})",
                reason="no request is longer than the context",
            )
        )

    return issues


def _model_issues(host: str, p: HostProfile) -> list[DataIssue]:
    """What the model's dimensions allow: its attention heads, its context."""
    issues = []
    model_len = p.vllm_max_model_len
    spec = model_catalog.lookup(p.vllm_model) if p.vllm_model else None
    tp = p.vllm_tensor_parallel_size
    if spec and tp and spec.attention_heads % tp:
        issues.append(
            DataIssue(
                host,
                "vllm_tensor_parallel_size",
                tp,
                f"a divisor of {spec.attention_heads}",
                reason=f"{spec.name} has {spec.attention_heads} attention heads",
            )
        )
    if tp and p.gpu_count and tp > p.gpu_count:
        issues.append(DataIssue(host, "vllm_tensor_parallel_size", tp, f"at most gpu_count ({p.gpu_count})"))
    allow_long = p.vllm_env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") in ("1", "true", "True")
    if spec and model_len and model_len > spec.max_position_embeddings and not allow_long:
        issues.append(
            DataIssue(
                host,
                "vllm_max_model_len",
                model_len,
                f"at most {spec.max_position_embeddings}",
                reason=f"{spec.name} supports {spec.max_position_embeddings} tokens "
                "(vLLM refuses more unless vllm_env sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)",
            )
        )
    return issues
