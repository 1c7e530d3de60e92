"""Lab VMs: a qcow2 overlay on the cached base image and raw NVMe disks, booted with qemu (TCG) and reached by ssh."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from hostkit_lab.host import BOOT_TIMEOUT_S, LabHost
from hostkit_lab.image import base_image
from hostkit_lab.progress import say
from hostkit_lab.qemu import lab_qemu

MEMORY_MB = 2048
NVME_SIZE = "8G"


@dataclass
class VmHost(LabHost):
    """A qemu VM (TCG) with a kernel of its own: swap, sysctls, THP, an NVMe disk, reboots and
    memory limits are real there."""

    cgroup: str = "v2"
    cpus: int = 2
    memory_mb: int = MEMORY_MB
    # Raw disk images attached read-only after the root disk (/dev/vdb, /dev/vdc, ...).
    disks: list[str] = field(default_factory=list)
    # A second blank NVMe disk (serial hostkit-NAME-2, after the first unless swapped): several
    # instance-store disks, whose nvmeXnY names follow the order qemu attaches them in.
    second_nvme: bool = False
    nvme_order_swapped: bool = False
    # No NVMe disk attached at all (a host without instance store: the boot baseline).
    nvme_detached: bool = False

    kind: ClassVar[str] = "vm"

    @property
    def pid(self) -> int | None:
        try:
            pid = int((self.path / "qemu.pid").read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None

    def host_key(self) -> str:
        return base_image(self.os).host_key()

    def describe(self) -> str:
        return f"{self.os}, cgroup {self.cgroup}, qemu TCG"

    def create(self) -> None:
        """The host's own disks: an overlay of the base image and a blank NVMe."""
        image = base_image(self.os)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root_disk),
                        str(self.path / "root.qcow2")], check=True)
        _create_blank(self.path / "nvme.raw")

    def start(self) -> None:
        image = base_image(self.os)
        qemu = lab_qemu()
        # The emulated NVMe (qemu 7.2) now and then stops answering a queue: its requests never
        # complete (CI, 2026-12-04, a boot: I/O 401-411 outstanding for 1200 s, until a controller
        # reset at io_timeout=600). A reset recovers it: the driver resubmits what was cancelled.
        # io_timeout=60 gets there in 2 x 60 s (abort, then reset) and still lets a write wait a
        # minute behind the lab machine's writeback; admin_timeout gives the reset's own commands
        # 5 minutes on a loaded machine (with the defaults, 30 s and 60 s, a reset under load
        # ended with the controller disabled: swap dd EIO, filesystem read-only).
        append = (f"root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname={self.name}"
                  " nvme_core.io_timeout=60 nvme_core.admin_timeout=300")
        if self.cgroup == "v1":
            append += " systemd.unified_cgroup_hierarchy=0"
        read_only = [arg for disk in self.disks for arg in ("-drive", f"file={disk},if=virtio,format=raw,readonly=on")]
        subprocess.run(
            [
                str(qemu.binary), "-L", str(qemu.data_dir), "-name", self.name,
                "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", str(self.cpus), "-m", str(self.memory_mb),
                "-display", "none", "-monitor", "none", "-serial", f"file:{self.path / 'console.log'}",
                "-daemonize", "-pidfile", str(self.path / "qemu.pid"),
                "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", append,
                # cache=unsafe: a guest's flushes stay in the controller's page cache, which a qemu
                # restart keeps; only a crash of the controller itself would lose them.
                "-drive", f"file={self.path / 'root.qcow2'},if=virtio,format=qcow2,cache=unsafe",
                *self._nvme_args(),
                *read_only,
                "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:22",
                "-device", "virtio-net-pci,netdev=n0",
            ],
            check=True,
        )

    def _nvme_args(self) -> list[str]:
        if self.nvme_detached:
            return []
        disks = [("nvm", "nvme.raw", f"hostkit-{self.name}")]
        if self.second_nvme:
            disks.append(("nvm2", "nvme2.raw", f"hostkit-{self.name}-2"))
        if self.nvme_order_swapped:
            disks.reverse()
        args = []
        for drive, image, serial in disks:
            args += ["-drive", f"file={self.path / image},if=none,id={drive},format=raw,cache=unsafe",
                     "-device", f"nvme,drive={drive},serial={serial}"]
        return args

    def add_second_nvme(self) -> None:
        """Attach a second blank NVMe disk from the next start."""
        if self.pid is not None:
            raise RuntimeError(f"{self.name}: stop the host before adding a disk")
        _create_blank(self.path / "nvme2.raw")
        self.second_nvme = True

    def reboot(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        """The lab powers off and starts qemu again rather than letting the guest reset in place:
        under TCG a guest boots 2-3 times slower after an in-place reset (measured: ssh back
        80-105 s after `systemctl reboot`, against 7 s to power off plus 38 s to boot)."""
        super().reboot(timeout)

    def stop(self, timeout: float = 120) -> None:
        """Power off cleanly; kill qemu if the guest does not go down in time."""
        pid = self.pid
        if pid is None:
            return
        try:
            self.ssh("systemctl poweroff", timeout=20)
        except subprocess.TimeoutExpired:
            pass
        if not self._exited_within(timeout):
            # SIGTERM first: qemu then writes its caches back (cache=unsafe keeps them in qemu).
            say(f"{self.name}: no power-off after {timeout:.0f} s; stopping qemu")
            os.kill(pid, signal.SIGTERM)
            if not self._exited_within(15):
                os.kill(pid, signal.SIGKILL)
                time.sleep(1)

    def kill(self) -> None:
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def blank_nvme(self) -> None:
        """Replace the NVMe disk with a blank one, as an instance-store disk after stop/start."""
        if self.pid is not None:
            raise RuntimeError(f"{self.name}: stop the host before blanking its NVMe disk")
        _create_blank(self.path / "nvme.raw")

    def copy_second_nvme_to_first(self) -> None:
        """The first NVMe disk gets the second one's contents (say, someone else's filesystem)."""
        if self.pid is not None or not self.second_nvme:
            raise RuntimeError(f"{self.name}: stop the host, which needs a second NVMe disk, first")
        subprocess.run(["cp", "--sparse=always", str(self.path / "nvme2.raw"), str(self.path / "nvme.raw")], check=True)


def _create_blank(path: Path) -> None:
    path.unlink(missing_ok=True)
    # Raw and sparse: the controller's own filesystem allocates what a guest writes, with no
    # image format between. On qcow2 images qemu 7.2's NVMe controller lost requests: without
    # preallocation during the first writes (2 of 3 fresh images, 2026-12-01); with
    # preallocation=metadata or falloc during a boot that formatted a blank disk and wrote its
    # swap file beside a second controller (CI 2026-12-04 and of 38dbd7f: "QID n timeout",
    # abort, reset, controller disabled, ext4 read-only).
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(path), NVME_SIZE], check=True)
