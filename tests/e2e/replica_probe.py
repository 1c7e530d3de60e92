"""A client of tests/e2e/test_rollout_instances.py, run on a lab host: one completion request
after another to each of the host's instances, until STOP exists.

    python3 replica_probe.py PORTS_JSON MODEL LOG STOP

PORTS_JSON maps each port to the instance's environment file, where its API key is (so that
no key is in argv). Appends `START_TIME PORT OK` per request to LOG (the time it was sent, by
the host's clock, which lab containers share with their machine).
"""

import json
import os
import sys
import time
import urllib.request

ports, model, log, stop = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


def api_key(env_file):
    for line in open(env_file).read().splitlines():
        if line.startswith("VLLM_API_KEY="):
            return line.split("=", 1)[1].strip('"')
    return ""


keys = {port: api_key(env_file) for port, env_file in ports.items()}
body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1}).encode()
deadline = time.time() + 600
with open(log, "a", buffering=1) as out:
    while not os.path.exists(stop) and time.time() < deadline:
        for port, key in keys.items():
            sent = time.time()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                             {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    ok = answer.status == 200
            except OSError:
                ok = False
            out.write(f"{sent:.3f} {port} {int(ok)}\n")
        time.sleep(0.05)
