"""The README's inventory key tables are written from the profile (hostkit.profile.keys_table):
every key once, with its declared default and its docstring; and the README stays short."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hostkit.profile.host_profile import HostProfile
from hostkit.profile.keys_table import TABLES, WORD_DEFAULTS, default_text, key_table, with_tables

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_tables_are_the_profiles():
    assert with_tables(README.read_text()) == README.read_text(), "run python3 scripts/readme_keys.py"


def test_every_key_is_in_one_table_with_a_meaning():
    listed = [name for names in TABLES.values() for name in names]
    assert sorted(listed) == sorted(HostProfile.model_fields)
    assert [name for name, field in HostProfile.model_fields.items() if not (field.description or "").strip()] == []


@pytest.mark.parametrize("key", sorted(set(HostProfile.model_fields) - set(WORD_DEFAULTS)))
def test_the_written_default_is_one_an_inventory_can_give(key):
    """Given back as inventory data, the default as written validates to the declared one."""
    written = ast.literal_eval(default_text(key).strip("`"))
    declared = HostProfile.model_fields[key].get_default(call_default_factory=True)
    assert getattr(HostProfile.model_validate({key: written}), key) == declared


def test_a_table_row_per_key():
    table = key_table(("vllm_port", "vllm_model"))
    assert table.splitlines()[2:] == ["| `vllm_port` | `8000` | listen port |",
                                      "| `vllm_model` | required | a Hugging Face id or an absolute local directory |"]


def test_the_readme_is_under_20_kb():
    assert len(README.read_bytes()) < 20_000
