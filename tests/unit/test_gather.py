"""From recorded snapshot sections (a real Debian 12 lab host) to the planner's facts."""

from pathlib import Path

from hostkit.facts.gpu import GpuFacts
from hostkit.facts.snapshot import HostSnapshot
from hostkit.facts.storage import StorageFact
from hostkit.facts.system import SystemFact
from hostkit.plan.snapshot_facts import planning_facts

FIXTURES = Path(__file__).parent / "fixtures" / "storage"

SYSTEM_LINES = [
    "hostname=lab1", "os_id=debian", "os_version_id=12", "kernel=6.1.0-57-cloud-amd64",
    "boot_id=fe09e670", "cpu_count=2", "cgroup_fs=cgroup2fs", "systemd=systemd 252 (252.39-1~deb12u2)",
    "cmdline=root=/dev/vda rw", "meminfo:MemTotal:        2025980 kB", "meminfo:MemAvailable:    1832936 kB",
]


def snapshot_from(fixture: str) -> HostSnapshot:
    storage = StorageFact().process((FIXTURES / fixture).read_text().splitlines())
    return HostSnapshot({"system": SystemFact().process(SYSTEM_LINES), "storage": storage,
                         "gpu": GpuFacts(driver_present=False)})


def test_a_blank_nvme_disk_is_reported_blank_and_unmounted():
    facts = planning_facts(snapshot_from("debian12-blank-nvme.txt"))
    (nvme,) = facts.nvme_devices
    assert nvme.path == "/dev/nvme0n1" and nvme.is_blank and nvme.fstab_mountpoint is None
    assert facts.ram_total_bytes == 2025980 * 1024 and facts.cgroup_version == 2 and facts.systemd_version == 252
    assert not facts.gpus


def test_a_provisioned_host_shows_its_nvme_filesystem_swap_and_fstab_mount():
    facts = planning_facts(snapshot_from("debian12-converged.txt"))
    (nvme,) = facts.nvme_devices
    assert not nvme.is_blank and "/mnt/nvme" in nvme.mountpoints
    assert nvme.fstab_mountpoint == "/mnt/nvme"
    assert [fs.mountpoint for fs in facts.filesystems if fs.on_nvme] == ["/mnt/nvme"]
    assert [(s.path, s.size_bytes) for s in facts.swaps] == [("/mnt/nvme/vllm-hostkit.swap", 1048572 * 1024)]
