"""Model dimensions the planner needs to size weights and the KV cache.

A small built-in table covers common models by their Hugging Face id. For a model in a
local directory (vllm_model = "/models/foo"), the caller reads `<dir>/config.json` on the
host and passes its contents to `spec_from_hf_config`; nothing here touches the network
or the filesystem.

Weights are counted from the dimensions, layer by layer, the way vLLM shards them over
tensor parallel ranks: attention (q, k, v, o), the gated MLP (or, for mixture-of-experts
models, every expert plus any shared expert and the router), the input embeddings and the
output layer (one matrix when the embeddings are tied). Quantization applies to the linear
layers of the decoder only: vLLM keeps the embeddings, the output layer and the MoE router
in the checkpoint's dtype. Norms and biases (well under 0.1% of a model) are left out.
Checked against vLLM's own "Model loading took" figures in
tests/unit/fixtures/calibration/vllm_startups.json (within 0.4% for unquantized models).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
# vLLM pads the vocabulary to a multiple of this before splitting it over TP ranks
# (VocabParallelEmbedding's padding; a TP size that does not divide the padded vocabulary
# fails with "151936 is not divisible by 5", calibration case v0.19.0-qwen3-14b-tp5).
VOCAB_PADDING = 64


class ModelConfigError(ValueError):
    pass


@dataclass(frozen=True)
class MoeSpec:
    experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int = 0  # Qwen-MoE's shared expert (0 = none)


@dataclass(frozen=True)
class QuantSpec:
    """How a checkpoint stores its decoder's linear layers (config.json quantization_config)."""

    method: str
    bytes_per_param: float  # of the quantized linear layers, scales and zero points included
    quantizes_lm_head: bool = False


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    max_position_embeddings: int
    dtype_bytes: int = 2  # of the checkpoint (bf16 for all built-ins)
    tie_word_embeddings: bool = False
    moe: MoeSpec | None = None
    quantization: QuantSpec | None = None

    def kv_bytes_per_token(self, tensor_parallel_size: int, kv_dtype_bytes: int) -> int:
        """KV cache bytes per token on each GPU: K and V, for every layer, for the KV heads
        that GPU holds (each GPU keeps at least one when TP exceeds the KV head count)."""
        return 2 * self.layers * self._kv_heads_per_gpu(tensor_parallel_size) * self.head_dim * kv_dtype_bytes

    def _kv_heads_per_gpu(self, tensor_parallel_size: int) -> int:
        return max(1, self.kv_heads // tensor_parallel_size)

    @property
    def params(self) -> int:
        """All parameters, embeddings included."""
        return self._linear_params(1) + self._unquantized_params(1)

    def weight_bytes_per_gpu(self, tensor_parallel_size: int, dtype_bytes: int, linear_bytes: float) -> int:
        """Weights on each GPU: the decoder's linear layers at `linear_bytes` per parameter,
        the embeddings, output layer and router at `dtype_bytes`."""
        tp = tensor_parallel_size
        unquantized = self._unquantized_params(tp)
        lm_head = 0 if self.tie_word_embeddings else self._padded_vocab(tp) * self.hidden // tp
        if self.quantization is not None and self.quantization.quantizes_lm_head:
            unquantized -= lm_head
            return int(self._linear_params(tp) * linear_bytes + lm_head * linear_bytes + unquantized * dtype_bytes)
        return int(self._linear_params(tp) * linear_bytes + unquantized * dtype_bytes)

    def _padded_vocab(self, tp: int) -> int:
        return -(-self.vocab // VOCAB_PADDING) * VOCAB_PADDING if tp > 1 else self.vocab

    def _linear_params(self, tp: int) -> int:
        """Decoder linear parameters on one of `tp` GPUs. K and V projections are replicated
        when TP exceeds the KV head count, like vLLM's QKVParallelLinear."""
        q_and_o = 2 * self.hidden * self.attention_heads * self.head_dim // tp
        k_and_v = 2 * self.hidden * self._kv_heads_per_gpu(tp) * self.head_dim
        if self.moe is None:
            mlp = 3 * self.hidden * self.intermediate // tp
        else:
            experts = self.moe.experts * 3 * self.hidden * self.moe.expert_intermediate
            mlp = (experts + 3 * self.hidden * self.moe.shared_intermediate) // tp
        return self.layers * (q_and_o + k_and_v + mlp)

    def _unquantized_params(self, tp: int) -> int:
        embeddings = self._padded_vocab(tp) * self.hidden // tp
        lm_head = 0 if self.tie_word_embeddings else embeddings
        router = self.layers * self.hidden * self.moe.experts if self.moe else 0
        return embeddings + lm_head + router

    def tp_problem(self, tensor_parallel_size: int) -> str | None:
        """Why vLLM refuses this TP size for the model, or None."""
        tp = tensor_parallel_size
        if self.attention_heads % tp:
            return f"{tp} does not divide the {self.attention_heads} attention heads of {self.name}"
        if self.kv_heads % tp and tp % self.kv_heads:
            return f"{tp} neither divides nor is a multiple of the {self.kv_heads} KV heads of {self.name}"
        if tp > 1 and self._padded_vocab(tp) % tp:
            return f"{tp} does not divide the vocabulary of {self.name} ({self._padded_vocab(tp)} padded)"
        return None


def _spec(name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, tie, max_len) -> ModelSpec:
    return ModelSpec(name, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, max_len, tie_word_embeddings=tie)


# Dimensions from each model's config.json on Hugging Face.
_BUILTIN = (
    (_spec("Qwen/Qwen2.5-0.5B-Instruct", 24, 14, 2, 64, 896, 4864, 151936, True, 32768), ("Qwen/Qwen2.5-0.5B",)),
    (_spec("Qwen/Qwen2.5-1.5B-Instruct", 28, 12, 2, 128, 1536, 8960, 151936, True, 32768), ("Qwen/Qwen2.5-1.5B",)),
    (_spec("Qwen/Qwen2.5-3B-Instruct", 36, 16, 2, 128, 2048, 11008, 151936, True, 32768), ("Qwen/Qwen2.5-3B",)),
    (_spec("Qwen/Qwen2.5-7B-Instruct", 28, 28, 4, 128, 3584, 18944, 152064, False, 32768), ("Qwen/Qwen2.5-7B",)),
    (_spec("Qwen/Qwen2.5-14B-Instruct", 48, 40, 8, 128, 5120, 13824, 152064, False, 32768), ("Qwen/Qwen2.5-14B",)),
    (_spec("Qwen/Qwen2.5-32B-Instruct", 64, 40, 8, 128, 5120, 27648, 152064, False, 32768), ("Qwen/Qwen2.5-32B",)),
    (_spec("Qwen/Qwen2.5-72B-Instruct", 80, 64, 8, 128, 8192, 29568, 152064, False, 32768), ("Qwen/Qwen2.5-72B",)),
    (_spec("Qwen/Qwen3-0.6B", 28, 16, 8, 128, 1024, 3072, 151936, True, 40960), ()),
    (_spec("Qwen/Qwen3-8B", 36, 32, 8, 128, 4096, 12288, 151936, False, 40960), ()),
    (
        _spec("meta-llama/Llama-3.1-8B-Instruct", 32, 32, 8, 128, 4096, 14336, 128256, False, 131072),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B"),
    ),
    (
        _spec("meta-llama/Llama-3.1-70B-Instruct", 80, 64, 8, 128, 8192, 28672, 128256, False, 131072),
        ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B"),
    ),
    (
        _spec("THUDM/glm-4-9b-chat", 40, 32, 2, 128, 4096, 13696, 151552, False, 131072),
        ("THUDM/glm-4-9b-chat-hf", "THUDM/glm-4-9b", "THUDM/glm-4-9b-hf", "zai-org/glm-4-9b-chat", "zai-org/glm-4-9b-chat-hf"),
    ),
    (_spec("mistralai/Mistral-7B-Instruct-v0.3", 32, 32, 8, 128, 4096, 14336, 32768, False, 32768), ("mistralai/Mistral-7B-v0.3",)),
)

_BY_NAME: dict[str, ModelSpec] = {}
for _model, _aliases in _BUILTIN:
    for _name in (_model.name, *_aliases):
        _BY_NAME[_name.lower()] = _model


def lookup(model: str) -> ModelSpec | None:
    """The built-in spec for a Hugging Face id (case-insensitive), or None."""
    return _BY_NAME.get(model.lower())


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _group_overhead(bits: float, group_size: Any, zero_points: bool) -> float:
    """Bytes per parameter of a group-quantized layer: the packed weights plus one fp16
    scale (and a packed zero point) per group; per-channel (group_size -1 or none) is ~0."""
    if not isinstance(group_size, int) or group_size <= 0:
        return bits / 8
    return bits / 8 + (2 + (bits / 8 if zero_points else 0)) / group_size


def quant_spec(config: Mapping[str, Any]) -> QuantSpec | None:
    """The quantization of a checkpoint from its config.json, None when it has none.
    ModelConfigError for a method hostkit cannot size."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method in ("awq", "gptq"):
        bits = _first(quant, "bits", "w_bit") or 4
        group = _first(quant, "group_size", "q_group_size")
        return QuantSpec(method, _group_overhead(bits, group, zero_points=True), bool(quant.get("lm_head", False)))
    if method in ("fp8", "fbgemm_fp8"):
        return QuantSpec(method, 1.0)
    if method == "bitsandbytes":
        if quant.get("load_in_8bit"):
            return QuantSpec(method, 1.0)
        # 4-bit blocks of 64 with an fp32 absmax each, or an 8-bit absmax when doubly quantized.
        absmax = 1 / 64 if quant.get("bnb_4bit_use_double_quant", True) else 4 / 64
        return QuantSpec(method, 0.5 + absmax)
    if method == "compressed-tensors":
        weights = [
            group.get("weights") for group in (quant.get("config_groups") or {}).values() if isinstance(group, Mapping)
        ]
        weights = [w for w in weights if isinstance(w, Mapping) and isinstance(w.get("num_bits"), int)]
        if not weights:
            raise ModelConfigError("compressed-tensors quantization_config without config_groups weights num_bits")
        w = weights[0]
        zero_points = not w.get("symmetric", True)
        ignored = quant.get("ignore") or []
        return QuantSpec(method, _group_overhead(w["num_bits"], w.get("group_size"), zero_points), "lm_head" not in ignored)
    raise ModelConfigError(f"quantization method {method or '?'} in config.json is not sized by hostkit")


def _moe_spec(config: Mapping[str, Any], intermediate: int) -> MoeSpec | None:
    experts = _first(config, "num_local_experts", "num_experts", "n_routed_experts")
    if not isinstance(experts, int) or experts <= 1:
        return None
    if config.get("mlp_only_layers") or config.get("first_k_dense_replace"):
        raise ModelConfigError("mixture-of-experts models with dense layers in between are not sized by hostkit")
    return MoeSpec(
        experts=experts,
        experts_per_token=_first(config, "num_experts_per_tok", "top_k") or 2,
        expert_intermediate=_first(config, "moe_intermediate_size") or intermediate,
        shared_intermediate=_first(config, "shared_expert_intermediate_size") or 0,
    )


def spec_from_hf_config(name: str, config: Mapping[str, Any]) -> ModelSpec:
    """A spec from a decoder's config.json: dense or mixture-of-experts, quantized or not.
    ModelConfigError for what hostkit cannot size (multimodal, MLA attention, unknown
    quantization)."""
    if isinstance(config.get("text_config"), Mapping):
        raise ModelConfigError(f"{name}: multimodal configs (text_config) are not sized by hostkit")
    if config.get("kv_lora_rank"):
        raise ModelConfigError(f"{name}: multi-head latent attention (kv_lora_rank) is not sized by hostkit")

    layers = _first(config, "num_hidden_layers", "num_layers", "n_layer")
    heads = _first(config, "num_attention_heads", "n_head")
    hidden = _first(config, "hidden_size", "n_embd")
    intermediate = _first(config, "intermediate_size", "ffn_hidden_size", "moe_intermediate_size")
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
    try:
        quantization = quant_spec(config)
        moe = _moe_spec(config, intermediate)
    except ModelConfigError as error:
        raise ModelConfigError(f"{name}: {error}") from None
    return ModelSpec(
        name,
        layers,
        heads,
        kv_heads,
        head_dim,
        hidden,
        intermediate,
        vocab,
        max_len,
        DTYPE_BYTES[dtype_name],
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        moe=moe,
        quantization=quantization,
    )
