"""A drain/undrain command for the rollout tests: logs what a load balancer would be told.

    python rollout_hook.py ACTION TARGETS_JSON LOG HOST [UNIT]

appends `ACTION TARGET INVOCATION_ID` to LOG. TARGET is HOST, or HOST/UNIT for one of a host's
vllm_instances (the rollout passes the instance's unit after the host); INVOCATION_ID is that
unit's run at that moment, read over ssh with the argv TARGETS_JSON gives for TARGET: a restart
between drain and undrain shows as two different ids.
"""

import json
import subprocess
import sys

action, targets_json, log, *target = sys.argv[1:]
target = "/".join(target)
argv = json.loads(open(targets_json).read())[target]
invocation = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
with open(log, "a") as out:
    out.write(f"{action} {target} {invocation}\n")
