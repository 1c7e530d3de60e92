"""One HTTP request to a vLLM server: a GET, or a POST of a JSON body, all of it within one
deadline, with the API key (when there is one) as a bearer token. hostkit's only HTTP client,
on the controller and on hosts.

Standard library only, no imports from hostkit, and Python 3.6's language: hosts run it
before the program that uses it (hostkit.remote.host_program), some as `python3 -I -S` where
importing urllib.request (http.client, email, ssl) costs more than the whole probe on a slow
host. So a plain socket: HTTP/1.0 with `Connection: close` ends the answer at EOF, and
uvicorn's httptools backend may still chunk a body that has no Content-Length.
"""

import json
import socket
import time


class BadAnswer(OSError):
    """Something answered, but not in HTTP, or cut short."""


def _address(url):
    """("host", port, "/path") of an http:// URL; IPv6 hosts in brackets."""
    if not url.startswith("http://"):
        raise ValueError("not an http:// URL: %r" % url)
    netloc, slash, path = url[len("http://"):].partition("/")
    host, _, port = netloc.rpartition(":") if netloc.rfind(":") > netloc.rfind("]") else (netloc, "", "80")
    return host.strip("[]"), int(port), slash + path or "/"


def _dechunk(body):
    out = []
    while True:
        size, _, body = body.partition(b"\r\n")
        try:
            size = int(size.split(b";")[0], 16)
        except ValueError:
            raise BadAnswer("a chunked body cut short")
        if size == 0:
            return b"".join(out)
        out.append(body[:size])
        body = body[size + 2:]


def _exchange(host, port, request, deadline):
    def remaining():
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        return left

    with socket.create_connection((host, port), timeout=remaining()) as connection:
        connection.settimeout(remaining())
        connection.sendall(request)
        answer = []
        while True:
            connection.settimeout(remaining())
            data = connection.recv(65536)
            if not data:
                return b"".join(answer)
            answer.append(data)


def _parse(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(None, 2)
    if len(status) < 2 or not status[0].startswith("HTTP/") or not status[1].isdigit():
        raise BadAnswer("not an HTTP answer: %r" % lines[0][:80])
    headers = [line.lower().split(":", 1) for line in lines[1:]]
    if any(len(h) == 2 and h[0].strip() == "transfer-encoding" and "chunked" in h[1] for h in headers):
        body = _dechunk(body)
    return int(status[1]), body


def http_request(url, api_key=None, body=None, timeout=30.0):
    """(HTTP status, body bytes), an error status (4xx, 5xx) and its body included.

    Raises OSError when no whole answer came within `timeout` seconds: refused, reset, timed
    out (socket.timeout), or BadAnswer.
    """
    host, port, path = _address(url)
    data = b"" if body is None else json.dumps(body).encode()
    head = ["%s %s HTTP/1.0" % ("GET" if body is None else "POST", path),
            "Host: %s:%d" % ("[%s]" % host if ":" in host else host, port), "Connection: close"]
    if body is not None:
        head += ["Content-Type: application/json", "Content-Length: %d" % len(data)]
    if api_key:
        head.append("Authorization: Bearer " + api_key)
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
    return _parse(_exchange(host, port, request, time.monotonic() + timeout))


def api_key_from_env_file(path):
    """VLLM_API_KEY as hostkit's environment file holds it (double-quoted, \\-escaped); None
    when the file or the key is absent or unreadable."""
    try:
        with open(path) as env_file:
            lines = env_file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name.strip() == "VLLM_API_KEY":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                unescaped, chars = [], iter(value[1:-1])
                for char in chars:
                    unescaped.append(next(chars, "") if char == "\\" else char)
                value = "".join(unescaped)
            return value or None
    return None
