"""Ask a vLLM server whether it serves: /health, /v1/models, one real completion.

Standard library only: the same file runs in the controller (`probe(...)`) and on a host
(`python3 -c SOURCE ARGS_JSON`, SOURCE being hostkit.rollout.gate.host_source's, with the
API key as the first line of stdin so it never appears in argv, a process list or a log).
"""

import json
import sys
import time

try:
    from hostkit.remote.http_request import http_request
except ImportError:  # on a host, where SOURCE holds http_request's text before this file's
    pass

COMPLETION_PROMPT = "Reply with one word: ready?"


def _request(url, api_key, body=None, timeout=30.0):
    """(HTTP status or None, parsed JSON or None, short error text)."""
    try:
        status, raw = http_request(url, api_key, body, timeout)
    except OSError as error:
        return None, None, str(getattr(error, "reason", error))
    if not 200 <= status < 300:
        return status, None, "HTTP {} {}".format(status, raw[:200].decode("utf-8", "replace").strip())
    try:
        return status, json.loads(raw.decode("utf-8")), ""
    except ValueError:
        return status, None, "HTTP {} with a body that is not JSON".format(status)


def _check(name, started, passed, detail):
    return {"name": name, "passed": passed, "detail": detail, "seconds": round(time.monotonic() - started, 3)}


def probe(base_url, model, api_key=None, timeout=60.0, poll_interval=2.0):
    """Check results, in order; stops at the first failure (later checks would only repeat it)."""
    checks = []
    started = time.monotonic()
    deadline = started + timeout
    # /health refuses connections while the model loads: poll it until the deadline.
    while True:
        status, _, error = _request(base_url + "/health", None, timeout=min(10.0, timeout))
        if status == 200:
            checks.append(_check("health", started, True, "HTTP 200"))
            break
        if time.monotonic() + poll_interval > deadline:
            detail = error or "HTTP {}".format(status)
            checks.append(_check("health", started, False, "not healthy after {:.0f}s: {}".format(timeout, detail)))
            return checks
        time.sleep(poll_interval)

    started = time.monotonic()
    status, payload, error = _request(base_url + "/v1/models", api_key)
    served = [entry.get("id") for entry in (payload or {}).get("data", []) if isinstance(entry, dict)] if isinstance(payload, dict) else []
    if status != 200:
        checks.append(_check("models", started, False, error or "HTTP {}".format(status)))
        return checks
    if model not in served:
        checks.append(_check("models", started, False, "{} not served; the server lists {}".format(model, served)))
        return checks
    checks.append(_check("models", started, True, "serves " + model))

    started = time.monotonic()
    body = {"model": model, "prompt": COMPLETION_PROMPT, "max_tokens": 4, "temperature": 0}
    status, payload, error = _request(base_url + "/v1/completions", api_key, body=body, timeout=max(30.0, timeout))
    choices = payload.get("choices") if isinstance(payload, dict) else None
    if status != 200:
        checks.append(_check("completion", started, False, error or "HTTP {}".format(status)))
    elif not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("text"), str):
        checks.append(_check("completion", started, False, "HTTP 200 without choices[0].text"))
    else:
        checks.append(_check("completion", started, True, "{} tokens asked, answered {!r}".format(body["max_tokens"], choices[0]["text"][:40])))
    return checks


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    key = sys.stdin.readline().strip() or None
    print(json.dumps(probe(args["base_url"], args["model"], key, args["timeout"], args.get("poll_interval", 2.0))))
