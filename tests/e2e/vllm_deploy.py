"""Only hostkit's vLLM service and readiness gate, planned from the host's data: the deploy of
tests/e2e/test_vllm_service.py (the full deploy adds swap, NVMe and kernel tuning)."""

from hostkit.deploy import current_plan
from hostkit.operations import vllm_service

profile, plan = current_plan()
vllm_service.vllm_service(name="vLLM systemd unit", plan=plan.vllm, profile=profile)
vllm_service.vllm_ready(name="vLLM readiness gate", plan=plan.vllm, profile=profile)
