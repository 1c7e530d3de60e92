"""vLLM itself: the flags each release accepts, model dimensions, the runtime hostkit installs, readiness."""
