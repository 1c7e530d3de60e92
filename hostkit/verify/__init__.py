"""Post-provision verification: does each host match the plan the deploy worked from?

`hostkit verify INVENTORY` and `pytest --pyinfra-inventory INVENTORY tests/host` share this
package. Per host: one testinfra connection, one snapshot command (the deploy's own facts),
one probe command (readiness, the running vLLM process, the kernel log), then pure checks
(`checks.check_host`) against the plan that `hostkit.plan.planner` makes from the same profile
and snapshot as the deploy.
"""
