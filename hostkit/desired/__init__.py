"""systemd units: the vLLM unit and its environment file, directives per systemd version, what a unit change means."""
