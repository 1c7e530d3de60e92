"""The NVMe boot unit (hostkit.operations.nvme_boot): what the deploy installs, how it takes a
host of the fstab era over, and the storage facts it rests on, on the storage section recorded
on a Debian 12 lab VM after the deploy (fixtures/storage/debian12-nvme-unit.txt) and udev's
by-id listing there (debian12-by-id.txt)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hostkit.desired.digest import text_sha256
from hostkit.desired.nvme_boot import render_settings, render_unit, wanted_files
from hostkit.facts.storage import NVME_FILES, NVME_UNIT_PATH, FstabEntry, StorageFact, parse_by_id
from hostkit.operations import nvme_boot
from hostkit.plan.plans import NvmePlan, SwapPlan
from hostkit.plan.scope import snapshot_scope
from tests.unit.op_host import OpHost
from pyinfra.context import ctx_host

FIXTURES = Path(__file__).parent / "fixtures" / "storage"
BY_ID = "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1_1"
NVME = NvmePlan(device="/dev/nvme0n1", by_id=BY_ID, mount="/mnt/nvme")
SWAP = SwapPlan(enabled=True, path="/mnt/nvme/vllm-hostkit.swap", size_bytes=2**30, priority=10, boot="unit")


def converged():
    return StorageFact().process((FIXTURES / "debian12-nvme-unit.txt").read_text().splitlines())


def run_op(storage, nvme=NVME, swap=SWAP) -> list:
    with ctx_host.use(OpHost({"storage": storage}, False)):
        return list(nvme_boot.nvme_boot._inner(nvme, swap, snapshot_scope()))


def test_udev_names_the_disk_by_model_serial_and_namespace():
    links = parse_by_id((FIXTURES / "debian12-by-id.txt").read_text().splitlines())
    assert links == {
        "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_hostkit-lab1": "/dev/nvme0n1",
        BY_ID: "/dev/nvme0n1",
        "/dev/disk/by-id/nvme-nvme.1b36-686f73746b69742d6c616231-51454d55204e564d65204374726c-00000001": "/dev/nvme0n1",
    }
    storage = dataclasses.replace(converged(), by_id=links)
    # The namespace's own name where udev made one (systemd 252 does), not the WWN form.
    assert storage.model_serial_link("/dev/nvme0n1") == BY_ID
    older = {link: target for link, target in links.items() if link != BY_ID}
    assert dataclasses.replace(storage, by_id=older).model_serial_link("/dev/nvme0n1") == BY_ID.removesuffix("_1")
    assert storage.model_serial_link("/dev/nvme1n1") is None


def test_the_recorded_host_after_the_deploy_needs_nothing():
    storage = converged()
    assert storage.nvme_unit_enabled and set(storage.nvme_unit_sha256) == set(NVME_FILES)
    assert storage.devices["/dev/nvme0n1"].label == "vllm-hostkit"
    assert storage.fstab_mount_entries("/mnt/nvme") == [] and storage.fstab_swap_entries(SWAP.path) == []
    assert run_op(storage) == []


def test_the_settings_say_what_the_boot_brings_back():
    text = render_settings(NVME, SWAP)
    assert f"hk_by_id={BY_ID}\n" in text and "hk_swap_file=/mnt/nvme/vllm-hostkit.swap\n" in text
    assert "hk_swap_size=1073741824\n" in text and "hk_wait_s=30\n" in text
    elsewhere = render_settings(NVME, SWAP.model_copy(update={"boot": "fstab",
                                                                        "path": "/var/lib/swap/vllm-hostkit.swap"}))
    assert "hk_swap_file=''\n" in elsewhere


def test_the_unit_does_not_hold_the_boot():
    unit = render_unit(NVME, SWAP)
    assert "Before=vllm.service\n" in unit and "WantedBy=multi-user.target\n" in unit
    directives = [line for line in unit.splitlines() if not line.startswith("#")]
    assert not any(line.startswith("Before=") and "swap.target" in line for line in directives)
    assert "DefaultDependencies=no" not in unit
    assert "TimeoutStartSec=690\n" in unit  # the 30 s wait plus the 1 GiB swap step's deadline


def test_an_fstab_era_host_gets_the_unit_first_then_loses_its_fstab_lines():
    storage = dataclasses.replace(
        converged(), nvme_unit_sha256={}, nvme_unit_enabled=False,
        fstab=converged().fstab + (
            FstabEntry("UUID=8dc5", "/mnt/nvme", "ext4", ("defaults", "nofail", "x-systemd.device-timeout=90s"), 0, 2, 2),
            FstabEntry(SWAP.path, "none", "swap", ("nofail", "pri=10"), 0, 0, 3)))
    [script] = run_op(storage)
    # Last occurrences: the scripts installed carry some of these words in their text.
    order = [script.rindex(marker) for marker in (
        "/etc/systemd/system/.vllm-hostkit-nvme.service.hostkit-new", "systemctl enable --quiet vllm-hostkit-nvme.service",
        "systemctl restart vllm-hostkit-nvme.service", "hk_fstab_put mount /mnt/nvme ''",
        f"hk_fstab_put swap {SWAP.path} ''", "hk_reload_if_fstab_changed")]
    assert order == sorted(order)
    assert "swapoff" not in script.replace("hk_swapoff() {", "").split("hk_fstab_put mount")[1]
    assert "umount" not in script


def test_a_changed_plan_rewrites_only_the_settings():
    storage = converged()
    [script] = run_op(storage, swap=SWAP.model_copy(update={"size_bytes": 2 * 2**30}))
    assert "/etc/vllm-hostkit/.nvme.conf.hostkit-new" in script and "nvme_boot.sh.hostkit-new" not in script
    assert "systemctl enable" not in script and "systemctl restart vllm-hostkit-nvme.service" in script


def test_without_nvme_device_an_installed_unit_is_removed():
    [script] = run_op(converged(), nvme=None)
    assert "systemctl disable --quiet vllm-hostkit-nvme.service" in script and f"rm -f -- {NVME_UNIT_PATH}" in script
    assert run_op(dataclasses.replace(converged(), nvme_unit_sha256={}, nvme_unit_enabled=False), nvme=None) == []


def test_the_wanted_files_are_the_deploys_own_scripts():
    files = wanted_files(NVME, SWAP)
    assert set(files) == set(NVME_FILES)
    from hostkit.remote import host_file
    assert files["/usr/local/lib/vllm-hostkit/nvme_format.sh"] == host_file("nvme_format.sh")
    assert text_sha256(files["/usr/local/lib/vllm-hostkit/swap_lib.sh"]) == text_sha256(host_file("swap_lib.sh"))
