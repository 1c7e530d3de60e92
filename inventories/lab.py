"""The lab hosts started by `python -m hostkit_lab up` (connection data from .lab/lab.json).

Lab hosts have no GPU and no internet: vLLM there is the lab stand-in (hostkit_lab/standin),
installed by `make demo` and by the end-to-end tests, except on hosts named realvllm*
(`make demo-real`), which hostkit gives real vLLM's CPU build (hostkit_lab/real_vllm.py).
Everything else is real.
"""

from hostkit_lab import Lab, real_vllm

LAB_DATA = {
    "gpu_required": False,
    "nvme_device": "/dev/nvme0n1",
    # Small enough to write quickly under qemu TCG; production uses "auto".
    "swap_size": "1G",
    "vllm_model": "Qwen/Qwen2.5-0.5B-Instruct",
    "vllm_max_model_len": 4096,
    "vllm_ready_timeout": 180,
    "vllm_api_key": "lab-secret-not-for-production",
}

lab_hosts = [
    (lab_host.name, {**lab_host.pyinfra_data(), **LAB_DATA,
                     **(real_vllm.DATA if real_vllm.serves_real_vllm(lab_host.name) else {})})
    for lab_host in Lab().hosts()
]
