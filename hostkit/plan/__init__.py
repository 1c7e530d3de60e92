"""Planning: from a host profile and the host's facts to what hostkit will make true. Pure: no I/O."""
