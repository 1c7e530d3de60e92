"""The lab: real Debian hosts on this machine, reached over ssh.

- VMs (qemu TCG): a kernel of their own, an NVMe disk, reboots; swap, sysctls, THP and memory
  limits are real there.
- Containers (systemd-nspawn): systemd, sshd and a network of their own at native speed, on
  the controller's kernel.

Not shipped to production hosts; it exists so that every deploy and check is exercised on a
real host over real SSH.
"""

from hostkit_lab.container import ContainerHost
from hostkit_lab.host import LabHost
from hostkit_lab.lab import Lab
from hostkit_lab.vm import VmHost

__all__ = ["ContainerHost", "Lab", "LabHost", "VmHost"]
