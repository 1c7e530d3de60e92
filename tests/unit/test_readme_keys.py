"""The README's inventory key tables ("## Inventory keys" and its subsections) against the
profile: every HostProfile field is documented, every documented key is a field, and each
documented default is the field's declared default."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hostkit.profile.host_profile import HostProfile

README = Path(__file__).resolve().parents[2] / "README.md"
# Defaults the README gives in words: the declared default is None and something else
# (validation, the planner) decides what it means.
WORD_DEFAULTS = {"vllm_model": "required", "vllm_served_model_name": "the model"}


def documented_defaults(text: str) -> dict[str, str]:
    """{key: default cell text} from every `| Key | Default | Meaning |` table of the section."""
    section = text.split("\n## Inventory keys\n", 1)[1].split("\n## ", 1)[0]
    defaults: dict[str, str] = {}
    in_table = False
    for line in section.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[:2] == ["Key", "Default"]:
            in_table = True
            continue
        if not in_table or set(cells[0]) <= set("-") and set(cells[1]) <= set("-"):
            continue  # the rule under the header, or a row that continues the one above
        keys = re.findall(r"`([^`]+)`", cells[0])
        values = re.findall(r"`([^`]+)`", cells[1]) or [cells[1]]
        assert keys, f"README row without a key: {line}"
        assert len(values) in (1, len(keys)), f"README row with {len(keys)} keys and {len(values)} defaults: {line}"
        for key, value in zip(keys, values * len(keys) if len(values) == 1 else values):
            assert key not in defaults, f"{key} is documented twice"
            defaults[key] = value
    return defaults


DOCUMENTED = documented_defaults(README.read_text())


def declared_default(name: str):
    return HostProfile.model_fields[name].get_default(call_default_factory=True)


def test_the_tables_are_found():
    assert {"swap_enabled", "vllm_host", "vllm_port", "vllm_kv_cache_dtype", "vllm_install_root",
            "monitoring_node_exporter"} <= set(DOCUMENTED)
    assert DOCUMENTED["vllm_port"] == "8000" and DOCUMENTED["vllm_quantization"] == "None"


def test_every_profile_field_is_documented():
    assert sorted(set(HostProfile.model_fields) - set(DOCUMENTED)) == []


def test_every_documented_key_is_a_profile_field():
    assert sorted(set(DOCUMENTED) - set(HostProfile.model_fields)) == []


@pytest.mark.parametrize("key", sorted(set(DOCUMENTED) & set(HostProfile.model_fields)))
def test_the_documented_default_is_the_declared_one(key):
    text = DOCUMENTED[key]
    if key in WORD_DEFAULTS:
        assert (text, declared_default(key)) == (WORD_DEFAULTS[key], None)
        return
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pytest.fail(f"README: the default of {key} is {text!r}, not a Python literal")
    # As an inventory would give it: validated (`{"vm.swappiness": 10}` is read as "10").
    assert getattr(HostProfile.model_validate({key: value}), key) == declared_default(key), (
        f"README: {key} defaults to {text}; profile.py declares {declared_default(key)!r}")
