"""One HTTP request to a vLLM server: a GET, or a POST of a JSON body, within a timeout, with
the API key (when there is one) as a bearer token.

Standard library only, no imports from hostkit, and Python 3.6's language: hostkit.rollout's
probe.py and idle.py also run on hosts, as `python3 -c SOURCE` with this file's text first
(hostkit.rollout.gate.host_source).
"""

import json
import urllib.error
import urllib.request


def http_request(url, api_key=None, body=None, timeout=30.0):
    """(HTTP status, body bytes), an error status (4xx, 5xx) and its body included.

    Raises OSError (urllib's URLError is one) when no answer came: refused, reset, timed out;
    http.client.HTTPException when the answer was cut short.
    """
    headers = {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
