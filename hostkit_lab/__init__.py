"""The lab: real Debian hosts (kernel, systemd, sshd, an NVMe disk) as qemu VMs on this machine.

Not shipped to production hosts; it exists so that every deploy and check is exercised on a
real kernel over real SSH.
"""

from hostkit_lab.vm import Lab, LabHost

__all__ = ["Lab", "LabHost"]
