"""hostkit's vLLM servers alone (vllm.service, or each of vllm_instances with its gate, and the
removal of units no longer planned), planned from the host's data, inside the deploy lock:
the deploy of tests/e2e/test_instances.py.

Not the full deploy: instances are placed on GPUs, and a lab container has none. The test
gives it an nvidia-smi that lists three (indices, UUIDs, memory) for the planner, as the
recorded facts do in the unit tests; the full deploy's GPU check would rightly fail such a
host (no NVIDIA kernel module, no /proc/modules, no device nodes). The host-level steps are
the classic deploy's, tested by the other modules.
"""

from hostkit.deploy import current_plan, lock_stale_after_s, vllm_servers
from hostkit.operations import lock

plan = current_plan()
lock.acquire_deploy_lock(name="Take the deploy lock", stale_after_s=lock_stale_after_s(plan))
vllm_servers(plan)
lock.release_deploy_lock(name="Release the deploy lock")
