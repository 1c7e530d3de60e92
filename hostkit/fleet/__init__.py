"""The controller's side of pyinfra: connecting to an inventory's hosts, and running the pyinfra CLI."""
