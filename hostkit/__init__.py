"""vllm-hostkit: provision and verify GPU hosts that serve LLMs with vLLM."""

from functools import cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

__version__ = "0.1.0"


def templates_dir() -> Path:
    """Jinja2 templates: inside the wheel, or at the top of a source checkout."""
    packaged = Path(__file__).parent / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "templates"


@cache
def templates() -> Environment:
    """The one Jinja2 environment for every template: strict, so a missing value fails the render."""
    return Environment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
