"""hostkit's one HTTP client (hostkit.remote.http_request) against local sockets, and the host
programs that carry its text (hostkit.remote.host_program) run as hosts run them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from hostkit.desired.vllm_unit import env_file_value
from hostkit.desired.watchdog import script_text
from hostkit.monitoring import collector_source
from hostkit.remote import host_program
from hostkit.remote.http_request import BadAnswer, api_key_from_env_file, http_request


def serve_once(handle) -> tuple[str, socket.socket]:
    """A listening socket on loopback whose first connection goes to `handle(connection)`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        connection, _ = listener.accept()
        with connection:
            handle(connection)

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def read_request(connection: socket.socket) -> bytes:
    request = b""
    while b"\r\n\r\n" not in request:
        request += connection.recv(4096)
    head, _, body = request.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    length = lengths[0] if lengths else 0
    while len(body) < length:
        body += connection.recv(4096)
    return head + b"\r\n\r\n" + body


def test_a_post_carries_the_key_and_body_and_an_error_status_comes_back():
    seen = []

    def handle(connection):
        seen.append(read_request(connection))
        connection.sendall(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 5\r\n\r\nnope!")

    url, listener = serve_once(handle)
    with listener:
        assert http_request(f"{url}/v1/completions", "k", {"prompt": "x"}, 5) == (401, b"nope!")
    head, _, body = seen[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/completions HTTP/1.0\r\n")
    assert b"Authorization: Bearer k" in head and json.loads(body) == {"prompt": "x"}


def test_a_server_that_dribbles_its_answer_is_cut_off_at_the_deadline():
    """One deadline for the whole exchange: a byte a tenth of a second never ends it otherwise."""
    def handle(connection):
        read_request(connection)
        try:
            for _ in range(100):
                connection.sendall(b"x")
                time.sleep(0.1)
        except OSError:
            pass

    url, listener = serve_once(handle)
    with listener:
        started = time.monotonic()
        with pytest.raises(socket.timeout):
            http_request(f"{url}/health", timeout=1.0)
        assert time.monotonic() - started < 3


def test_an_answer_that_is_not_http_is_an_oserror():
    url, listener = serve_once(lambda connection: (read_request(connection), connection.sendall(b"SSH-2.0-x\r\n")))
    with listener, pytest.raises(BadAnswer, match="not an HTTP answer"):
        http_request(f"{url}/health", timeout=5)


def test_the_api_key_is_read_back_as_hostkit_writes_it(tmp_path):
    secret = 'k"$`\\ey'
    env = tmp_path / "vllm.env"
    env.write_text(f"# Managed by vllm-hostkit\nVLLM_API_KEY={env_file_value(secret)}\n")
    assert api_key_from_env_file(str(env)) == secret
    assert api_key_from_env_file(str(tmp_path / "missing")) is None


@pytest.mark.processes
def test_a_host_program_keeps_its_future_imports_first_and_runs_with_the_library(tmp_path):
    program = "#!/usr/bin/python3\n'\'\'doc'\'\'\nfrom __future__ import annotations\nprint(http_request.__name__)\n"
    text = host_program(program, "http_request.py")
    assert text.startswith("#!/usr/bin/python3\n'\'\'doc'\'\'\nfrom __future__ import annotations\n")
    (tmp_path / "program.py").write_text(text)
    result = subprocess.run([sys.executable, "-I", "-S", str(tmp_path / "program.py")], capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "http_request\n"), result.stderr


OK = b"HTTP/1.0 200 OK\r\n\r\n"
# What each installed program asks of a server, through the client's text inside it.
INSTALLED = {
    "watchdog": (script_text, "ns['probe_health'](ns['parse_args'](['--url', url, '--model', 'm'])[0]).describe()",
                 "/health: HTTP 200"),
    "collector": (collector_source, "ns['health_ok'](url + '/health', 5)", "True"),
}


@pytest.mark.processes
@pytest.mark.parametrize("program", INSTALLED)
def test_an_installed_program_asks_over_http_on_its_own(program, tmp_path):
    """As its unit runs it: one file, no hostkit to import (-I -S: no site packages)."""
    source, expression, expected = INSTALLED[program]
    installed = tmp_path / f"{program}.py"
    installed.write_text(source())
    url, listener = serve_once(lambda connection: (read_request(connection), connection.sendall(OK)))
    asking = ("import runpy, sys; ns = runpy.run_path(sys.argv[1], run_name='installed'); url = sys.argv[2];"
              f" print({expression})")
    with listener:
        result = subprocess.run([sys.executable, "-I", "-S", "-c", asking, str(installed), url], capture_output=True,
                                text=True, timeout=60, cwd=tmp_path)
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr
