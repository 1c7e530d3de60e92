"""Bad inventory data, end to end: `pyinfra INVENTORY deploys/vllm_host.py` against a lab host,
and each run must exit non-zero, name each bad host and its key, and leave the host as it was.

Most cases are refused by the data alone, before any host's facts are read: those need only a
host that pyinfra reaches, so they run on the shared container host (`main_container`, systemd
only, native speed), as hosts of one inventory (CASES_PER_RUN to a run, each entry a case named
by its id, all pointing at that host), which also shows a fleet's every bad host named in one
refusal. The cases that only the host's facts can refuse (its disks, its kernel) need the VM
(`main_host`): a container's plan leaves swap, NVMe, sysctl and THP to the container's host,
so it would not refuse them. The first host whose plan fails stops the run, so each runs alone.
The container group's first module, this one meets a fresh container host, the strictest
witness: any case hostkit failed to refuse would install the unit, its user and files, which
the state digest shows; run alone, the module gets a fresh VM too. The digest (fstab,
sysctl.d, systemd units, /proc/swaps, THP, swappiness, /run/vllm-hostkit) is one ssh command,
taken on each host before all its runs and right after each. Several runs go at once on the VM
(every case fails while pyinfra prepares, before any command that changes a host), so a
digest that differs names its case and the cases that ran beside it.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field

import pytest

from tests.e2e.conftest import UNSET, main_host_for
from tests.e2e.lab_shell import sh


@dataclass(frozen=True)
class Case:
    id: str
    data: dict
    key: str  # the key the message must name
    says: str = ""  # and a phrase that shows it was refused for the right reason
    host_facts: bool = False  # refused only once the host's facts are read


# The lab data (inventories/lab.py) is valid; each case changes it in one way.
CASES = [
    # wrong types
    Case("swap_enabled-string", {"swap_enabled": "yes"}, "swap_enabled", "true or false"),
    Case("vllm_port-string", {"vllm_port": "8000"}, "vllm_port", "1-65535"),
    Case("gpu_tolerated_xids-strings", {"gpu_tolerated_xids": ["79"]}, "gpu_tolerated_xids", "Xid numbers"),
    Case("sysctl-not-a-mapping", {"sysctl": "vm.swappiness=10"}, "sysctl", "mapping of sysctl names"),
    Case("vllm_env-list-value", {"vllm_env": {"HF_HOME": ["/a"]}}, "vllm_env['HF_HOME']", "a string or number"),
    # out-of-range values
    Case("swap_priority-too-high", {"swap_priority": 40000}, "swap_priority", "0-32767"),
    Case("swap_priority-negative", {"swap_priority": -1}, "swap_priority", "0-32767"),
    Case("vllm_port-too-high", {"vllm_port": 70000}, "vllm_port", "1-65535"),
    Case("gpu_memory_utilization-above-1", {"vllm_gpu_memory_utilization": 1.5}, "vllm_gpu_memory_utilization",
         "(0, 1]"),
    Case("max_num_seqs-zero", {"vllm_max_num_seqs": 0}, "vllm_max_num_seqs", ">= 1"),
    Case("gpu_count-zero", {"gpu_count": 0}, "gpu_count", ">= 1"),
    Case("ready_timeout-zero", {"vllm_ready_timeout": 0}, "vllm_ready_timeout", ">= 1"),
    Case("ready_timeout-negative", {"vllm_ready_timeout": -1}, "vllm_ready_timeout", ">= 1"),
    Case("thp_enabled-unknown", {"thp_enabled": "sometimes"}, "thp_enabled", "'always', 'madvise' or 'never'"),
    Case("thp_defrag-unknown", {"thp_defrag": "lazy"}, "thp_defrag", "'defer+madvise'"),
    Case("sysctl_conflicts-unknown", {"sysctl_conflicts": "ignore"}, "sysctl_conflicts", "'error' or 'warn'"),
    Case("hardening-unknown", {"vllm_hardening": "paranoid"}, "vllm_hardening", "'standard' or 'strict'"),
    # bad sizes
    Case("swap_size-word", {"swap_size": "lots"}, "swap_size", "binary size"),
    Case("swap_size-bare-number", {"swap_size": 1024}, "swap_size", "a bare number is ambiguous"),
    Case("swap_size-below-1G", {"swap_size": "512M"}, "swap_size", "below 1G", host_facts=True),
    Case("swap_size-does-not-fit", {"swap_size": "500G"}, "swap_size", "does not fit in /mnt/nvme", host_facts=True),
    Case("memory_max-bad-unit", {"vllm_memory_max": "48Q"}, "vllm_memory_max", "binary size"),
    Case("memory_high-above-max", {"vllm_memory_max": "1G", "vllm_memory_high": "2G"}, "vllm_memory_high",
         "at most vllm_memory_max"),
    # paths and devices
    Case("swap_dir-relative", {"swap_dir": "var/swap"}, "swap_dir", "absolute directory path"),
    Case("swap_dir-on-tmpfs", {"swap_dir": "/dev/shm"}, "swap_dir", "cannot hold a swap file", host_facts=True),
    Case("nvme_mount-root", {"nvme_mount": "/"}, "nvme_mount", "other than /"),
    Case("nvme_device-not-a-dev-path", {"nvme_device": "nvme0n1"}, "nvme_device", "under /dev/"),
    Case("nvme_device-absent", {"nvme_device": "/dev/nvme9n1"}, "nvme_device", "is not on this host", host_facts=True),
    Case("vllm_command-relative", {"vllm_command": "vllm"}, "vllm_command", "absolute path"),
    # vLLM settings the release or the model refuses
    Case("model-missing", {"vllm_model": UNSET}, "vllm_model", "required when vllm_enabled is true"),
    Case("flag-unknown-to-version", {"vllm_extra_args": {"--no-such-flag": True}},
         "vllm_extra_args['--no-such-flag']", "vLLM 0.33.0 has no --no-such-flag"),
    Case("flag-removed-in-version", {"vllm_version": "0.20.0", "vllm_swap_space": 4}, "vllm_swap_space",
         "removed in"),
    Case("flag-owned-by-hostkit", {"vllm_extra_args": {"--max-num-seqs": 8}}, "vllm_extra_args['--max-num-seqs']",
         "set vllm_max_num_seqs instead"),
    Case("batched-tokens-below-seqs", {"vllm_max_num_seqs": 256, "vllm_max_num_batched_tokens": 128},
         "vllm_max_num_batched_tokens", "at least vllm_max_num_seqs (256)"),
    Case("tp-does-not-divide-heads", {"vllm_tensor_parallel_size": 3}, "vllm_tensor_parallel_size",
         "a divisor of 14"),
    Case("model_len-beyond-model", {"vllm_max_model_len": 1_000_000}, "vllm_max_model_len", "at most 32768"),
    Case("dtype-unknown", {"vllm_dtype": "float13"}, "vllm_dtype", "float13"),
    Case("version-too-old", {"vllm_version": "0.1.0"}, "vllm_version", "at least"),
    Case("version-not-a-version", {"vllm_version": "latest"}, "vllm_version", "a vLLM release"),
    Case("user-root", {"vllm_user": "root"}, "vllm_user", "non-root user"),
    Case("api-key-in-env", {"vllm_env": {"VLLM_API_KEY": "sk-e2e-should-not-show"}}, "vllm_env['VLLM_API_KEY']",
         "set vllm_api_key"),
    Case("hf-token-in-env", {"vllm_env": {"HF_TOKEN": "sk-e2e-should-not-show"}}, "vllm_env['HF_TOKEN']",
         "set vllm_hf_token"),
    Case("secret-looking-env-name", {"vllm_env": {"S3_SECRET_ACCESS_KEY": "sk-e2e-should-not-show"}},
         "vllm_env['S3_SECRET_ACCESS_KEY']", "vllm_hf_token (HF_TOKEN)"),
    # values the host's kernel refuses, found in its facts before anything changes
    Case("sysctl-swappiness-400", {"sysctl": {"vm.swappiness": 400}}, "sysctl['vm.swappiness']",
         "vm.swappiness takes a whole number 0 to 200 on kernel", host_facts=True),
    Case("sysctl-unknown-key", {"sysctl": {"vm.swappiness": 10, "vm.no_such_knob": 1}}, "sysctl['vm.no_such_knob']",
         "/proc/sys/vm/no_such_knob does not exist on this host", host_facts=True),
    Case("sysctl-wrong-form", {"sysctl": {"vm.swappiness": 10, "net.core.somaxconn": "many"}},
         "sysctl['net.core.somaxconn']", "the kernel's value is a whole number", host_facts=True),
    # the vLLM runtime hostkit installs (vllm_install)
    Case("package-not-vllm", {"vllm_install": True, "vllm_package": "torch"}, "vllm_package",
         "a vLLM distribution name"),
    Case("install-version-not-a-release", {"vllm_install": True, "vllm_version": "0.33.0rc1"}, "vllm_version",
         "a vLLM release such as"),
    Case("wheelhouse-relative", {"vllm_install": True, "vllm_find_links": ["wheels"]}, "vllm_find_links[0]",
         "a relative path names no place on the host"),
    # keys of the rollout, the watchdog and the collector
    Case("drain-command-number", {"rollout_drain_command": 42}, "rollout_drain_command", "a list of argv words"),
    Case("drain-command-mapping", {"rollout_undrain_command": {"run": "lbctl"}}, "rollout_undrain_command",
         "a list of argv words"),
    Case("watchdog-interval-zero", {"vllm_watchdog_interval_s": 0}, "vllm_watchdog_interval_s", "1-3600"),
    Case("monitoring-interval-too-short", {"monitoring_interval_s": 1}, "monitoring_interval_s", "from 5 to 3600"),
    # typos in keys
    Case("typo-swap_szie", {"swap_szie": "8G"}, "swap_szie", "did you mean swap_size?"),
    Case("typo-vllm_modle", {"vllm_modle": "Qwen/Qwen2.5-0.5B-Instruct"}, "vllm_modle", "did you mean vllm_model?"),
]
# The runs refused from the data go one after another, each with CASES_PER_RUN hosts to
# connect (on the container host); the single-case runs, PARALLEL_SINGLE_RUNS at a time (on
# the VM, where nothing else runs beside them: measured there, about 25 s each, 2 at a time).
# That keeps the ssh handshakes that a lab host answers at once within sshd's MaxStartups
# (10): with 30 at once under load, handshakes timed out ("Error reading SSH protocol banner").
CASES_PER_RUN = 8
PARALLEL_SINGLE_RUNS = 4

# One ssh command: a digest line per piece of state a deploy may change.
STATE_DIGEST = r"""
for path in /etc/fstab /etc/sysctl.d /etc/systemd/system /etc/vllm-hostkit /run/vllm-hostkit; do
  if [ -e "$path" ]; then
    echo "$path $(find "$path" -xdev \( -type f -o -type l \) -printf '%p %m %U %l\n' -exec sha256sum {} + 2>/dev/null \
      | sort | sha256sum | cut -c1-16)"
  else
    echo "$path absent"
  fi
done
echo "swaps $(tail -n +2 /proc/swaps | awk '{print $1, $3}' | tr '\n' ' ')"
echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled) / $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
echo "swappiness $(cat /proc/sys/vm/swappiness)"
echo "vllm $(systemctl is-active vllm.service 2>&1) $(id -u vllm 2>&1 | head -c 20)"
"""


def state_digest(lab_host) -> str:
    return sh(lab_host, STATE_DIGEST)


@dataclass
class Outcome:
    returncode: int
    output: str
    digest_after: str
    started: float
    ended: float  # after the digest


def host_of(case: Case) -> str:
    """The host parameter a case runs on: the VM for the cases only the host's facts refuse."""
    return "vm" if case.host_facts else "container"


def runs_of(cases: list[Case]) -> tuple[list[list[Case]], list[list[Case]]]:
    """(shared runs, runs alone): cases refused from the data share runs; each case that needs
    the host's facts runs alone (the first host whose plan fails stops the run)."""
    by_data = [case for case in cases if not case.host_facts]
    return ([by_data[i:i + CASES_PER_RUN] for i in range(0, len(by_data), CASES_PER_RUN)],
            [[case] for case in cases if case.host_facts])


def message_for(output: str, host: str) -> str:
    """What a refusal says of one host: its first line, up to the next host's."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"host {host}: ")), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("host ")), len(lines))
    return "\n".join(lines[start:end])


@dataclass
class Campaign:
    before: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def beside(self, case_id: str) -> list[str]:
        """The cases whose run overlapped this one's, digest included."""
        mine = self.outcomes[case_id]
        return sorted(other for other, outcome in self.outcomes.items()
                      if other != case_id and outcome.started < mine.ended and mine.started < outcome.ended)


@pytest.fixture(scope="module")
def campaign(request, tmp_path_factory) -> Campaign:
    """The cases of this host parameter ("container" or "vm", host_of) run once against its host,
    each as an inventory host named by the case's id; the digest taken before all runs and after each."""
    from tests.e2e.conftest import MAIN_DEPLOY, REPO, lab_entry
    from hostkit.fleet.pyinfra_runner import run_pyinfra, write_inventory

    lab_host = main_host_for(request)
    directory = tmp_path_factory.mktemp(f"bad-input-{request.param}")
    before = state_digest(lab_host)

    def run(cases: list[Case]) -> dict[str, Outcome]:
        inventory = write_inventory(directory / f"{cases[0].id}.py", [lab_entry(case.id, lab_host, case.data) for case in cases])
        started = time.monotonic()
        run = run_pyinfra(inventory, MAIN_DEPLOY, cwd=REPO, timeout=600)
        outcome = Outcome(run.returncode, run.output, state_digest(lab_host), started, time.monotonic())
        print(f"{lab_host.kind}: {len(cases)} case(s) in one run: {outcome.ended - started:.1f} s, digest included")
        return {case.id: outcome for case in cases}

    shared_runs, single_runs = runs_of([case for case in CASES if host_of(case) == request.param])
    outcomes: dict[str, Outcome] = {}
    with concurrent.futures.ThreadPoolExecutor(PARALLEL_SINGLE_RUNS) as pool:
        singles = pool.map(run, single_runs)
        for cases in shared_runs:
            outcomes.update(run(cases))
        for ran in singles:
            outcomes.update(ran)
    return Campaign(before, outcomes)


def test_the_lab_data_itself_is_valid():
    """Each case breaks exactly one thing: the data it starts from must pass validation."""
    from hostkit.profile.validation import profile_from_data
    from tests.e2e.conftest import lab_data

    profile_from_data("lab", lab_data())


def test_at_least_30_cases():
    assert len(CASES) >= 30 and len({case.id for case in CASES}) == len(CASES)


# Each case on its host: test ids "container-CASE" or "vm-CASE" (conftest.group_of reads the host).
# Module scope: the default for a direct argument (case) beside an indirect one is the
# function's, which would run a campaign for each case.
ON_ITS_HOST = pytest.mark.parametrize(
    "campaign, case", [pytest.param(host_of(case), case, id=f"{host_of(case)}-{case.id}") for case in CASES],
    indirect=["campaign"], scope="module")


@ON_ITS_HOST
def test_bad_input_is_refused_naming_host_and_key(campaign, case):
    outcome = campaign.outcomes[case.id]
    message = message_for(outcome.output, case.id)
    assert outcome.returncode != 0, outcome.output[-3000:]
    assert message.startswith(f"host {case.id}: {case.key}"), outcome.output[-3000:]
    assert case.says in message, outcome.output[-3000:]
    assert "nothing was changed on any host" in outcome.output
    assert "sk-e2e-should-not-show" not in outcome.output  # refusals mask secrets too
    assert outcome.digest_after == campaign.before, (
        f"the host changed by the end of {case.id} (running beside it: {campaign.beside(case.id) or 'none'}):\n"
        f"before:\n{campaign.before}\nafter:\n{outcome.digest_after}"
    )


@pytest.mark.parametrize("campaign", ["container"], indirect=True)
def test_a_run_of_several_bad_hosts_names_each_of_them(campaign):
    """The whole inventory is validated before any host is touched: one refusal, every host in it."""
    shared = runs_of([case for case in CASES if host_of(case) == "container"])[0][0]
    output = campaign.outcomes[shared[0].id].output
    assert len(shared) > 1 and all(campaign.outcomes[case.id].output == output for case in shared)
    assert [case.id for case in shared if not message_for(output, case.id)] == []


@pytest.mark.parametrize("campaign", ["container", "vm"], indirect=True)
def test_the_host_is_unchanged_after_each_case(campaign):
    changed = [case_id for case_id, outcome in campaign.outcomes.items() if outcome.digest_after != campaign.before]
    assert not changed, f"the host's state digest differed after: {', '.join(changed)}"
