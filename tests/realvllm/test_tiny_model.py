"""The tiny model: made here from a fixed seed, the same bytes every time, the shape vLLM's CPU backend takes."""

from __future__ import annotations

import hashlib
import json

from hostkit_lab.real_vllm import tiny_model


def _digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_made_twice_it_is_the_same_bytes(realvllm_python, tiny_model_dir, tmp_path):
    tiny_model.make_model(realvllm_python, tmp_path / "again")
    assert _digests(tmp_path / "again") == _digests(tiny_model_dir)


def test_a_small_llama_with_head_dim_64(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
            config["num_key_value_heads"], config["head_dim"]) == (2, 256, 4, 2, 64)
    tokenizer = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "BPE" and tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    assert config["vocab_size"] == len(tokenizer["model"]["vocab"]) == tiny_model.VOCAB_SIZE
    assert 2_000_000 < (tiny_model_dir / "model.safetensors").stat().st_size < 4_000_000
