"""The `hostkit` command (main.py) and its sub-commands, one module each."""
