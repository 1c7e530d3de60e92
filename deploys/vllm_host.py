"""Provision a vLLM host: `pyinfra INVENTORY deploys/vllm_host.py` from the repo root."""

from hostkit.deploy import vllm_host

vllm_host()
