"""A tiny Llama model made here, from a fixed seed: nothing comes from a model hub.

Two layers, hidden 256, 4 attention heads, 2 KV heads, head_dim 64 (vLLM's CPU attention
backend refuses 16), a byte-level BPE tokenizer trained on the lines below, random bf16
weights (about 2.7 MB). Its text is noise; the server, scheduler, KV cache, API and process
tree that serve it are real vLLM.

`cached_model(python)` makes it once with the real-vLLM venv's python (it has torch, tokenizers
and safetensors) and caches it under a key of this file and the lock file: the same torch and
tokenizers give the same bytes (tests/realvllm/test_tiny_model.py checks).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

SEED = 20261201
VOCAB_SIZE = 320
HIDDEN = 256
INTERMEDIATE = 512
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
MAX_POSITIONS = 2048
SPECIAL_TOKENS = ["<s>", "</s>"]
TRAINING_LINES = [
    "vllm-hostkit provisions GPU hosts that serve vLLM.",
    "Swap on NVMe, kernel memory tuning and a memory-limited systemd unit.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am a tiny model and my text is noise.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000",
]


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TRAINING_LINES, trainer=trainer)
    return tokenizer


def config(vocab_size: int, bos: int, eos: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": bos,
        "eos_token_id": eos,
    }


def weight_shapes(vocab_size: int) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (vocab_size, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (vocab_size, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        shapes.update({
            f"{prefix}.input_layernorm.weight": (HIDDEN,),
            f"{prefix}.post_attention_layernorm.weight": (HIDDEN,),
            f"{prefix}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            f"{prefix}.self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            f"{prefix}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{prefix}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        })
    return shapes


def random_weights(vocab_size: int):
    import torch

    generator = torch.Generator().manual_seed(SEED)
    weights = {}
    for name, shape in sorted(weight_shapes(vocab_size).items()):
        if name.endswith("norm.weight"):
            weights[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            weights[name] = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
    return weights


def write_model(out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    vocab_size = tokenizer.get_vocab_size()
    bos, eos = (tokenizer.token_to_id(token) for token in SPECIAL_TOKENS)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL_TOKENS[0],
        "eos_token": SPECIAL_TOKENS[1], "model_max_length": MAX_POSITIONS}, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(config(vocab_size, bos, eos), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}) + "\n")
    save_file(random_weights(vocab_size), str(out / "model.safetensors"), metadata={"format": "pt"})


MAKE_TIMEOUT_S = 300


def model_key(lock_key: str) -> str:
    return hashlib.sha256(Path(__file__).read_bytes() + lock_key.encode()).hexdigest()[:16]


def make_model(python: Path, out: Path) -> None:
    try:
        subprocess.run([str(python), __file__, str(out)], check=True, timeout=MAKE_TIMEOUT_S,
                       capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"making the tiny model took over {MAKE_TIMEOUT_S} s") from None
    except subprocess.CalledProcessError as error:
        raise RuntimeError(f"making the tiny model failed ({error.returncode}): {error.stderr[-2000:]}") from None


def cached_model(python: Path, lock_key: str, root: Path) -> Path:
    """The model directory under root, made with python (the real-vLLM venv's) if missing."""
    final = root / f"tiny-llama-{model_key(lock_key)}"
    if (final / "model.safetensors").is_file():
        return final
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    make_model(python, tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


if __name__ == "__main__":
    write_model(Path(sys.argv[1]))
