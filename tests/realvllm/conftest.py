"""Real vLLM (the CPU build, 0.32) started natively on this machine, once for the session.

What hostkit assumes about vLLM is checked here against the real server, and the same
behavioural checks run against the lab's stand-in (hostkit_lab/standin) in test_conformance.py.
The venv comes from a cached wheelhouse (wheelhouse.py), the model is made locally
(tiny_model.py), the server is started through hostkit's `vllm` entry for distributions not
named `vllm` (hostkit/remote/vllm_cli.py) with flags rendered by hostkit/vllm/flags.py. Logs and
what was measured go to reports/realvllm/.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest

from hostkit.vllm.flags import flags_for
from tests.realvllm import server as srv
from hostkit_lab.net import free_port
from hostkit_lab.real_vllm import tiny_model, wheelhouse
from hostkit_lab.standin.install import standin_files

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reports" / "realvllm"
VERSION = "0.32.0"
SERVED_NAME = "tiny"
# Natively 33-70 s (field notes, and this suite's runs); under a loaded CI machine more.
START_TIMEOUT_S = float(os.environ.get("HOSTKIT_REALVLLM_START_TIMEOUT_S", "400"))
# bf16 picks vLLM 0.32's AMX attention kernel where the CPU has AMX (this machine's does), and
# the worker dies of SIGILL on the first request: nothing in it asks Linux for the AMX tile
# state first (with torch.cpu._init_amx() called beforehand, bf16 serves; measured
# 2026-12-01). float32 takes the AVX-512 kernel.
DTYPE = "float32"


def pytest_collection_modifyitems(items):
    """Tests that kill a server's engine run last: every other test shares that server."""
    items.sort(key=lambda item: item.get_closest_marker("kills_the_engine") is not None)


def pytest_configure(config):
    config.addinivalue_line("markers", "kills_the_engine: ends the shared server; run after the others")


def record(name: str, data: dict) -> None:
    """Merge what a test measured into reports/realvllm/measured.json (the figures docs/testing.md quotes)."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    path = REPORTS / "measured.json"
    measured = json.loads(path.read_text()) if path.is_file() else {}
    measured[name] = data
    path.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")


@pytest.fixture(scope="session")
def realvllm_venv() -> wheelhouse.Built:
    built = wheelhouse.venv()
    record("wheelhouse", wheelhouse.wheelhouse().record)
    record("venv", built.record)
    return built


@pytest.fixture(scope="session")
def realvllm_python(realvllm_venv) -> Path:
    return realvllm_venv.path / "bin" / "python"


@pytest.fixture(scope="session")
def tiny_model_dir(realvllm_python) -> Path:
    return tiny_model.cached_model(realvllm_python, wheelhouse.lock_key(), wheelhouse.cache_root())


@pytest.fixture(scope="session")
def vllm_cli(realvllm_python, tmp_path_factory) -> Path:
    """hostkit/remote/vllm_cli.py as it is installed on a host: beside the venv's python, with its #! line."""
    path = tmp_path_factory.mktemp("vllm-bin") / "vllm"
    path.write_text(f"#!{realvllm_python}\n" + (REPO / "hostkit" / "remote" / "vllm_cli.py").read_text())
    path.chmod(0o755)
    return path


def serve_flags(port: int) -> list[str]:
    return flags_for(VERSION).render({
        "--served-model-name": SERVED_NAME, "--host": "127.0.0.1", "--port": port, "--enforce-eager": True,
        "--dtype": DTYPE, "--max-model-len": 1024, "--max-num-seqs": 8,
    })


def _env_file(directory: Path, key: str) -> Path:
    path = directory / "vllm.env"
    path.touch(mode=0o600)
    path.write_text(f"VLLM_API_KEY={key}\n")
    return path


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON", "OMP_"))}
    return {**env, **extra}


@pytest.fixture(scope="session")
def real_vllm(vllm_cli, tiny_model_dir, tmp_path_factory):
    """Real vLLM serving the tiny model; the API key only in its environment."""
    key = secrets.token_urlsafe(24)
    port = free_port()
    env = _clean_env(VLLM_API_KEY=key, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1",
                     VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1")
    argv = [str(vllm_cli), "serve", str(tiny_model_dir), *serve_flags(port)]
    assert key not in " ".join(argv)
    server = srv.start("real", argv, env, SERVED_NAME, key, REPORTS / "real-vllm.log",
                       _env_file(tmp_path_factory.mktemp("real-env"), key))
    try:
        ready_s = srv.wait_ready(server, START_TIMEOUT_S)
        record("start", {"ready_s": round(ready_s, 1), "argv": argv[1:]})
        yield server
    finally:
        srv.stop(server)


@pytest.fixture(scope="session")
def standin_vllm(tmp_path_factory):
    """The lab's stand-in, installed as on a lab host, with the same command line."""
    prefix = tmp_path_factory.mktemp("standin")
    for name, (content, mode) in standin_files(VERSION).items():
        path = prefix / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    key = secrets.token_urlsafe(24)
    port = free_port()
    argv = [sys.executable, str(prefix / "bin" / "vllm"), "serve", "/models/tiny", *serve_flags(port)]
    env = _clean_env(VLLM_API_KEY=key, VLLM_STANDIN_LOAD_SECONDS="1")
    server = srv.start("standin", argv, env, SERVED_NAME, key, REPORTS / "standin.log",
                       _env_file(tmp_path_factory.mktemp("standin-env"), key))
    try:
        srv.wait_ready(server, 60)
        yield server
    finally:
        srv.stop(server)


@pytest.fixture(params=["real", "standin"])
def vllm_server(request) -> srv.Server:
    """Each behavioural check runs against real vLLM and against the stand-in."""
    return request.getfixturevalue("real_vllm" if request.param == "real" else "standin_vllm")
