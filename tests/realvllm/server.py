"""Start a vLLM server here (real vLLM or the stand-in) and look at it: HTTP and its processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HTTP_TIMEOUT_S = 30  # one request; a completion of a few tokens takes well under a second natively


@dataclass
class Server:
    kind: str  # "real" or "standin"
    process: subprocess.Popen
    port: int
    model: str  # the served model name
    api_key: str
    env_file: Path  # root-only VLLM_API_KEY=..., as hostkit writes it on hosts
    log: Path
    ready_s: float = 0.0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as error:
            return f"(no log: {error})"


def start(kind: str, argv: list[str], env: dict[str, str], model: str, api_key: str, log: Path,
          env_file: Path) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        # Its own session: the teardown can end the whole tree it started, and nothing else.
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    port = int(argv[argv.index("--port") + 1])
    return Server(kind, process, port, model, api_key, env_file, log)


def wait_ready(server: Server, timeout_s: float) -> float:
    """Seconds until /health answered 200; RuntimeError with the log's tail otherwise."""
    started = time.monotonic()
    while True:
        waited = time.monotonic() - started
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.kind} vLLM exited with status {server.process.returncode} after {waited:.0f} s"
                               f" before answering /health (log {server.log}):\n{server.log_tail()}")
        try:
            if get(server, "/health", timeout=5)[0] == 200:
                server.ready_s = waited
                return waited
        except OSError:
            pass
        if waited > timeout_s:
            raise RuntimeError(f"{server.kind} vLLM did not answer /health 200 within {timeout_s:.0f} s"
                               f" (log {server.log}):\n{server.log_tail()}")
        time.sleep(0.5)


def stop(server: Server) -> None:
    """End what this test started: the server's session (its process group), by id."""
    try:
        os.killpg(server.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in session_pids(server.process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _request(server: Server, request: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def get(server: Server, path: str, key: str | None = None, timeout: float = HTTP_TIMEOUT_S) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return _request(server, urllib.request.Request(server.base + path, headers=headers), timeout)


def post(server: Server, path: str, body: dict, key: str | None = None,
         timeout: float = HTTP_TIMEOUT_S) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(server.base + path, data=json.dumps(body).encode(), headers=headers)
    status, data = _request(server, request, timeout)
    try:
        return status, json.loads(data or b"{}")
    except ValueError:
        return status, {"raw": data.decode(errors="replace")}


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str  # /proc/PID/comm: at most 15 characters ("VLLM::EngineCor")
    cmdline: str

    @property
    def title(self) -> str:
        """The name vLLM gives its processes (setproctitle writes argv), else comm."""
        return self.cmdline.split(" ", 1)[0] if self.cmdline.startswith("VLLM::") else self.comm


def proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return Proc(pid, int(fields[1]), comm, cmdline)


def _all() -> list[Proc]:
    found = (proc(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [each for each in found if each is not None]


def descendants(pid: int) -> list[Proc]:
    procs = _all()
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def session_pids(session: int) -> list[int]:
    """Live processes of a session (start() makes one per server): orphans included."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            pids.append(int(name))
    return pids


def describe(pids: list[int]) -> list[str]:
    found = (proc(pid) for pid in pids)
    return [f"{each.pid} {each.title}" for each in found if each is not None]
