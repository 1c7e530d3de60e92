"""Secrets: vllm_hf_token goes the way vllm_api_key goes; vllm_env refuses names that look secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostkit.cli.plan import plan_as_json, plan_as_text
from hostkit.facts.snapshot import HostSnapshotFact
from hostkit.plan.snapshot_facts import planning_facts
from hostkit.plan.planner import plan_host
from hostkit.plan.planning_facts import PlanningFacts
from hostkit.profile.host_profile import SECRET_ENV, mask
from hostkit.profile.validation import ProfileError, profile_from_data
from hostkit.vllm.flags import RESERVED_OPTIONS
from hostkit.desired.vllm_unit import UnitError, render_env, render_unit

RUN = Path(__file__).parent / "fixtures" / "gpu" / "h200-serving"

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOKEN = "hf_s3cretTokenValue"


def h200_facts() -> PlanningFacts:
    """The recorded H200 machine serving (fixtures/gpu/h200-serving)."""
    return planning_facts(HostSnapshotFact().process((RUN / "snapshot-in-unit.txt").read_text().splitlines()))


def h200_plan(**data):
    profile = profile_from_data("h200", {"vllm_model": MODEL, "swap_enabled": False, **data})
    return plan_host(profile, h200_facts(), host_name="h200")


def test_the_hf_token_is_in_the_root_only_env_file_only():
    plan = h200_plan(vllm_hf_token=TOKEN, vllm_api_key="sk-key")
    assert f'\nHF_TOKEN="{TOKEN}"\n' in render_env(plan.vllm)
    assert 'VLLM_API_KEY="sk-key"' in render_env(plan.vllm)
    unit = render_unit(plan.vllm)
    assert TOKEN not in unit and "HF_TOKEN" not in unit
    assert not any(TOKEN in word for word in plan.vllm.argv)
    assert TOKEN not in plan_as_text(plan) and "HF_TOKEN=********" in plan_as_text(plan)
    assert TOKEN not in json.dumps(plan_as_json(plan))


def test_an_hf_token_in_argv_is_refused():
    plan = h200_plan(vllm_hf_token=TOKEN).vllm
    with pytest.raises(UnitError, match="the HF token appears in argv"):
        render_unit(plan.model_copy(update={"argv": [*plan.argv, "--hf-token", TOKEN]}))


def test_a_blank_token_is_refused_masked():
    with pytest.raises(ProfileError, match=r"vllm_hf_token = '\*+' is invalid: .*non-empty"):
        profile_from_data("h200", {"vllm_model": MODEL, "vllm_hf_token": "  "})


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("HF_TOKEN", "not here: set vllm_hf_token"),
        ("VLLM_API_KEY", "not here: set vllm_api_key"),
        ("HUGGING_FACE_HUB_TOKEN", "vllm_hf_token (HF_TOKEN)"),
        ("AWS_SECRET_ACCESS_KEY", "vllm_api_key (VLLM_API_KEY), vllm_hf_token (HF_TOKEN)"),
        ("DB_PASSWORD", "world-readable unit file"),
        ("OPENAI_APIKEY", "no word ending in TOKEN, KEY, SECRET or PASSWORD"),
        ("my_token", "world-readable unit file"),
    ],
)
def test_vllm_env_refuses_secret_looking_names_with_a_hint(name, hint):
    with pytest.raises(ProfileError) as caught:
        profile_from_data("h200", {"vllm_model": MODEL, "vllm_env": {name: "v4lue-secret"}})
    message = str(caught.value)
    assert f"host h200: vllm_env[{name!r}]" in message and hint in message
    assert "v4lue-secret" not in message


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS_PER_EXPERT", "HF_HOME", "KEYBOARD"])
def test_ordinary_names_that_contain_the_words_pass(name):
    assert not SECRET_ENV.search(name)
    assert profile_from_data("h200", {"vllm_model": MODEL, "vllm_env": {name: "1"}}).vllm_env == {name: "1"}


def test_option_strings_still_mask():
    assert mask("--hf-token", "hf_x") == "********" and mask("--api-key", "x") == "********"
    assert mask("vllm_hf_token", "hf_x") == "********"


def test_the_hf_token_hint_names_the_secret_key():
    assert RESERVED_OPTIONS["--hf-token"].startswith("vllm_hf_token ")
    with pytest.raises(ProfileError, match=r"vllm_extra_args\['--hf-token'\] = '\*+' is invalid: .*set vllm_hf_token"):
        profile_from_data("h200", {"vllm_model": MODEL, "vllm_extra_args": {"--hf-token": TOKEN}})
