import json
import shlex
from pathlib import Path

import pytest

from hostkit.vllm.flags import (
    FlagError,
    flags_for,
    known_versions,
    parse_version,
    recorded_version_for,
)

FIXTURES = Path(__file__).parent / "fixtures" / "plan"
VERSIONS = ["0.4.3", "0.5.5", "0.6.6.post1", "0.8.5.post1", "0.10.2", "0.17.1", "0.20.0", "0.33.0"]


def test_known_versions_are_the_recorded_releases_oldest_first():
    assert known_versions() == VERSIONS


def test_parse_version():
    assert parse_version("0.8.5.post1") == (0, 8, 5, 1)
    assert parse_version("0.33.0") == (0, 33, 0, 0)
    for bad in ("0.9", "v0.9.0", "0.9.0rc1", "latest"):
        with pytest.raises(FlagError):
            parse_version(bad)


@pytest.mark.parametrize(
    ("version", "recorded"),
    [
        ("0.4.3", "0.4.3"),
        ("0.5.0", "0.4.3"),
        ("0.8.5", "0.8.5.post1"),  # same release, post-release data used
        ("0.9.2", "0.8.5.post1"),
        ("0.18.0", "0.17.1"),
        ("0.25.1", "0.20.0"),
        ("0.40.0", "0.33.0"),
    ],
)
def test_unrecorded_releases_use_the_nearest_recorded_one_below(version, recorded):
    assert recorded_version_for(version) == recorded
    assert flags_for(version).recorded == recorded


def test_releases_before_0_4_3_are_refused():
    with pytest.raises(FlagError, match="older than 0.4.3"):
        flags_for("0.4.2")


@pytest.mark.parametrize(("version", "entry"), [(v, "api_server" if v == "0.4.3" else "serve") for v in VERSIONS])
def test_entry_point(version, entry):
    assert flags_for(version).entry_point == entry


@pytest.mark.parametrize(
    ("version", "has_swap_space"),
    [("0.4.3", True), ("0.10.2", True), ("0.17.1", True), ("0.18.0", False), ("0.19.1", False), ("0.20.0", False), ("0.33.0", False)],
)
def test_swap_space_is_gone_from_0_18(version, has_swap_space):
    assert flags_for(version).has("--swap-space") is has_swap_space
    options = {"--swap-space": 4, "--max-num-seqs": 8}
    if has_swap_space:
        assert flags_for(version).render(options) == ["--swap-space", "4", "--max-num-seqs", "8"]
    else:
        with pytest.raises(FlagError, match=f"vLLM {version} has no --swap-space"):
            flags_for(version).render(options)


@pytest.mark.parametrize(
    ("version", "off"),
    [
        ("0.4.3", []),  # store_true with default False: off is the default
        ("0.5.5", ["--enable-chunked-prefill=false"]),  # StoreBoolean, nargs="?"
        ("0.6.6.post1", ["--enable-chunked-prefill=false"]),
        ("0.8.5.post1", ["--no-enable-chunked-prefill"]),
        ("0.10.2", ["--no-enable-chunked-prefill"]),
        ("0.17.1", ["--no-enable-chunked-prefill"]),
        ("0.20.0", ["--no-enable-chunked-prefill"]),
        ("0.33.0", ["--disable-chunked-prefill"]),
    ],
)
def test_chunked_prefill_off_is_spelled_per_release(version, off):
    assert flags_for(version).render({"--enable-chunked-prefill": False}) == off
    on = flags_for(version).render({"--enable-chunked-prefill": True})
    assert on == (["--enable-chunked-prefill=true"] if version in ("0.5.5", "0.6.6.post1") else ["--enable-chunked-prefill"])
    for word in off + on:
        assert flags_for(version).has(word.split("=")[0])


@pytest.mark.parametrize("version", VERSIONS)
def test_common_engine_options_render_in_every_release(version):
    argv = flags_for(version).render({
            "--host": "0.0.0.0",
            "--port": 8000,
            "--served-model-name": "m",
            "--gpu-memory-utilization": 0.85,
            "--max-num-seqs": 64,
            "--max-model-len": 32768,
            "--max-num-batched-tokens": 8192,
            "--tensor-parallel-size": 2,
            "--dtype": "bfloat16",
            "--kv-cache-dtype": "fp8",
            "--quantization": None,
        },
    )
    assert argv == [
        "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "m",
        "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64", "--max-model-len", "32768",
        "--max-num-batched-tokens", "8192", "--tensor-parallel-size", "2",
        "--dtype", "bfloat16", "--kv-cache-dtype", "fp8",
    ]  # fmt: skip
    assert all(flags_for(version).has(word) for word in argv if word.startswith("--"))


def test_default_gpu_memory_utilization_changes_in_0_20():
    assert flags_for("0.17.1").default("--gpu-memory-utilization") == 0.9
    assert flags_for("0.20.0").default("--gpu-memory-utilization") == 0.92


def test_render_refuses_what_the_release_rejects():
    with pytest.raises(FlagError, match="has no --swap-space"):
        flags_for("0.20.0").render({"--swap-space": 4})
    with pytest.raises(FlagError, match="has no --cpu-offload-gb"):
        flags_for("0.4.3").render({"--cpu-offload-gb": 4})
    with pytest.raises(FlagError, match="accepts"):
        flags_for("0.4.3").render({"--kv-cache-dtype": "fp8_inc"})
    with pytest.raises(FlagError, match="whole number"):
        flags_for("0.6.6.post1").render({"--max-model-len": "32k"})
    with pytest.raises(FlagError, match="switch"):
        flags_for("0.33.0").render({"--enforce-eager": "yes"})
    with pytest.raises(FlagError, match="one value"):
        flags_for("0.33.0").render({"--port": [1, 2]})
    with pytest.raises(FlagError, match="double negative"):
        flags_for("0.10.2").render({"--no-enable-prefix-caching": False})


def test_render_lists_and_explicit_off_spellings():
    assert flags_for("0.10.2").render({"--served-model-name": ["a", "b"]}) == ["--served-model-name", "a", "b"]
    assert flags_for("0.10.2").render({"--no-enable-prefix-caching": True}) == ["--no-enable-prefix-caching"]
    assert flags_for("0.33.0").render({"--max-model-len": "32k"}) == ["--max-model-len", "32k"]


def _probe_options(args: str) -> dict[str, object]:
    words = shlex.split(args)
    if words[:2] == ["--model", "m"]:
        words = words[2:]
    elif words[0] == "m":
        words = words[1:]
    options: dict[str, object] = {}
    while words:
        option = words.pop(0)
        value: object = True
        if words and not words[0].startswith("-"):
            value = words.pop(0)
        options[option] = value
    return options


# Where hostkit is stricter than vLLM's parser: it renders only the spellings in the data.
STRICTER = {
    # FlexibleArgumentParser turns underscores into dashes from 0.5.
    ("0.5.5", "--max_num_seqs"), ("0.6.6.post1", "--max_num_seqs"), ("0.8.5.post1", "--max_num_seqs"),
    ("0.10.2", "--max_num_seqs"), ("0.17.1", "--max_num_seqs"), ("0.20.0", "--max_num_seqs"),
    ("0.33.0", "--max_num_seqs"),
    # 0.33.0 still accepts the old off spelling through a deprecation alias.
    ("0.33.0", "--no-enable-chunked-prefill"),
}  # fmt: skip


def _probes():
    data = json.loads((FIXTURES / "parse_tests.json").read_text())
    for version, probes in data.items():
        for probe in probes:
            uses_model_option = probe["args"].startswith("--model")
            # --model under `vllm serve` is refused by vLLM's own checks; hostkit never writes it there.
            if probe["mode"] == "serve" and (version == "0.4.3" or not uses_model_option):
                yield pytest.param(version, probe, id=f"{version}:{probe['args']}")


@pytest.mark.parametrize(("version", "probe"), _probes())
def test_rendering_agrees_with_the_real_parsers(version, probe):
    """Every probe command line the real parser accepted, hostkit renders (except the
    spellings listed as stricter); every one it rejected, hostkit refuses to render."""
    options = _probe_options(probe["args"])
    refused = []
    for option, value in options.items():
        try:
            flags_for(version).render({option: value})
        except FlagError:
            refused.append(option)
    if probe["rc"] == 0:
        assert all((version, option) in STRICTER for option in refused), refused
    else:
        assert refused, f"vLLM {version} rejected {probe['args']!r} but hostkit would render it"
