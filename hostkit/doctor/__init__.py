"""`hostkit doctor`: read a vLLM host's memory state (gather), find the risks (rules), report them (report)."""
