"""Wait until a vLLM server runs no request: `vllm:num_requests_running` on its /metrics.

Standard library only: the same file runs in the controller (`wait_idle(...)`) and on a
host (`python3 -c SOURCE ARGS_JSON`), like probe.py. vLLM serves /metrics without the API
key. A server that does not answer runs no request; one without the metric cannot say,
which the result notes.
"""

import json
import sys
import time

try:
    from hostkit.remote.http_request import http_request
except ImportError:  # on a host, where SOURCE holds http_request's text before this file's
    pass

METRIC = "vllm:num_requests_running"


def running_requests(text):
    """The sum of METRIC over its series (one per model and engine), or None without it."""
    total, seen = 0.0, False
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == METRIC:
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def _read(url):
    """(running requests or None, what the server said)."""
    try:
        status, body = http_request(url, timeout=10)
    except OSError as error:
        return 0, "not serving ({})".format(getattr(error, "reason", error))
    if not 200 <= status < 300:
        return None, "HTTP {} from /metrics".format(status)
    running = running_requests(body.decode("utf-8", "replace"))
    if running is None:
        return None, "no {} on /metrics".format(METRIC)
    return running, "{:g} running".format(running)


def wait_idle(base_url, timeout, poll_interval=1.0):
    """{"idle": bool, "running": last count or None, "detail": str, "seconds": float}."""
    started = time.monotonic()
    while True:
        running, said = _read(base_url + "/metrics")
        waited = round(time.monotonic() - started, 3)
        if running is None:
            return {"idle": True, "running": None, "detail": said + ": not waited", "seconds": waited}
        if running == 0:
            return {"idle": True, "running": 0, "detail": "no running request after {:.0f}s ({})".format(waited, said),
                    "seconds": waited}
        if waited + poll_interval > timeout:
            return {"idle": False, "running": running,
                    "detail": "{:g} requests still running after {:.0f}s".format(running, timeout), "seconds": waited}
        time.sleep(poll_interval)


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps(wait_idle(args["base_url"], args["timeout"], args.get("poll_interval", 1.0))))
