"""`python -m hostkit`: the same as the `hostkit` command."""

from hostkit.cli.main import main

main()
