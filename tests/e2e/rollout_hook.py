"""A drain/undrain command for tests/e2e/test_rollout.py: logs what a load balancer would be told.

    python rollout_hook.py ACTION HOSTS_JSON LOG HOST

appends `ACTION HOST INVOCATION_ID` to LOG, where INVOCATION_ID is the host's vllm.service
run at that moment (read over ssh with the argv HOSTS_JSON gives for HOST): a restart
between drain and undrain shows as two different ids.
"""

import json
import subprocess
import sys

action, hosts_json, log, host = sys.argv[1:5]
argv = json.loads(open(hosts_json).read())[host]
invocation = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
with open(log, "a") as out:
    out.write(f"{action} {host} {invocation}\n")
