"""Sub-commands of the `hostkit` CLI, one module each."""
