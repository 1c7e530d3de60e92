"""An inventory's data checked against hostkit's keys: every issue of every host, named by
host, key, value and what is allowed, before any host is touched."""

from __future__ import annotations

import difflib
import os
from dataclasses import replace
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from hostkit.profile import instance_checks, instances
from hostkit.profile.host_profile import ALLOWED, HOSTKIT_PREFIXES, SIZE_KEYS, HostProfile, mask
from hostkit.profile.issues import DataIssue, ProfileError
from hostkit.sizes import format_size
from hostkit.vllm import model_catalog
from hostkit.vllm.flags import DOCUMENTED_REMOVALS, ENGINE_OPTIONS, RESERVED_OPTIONS, FlagError, flags_for
from hostkit.vllm.runtime import INSTALLED_ENTRY_POINT

def _unknown_key_issue(host: str, key: str, value: Any) -> DataIssue:
    close = difflib.get_close_matches(key, list(HostProfile.model_fields), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "see the inventory data contract for the keys hostkit reads"
    return DataIssue(host, key, mask(key, value), "", reason="not a hostkit key", hint=hint)


def _field_issues(host: str, data: Mapping[str, Any], error: ValidationError) -> list[DataIssue]:
    issues: dict[str, DataIssue] = {}
    for detail in error.errors():
        loc = detail["loc"]
        if loc[0] == instances.INSTANCES_KEY and len(loc) > 1:
            where = _instance_place(data[instances.INSTANCES_KEY], loc[1], loc[2:])
            if where is None:
                continue  # the host's value, which the host's own issue reports
            prefix, fields, field = where
        else:
            prefix, fields, field = "", data, str(loc[0])
        if field is None:  # the instance's overrides are not a mapping
            issues.setdefault(prefix, DataIssue(host, prefix, fields, f"a mapping of {instances.KEYS_ALLOWED}"))
            continue
        if prefix + field in issues:
            continue  # a union reports one error per member
        ctx = detail.get("ctx") or {}
        raw = fields.get(field)
        if detail["type"] == "hostkit":
            key = ctx.get("key", field)
            key = prefix + (instances.instance_key(key) if prefix and key == field else key)
            issues[prefix + field] = DataIssue(host, key, mask(field, ctx.get("value", raw)), ctx["allowed"])
        else:
            issues[prefix + field] = DataIssue(host, prefix + instances.instance_key(field) if prefix else field,
                                               mask(field, raw), ALLOWED[field])
    return list(issues.values())


def _instance_place(raw: Mapping[str, Any], name: Any, rest: tuple) -> tuple[str, Any, str | None] | None:
    """(key prefix, the instance's overrides by profile field, the field) of an error inside
    an instance; the field None when the overrides are no mapping; None when the field is
    the host's, not overridden."""
    overrides = raw.get(name)
    if not isinstance(overrides, Mapping) or not rest:
        return instances.raw_key_path(name), overrides, None
    fields = {instances.profile_field(key): value for key, value in overrides.items()}
    field = str(rest[0])
    return (instances.raw_key_path(name) + ".", fields, field) if field in fields else None


def _instance_data_issues(host: str, fields: dict[str, Any]) -> list[DataIssue]:
    """Bad instance names and keys, and bare-number sizes in an instance, each an issue; they
    are taken out of `fields`' vllm_instances, so that the rest is checked as usual."""
    raw = fields.get(instances.INSTANCES_KEY)
    if not isinstance(raw, Mapping):
        return []
    issues, bad = [], set()
    for name, key, value, allowed, reason in instances.data_problems(raw, HostProfile.model_fields):
        issues.append(DataIssue(host, instances.raw_key_path(name, key), mask(key, value), allowed, reason=reason))
        bad.add((name, key))
    cleaned = {}
    for name, overrides in raw.items():
        if (name, None) in bad:
            continue
        if isinstance(overrides, Mapping):
            overrides = {key: value for key, value in overrides.items() if (name, key) not in bad}
            for key in SIZE_KEYS:
                if _bare_number(overrides.get(key)):
                    issues.append(DataIssue(host, instances.raw_key_path(name, key), overrides.pop(key), ALLOWED[key],
                                            reason="a bare number is ambiguous"))
        cleaned[name] = overrides
    fields[instances.INSTANCES_KEY] = cleaned
    return issues


def _bare_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0


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
        if _bare_number(value):
            issues.append(DataIssue(host_name, key, value, ALLOWED[key], reason="a bare number is ambiguous"))
            del fields[key]
    issues.extend(_instance_data_issues(host_name, fields))
    try:
        profile = HostProfile(**fields)
    except ValidationError as error:
        issues.extend(_field_issues(host_name, fields, error))
        raise ProfileError(issues) from None
    issues.extend(cross_field_issues(host_name, profile))
    issues.extend(_each_instance_issues(host_name, profile, fields.get(instances.INSTANCES_KEY) or {}, issues))
    issues.extend(instance_checks.instance_issues(host_name, profile))
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
    if p.vllm_enabled and not p.vllm_instances:  # with instances the host's vllm_* keys are their defaults
        issues.extend(_vllm_issues(host, p))
    return issues


def _each_instance_issues(host: str, profile: HostProfile, raw: Mapping[str, Any],
                          host_issues: list[DataIssue]) -> list[DataIssue]:
    """cross_field_issues of each instance. One on a key the instance sets names it there
    (vllm_instances['a'].vllm_port); one on a key it takes from the host is the host key's,
    said once with the instances it is in, unless the host's own check says it already."""
    issues: list[DataIssue] = []
    inherited: dict[tuple, tuple[DataIssue, list[str]]] = {}
    said = {_said(issue) for issue in host_issues}
    for name, instance in profile.vllm_instances.items():
        overrides = {instances.profile_field(key) for key in raw.get(name, {})}
        for issue in cross_field_issues(host, instance):
            field, bracket, rest = issue.key.partition("[")
            if field in overrides:
                issues.append(replace(issue, key=instances.key_path(name, field) + bracket + rest))
            elif _said(issue) not in said:
                inherited.setdefault(_said(issue), (issue, []))[1].append(name)
    for issue, names in inherited.values():
        where = f"the host's value, taken by vllm_instances {', '.join(repr(n) for n in names)}"
        issues.append(replace(issue, hint="; ".join(filter(None, (issue.hint, where)))))
    return issues


def _said(issue: DataIssue) -> tuple:
    return issue.key, repr(issue.value), issue.allowed, issue.reason, issue.hint


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
