"""`python -m hostkit_lab`: the lab's command (hostkit_lab/cli.py)."""

from hostkit_lab.cli import lab

lab(prog_name="python -m hostkit_lab")
