"""What vLLM will find for its KV cache on each GPU: the memory model behind the planner.

Pure: no I/O. vLLM sizes its KV cache at start-up by profiling one forward pass and
subtracting what it saw from `gpu_memory_utilization` x the GPU total it sees:

    KV = utilization x (nvidia-smi total - driver reserve)
         - weights - activation peak - non-torch memory - CUDA graphs (from 0.21)

Each term below is named, with where its figure comes from. The calibration set
(tests/unit/fixtures/calibration/vllm_startups.json, real start-up logs) checks the whole;
tests/unit/test_planner_calibration.py prints how close it comes. Constants marked
"fitted" were fitted on the cases named beside them and are checked on all the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from hostkit.vllm.flags import V1_DEFAULT_FROM
from hostkit.vllm.model_catalog import ModelSpec
from hostkit.sizes import GIB, KIB

# The GPU total vLLM sees (torch.cuda.mem_get_info) is below nvidia-smi's memory.total.
# H200: 143771 MiB to nvidia-smi, 143155.9 MiB to torch 2.11 / CUDA 13.0 (measured on the
# project's H200 on 2026-12-01): 0.60 GiB. H100 80GB HBM3: 81559 MiB (79.65 GiB) to
# nvidia-smi (vLLM issue 55169's output) and 79.19 GiB in vLLM's logs (calibration cases
# v0.19.0-*): 0.46 GiB. Other GPUs: the middle of the 0.4-0.6 GiB seen on them.
DRIVER_RESERVED_BY_GPU = {"h200": int(0.60 * GIB), "h100": int(0.46 * GIB)}
DRIVER_RESERVED = int(0.50 * GIB)
# CUDA context + cuBLAS workspace, measured on an H200 with torch 2.11 / CUDA 13.0: 0.51 GiB
# after CUDA initialisation, 0.58 GiB outside the allocator after a bf16 matmul (measured
# again on 2026-12-01: 0.514 and 0.581 GiB). vLLM V1
# takes it before profiling ("init_cuda_memory 0.51 GiB" in the v0.19.0 logs), so it sits
# beside the utilization budget, not inside it: shown, not subtracted.
CUDA_CONTEXT = int(0.58 * GIB)
# Memory outside torch's allocator that grows during profiling (NCCL, custom all-reduce),
# one GPU: 0.24-0.27 GiB in the v0.19.0 logs and the 0.18.0 run of the version sweep,
# 0.13-0.14 GiB from 0.11 to 0.17 (version sweep, v0.11 document), 0.03-0.35 GiB in V0 logs.
NON_TORCH_ONE_GPU = int(0.25 * GIB)
NON_TORCH_ONE_GPU_V1_BEFORE_018 = int(0.13 * GIB)
# With TP > 1 the communication buffers vLLM counts: 2.06-2.21 GiB per GPU in every v0.19.0
# TP 2 and TP 4 run (Llama-3.1-8B, Qwen2.5-7B, Llama-3.3-70B, Mixtral) against 0.25 on one;
# 0.54-0.55 GiB in the v0.11 document's TP 2 runs; none in 0.10.1.1's (A100 logs, the TP 2
# KV figures leave 0.14 GiB for it). 0.18 is where the one-GPU figure rose too.
COMM_BUFFERS_FROM_018 = int(1.85 * GIB)
COMM_BUFFERS_011_TO_017 = int(0.42 * GIB)
# V1 profiles one batch of max_num_batched_tokens; its peak is a per-token term plus the
# sampler's logits for max_num_seqs sequences (float32, several copies). Fitted on
# Llama-3.1-8B (1.89 GiB) and CodeLlama-7b (0.77 GiB) at 8192 tokens and 1024 sequences
# (v0.19.0): vocabularies 128256 and 32016, the same hidden size.
ACTIVATION_V1_PER_TOKEN_HIDDEN = 12  # bytes per token per hidden unit
ACTIVATION_V1_PER_SEQUENCE_VOCAB = 12.5  # bytes per sampled sequence per vocabulary entry
# From 0.11 to 0.16 the sampler's profile took about three times that: Qwen3-14B 5.64 GiB
# in 0.15.0 and 0.16.0, 2.23 GiB from 0.17.0 (version sweep); 4.76-5.64 GiB in the v0.11
# document. Fitted on its Llama-3.1-8B and Qwen3-32B runs. 0.10.1.1 (A100 logs) is small.
ACTIVATION_V1_PER_SEQUENCE_VOCAB_011_TO_016 = 35.5
# Mixture-of-experts layers add their routing and expert buffers: fitted on Mixtral-8x7B
# (1.21 GiB), Qwen3-30B-A3B (2.68) and Qwen1.5-MoE-A2.7B (2.47) at 8192 tokens (v0.19.0).
ACTIVATION_MOE_PER_TOKEN = 72 * KIB
# V0 (before 0.8) profiled max_num_batched_tokens tokens too, which without chunked prefill
# is the whole max_model_len, and sampled 256 sequences. Least squares on issue 10517's
# Llama-3.1-8B at 20000 tokens (2.07 GiB), PR 10511's Llama-3-8B at 8192 (1.26 GiB) and the
# Qwen2.5-Math-1.5B case at 4096 (1.40 GiB).
ACTIVATION_V0_PER_TOKEN_HIDDEN = 16
ACTIVATION_V0_VOCAB = 8 * KIB  # bytes per vocabulary entry (256 sequences' logits)
V0_SAMPLED_SEQUENCES = 256
# Defaults vLLM picks when the command line says nothing: on GPUs like H100 (70 GiB or more,
# not an A100) 8192 batched tokens and 1024 sequences ("Defaulting max_num_batched_tokens to
# 8192", "Defaulting max_num_seqs to 1024 for OPENAI_API_SERVER" in the v0.19.0 logs), else
# 2048 and 256 ("Chunked prefill is enabled with max_num_batched_tokens=2048" on A100 80GB,
# 0.10.1.1).
V1_LARGE_GPU_BATCHED_TOKENS = 8192
V1_LARGE_GPU_MAX_NUM_SEQS = 1024
V1_DEFAULT_BATCHED_TOKENS = 2048
DEFAULT_MAX_NUM_SEQS = 256
LARGE_GPU = 70 * GIB
V0_DEFAULT_BATCHED_TOKENS = 2048
# V0 turned chunked prefill on by itself above 32k tokens of context: issue 10517's 35k run
# peaks lower (15.05 GiB) than its 20k run (17.06 GiB).
V0_AUTO_CHUNKED_ABOVE = 32768
# CUDA graphs: until 0.21 vLLM captures them after sizing the KV cache, from outside the
# budget. From 0.21 it profiles them first and takes them from the KV cache
# (eugr/spark-vllm-docker issue 396: "CUDA-graph memory profiling (default since v0.21)
# makes 0.80 effectively 0.758"). Their size follows the capture sizes, so max_num_seqs:
# 0.51-1.85 GiB, mean 1.03, captured on H100 with 1024 sequences (v0.19.0 logs); 0.42 GiB
# estimated with the 256-sequence default on a 47 GiB SM89 GPU (vLLM PR 57047's log); 0.17
# and 0.36 GiB estimated in gpustack/runner PR 251 and noonghunna/club-3090 issue 127.
CUDA_GRAPHS_PROFILED_FROM = (0, 21, 0)
CUDA_GRAPHS_LARGE_GPU = int(1.03 * GIB)
CUDA_GRAPHS_SMALLER_GPU = int(0.42 * GIB)
BLOCK_SIZE = 16  # vLLM's default KV block size, in tokens


@dataclass(frozen=True)
class EngineSettings:
    """The engine settings that move vLLM's memory arithmetic (None = vLLM's default)."""

    release: tuple[int, int, int]
    tensor_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    chunked_prefill: bool | None = None
    enforce_eager: bool = False
    gpu_name: str = ""
    weight_dtype_bytes: int = 2
    linear_bytes_per_param: float = 2.0
    kv_dtype_bytes: int = 2
    cpu_offload_bytes: int = 0


@dataclass(frozen=True)
class MemoryTerm:
    name: str
    bytes: int
    why: str
    subtracted: bool = True  # False: shown for the record, outside vLLM's budget


@dataclass(frozen=True)
class GpuMemoryEstimate:
    gpu_seen_bytes: int
    terms: tuple[MemoryTerm, ...]
    kv_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int

    def term(self, name: str) -> MemoryTerm:
        return next(t for t in self.terms if t.name == name)


def driver_reserved(gpu_name: str) -> int:
    """nvidia-smi's memory.total minus the total vLLM sees, for a GPU of this name."""
    name = gpu_name.lower()
    return next((reserve for key, reserve in DRIVER_RESERVED_BY_GPU.items() if key in name), DRIVER_RESERVED)


def _is_v1(s: EngineSettings) -> bool:
    return s.release >= V1_DEFAULT_FROM


def _large_gpu_defaults(s: EngineSettings, gpu_seen_bytes: int) -> bool:
    return _is_v1(s) and gpu_seen_bytes >= LARGE_GPU and "a100" not in s.gpu_name.lower()


def profiled_tokens(s: EngineSettings, gpu_seen_bytes: int) -> int:
    """Tokens in vLLM's profiling batch: max_num_batched_tokens, or the whole context when
    prompts are not prefilled in chunks."""
    chunked = s.chunked_prefill
    if chunked is None:
        chunked = _is_v1(s) or s.max_model_len > V0_AUTO_CHUNKED_ABOVE
    if _is_v1(s):
        default = V1_LARGE_GPU_BATCHED_TOKENS if _large_gpu_defaults(s, gpu_seen_bytes) else V1_DEFAULT_BATCHED_TOKENS
    else:
        default = V0_DEFAULT_BATCHED_TOKENS
    batched = s.max_num_batched_tokens or default
    return batched if chunked else max(batched if s.max_num_batched_tokens else 0, s.max_model_len, default)


def activation_peak(spec: ModelSpec, s: EngineSettings, gpu_seen_bytes: int) -> tuple[int, str]:
    tokens = profiled_tokens(s, gpu_seen_bytes)
    scale = s.weight_dtype_bytes / 2  # the per-token buffers are in the model's dtype
    if _is_v1(s):
        default_seqs = V1_LARGE_GPU_MAX_NUM_SEQS if _large_gpu_defaults(s, gpu_seen_bytes) else DEFAULT_MAX_NUM_SEQS
        seqs = s.max_num_seqs or default_seqs
        per_token = ACTIVATION_V1_PER_TOKEN_HIDDEN * spec.hidden * scale + (ACTIVATION_MOE_PER_TOKEN if spec.moe else 0)
        heavy_sampler = (0, 11, 0) <= s.release < (0, 17, 0)
        per_logit = ACTIVATION_V1_PER_SEQUENCE_VOCAB_011_TO_016 if heavy_sampler else ACTIVATION_V1_PER_SEQUENCE_VOCAB
        logits = per_logit * seqs * spec.vocab
        why = f"{tokens} profiled tokens x hidden {spec.hidden}, and {seqs} sequences' logits over {spec.vocab} tokens"
    else:
        per_token = ACTIVATION_V0_PER_TOKEN_HIDDEN * spec.hidden * scale
        logits = ACTIVATION_V0_VOCAB * spec.vocab
        why = f"{tokens} profiled tokens x hidden {spec.hidden}, and {V0_SAMPLED_SEQUENCES} sequences' logits"
    return int(tokens * per_token + logits), why


def non_torch(s: EngineSettings) -> tuple[int, str]:
    one_gpu = NON_TORCH_ONE_GPU_V1_BEFORE_018 if _is_v1(s) and s.release < (0, 18, 0) else NON_TORCH_ONE_GPU
    comm = 0
    if s.tensor_parallel_size > 1 and s.release >= (0, 18, 0):
        comm = COMM_BUFFERS_FROM_018
    elif s.tensor_parallel_size > 1 and s.release >= (0, 11, 0):
        comm = COMM_BUFFERS_011_TO_017
    why = "allocations outside torch" + (f", TP {s.tensor_parallel_size} communication buffers" if comm else "")
    return one_gpu + comm, why


def estimate(spec: ModelSpec, s: EngineSettings, nvidia_smi_total_bytes: int) -> GpuMemoryEstimate:
    """vLLM's KV cache on each GPU for `spec` under `s`, term by term."""
    tp = s.tensor_parallel_size
    reserve = driver_reserved(s.gpu_name)
    seen = nvidia_smi_total_bytes - reserve
    budget = int(seen * s.gpu_memory_utilization)
    weights = max(0, spec.weight_bytes_per_gpu(tp, s.weight_dtype_bytes, s.linear_bytes_per_param) - s.cpu_offload_bytes)
    activation, activation_why = activation_peak(spec, s, seen)
    outside_torch, outside_torch_why = non_torch(s)
    graphs = 0 if s.enforce_eager else CUDA_GRAPHS_LARGE_GPU if _large_gpu_defaults(s, seen) else CUDA_GRAPHS_SMALLER_GPU
    graphs_taken = graphs > 0 and s.release >= CUDA_GRAPHS_PROFILED_FROM
    terms = (
        MemoryTerm("driver reserve", reserve, "nvidia-smi's total minus the total vLLM sees", False),
        MemoryTerm("CUDA context", CUDA_CONTEXT, "CUDA context and cuBLAS workspace, beside vLLM's budget", False),
        MemoryTerm("weights", weights, f"{spec.name} over {tp} GPU(s)"),
        MemoryTerm("activation peak", activation, activation_why),
        MemoryTerm("non-torch", outside_torch, outside_torch_why),
        MemoryTerm(
            "CUDA graphs",
            graphs,
            "profiled and taken from the KV cache (vLLM 0.21 and later)" if graphs_taken else
            ("none (enforce_eager)" if not graphs else "captured after the KV cache is sized (before 0.21)"),
            graphs_taken,
        ),
    )
    kv = budget - sum(t.bytes for t in terms if t.subtracted)
    per_token = spec.kv_bytes_per_token(tp, s.kv_dtype_bytes)
    tokens = max(0, kv) // (per_token * BLOCK_SIZE) * BLOCK_SIZE
    return GpuMemoryEstimate(seen, terms, kv, per_token, tokens)
