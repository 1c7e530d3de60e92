"""One host, `@local`: the machine the command runs on, a self-hosted CI runner on a GPU host.

pyinfra runs the deploy through its local connector and `hostkit verify` through testinfra's
local backend: no ssh, no DNS lookup of the name, the same checks and JUnit as over ssh.

Run: examples/ci/self-check.sh provision examples/ci/inventory.py   (or verify)

Every key is documented in README.md ("Inventory keys"); edit them for your host. The API key
and the Hugging Face token come from the job's environment (CI secrets), never the repository.
A runner that is not root needs passwordless sudo and `"_sudo": True` here.
"""

import os

hosts = [
    ("@local", {
        "vllm_version": "0.33.0",
        "vllm_command": "/opt/vllm/bin/vllm",
        "vllm_model": os.environ.get("VLLM_MODEL", "Qwen/Qwen2.5-7B-Instruct"),
        "vllm_api_key": os.environ.get("VLLM_API_KEY"),
        "vllm_hf_token": os.environ.get("HF_TOKEN"),
        "gpu_count": int(os.environ.get("GPU_COUNT", "1")),
        "gpu_min_driver": "550.54.15",
        "swap_size": "16G",
        "vllm_max_model_len": 32768,
        "vllm_gpu_memory_utilization": 0.85,
    }),
]
