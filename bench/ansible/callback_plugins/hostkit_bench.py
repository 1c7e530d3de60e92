"""Count, per host, what an ansible-playbook run did, for bench/run.py.

Writes JSON to $HOSTKIT_BENCH_ANSIBLE_STATS at the end of the run:
{host: {"tasks": {status: count}, "module_executions": n, "changed": [task names]}}.

A module execution is one run of a module on the host: a task result that was not
skipped, each loop item that was not skipped, and each `until` retry. Results of actions
that run only on the controller (set_fact, meta, debug...) are not executions. The
remote commands themselves (one ssh exec each, more for file transfers) are counted
from the -vvv log by bench/counting.py.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: hostkit_bench
    type: aggregate
    short_description: per-host task and module-execution counts for vllm-hostkit's benchmark
    description: Writes JSON to the file named by HOSTKIT_BENCH_ANSIBLE_STATS.
    requirements:
      - enable in ansible.cfg (callbacks_enabled)
"""

CONTROLLER_ACTIONS = frozenset({
    "set_fact", "ansible.builtin.set_fact", "meta", "ansible.builtin.meta", "debug", "ansible.builtin.debug",
    "assert", "ansible.builtin.assert", "fail", "ansible.builtin.fail", "include_tasks",
    "ansible.builtin.include_tasks", "import_tasks", "ansible.builtin.import_tasks", "include_vars",
    "ansible.builtin.include_vars", "add_host", "ansible.builtin.add_host", "group_by", "ansible.builtin.group_by",
})


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "hostkit_bench"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.hosts = defaultdict(lambda: {"tasks": defaultdict(int), "module_executions": 0, "changed": []})

    def _record(self, result, status):
        entry = self.hosts[result._host.get_name()]
        entry["tasks"][status] += 1
        action = result._task.action
        if status != "skipped" and action not in CONTROLLER_ACTIONS:
            loop_results = result._result.get("results")
            if isinstance(loop_results, list):
                entry["module_executions"] += sum(1 for item in loop_results if not item.get("skipped"))
            else:
                entry["module_executions"] += 1
        if result._result.get("changed") and status != "skipped":
            entry["changed"].append(result._task.get_name())

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_runner_retry(self, result):
        self.hosts[result._host.get_name()]["module_executions"] += 1

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("HOSTKIT_BENCH_ANSIBLE_STATS")
        if not path:
            return
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({name: {**entry, "tasks": dict(entry["tasks"])} for name, entry in self.hosts.items()},
                      handle, indent=2)
