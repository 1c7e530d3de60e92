"""The config.json of each local model directory the plan sizes, read in one command.

A server whose vllm_model is a directory on the host ("/models/foo") is sized on that
directory's config.json (hostkit.vllm.model_catalog.spec_from_hf_config): vllm.service's, or
each instance's of vllm_instances, which may each name another (the scope's model_dirs).

For each directory the command prints `@@model:dir@@DIR`, the file's first MAX_BYTES bytes
(or head's error), and `@@model:rc@@ N`. JSON never starts a line with `@@`, so the markers
cannot be mistaken for its text. Each read has a deadline: a model directory on a network
filesystem can hang.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api import FactBase

from hostkit.facts.deadline import DEADLINE_FUNCTION, MODEL_CONFIG_S, TIMED_OUT
from hostkit.facts.scope import SnapshotScope
from hostkit.remote import host_file

SUB_MARKER = "@@model:"
# A config.json is a few kilobytes; more is not a model's configuration.
MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ModelConfigs:
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # directory -> its config.json
    errors: dict[str, str] = field(default_factory=dict)  # directory -> why its config.json was not read


class ModelConfigFact(FactBase):
    """Parsed into `ModelConfigs`. Always exits 0; a file that cannot be read is itself a fact."""

    section = "model_configs"

    takes_scope = True

    def command(self, scope: SnapshotScope) -> str:
        settings = {"hk_mark": SUB_MARKER, "hk_read_s": str(MODEL_CONFIG_S), "hk_max_bytes": str(MAX_BYTES)}
        lines = [f"{name}={shlex.quote(value)}" for name, value in settings.items()]
        calls = [f"hk_model_config {shlex.quote(directory)}" for directory in scope.model_dirs]
        return "\n".join((*lines, DEADLINE_FUNCTION, host_file("model_config.sh"), *calls, "true"))

    def process(self, output: list[str]) -> ModelConfigs:
        return parse_model_configs(output)


def parse_model_configs(output: list[str]) -> ModelConfigs:
    configs: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    directory, text = None, []
    for line in output:
        if line.startswith(f"{SUB_MARKER}dir@@"):
            directory, text = line[len(f"{SUB_MARKER}dir@@"):], []
        elif line.startswith(f"{SUB_MARKER}rc@@") and directory is not None:
            return_code = line[len(f"{SUB_MARKER}rc@@"):].strip()
            config, error = _config(text, return_code)
            if config is not None:
                configs[directory] = config
            else:
                errors[directory] = error
            directory = None
        elif directory is not None:
            text.append(line)
    return ModelConfigs(configs, errors)


def _config(lines: list[str], return_code: str) -> tuple[dict[str, Any] | None, str]:
    """The parsed file, or None and why not."""
    body = "\n".join(lines).strip()
    if return_code != "0":
        last = body.splitlines()[-1] if body else f"head exited {return_code}"
        return None, last.removeprefix(TIMED_OUT).strip()
    try:
        config = json.loads(body)
    except ValueError as error:
        return None, f"not JSON ({error})"
    if not isinstance(config, dict):
        return None, "not a JSON object"
    return config, ""
