#!/usr/bin/python3
"""A STAND-IN for the `vllm` executable, for vllm-hostkit's lab tests. It is not vLLM and is
not shipped with hostkit: it loads no model and generates no text.

Lab hosts have no GPU and no pip packages, only python3, so this file uses the standard
library alone. It imitates what hostkit relies on:

- `vllm serve [MODEL] [FLAGS]` parses the flags of one vLLM release with hostkit's own flag
  data (hostkit/vllm/flags.py and hostkit/vllm/flags.json, copied next to it by
  hostkit_lab/standin/install.py), and exits 2 on an option that release lacks, as vLLM does. Its
  CLI has vLLM's layout (a `serve` subparser whose `dispatch_function` default serves), so
  hostkit's parse-only check (hostkit/remote/vllm_parse_check.py) checks it the same way;
- it "loads" for a few seconds without binding its port (so /health refuses connections,
  like vLLM's), then serves /health, /v1/models, /v1/completions and /metrics; /v1/* need
  `Authorization: Bearer KEY` when --api-key or VLLM_API_KEY is set;
- SIGTERM stops it cleanly;
- it runs an "engine" child process, as vLLM runs VLLM::EngineCore: when that process dies
  (`kill -9`), or on SIGUSR1, the engine is dead and the server does what vLLM 0.32/0.33 do
  (field-notes.md): EngineDeadError in the log, /health and requests answer 503, then the
  HTTP server shuts down and the process exits with status 0.

The release: VLLM_STANDIN_VERSION, else "version" in standin.json next to the lib directory.
Test knobs (environment):
  VLLM_STANDIN_LOAD_SECONDS   seconds of "loading" before binding (default 3)
  VLLM_STANDIN_ALLOCATE_MB    allocate and touch this many MiB while loading, and hold them
  VLLM_STANDIN_CRASH=1        exit 1 while loading (so does the model path /nonexistent)
  VLLM_STANDIN_STEP_DELAY_MS sleep this long per generated token (default 0)
  VLLM_STANDIN_FAULT          health-500: /health and requests answer 500, the server stays up
                              hang-completions: /health 200, /v1/completions never answer
  VLLM_STANDIN_FAULT_AFTER_S  serve normally this many seconds first (default 0): the fault
                              starts after hostkit's readiness gate has seen a healthy server
  VLLM_STANDIN_LEFTOVER=1     the engine process ignores SIGTERM and outlives the server (as
                              vLLM's helper processes can); otherwise it exits with the server
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
# Installed layout: /opt/vllm/bin/vllm and /opt/vllm/lib/vllm-standin/{hostkit/,standin.json}.
LIB_DIR = os.environ.get("VLLM_STANDIN_LIB") or os.path.join(os.path.dirname(HERE), "lib", "vllm-standin")
if os.path.isdir(os.path.join(LIB_DIR, "hostkit")):
    sys.path.insert(0, LIB_DIR)

from hostkit.vllm.flags import flags_for

_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")
_held_memory = []  # what VLLM_STANDIN_ALLOCATE_MB allocated: kept alive while serving


def declared_version():
    if os.environ.get("VLLM_STANDIN_VERSION"):
        return os.environ["VLLM_STANDIN_VERSION"]
    try:
        with open(os.path.join(LIB_DIR, "standin.json")) as config:
            return json.load(config)["version"]
    except (OSError, ValueError, KeyError):
        sys.exit(f"vllm stand-in: no release given: set VLLM_STANDIN_VERSION or write {LIB_DIR}/standin.json")


def _human_int(text):
    if not _HUMAN_INT.match(text):
        raise argparse.ArgumentTypeError(f"invalid human-readable integer: {text!r}")
    return text


def _human_int_or_auto(text):
    return text if text == "auto" else _human_int(text)


_TYPES = {"int": int, "float": float, "human_readable_int": _human_int, "human_readable_int_or_auto": _human_int_or_auto}


class FlexibleParser(argparse.ArgumentParser):
    """Like vLLM's FlexibleArgumentParser (from 0.5, with `vllm serve`): `--max_num_seqs`
    means `--max-num-seqs`. 0.4.3's api_server parser is a plain ArgumentParser."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        normalised = []
        for arg in args:
            if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
                key, sep, value = arg.partition("=")
                arg = key.replace("_", "-") + sep + value
            normalised.append(arg)
        return super().parse_known_args(normalised, namespace)


def add_release_flags(parser, flag_set):
    for flag in flag_set.flags:
        options = [option for option in flag.options if option not in ("-h", "--help")]
        if not options:
            continue
        if flag.is_switch:
            for option in options:
                parser.add_argument(option, dest=flag.dest, action="store_const", const=not flag.is_off_spelling(option))
            continue
        kwargs = {"dest": flag.dest}
        if flag.is_store_boolean:
            kwargs.update(nargs="?", const="true")
        else:
            if flag.nargs in ("+", "*", "?"):
                kwargs["nargs"] = flag.nargs
            kwargs["type"] = _TYPES.get(flag.type, str)
        if flag.choices is not None:
            kwargs["choices"] = [choice for choice in flag.choices if choice is not None]
        parser.add_argument(*options, **kwargs)


def build_parser(version):
    flag_set = flags_for(version)
    parser_class = FlexibleParser if flag_set.entry_point == "serve" else argparse.ArgumentParser
    parser = parser_class(prog="vllm", description=f"vLLM {version} STAND-IN (vllm-hostkit lab tests)",
                            allow_abbrev=False)
    parser.add_argument("-v", "--version", action="version", version=version)
    subparsers = parser.add_subparsers(dest="subparser")
    # 0.4.3 has no `vllm serve`; the stand-in offers it anyway, with that release's flags.
    serve_parser = subparsers.add_parser("serve", allow_abbrev=False)
    serve_parser.add_argument("model_tag", nargs="?")
    add_release_flags(serve_parser, flag_set)
    serve_parser.set_defaults(dispatch_function=serve)
    return parser


def log(message):
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [stand-in] {message}", file=sys.stderr, flush=True)


def first(value):
    return value[0] if isinstance(value, list) else value


def allocate(megabytes):
    """Hold `megabytes` MiB, every page written, in 64 MiB steps (an OOM kill lands midway)."""
    step = 64
    done = 0
    while done < megabytes:
        size = min(step, megabytes - done) * 2**20
        block = bytearray(size)
        block[::4096] = b"\x01" * len(range(0, size, 4096))
        _held_memory.append(block)
        done += size // 2**20
        log(f"allocated {done} MiB of {megabytes} MiB")


ENGINE_DEATH_EXIT_DELAY_S = 1.0
# The "engine" process: it sleeps; it leaves with the server unless told to linger.
_ENGINE_CODE = (
    "import os, signal, sys, time\n"
    "linger = sys.argv[1] == '1'\n"
    "if linger: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "parent = os.getppid()\n"
    "while linger or os.getppid() == parent: time.sleep(0.5)\n"
)


def start_engine():
    linger = "1" if os.environ.get("VLLM_STANDIN_LEFTOVER") == "1" else "0"
    return subprocess.Popen([sys.executable, "-I", "-c", _ENGINE_CODE, linger, "VLLM::EngineCore (stand-in)"])


def engine_dead(server, why):
    """What vLLM does when its engine dies: EngineDeadError, 503s, then a clean exit (status 0)."""
    state = server.state
    if state["engine_dead"]:
        return
    state["engine_dead"] = True
    log(f"ERROR EngineDeadError: EngineCore encountered an issue ({why}). See stack trace for the root cause.")
    log("engine dead: shutting the API server down")
    threading.Timer(ENGINE_DEATH_EXIT_DELAY_S, server.shutdown).start()


def watch_engine(server, engine):
    engine.wait()
    if not server.state["stopping"]:
        engine_dead(server, f"engine process {engine.pid} exited with status {engine.returncode}")


def fault(state):
    """VLLM_STANDIN_FAULT once VLLM_STANDIN_FAULT_AFTER_S have passed since serving began."""
    return state["fault"] if time.monotonic() >= state["fault_from"] else ""


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, state):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.state = state
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    server_version = "vllm-standin"

    def log_message(self, format, *args):
        log(f"{self.client_address[0]} - {format % args}")

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self):
        key = self.server.state["api_key"]
        if key and self.headers.get("Authorization") != f"Bearer {key}":
            self._send(401, {"error": "Unauthorized"})
            return False
        return True

    def _failing(self):
        """The status every request gets from a dead or faulty engine, or None."""
        state = self.server.state
        if state["engine_dead"]:
            return 503
        return 500 if fault(state) == "health-500" else None

    def do_GET(self):
        state = self.server.state
        failing = self._failing()
        if failing and self.path != "/metrics":
            self._send(failing, {"error": {"message": "EngineDeadError", "code": failing}})
        elif self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/metrics":
            self._send(200, metrics(state).encode(), "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            if self._authorised():
                model = {"id": state["served"], "object": "model", "created": state["started"],
                         "owned_by": "vllm", "root": state["model"], "parent": None}
                self._send(200, {"object": "list", "data": [model]})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        if self.path != "/v1/completions":
            self._send(404, {"detail": "Not Found"})
            return
        if not self._authorised():
            return
        state = self.server.state
        failing = self._failing()
        if failing:
            self._send(failing, {"error": {"message": "EngineDeadError", "code": failing}})
            return
        if fault(state) == "hang-completions":
            log("hang-completions: this completion never answers")
            threading.Event().wait()
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "invalid JSON", "type": "BadRequestError", "code": 400}})
            return
        if request.get("model", state["served"]) != state["served"]:
            message = f"The model `{request.get('model')}` does not exist."
            self._send(404, {"error": {"message": message, "type": "NotFoundError", "code": 404}})
            return
        with state["lock"]:
            state["running"] += 1
        try:
            self._complete(state, request)
        finally:
            with state["lock"]:
                state["running"] -= 1

    def _complete(self, state, request):
        max_tokens = int(request.get("max_tokens") or 16)
        prompt = request.get("prompt") or ""
        prompt_tokens = len(" ".join(prompt if isinstance(prompt, list) else [prompt]).split())
        time.sleep(state["token_delay_s"] * max_tokens)
        with state["lock"]:
            state["succeeded"] += 1
            state["prompt_tokens"] += prompt_tokens
            state["generation_tokens"] += max_tokens
        self._send(200, {
            "id": f"cmpl-standin-{state['succeeded']}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": state["served"],
            "choices": [{"index": 0, "text": " stand-in" * max_tokens, "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                      "total_tokens": prompt_tokens + max_tokens},
        })


def metrics(state):
    label = f'{{model_name="{state["served"]}"}}'
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    rows = [
        ("vllm:num_requests_running", "gauge", state["running"]),
        ("vllm:num_requests_waiting", "gauge", 0),
        ("vllm:kv_cache_usage_perc", "gauge", 0.0),
        ("vllm:num_preemptions_total", "counter", 0),
        ("vllm:request_success_total", "counter", state["succeeded"]),
        ("vllm:prompt_tokens_total", "counter", state["prompt_tokens"]),
        ("vllm:generation_tokens_total", "counter", state["generation_tokens"]),
    ]
    lines = []
    for name, kind, value in rows:
        lines += [f"# TYPE {name} {kind}", f"{name}{label} {value}"]
    lines += ["# TYPE process_resident_memory_bytes gauge", f"process_resident_memory_bytes {rss}"]
    return "\n".join(lines) + "\n"


def serve(args):
    model = args.model_tag or getattr(args, "model", None)
    if not model:
        print("vllm serve: error: a model is required", file=sys.stderr)
        sys.exit(2)
    log(f"vLLM {declared_version()} STAND-IN (not vLLM): serving {model}")
    if model == "/nonexistent" or os.environ.get("VLLM_STANDIN_CRASH") == "1":
        log(f"cannot load model {model}: crashing as asked")
        sys.exit(1)
    allocate(int(os.environ.get("VLLM_STANDIN_ALLOCATE_MB") or 0))
    time.sleep(float(os.environ.get("VLLM_STANDIN_LOAD_SECONDS") or 3))
    host = getattr(args, "host", None) or "0.0.0.0"
    port = getattr(args, "port", None) or 8000
    state = {
        "model": model,
        "served": first(getattr(args, "served_model_name", None)) or model,
        "api_key": first(getattr(args, "api_key", None)) or os.environ.get("VLLM_API_KEY"),
        "token_delay_s": float(os.environ.get("VLLM_STANDIN_STEP_DELAY_MS") or 0) / 1000,
        "started": int(time.time()),
        "lock": threading.Lock(),
        "running": 0, "succeeded": 0, "prompt_tokens": 0, "generation_tokens": 0,
        "fault": os.environ.get("VLLM_STANDIN_FAULT") or "", "engine_dead": False, "stopping": False,
        "fault_from": time.monotonic() + float(os.environ.get("VLLM_STANDIN_FAULT_AFTER_S") or 0),
    }
    engine = start_engine()
    server = StandinServer((host, int(port)), state)

    def stop(*_):
        state["stopping"] = True
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, lambda *_: engine_dead(server, "SIGUSR1"))
    threading.Thread(target=watch_engine, args=(server, engine), daemon=True).start()
    log(f"ready: http://{host}:{port} serving {state['served']} (engine pid {engine.pid}"
        f"{', fault ' + state['fault'] if state['fault'] else ''})")
    server.serve_forever()
    state["stopping"] = True
    log("engine dead: exiting with status 0, as vLLM does" if state["engine_dead"] else "stopped by SIGTERM")


def main():
    parser = build_parser(declared_version())
    args = parser.parse_args()
    if hasattr(args, "dispatch_function"):
        args.dispatch_function(args)
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
