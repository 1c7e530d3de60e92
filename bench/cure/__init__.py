"""The cure, demonstrated (issue 36): the field reports' failures with real vLLM on a bare lab
host and on a hostkit host side by side. bench/cure.py is the command; these are its parts:

- measure: what the samples, request outcomes, kernel log and alerts say (pure);
- venv_disk: real vLLM's venv, installed once by hostkit's own install script at native speed
  in a container host, as a read-only ext4 disk image for the VMs;
- hosts: identical lab hosts (VMs, or containers for scenario 2), each set up one way (bare,
  githubixx, hostkit);
- probes: the load, the memory sampler and the alert watcher that run during a scenario;
- scenarios: the three failures, each driven the same way on every host;
- chart: one PNG per scenario.
Host-side scripts are in host/.
"""
