"""pyinfra operations: each reads the host snapshot and yields only the commands that fix what differs."""
