"""hostkit.vllm.readiness's on-host probe, run as the host runs it (`sh -c`), against a local
server that answers canned HTTP and records what it was asked."""

from __future__ import annotations

import json
import socket
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostkit.paths import PLATFORM_PYTHON
from hostkit.vllm.readiness import Probe, probe_command

pytestmark = pytest.mark.processes

KEY = 'k"$1 \\x'
MODELS = json.dumps({"object": "list", "data": [{"id": "lab"}]}).encode()


def answer(status: str, body: bytes = b"", *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status}", *headers] if headers else [f"HTTP/1.1 {status}", f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes) -> bytes:
    pieces = [body[:7], body[7:]]
    encoded = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    return answer("200 OK", encoded, "content-type: application/json", "transfer-encoding: chunked")


class CannedServer:
    """Answers each request with `routes[path]` and closes; keeps the requests it read."""

    def __init__(self, family: int, address: str, routes: dict[str, bytes]):
        self.routes = routes
        self.requests: list[str] = []
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((address, 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            with connection:
                request = b""
                while b"\r\n\r\n" not in request:
                    data = connection.recv(4096)
                    if not data:
                        break
                    request += data
                text = request.decode("latin-1")
                self.requests.append(text)
                path = text.split(" ", 2)[1] if text.count(" ") >= 2 else ""
                connection.sendall(self.routes.get(path, answer("404 Not Found")))


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    path = tmp_path / "vllm.env"
    escaped = KEY.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    path.write_text(f'HF_HOME="/x"\nVLLM_API_KEY="{escaped}"\n')
    return path


@pytest.fixture
def server() -> Iterator[CannedServer]:
    served = CannedServer(socket.AF_INET, "127.0.0.1", {"/health": answer("200 OK"), "/v1/models": chunked(MODELS)})
    yield served
    served.sock.close()


def probe(bind_host: str, port: int, env_file: Path | str) -> tuple[Probe | None, str]:
    result = subprocess.run(["sh", "-c", probe_command(bind_host, port, str(env_file))],
                            capture_output=True, text=True, timeout=30)
    return Probe.parse(result.stdout), result.stdout


def test_sends_the_key_from_the_env_file_and_reads_a_chunked_model_list(server, env_file):
    result, output = probe("0.0.0.0", server.port, env_file)
    assert result == Probe(health=200, error="", models_status=200, models=("lab",))
    health, models = server.requests
    assert health.startswith("GET /health HTTP/1.0\r\n") and "Authorization: Bearer" in health
    assert models.startswith("GET /v1/models HTTP/1.0\r\n")
    assert f"\r\nHost: 127.0.0.1:{server.port}\r\n" in models
    assert f"\r\nAuthorization: Bearer {KEY}\r\n" in models
    assert KEY not in output and KEY not in probe_command("0.0.0.0", server.port, str(env_file))


def test_without_a_key_no_authorization_header(server):
    server.routes["/v1/models"] = answer("401 Unauthorized", b'{"error": "no key"}')
    result, _ = probe("127.0.0.1", server.port, "/nonexistent")
    assert result == Probe(health=200, error="", models_status=401, models=None)
    assert not any("Authorization" in request for request in server.requests)


def test_unhealthy_server_is_not_asked_for_models(server, env_file):
    server.routes["/health"] = answer("503 Service Unavailable", b"engine dead")
    result, _ = probe("127.0.0.1", server.port, env_file)
    assert result == Probe(health=503, error="", models_status=None, models=None)
    assert len(server.requests) == 1


def test_bad_model_list_and_non_http_answers(server, env_file):
    server.routes["/v1/models"] = answer("200 OK", b'{"data": 3}')
    result, _ = probe("127.0.0.1", server.port, env_file)
    assert result.models_status == 200 and result.models is None
    assert result.error.startswith("bad /v1/models answer: ")
    server.routes["/health"] = b"SSH-2.0-OpenSSH_9.2\r\n"
    result, _ = probe("127.0.0.1", server.port, env_file)
    assert result.health is None and result.error.startswith("not an HTTP answer")


def test_refused_connection_reads_as_no_answer(env_file):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    result, _ = probe("127.0.0.1", port, env_file)
    assert result == Probe(health=None, error="[Errno 111] Connection refused", models_status=None, models=None)


def test_ipv6_bind_address_is_probed_on_loopback_with_a_bracketed_host(env_file):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        served = CannedServer(socket.AF_INET6, "::1", {"/health": answer("200 OK"), "/v1/models": answer("200 OK", MODELS)})
    except OSError:
        pytest.skip("no IPv6 loopback")
    try:
        result, _ = probe("::", served.port, env_file)
        assert result.serves("lab")
        assert f"\r\nHost: [::1]:{served.port}\r\n" in served.requests[0]
    finally:
        served.sock.close()



def test_without_python3_on_path_the_probe_runs_platform_python(server, env_file, tmp_path):
    """RHEL 8: no python3 on PATH, /usr/libexec/platform-python instead (here a link to this
    python under a temporary path, or HK_TEST_PLATFORM_PYTHON: a python 3.6 like RHEL 8's passes
    too); with neither, the probe prints nothing."""
    platform_python = tmp_path / "libexec" / "platform-python"
    platform_python.parent.mkdir()
    platform_python.symlink_to(os.environ.get("HK_TEST_PLATFORM_PYTHON", sys.executable))
    bin_dir = tmp_path / "bin"  # sh's tools, without python3
    bin_dir.mkdir()
    command = probe_command("0.0.0.0", server.port, str(env_file)).replace(PLATFORM_PYTHON, str(platform_python))
    env = {"PATH": str(bin_dir)}
    result = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, env=env)
    assert Probe.parse(result.stdout) == Probe(health=200, error="", models_status=200, models=("lab",))
    platform_python.unlink()
    result = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode != 0 and result.stdout == ""
