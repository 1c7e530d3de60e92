"""A realistic fleet: two groups of GPU hosts, with group data and per-host overrides.

Run: pyinfra inventories/example_fleet.py deploys/vllm_host.py
     hostkit plan inventories/example_fleet.py --facts FACTS.json   (review without connecting)
     hostkit rollout inventories/example_fleet.py --batches 1,25%,100%

Every key is documented in README.md ("Inventory keys"). The API key is read from the
environment of the machine running pyinfra, so it never sits in the repository.
"""

import os

_common = {
    "ssh_user": "root",
    "vllm_version": "0.33.0",
    "vllm_command": "/opt/vllm/bin/vllm",
    "vllm_api_key": os.environ.get("VLLM_API_KEY"),
    "gpu_min_driver": "550.54.15",
    "swap_size": "16G",
    "sysctl": {"vm.swappiness": 10},
    "thp_enabled": "madvise",
    "thp_defrag": "defer",
}

# 8x H200 hosts serving a 70B model across all GPUs.
h200_llama70b = (
    [
        ("gpu-a01.example.net", {"rollout_order": 1}),
        ("gpu-a02.example.net", {}),
        ("gpu-a03.example.net", {}),
        ("gpu-a04.example.net", {}),
    ],
    {
        **_common,
        "gpu_count": 8,
        "vllm_model": "meta-llama/Llama-3.1-70B-Instruct",
        "vllm_tensor_parallel_size": 8,
        "vllm_max_model_len": 32768,
        "vllm_gpu_memory_utilization": 0.85,
        "vllm_enable_chunked_prefill": True,
        "vllm_max_num_batched_tokens": 8192,
        "vllm_max_num_seqs": "auto",
    },
)

# 1x H200 hosts serving a 7B model; instance-store NVMe that comes back blank.
h200_qwen7b = (
    [
        ("gpu-b01.example.net", {}),
        ("gpu-b02.example.net", {}),
    ],
    {
        **_common,
        "gpu_count": 1,
        "nvme_device": "/dev/nvme1n1",
        "vllm_model": "Qwen/Qwen2.5-7B-Instruct",
        "vllm_max_model_len": 32768,
        "vllm_gpu_memory_utilization": 0.85,
        "vllm_max_num_seqs": 64,
        "vllm_max_num_batched_tokens": 6144,
    },
)
