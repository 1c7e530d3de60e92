"""pyinfra facts: each one runs one command and parses it.

`hostkit.facts.snapshot` composes them into a single remote command per host.
"""
