"""vllm-hostkit: provision and verify GPU hosts that serve LLMs with vLLM."""

from functools import cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

__version__ = "0.1.0"


@cache
def templates() -> Environment:
    """The one Jinja2 environment for every template: strict, so a missing value fails the render."""
    return Environment(
        loader=FileSystemLoader(_template_dir()),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _template_dir() -> Path:
    """Inside the installed package (the wheel puts them there), else the checkout's templates/."""
    package = Path(__file__).parent
    installed = package / "templates"
    return installed if installed.is_dir() else package.parent / "templates"
