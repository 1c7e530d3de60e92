"""tests/e2e/instances_deploy.py's vLLM servers, with the steps that watch them: the memory
collector reading every server and each server's watchdog. The deploy of
tests/e2e/test_instances_watched.py (the GPU check would fail its driverless host: see
instances_deploy.py)."""

from hostkit.deploy import current_plan, lock_stale_after_s, vllm_servers, vllm_watchdogs
from hostkit.desired.monitoring import monitored_servers
from hostkit.operations import lock, monitoring

plan = current_plan()
lock.acquire_deploy_lock(name="Take the deploy lock", stale_after_s=lock_stale_after_s(plan))
monitoring.monitoring(name="Memory monitoring", plan=plan.monitoring, servers=monitored_servers(plan), scope=plan.scope)
vllm_servers(plan)
vllm_watchdogs(plan)
lock.release_deploy_lock(name="Release the deploy lock")
