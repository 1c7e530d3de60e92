"""The desired state from a host's plan: files as hostkit renders them, settings as wanted, and how
the host's facts differ from them. Pure: no host access; operations apply it, verify checks it."""
