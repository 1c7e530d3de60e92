"""vllm-hostkit: provision and verify GPU hosts that serve LLMs with vLLM."""

from pathlib import Path

__version__ = "0.1.0"


def templates_dir() -> Path:
    """Jinja2 templates: inside the wheel, or at the top of a source checkout."""
    packaged = Path(__file__).parent / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "templates"
