"""vllm-hostkit: provision and verify GPU hosts that serve LLMs with vLLM."""

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined

__version__ = "0.1.0"


@cache
def templates() -> Environment:
    """The one Jinja2 environment for every template: strict, so a missing value fails the render."""
    return Environment(
        loader=PackageLoader("hostkit"),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
