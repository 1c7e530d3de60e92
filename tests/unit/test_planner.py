import pytest

from hostkit.desired.vllm_unit import service_environment
from hostkit.vllm import model_catalog
from hostkit.vllm.model_catalog import ModelConfigError, spec_from_hf_config
from hostkit.plan.planner import PlanError, plan_host
from hostkit.plan.planning_facts import FilesystemFact, GpuMemoryFact, NvmeDeviceFact, PlanningFacts, SwapFact
from hostkit.profile.validation import profile_from_data
from hostkit.sizes import GIB, KIB, MIB, format_size

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
H200_MIB = 143771  # the reference H200 host


def h200(index=0, used_mib=0):
    return GpuMemoryFact(index=index, name="NVIDIA H200", memory_total_mib=H200_MIB, memory_used_mib=used_mib)


def nvme_fs(mountpoint="/mnt/nvme", size=3500 * GIB, avail=3000 * GIB, fstype="ext4"):
    return FilesystemFact(
        mountpoint=mountpoint, device="/dev/nvme0n1", fstype=fstype, on_nvme=True, size_bytes=size, avail_bytes=avail
    )


ROOT_SSD = FilesystemFact(mountpoint="/", device="/dev/sda1", fstype="ext4", on_nvme=False, size_bytes=100 * GIB, avail_bytes=60 * GIB)


def facts(**overrides):
    values = dict(
        ram_total_bytes=64 * GIB,
        ram_available_bytes=60 * GIB,
        cpu_count=16,
        cgroup_version=2,
        systemd_version=252,
        filesystems=[ROOT_SSD, nvme_fs()],
        nvme_devices=[],
        swaps=[],
        gpus=[h200()],
    )
    values.update(overrides)
    return PlanningFacts(**values)


def plan(data=None, host_facts=None, model=QWEN7):
    profile = profile_from_data("gpu-a1", {"vllm_model": model, **(data or {})})
    return plan_host(profile, host_facts or facts(), host_name="gpu-a1")


def refused(data=None, host_facts=None, model=QWEN7) -> PlanError:
    with pytest.raises(PlanError) as caught:
        plan(data, host_facts, model)
    return caught.value


# --- model arithmetic (field notes) ---------------------------------------------------


@pytest.mark.parametrize(
    ("model", "kib_per_token"),
    [(QWEN7, 56), (LLAMA8, 128), ("THUDM/glm-4-9b-chat", 40)],
)
def test_kv_bytes_per_token_field_note_examples(model, kib_per_token):
    assert model_catalog.lookup(model).kv_bytes_per_token(1, 2) == kib_per_token * KIB


def test_kv_heads_split_across_tensor_parallel_ranks_but_never_below_one():
    llama = model_catalog.lookup(LLAMA8)  # 8 KV heads
    assert llama.kv_bytes_per_token(2, 2) == 64 * KIB
    assert llama.kv_bytes_per_token(8, 2) == 16 * KIB
    qwen = model_catalog.lookup(QWEN7)  # 4 KV heads: TP 8 still keeps one per GPU
    assert qwen.kv_bytes_per_token(8, 2) == 2 * 28 * 1 * 128 * 2
    assert qwen.kv_bytes_per_token(1, 1) == 28 * KIB  # fp8 KV cache


def test_qwen_7b_weights_are_14_2_gib_in_bf16():
    assert format_size(model_catalog.lookup(QWEN7).weight_bytes_per_gpu(1, 2, 2)) == "14.2G"


def test_lookup_is_case_insensitive_and_knows_aliases():
    assert model_catalog.lookup("qwen/qwen2.5-7b-instruct").name == QWEN7
    assert model_catalog.lookup("meta-llama/Meta-Llama-3.1-8B-Instruct").name == LLAMA8
    assert model_catalog.lookup("someone/unknown-model") is None


QWEN7_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
}
GLM4_CONFIG = {  # ChatGLM-style names
    "num_layers": 40,
    "hidden_size": 4096,
    "ffn_hidden_size": 13696,
    "kv_channels": 128,
    "num_attention_heads": 32,
    "multi_query_group_num": 2,
    "padded_vocab_size": 151552,
    "seq_length": 131072,
    "torch_dtype": "bfloat16",
}


def test_spec_from_hf_config_matches_the_builtin_table():
    spec = spec_from_hf_config("/models/qwen7", QWEN7_CONFIG)
    assert spec.kv_bytes_per_token(1, 2) == 56 * KIB
    assert abs(spec.params - 7.62e9) / 7.62e9 < 0.01
    glm = spec_from_hf_config("/models/glm4", GLM4_CONFIG)
    assert glm.kv_bytes_per_token(1, 2) == 40 * KIB
    assert abs(glm.params - 9.4e9) / 9.4e9 < 0.01


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({**QWEN7_CONFIG, "num_experts": 8, "mlp_only_layers": [0]}, "dense layers in between"),
        ({**QWEN7_CONFIG, "kv_lora_rank": 512}, "latent attention"),
        ({**QWEN7_CONFIG, "quantization_config": {"quant_method": "hqq"}}, "hqq"),
        ({"text_config": QWEN7_CONFIG}, "multimodal"),
        ({k: v for k, v in QWEN7_CONFIG.items() if k != "num_hidden_layers"}, "num_hidden_layers"),
        ({**QWEN7_CONFIG, "torch_dtype": "int4"}, "torch_dtype"),
    ],
)
def test_spec_from_hf_config_refuses_what_it_cannot_size(config, message):
    with pytest.raises(ModelConfigError, match=message):
        spec_from_hf_config("/models/x", config)


# --- swap ---------------------------------------------------------------------------


@pytest.mark.parametrize(("ram_gib", "swap_gib"), [(4, 8), (12, 12), (64, 16), (2048, 16)])
def test_auto_swap_is_one_x_ram_clamped_to_8_16_gib(ram_gib, swap_gib):
    swap = plan(host_facts=facts(ram_total_bytes=ram_gib * GIB)).swap
    assert swap.size_bytes == swap_gib * GIB
    assert swap.path == "/mnt/nvme/vllm-hostkit.swap"
    assert "clamped to 8G-16G" in swap.reason


def test_auto_swap_is_capped_by_free_space_minus_the_reserve():
    # 100G filesystem, 10G free: reserve max(1G, 5% of 100G) = 5G, so 5G of swap.
    small = nvme_fs(size=100 * GIB, avail=10 * GIB)
    swap = plan(host_facts=facts(filesystems=[ROOT_SSD, small])).swap
    assert swap.size_bytes == 5 * GIB
    assert "capped to 5G" in swap.reason


def test_an_existing_hostkit_swap_file_counts_as_free_space():
    small = nvme_fs(size=100 * GIB, avail=10 * GIB)
    existing = SwapFact(path="/mnt/nvme/vllm-hostkit.swap", size_bytes=16 * GIB, used_bytes=0, priority=10)
    swap = plan(host_facts=facts(filesystems=[ROOT_SSD, small], swaps=[existing])).swap
    assert swap.size_bytes == 16 * GIB  # 10G free + 16G of our own file - 5G reserve


def test_a_resize_needs_room_for_the_new_file_beside_the_old_one():
    # 20G free, reserve 5G: a 16G file exists, growing to 24G needs 24G free beside it.
    small = nvme_fs(size=100 * GIB, avail=20 * GIB)
    existing = SwapFact(path="/mnt/nvme/vllm-hostkit.swap", size_bytes=16 * GIB, used_bytes=0, priority=10)
    error = refused({"swap_size": "24G"}, facts(filesystems=[ROOT_SSD, small], swaps=[existing]))
    assert "host gpu-a1: swap_size: 24G does not fit in /mnt/nvme" in str(error)
    # Keeping the same size needs no new room.
    kept = plan({"swap_size": "16G"}, facts(filesystems=[ROOT_SSD, small], swaps=[existing])).swap
    assert kept.size_bytes == 16 * GIB


def test_auto_swap_keeps_a_file_that_free_space_capped_earlier():
    # The 6G file was capped by space; free space moved since: no resize churn.
    small = nvme_fs(size=100 * GIB, avail=9 * GIB)
    existing = SwapFact(path="/mnt/nvme/vllm-hostkit.swap", size_bytes=6 * GIB, used_bytes=0, priority=10)
    swap = plan(host_facts=facts(filesystems=[ROOT_SSD, small], swaps=[existing])).swap
    assert swap.size_bytes == 6 * GIB


def test_auto_swap_dir_picks_the_nvme_filesystem_with_most_free_space():
    a = nvme_fs("/mnt/a", avail=100 * GIB)
    b = nvme_fs("/mnt/b", avail=900 * GIB)
    tmp = nvme_fs("/dev/shm", avail=5000 * GIB, fstype="tmpfs")
    assert plan(host_facts=facts(filesystems=[ROOT_SSD, a, b, tmp])).swap.path == "/mnt/b/vllm-hostkit.swap"


def test_explicit_swap_size_must_fit():
    small = nvme_fs(size=100 * GIB, avail=10 * GIB)
    error = refused({"swap_size": "8G"}, facts(filesystems=[ROOT_SSD, small]))
    assert str(error).startswith("host gpu-a1: swap_size: 8G does not fit in /mnt/nvme")


def test_explicit_swap_dir_uses_the_filesystem_that_holds_it():
    swap = plan({"swap_dir": "/var/lib/swap", "swap_size": "8G"}).swap
    assert swap.path == "/var/lib/swap/vllm-hostkit.swap" and swap.size_bytes == 8 * GIB


def test_swap_on_tmpfs_is_refused():
    shm = FilesystemFact(mountpoint="/dev/shm", device="tmpfs", fstype="tmpfs", on_nvme=False, size_bytes=32 * GIB, avail_bytes=32 * GIB)
    error = refused({"swap_dir": "/dev/shm"}, facts(filesystems=[ROOT_SSD, shm]))
    assert "host gpu-a1: swap_dir: /dev/shm is on tmpfs" in str(error)


def test_the_plan_refuses_every_filesystem_the_deploy_refuses():
    """One rule (hostkit.plan.swap_filesystems): a vfat or f2fs NVMe that the deploy's swap step would
    refuse is refused at plan time, and auto picks a filesystem the deploy accepts."""
    for fstype in ("vfat", "f2fs", "zfs"):
        odd = nvme_fs("/mnt/odd", avail=900 * GIB, fstype=fstype)
        error = refused({"swap_dir": "/mnt/odd"}, facts(filesystems=[ROOT_SSD, odd]))
        assert f"host gpu-a1: swap_dir: /mnt/odd is on {fstype}, which cannot hold a swap file" in str(error)
        assert refusal_in_deploy(fstype) in str(error)
    odd, ext4 = nvme_fs("/mnt/odd", avail=2000 * GIB, fstype="vfat"), nvme_fs("/mnt/b", avail=900 * GIB)
    assert plan(host_facts=facts(filesystems=[ROOT_SSD, odd, ext4])).swap.path == "/mnt/b/vllm-hostkit.swap"


def refusal_in_deploy(fstype: str) -> str:
    from hostkit.facts.storage import Mount, StorageInfo
    from hostkit.operations.swap import SwapRefused, fill_method

    storage = StorageInfo(mounts=(Mount(source="/dev/nvme0n1", mountpoint="/mnt/odd", fstype=fstype),))
    try:
        fill_method(storage, "/mnt/odd")
    except SwapRefused as refusal:
        return str(refusal).rsplit(": ", 1)[1]
    raise AssertionError(f"the deploy accepted {fstype}")


def test_auto_swap_dir_without_nvme_says_how_to_set_it():
    error = refused(host_facts=facts(filesystems=[ROOT_SSD]))
    assert "host gpu-a1: swap_dir:" in str(error)
    assert 'swap_dir = "/var/lib/swap"' in str(error) and "nvme_device" in str(error)


def test_disabled_swap_needs_no_filesystem():
    result = plan({"swap_enabled": False}, facts(filesystems=[ROOT_SSD]))
    assert result.swap.enabled is False and result.swap.path is None
    assert result.vllm.memory_swap_max_bytes == 0


# --- NVMe -----------------------------------------------------------------------------

BY_ID = "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1A2B3C4D5E6F7G8H"
BLANK = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB, by_id=BY_ID)


def test_blank_nvme_device_is_formatted_and_holds_swap_and_caches():
    result = plan({"nvme_device": "/dev/nvme1n1"}, facts(filesystems=[ROOT_SSD], nvme_devices=[BLANK]))
    assert (result.nvme.device, result.nvme.mount, result.nvme.fstype) == ("/dev/nvme1n1", "/mnt/nvme", "ext4")
    assert result.nvme.by_id == BY_ID
    assert result.swap.path == "/mnt/nvme/vllm-hostkit.swap" and result.swap.size_bytes == 16 * GIB
    assert result.swap.boot == "unit"  # the boot unit brings it back, no fstab line
    assert result.vllm.cache_dir == "/mnt/nvme/vllm-cache"
    environment = service_environment(result.vllm)
    assert environment["HF_HOME"] == "/mnt/nvme/vllm-cache/huggingface"
    assert environment["VLLM_CACHE_ROOT"] == "/mnt/nvme/vllm-cache/vllm"


def test_nvme_device_already_mounted_at_nvme_mount_stays_planned():
    prepared = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB, by_id=BY_ID, signatures=["ext4"], mountpoints=["/mnt/nvme"])
    result = plan({"nvme_device": "/dev/nvme1n1"}, facts(nvme_devices=[prepared]))
    assert result.nvme is not None and result.swap.path == "/mnt/nvme/vllm-hostkit.swap"


def test_hostkits_own_unmounted_nvme_filesystem_is_mounted_again():
    # A slow boot hit x-systemd.device-timeout: the fstab line (by UUID) names nvme_mount.
    unmounted = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB, by_id=BY_ID, signatures=["ext4"], mountpoints=[],
                               fstab_mountpoint="/mnt/nvme")
    result = plan({"nvme_device": "/dev/nvme1n1"}, facts(filesystems=[ROOT_SSD], nvme_devices=[unmounted]))
    assert result.nvme is not None and result.nvme.mount == "/mnt/nvme"
    assert any("mounted again" in note for note in result.notes)


def test_hostkits_labelled_filesystem_is_mounted_again_without_fstab():
    unmounted = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB, by_id=BY_ID, signatures=["ext4"],
                               label="vllm-hostkit")
    result = plan({"nvme_device": "/dev/nvme1n1"}, facts(filesystems=[ROOT_SSD], nvme_devices=[unmounted]))
    assert result.nvme is not None and any("mounted again" in note for note in result.notes)


def test_a_device_without_a_model_and_serial_link_is_refused():
    no_link = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB)
    error = refused({"nvme_device": "/dev/nvme1n1"}, facts(filesystems=[ROOT_SSD], nvme_devices=[no_link]))
    assert "/dev/nvme1n1 has no /dev/disk/by-id link by model and serial" in str(error)


def test_of_several_disks_the_plan_names_the_one_used():
    other = NvmeDeviceFact(path="/dev/nvme2n1", size_bytes=900 * GIB, by_id=BY_ID.replace("AWS1", "AWS9"))
    result = plan({"nvme_device": "/dev/nvme1n1"}, facts(filesystems=[ROOT_SSD], nvme_devices=[BLANK, other]))
    assert result.nvme.by_id == BY_ID
    assert f"nvme_device: /dev/nvme1n1 ({BY_ID}) is the one used; /dev/nvme2n1 left alone (no striping)" in result.notes


def test_swap_elsewhere_keeps_its_fstab_line():
    result = plan({"nvme_device": "/dev/nvme1n1", "swap_dir": "/var/lib/swap"},
                  facts(filesystems=[ROOT_SSD], nvme_devices=[BLANK]))
    assert result.nvme is not None and result.swap.boot == "fstab"


def test_nvme_device_with_data_elsewhere_is_refused():
    used = NvmeDeviceFact(path="/dev/nvme1n1", size_bytes=900 * GIB, by_id=BY_ID, signatures=["xfs"], mountpoints=[])
    error = refused({"nvme_device": "/dev/nvme1n1"}, facts(nvme_devices=[used]))
    assert "host gpu-a1: nvme_device: /dev/nvme1n1 holds xfs and is not mounted" in str(error)


def test_missing_nvme_device_is_refused():
    error = refused({"nvme_device": "/dev/nvme9n1"}, facts(nvme_devices=[BLANK]))
    assert "host gpu-a1: nvme_device: /dev/nvme9n1 is not on this host (NVMe devices: /dev/nvme1n1)" in str(error)


def test_cache_stays_on_the_default_dir_without_nvme():
    result = plan({"swap_dir": "/var/lib/swap"}, facts(filesystems=[ROOT_SSD]))
    assert result.vllm.cache_dir == "/var/cache/vllm"


# --- what the operations read: the GPU gate, monitoring, the snapshot scope ---------------


def test_the_plan_carries_what_the_operations_read_from_the_profile():
    """After validation only the planner reads the profile: the GPU gate, the driver hold,
    monitoring and the snapshot's scope reach the operations in the plan."""
    from hostkit.plan.scope import snapshot_scope

    data = {"gpu_count": 1, "gpu_tolerated_xids": [13], "gpu_hold_driver_packages": True, "monitoring_interval_s": 30,
            "monitoring_node_exporter": True, "monitoring_textfile_dir": "/srv/textfiles", "swap_dir": "/var/lib/swap"}
    result = plan(data, facts(filesystems=[ROOT_SSD]))
    assert (result.gpu.policy.count, result.gpu.policy.tolerated_xids, result.gpu.hold_driver_packages) == (1, {13}, True)
    assert (result.monitoring.enabled, result.monitoring.interval_s, result.monitoring.node_exporter,
            result.monitoring.textfile_dir) == (True, 30, True, "/srv/textfiles")
    assert result.scope == snapshot_scope(profile_from_data("gpu-a1", {"vllm_model": QWEN7, **data}))
    assert "scope" not in result.model_dump()  # plumbing: `hostkit plan --format json` leaves it out


# --- memory limits ----------------------------------------------------------------------


def test_auto_memory_limits_by_hand():
    result = plan().vllm
    ram = 64 * GIB
    memory_max = (ram - ram // 10) // GIB * GIB  # headroom 10% = 6.4G, then whole GiB down
    assert result.memory_max_bytes == memory_max == 57 * GIB
    memory_high = (memory_max - memory_max // 20) // GIB * GIB  # 5% below, whole GiB down
    assert result.memory_high_bytes == memory_high == 54 * GIB
    assert result.memory_swap_max_bytes == 8 * GIB  # half the 16G swap file


def test_small_hosts_keep_half_their_ram_up_to_2_gib():
    result = plan({"swap_dir": "/var/lib/swap", "swap_size": "1G"}, facts(ram_total_bytes=2 * GIB, filesystems=[ROOT_SSD])).vllm
    assert result.memory_max_bytes == 1 * GIB
    assert result.memory_high_bytes == 896 * MIB  # 1024M minus a 10% gap (102.4M), down to 128 MiB steps


@pytest.mark.parametrize("drift", [-40 * MIB, -4 * MIB, 3 * MIB, 60 * MIB])
def test_auto_limits_ignore_a_drift_of_memtotal(drift):
    """A kernel update moves MemTotal by some MiB (it reserves a little more or less)."""
    ram = int(503.6 * GIB)
    before, after = (plan(host_facts=facts(ram_total_bytes=total)).vllm for total in (ram, ram + drift))
    assert (after.memory_max_bytes, after.memory_high_bytes) == (before.memory_max_bytes, before.memory_high_bytes)
    assert before.memory_max_bytes % GIB == 0


def test_auto_swap_max_ignores_a_small_swap_resize():
    small, resized = (plan({"swap_size": size}).vllm.memory_swap_max_bytes for size in ("16G", "17G"))
    assert small == resized == 8 * GIB


def test_small_auto_limits_move_in_128_mib_steps():
    from hostkit.plan.planner import auto_limit

    assert auto_limit(8 * GIB - 1) == 8 * GIB - 128 * MIB
    assert auto_limit(8 * GIB + 1000 * MIB) == 8 * GIB
    assert auto_limit(1000 * MIB) == 896 * MIB


def test_cgroup_v1_has_no_memory_high_or_swap_max():
    result = plan({"vllm_memory_high": "40G"}, facts(cgroup_version=1))
    assert result.vllm.memory_max_bytes is not None
    assert result.vllm.memory_high_bytes is None and result.vllm.memory_swap_max_bytes is None
    assert result.vllm.cgroup_version == 1
    assert any("vllm_memory_high is ignored" in w for w in result.warnings)


def test_explicit_memory_high_above_auto_max_is_refused():
    error = refused({"vllm_memory_high": "63G"})
    assert "host gpu-a1: vllm_memory_high: 63G is above MemoryMax 57G" in str(error)


def test_warns_when_vllm_ram_estimate_exceeds_memory_max():
    result = plan({"vllm_memory_max": "6G"})
    assert any("4G-7G of host RAM" in w and "MemoryMax 6G" in w for w in result.warnings)


def test_pre_v1_swap_space_is_pinned_per_gpu():
    # 0.6.6: the default --swap-space 4 GiB x TP 2 adds 8G: 2x2+2 .. 2x4+3 = 6G..11G, +8G = 14G..19G
    result = plan(
        {"vllm_version": "0.6.6.post1", "vllm_tensor_parallel_size": 2, "vllm_memory_max": "16G"},
        facts(gpus=[h200(0), h200(1)]),
    )
    assert any("14G-19G of host RAM" in w and "--swap-space 4 GiB x 2" in w for w in result.warnings)


def test_cpu_offload_counts_against_host_ram():
    result = plan({"vllm_cpu_offload_gb": 10, "vllm_memory_max": "12G"})
    assert any("14G-17G" in w and "--cpu-offload-gb 10" in w for w in result.warnings)


# --- vLLM sizing against hand-computed numbers ---------------------------------------


def test_qwen_7b_on_one_h200_by_hand():
    # vLLM 0.33.0 (the default release) on the reference H200, every term of hostkit.plan.vllm_memory.
    result = plan({"vllm_gpu_memory_utilization": 0.9, "vllm_max_num_seqs": "auto"})
    sizing = result.vllm.sizing
    seen = 143771 * MIB - int(0.60 * GIB)  # nvidia-smi total minus the H200 driver reserve
    weights = 28 * (2 * 3584 * 28 * 128 + 2 * 3584 * 4 * 128 + 3 * 3584 * 18944) + 2 * 152064 * 3584
    assert weights == 7615283200  # parameters; bf16 is two bytes each
    activation = int(8192 * 12 * 3584 + 12.5 * 1024 * 152064)  # 8192 tokens, 1024 sequences' logits
    kv = int(seen * 0.9) - 2 * weights - activation - int(0.25 * GIB) - int(1.03 * GIB)
    assert sizing.kv_budget_bytes == kv
    assert sizing.kv_bytes_per_token == 57344
    assert sizing.kv_tokens == kv // (57344 * 16) * 16 == 2026288
    assert sizing.max_concurrent_at_max_model_len == 2026288 // 32768 == 61
    assert "--max-num-seqs" in result.vllm.argv
    assert result.vllm.argv[result.vllm.argv.index("--max-num-seqs") + 1] == "61"
    assert [t.name for t in sizing.terms] == [
        "driver reserve", "CUDA context", "weights", "activation peak", "non-torch", "CUDA graphs"
    ]


def test_expected_request_length_sizes_auto_max_num_seqs():
    result = plan({"vllm_gpu_memory_utilization": 0.9, "vllm_max_num_seqs": "auto", "vllm_expected_tokens_per_request": 16384})
    argv = result.vllm.argv
    assert argv[argv.index("--max-num-seqs") + 1] == str(2026288 // 16384) == "123"
    assert "max_num_seqs 123: requests of 16384 tokens (vllm_expected_tokens_per_request)" in " ".join(result.notes)
    assert (
        "max_num_seqs 123 against 2026288 KV tokens: 61 of them can be at max_model_len 32768 at once, "
        "123 at the expected 16384 tokens; longer requests beyond that wait or are preempted (vLLM's scheduler)"
    ) in result.notes
    short = plan({"vllm_max_num_seqs": "auto", "vllm_expected_tokens_per_request": 1000}).vllm.argv
    assert short[short.index("--max-num-seqs") + 1] == "256"  # the cap


def test_communication_buffers_only_with_tensor_parallelism():
    one = plan(model=LLAMA8).vllm.sizing
    two = plan({"vllm_tensor_parallel_size": 2}, facts(gpus=[h200(0), h200(1)]), model=LLAMA8).vllm.sizing
    non_torch = {s.tensor_parallel_size: next(t.bytes for t in s.terms if t.name == "non-torch") for s in (one, two)}
    assert non_torch == {1: int(0.25 * GIB), 2: int(0.25 * GIB) + int(1.85 * GIB)}


def test_cuda_graphs_are_taken_from_the_kv_cache_from_0_21():
    def graphs(data):
        return next(t for t in plan(data).vllm.sizing.terms if t.name == "CUDA graphs")

    assert (graphs({"vllm_version": "0.33.0"}).bytes, graphs({"vllm_version": "0.33.0"}).subtracted) == (int(1.03 * GIB), True)
    assert graphs({"vllm_version": "0.20.0"}).subtracted is False  # captured after the KV cache is sized
    assert graphs({"vllm_extra_args": {"--enforce-eager": True}}).bytes == 0


def test_without_chunked_prefill_the_activation_grows_with_the_context():
    # V0 (0.6.6) profiles the whole prompt: 8k and 16k differ by 8k tokens x hidden 3584 x 16 bytes.
    def activation(length):
        data = {"vllm_version": "0.6.6.post1", "vllm_max_model_len": length, "vllm_enable_chunked_prefill": False}
        return plan(data).vllm.sizing.activation_peak_bytes

    assert activation(16384) - activation(8192) == 8192 * 3584 * 16


def test_pre_quantized_checkpoints_are_sized_from_quantization_config():
    awq = {**QWEN7_CONFIG, "torch_dtype": "float16", "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    sizing = plan(model="/models/q", host_facts=facts(model_configs={"/models/q": awq})).vllm.sizing
    linear = 28 * (2 * 3584 * 28 * 128 + 2 * 3584 * 4 * 128 + 3 * 3584 * 18944)
    embeddings_and_head = 2 * 152064 * 3584 * 2  # fp16, never quantized
    assert sizing.weights_bytes_per_gpu == int(linear * (0.5 + 2.5 / 128) + embeddings_and_head)
    assert format_size(sizing.weights_bytes_per_gpu) == "5.2G"


def test_moe_experts_are_split_over_tensor_parallel_ranks():
    moe = {**QWEN7_CONFIG, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 1024}
    one = spec_from_hf_config("/m", moe)
    assert one.moe.experts == 8
    per_layer = 2 * 3584 * 28 * 128 + 2 * 3584 * 4 * 128 + 8 * 3 * 3584 * 1024
    assert one.weight_bytes_per_gpu(1, 2, 2) == 2 * (28 * per_layer + 2 * 152064 * 3584 + 28 * 3584 * 8)
    assert one.weight_bytes_per_gpu(2, 2, 2) == 2 * (28 * per_layer // 2 + 152064 * 3584 + 28 * 3584 * 8)


def test_default_utilization_comes_from_the_release():
    assert plan({"vllm_version": "0.17.1"}).vllm.sizing.gpu_memory_utilization == 0.9
    assert plan({"vllm_version": "0.20.0"}).vllm.sizing.gpu_memory_utilization == 0.92


def test_tensor_parallel_splits_weights_and_kv():
    result = plan({"vllm_tensor_parallel_size": 2}, facts(gpus=[h200(0), h200(1)]), model=LLAMA8)
    sizing = result.vllm.sizing
    llama = model_catalog.lookup(LLAMA8)
    assert sizing.weights_bytes_per_gpu == llama.weight_bytes_per_gpu(1, 2, 2) // 2
    assert format_size(sizing.weights_bytes_per_gpu) == "7.5G"  # vLLM logged 7.51 GiB (v0.19.0, TP 2)
    assert sizing.kv_bytes_per_token == 64 * KIB


def test_auto_max_num_seqs_is_capped_at_256_and_by_batch_tokens():
    short = {"vllm_max_model_len": 4096, "vllm_max_num_seqs": "auto"}
    assert plan(short).vllm.argv[-1] == "256"
    capped = plan({**short, "vllm_max_num_batched_tokens": 128}).vllm.argv
    assert capped[capped.index("--max-num-seqs") + 1] == "128"


def test_auto_chunked_prefill_for_long_contexts():
    argv = plan({"vllm_enable_chunked_prefill": "auto", "vllm_max_num_batched_tokens": "auto"}).vllm.argv
    assert "--enable-chunked-prefill" in argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "8192"
    short = plan(
        {"vllm_enable_chunked_prefill": "auto", "vllm_max_num_batched_tokens": "auto", "vllm_max_model_len": 4096}
    ).vllm.argv
    assert "--disable-chunked-prefill" in short
    assert short[short.index("--max-num-batched-tokens") + 1] == "4096"


def test_auto_batch_tokens_are_at_least_the_auto_max_num_seqs():
    argv = plan({"vllm_max_model_len": 4096, "vllm_max_num_seqs": "auto", "vllm_enable_chunked_prefill": False,
                 "vllm_max_num_batched_tokens": "auto", "vllm_gpu_memory_utilization": 0.9}).vllm.argv
    seqs = int(argv[argv.index("--max-num-seqs") + 1])
    assert seqs == 256
    assert int(argv[argv.index("--max-num-batched-tokens") + 1]) == 4096


def test_the_release_is_resolved_once_per_plan(monkeypatch):
    from hostkit.plan import planner

    asked = []
    real = planner.flags_for
    monkeypatch.setattr(planner, "flags_for", lambda version: asked.append(version) or real(version))
    plan({"vllm_version": "0.8.5", "vllm_max_num_seqs": "auto", "vllm_enable_chunked_prefill": "auto",
          "vllm_max_num_batched_tokens": "auto"})
    assert asked == ["0.8.5"]


def test_auto_values_without_gpu_facts_are_left_to_vllm_with_a_warning():
    result = plan({"vllm_max_num_seqs": "auto"}, facts(gpus=[]))
    assert "--max-num-seqs" not in result.vllm.argv
    assert result.vllm.sizing is None
    assert any("left to vLLM's default" in w for w in result.warnings)


def test_unknown_model_skips_sizing_with_a_warning():
    result = plan(model="someone/private-model")
    assert result.vllm.sizing is None
    assert any("not in hostkit's model table" in w for w in result.warnings)


def test_local_model_dir_is_sized_from_its_config_json():
    host_facts = facts(model_configs={"/models/qwen7": QWEN7_CONFIG})
    result = plan(model="/models/qwen7", host_facts=host_facts)
    assert result.vllm.sizing.kv_bytes_per_token == 56 * KIB
    assert result.vllm.argv[:3] == ["/opt/vllm/bin/vllm", "serve", "/models/qwen7"]


# --- what vLLM would refuse at start-up -----------------------------------------------


def test_utilization_above_free_gpu_memory_is_refused():
    error = refused({"vllm_gpu_memory_utilization": 0.9}, facts(gpus=[h200(used_mib=40000)]))
    message = str(error)
    assert message.startswith("host gpu-a1: vllm_gpu_memory_utilization: GPU 0 has 101.3G free")
    assert "Lower it to 0.72" in message


def test_one_max_model_len_request_must_fit_the_kv_cache():
    # Llama-3.1-8B on a 24 GiB GPU: 0.9 x 22.5G - 15.0G weights - 2G = 3.3G, 128 KiB/token: ~27k tokens < 131072.
    l4 = GpuMemoryFact(index=0, name="NVIDIA L4", memory_total_mib=23034, memory_used_mib=0)
    error = refused({"vllm_gpu_memory_utilization": 0.9}, facts(gpus=[l4]), model=LLAMA8)
    assert "host gpu-a1: vllm_max_model_len: one request of 131072 tokens does not fit" in str(error)
    fits = plan({"vllm_gpu_memory_utilization": 0.9, "vllm_max_model_len": 16384}, facts(gpus=[l4]), model=LLAMA8)
    assert fits.vllm.sizing.max_concurrent_at_max_model_len == 1


def test_weights_that_do_not_fit_are_refused():
    error = refused(host_facts=facts(), model="meta-llama/Llama-3.1-70B-Instruct")
    assert "host gpu-a1: vllm_gpu_memory_utilization: one request of 131072 tokens" in str(error)


def test_tp_must_divide_heads_of_a_local_model():
    error = refused({"vllm_tensor_parallel_size": 3}, facts(gpus=[h200(0), h200(1), h200(2)], model_configs={"/models/q": QWEN7_CONFIG}), model="/models/q")
    assert "host gpu-a1: vllm_tensor_parallel_size: 3 does not divide the 28 attention heads" in str(error)
    # 28 heads split 7 ways, but 4 KV heads neither divide by nor divide 7.
    seven = refused({"vllm_tensor_parallel_size": 7}, facts(gpus=[h200(i) for i in range(7)], model_configs={"/models/q": QWEN7_CONFIG}), model="/models/q")
    assert "7 neither divides nor is a multiple of the 4 KV heads" in str(seven)


def test_tp_above_the_gpu_count_is_refused():
    error = refused({"vllm_tensor_parallel_size": 2})
    assert "host gpu-a1: vllm_tensor_parallel_size: 2 GPUs needed, the host has 1" in str(error)


def test_all_problems_of_a_host_are_reported_together():
    error = refused({"vllm_tensor_parallel_size": 2}, facts(filesystems=[ROOT_SSD]))
    assert sorted(issue.key for issue in error.issues) == ["swap_dir", "vllm_tensor_parallel_size"]


# --- the command line -----------------------------------------------------------------


def test_argv_shape_and_no_secret():
    result = plan({"vllm_api_key": "s3cret", "vllm_served_model_name": "qwen", "vllm_port": 8001}).vllm
    assert result.argv[:9] == [
        "/opt/vllm/bin/vllm", "serve", QWEN7, "--host", "0.0.0.0", "--port", "8001", "--served-model-name", "qwen",
    ]  # fmt: skip
    assert not any("s3cret" in word for word in result.argv)
    assert result.api_key.get_secret_value() == "s3cret"
    assert "--api-key" not in result.argv


def test_0_4_3_uses_the_api_server_module():
    argv = plan({"vllm_version": "0.4.3", "vllm_command": "/opt/vllm/bin/python"}).vllm.argv
    assert argv[:5] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", QWEN7]


@pytest.mark.parametrize(
    ("version", "off"),
    [("0.6.6.post1", "--enable-chunked-prefill=false"), ("0.10.2", "--no-enable-chunked-prefill"), ("0.33.0", "--disable-chunked-prefill")],
)
def test_chunked_prefill_off_per_release(version, off):
    data = {"vllm_version": version, "vllm_enable_chunked_prefill": False, "vllm_max_model_len": 8192}
    assert off in plan(data).vllm.argv


def test_swap_space_and_extra_args_are_rendered_where_the_release_has_them():
    argv = plan({"vllm_version": "0.17.1", "vllm_swap_space": 4, "vllm_extra_args": {"--enforce-eager": True, "--block-size": 16}}).vllm.argv
    assert argv[-5:] == ["--swap-space", "4", "--enforce-eager", "--block-size", "16"]


def test_user_env_wins_over_cache_defaults():
    env = plan({"vllm_env": {"HF_HOME": "/srv/hf", "HF_HUB_OFFLINE": 1}}).vllm.env
    assert env["HF_HOME"] == "/srv/hf" and env["HF_HUB_OFFLINE"] == "1"


def test_release_notes_for_unrecorded_versions():
    between = plan({"vllm_version": "0.18.0"})
    assert any("options taken from 0.17.1" in note for note in between.notes)
    newer = plan({"vllm_version": "0.40.0"})
    assert any("newer than 0.33.0" in w for w in newer.warnings)


def test_disabled_vllm_plans_no_unit():
    result = plan_host(
        profile_from_data("cpu-1", {"vllm_enabled": False, "swap_dir": "/var/lib/swap"}), facts(gpus=[]), host_name="cpu-1"
    )
    assert result.vllm.enabled is False and result.vllm.argv == []
    assert result.host == "cpu-1"


def test_plan_is_json_serialisable():
    result = plan({"vllm_api_key": "s3cret"})
    text = result.model_dump_json()
    assert "s3cret" not in text and '"host":"gpu-a1"' in text
