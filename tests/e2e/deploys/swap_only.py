"""The NVMe and swap part of the vLLM host deploy, alone, for tests/e2e/test_swap.py.

`e2e_swap_plan` / `e2e_nvme_plan` in the host data (dicts of SwapPlan / NvmePlan fields)
replace the planner's choice, so that a test can reach the operations' own checks on the
host (free space, blank device) that the planner would otherwise refuse first; the boot
unit is then left as it is.
"""

from pyinfra import host

from hostkit.deploy import current_plan
from hostkit.operations import nvme_boot, swap
from hostkit.plan.plans import NvmePlan, SwapPlan

plan = current_plan()
nvme = NvmePlan(**host.data.e2e_nvme_plan) if host.data.get("e2e_nvme_plan") else plan.nvme
swap_plan = SwapPlan(**host.data.e2e_swap_plan) if host.data.get("e2e_swap_plan") else plan.swap
if nvme is not None:
    swap.prepare_nvme(name="Prepare NVMe", plan=nvme, scope=plan.scope)
swap.swap_file(name="Swap file", plan=swap_plan, scope=plan.scope)
if not (host.data.get("e2e_nvme_plan") or host.data.get("e2e_swap_plan")):
    nvme_boot.nvme_boot(name="NVMe and swap at boot", nvme=plan.nvme, swap=plan.swap, scope=plan.scope)
