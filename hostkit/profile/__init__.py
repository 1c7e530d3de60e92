"""The host profile: inventory data validated into one typed object per host, and byte sizes."""
