"""Model dimensions the planner needs to size weights and the KV cache.

A small built-in table covers common models by their Hugging Face id. For a model in a
local directory (vllm_model = "/models/foo"), the caller reads `<dir>/config.json` on the
host and passes its contents to `spec_from_hf_config`; nothing here touches the network
or the filesystem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


class ModelConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    params: int  # total parameters, embeddings included
    max_position_embeddings: int
    dtype_bytes: int = 2  # of the checkpoint (bf16 for all built-ins)

    def kv_bytes_per_token(self, tensor_parallel_size: int, kv_dtype_bytes: int) -> int:
        """KV cache bytes per token on each GPU: K and V, for every layer, for the KV heads
        that GPU holds (each GPU keeps at least one when TP exceeds the KV head count)."""
        kv_heads_per_gpu = max(1, self.kv_heads // tensor_parallel_size)
        return 2 * self.layers * kv_heads_per_gpu * self.head_dim * kv_dtype_bytes

    def weight_bytes(self, bytes_per_param: float) -> int:
        return int(self.params * bytes_per_param)


def _spec(name, layers, heads, kv_heads, head_dim, params_billion, max_len) -> ModelSpec:
    return ModelSpec(name, layers, heads, kv_heads, head_dim, round(params_billion * 1e9), max_len)


# Dimensions from each model's config.json; parameter counts from the model cards.
_BUILTIN = (
    (_spec("Qwen/Qwen2.5-0.5B-Instruct", 24, 14, 2, 64, 0.494, 32768), ("Qwen/Qwen2.5-0.5B",)),
    (_spec("Qwen/Qwen2.5-1.5B-Instruct", 28, 12, 2, 128, 1.54, 32768), ("Qwen/Qwen2.5-1.5B",)),
    (_spec("Qwen/Qwen2.5-3B-Instruct", 36, 16, 2, 128, 3.09, 32768), ("Qwen/Qwen2.5-3B",)),
    (_spec("Qwen/Qwen2.5-7B-Instruct", 28, 28, 4, 128, 7.62, 32768), ("Qwen/Qwen2.5-7B",)),
    (_spec("Qwen/Qwen2.5-14B-Instruct", 48, 40, 8, 128, 14.7, 32768), ("Qwen/Qwen2.5-14B",)),
    (_spec("Qwen/Qwen2.5-32B-Instruct", 64, 40, 8, 128, 32.5, 32768), ("Qwen/Qwen2.5-32B",)),
    (_spec("Qwen/Qwen2.5-72B-Instruct", 80, 64, 8, 128, 72.7, 32768), ("Qwen/Qwen2.5-72B",)),
    (_spec("Qwen/Qwen3-0.6B", 28, 16, 8, 128, 0.6, 40960), ()),
    (_spec("Qwen/Qwen3-8B", 36, 32, 8, 128, 8.2, 40960), ()),
    (
        _spec("meta-llama/Llama-3.1-8B-Instruct", 32, 32, 8, 128, 8.03, 131072),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B"),
    ),
    (
        _spec("meta-llama/Llama-3.1-70B-Instruct", 80, 64, 8, 128, 70.6, 131072),
        ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B"),
    ),
    (
        _spec("THUDM/glm-4-9b-chat", 40, 32, 2, 128, 9.4, 131072),
        ("THUDM/glm-4-9b-chat-hf", "THUDM/glm-4-9b", "THUDM/glm-4-9b-hf", "zai-org/glm-4-9b-chat", "zai-org/glm-4-9b-chat-hf"),
    ),
    (_spec("mistralai/Mistral-7B-Instruct-v0.3", 32, 32, 8, 128, 7.25, 32768), ("mistralai/Mistral-7B-v0.3",)),
)

_BY_NAME: dict[str, ModelSpec] = {}
for _model, _aliases in _BUILTIN:
    for _name in (_model.name, *_aliases):
        _BY_NAME[_name.lower()] = _model


def builtin_models() -> list[ModelSpec]:
    return [model for model, _ in _BUILTIN]


def lookup(model: str) -> ModelSpec | None:
    """The built-in spec for a Hugging Face id (case-insensitive), or None."""
    return _BY_NAME.get(model.lower())


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def spec_from_hf_config(name: str, config: Mapping[str, Any]) -> ModelSpec:
    """A spec from a dense decoder's config.json. The parameter count is computed from the
    dimensions (attention + gated MLP + embeddings), which is within about 1% for
    Llama/Qwen/Mistral/GLM-style models. ModelConfigError for anything else."""
    if isinstance(config.get("text_config"), Mapping):
        raise ModelConfigError(f"{name}: multimodal configs (text_config) are not sized by hostkit")
    experts = _first(config, "num_local_experts", "num_experts", "n_routed_experts")
    if isinstance(experts, int) and experts > 1:
        raise ModelConfigError(f"{name}: mixture-of-experts models are not sized by hostkit")

    layers = _first(config, "num_hidden_layers", "num_layers", "n_layer")
    heads = _first(config, "num_attention_heads", "n_head")
    hidden = _first(config, "hidden_size", "n_embd")
    intermediate = _first(config, "intermediate_size", "ffn_hidden_size")
    vocab = _first(config, "padded_vocab_size", "vocab_size")
    max_len = _first(config, "max_position_embeddings", "seq_length", "n_positions")
    missing = [
        key
        for key, value in (
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            ("intermediate_size", intermediate),
            ("vocab_size", vocab),
            ("max_position_embeddings", max_len),
        )
        if not isinstance(value, int) or value <= 0
    ]
    if missing:
        raise ModelConfigError(f"{name}: config.json lacks {', '.join(missing)}")

    kv_heads = _first(config, "num_key_value_heads", "multi_query_group_num") or heads
    head_dim = _first(config, "head_dim", "kv_channels") or hidden // heads
    dtype_name = _first(config, "torch_dtype", "dtype") or "bfloat16"
    if dtype_name not in DTYPE_BYTES:
        raise ModelConfigError(f"{name}: unknown torch_dtype {dtype_name!r}")

    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", False) else 2)
    params = layers * (attention + mlp) + embeddings
    return ModelSpec(name, layers, heads, kv_heads, head_dim, params, max_len, DTYPE_BYTES[dtype_name])
