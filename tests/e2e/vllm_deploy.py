"""Only hostkit's vLLM service and readiness gate, planned from the host's data, inside the
deploy lock: the deploy of tests/e2e/test_vllm_service.py (the full deploy adds swap, NVMe
and kernel tuning)."""

from hostkit.deploy import current_plan
from hostkit.desired.deploy_lock import deploy_lock_stale_after_s
from hostkit.operations import lock, vllm_service

plan = current_plan()
lock.acquire_deploy_lock(name="Take the deploy lock", stale_after_s=deploy_lock_stale_after_s(plan.vllm.ready_timeout_s))
vllm_service.vllm_service(name="vLLM systemd unit", plan=plan.vllm, scope=plan.scope)
vllm_service.vllm_ready(name="vLLM readiness gate", plan=plan.vllm, scope=plan.scope)
lock.release_deploy_lock(name="Release the deploy lock")
